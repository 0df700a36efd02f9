package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	ax "github.com/axsched/ax/clients/go"
	"github.com/axsched/ax/internal/axapi"
)

// lastErrorWidth is how many characters of a task's last error `ax list`
// shows.
const lastErrorWidth = 48

// taskCmds returns the commands about tasks: submit, get, list, cancel,
// retry.
func taskCmds() []*cobra.Command {
	return []*cobra.Command{submitCmd(), getCmd(), listCmd(), cancelCmd(), retryCmd()}
}

func submitCmd() *cobra.Command {
	var f apiFlags
	var (
		id, payload, payloadFile, runAt string
		delay, timeout                  time.Duration
		priority, maxAttempts           int
		overwrite                       bool
	)
	cmd := &cobra.Command{
		Use:   "submit HANDLER",
		Short: "Submit a task for HANDLER, now or later",
		Long: `Submit a task that the executor of HANDLER runs, now (the default), after
--delay, or at --run-at. The task id is the idempotency key: submitting the
same --id with the same spec again returns the existing task; with another
spec it fails unless --overwrite is given.`,
		Example: `  ax submit order.timeout --id 'order|42' --delay 30m --payload '{"order_id":42}'
  ax submit report.build --run-at 2026-07-01T06:00:00Z --payload-file req.json
  ax submit email.send --priority 0 --max-attempts 10 --timeout 1m --json`,
		Args: exactArgs("HANDLER"),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := ax.SubmitRequest{ID: id, Handler: args[0], Timeout: timeout, MaxAttempts: maxAttempts, Overwrite: overwrite}
			fl := cmd.Flags()
			if fl.Changed("payload") && fl.Changed("payload-file") {
				return usagef("give --payload or --payload-file, not both")
			}
			if fl.Changed("delay") && fl.Changed("run-at") {
				return usagef("give --delay or --run-at, not both")
			}
			switch {
			case fl.Changed("payload"):
				if !json.Valid([]byte(payload)) {
					return usagef("--payload: not valid JSON (quote strings: --payload '\"text\"')")
				}
				req.Payload = json.RawMessage(payload)
			case fl.Changed("payload-file"):
				b, err := readPayloadFile(payloadFile, cmd.InOrStdin())
				if err != nil {
					return usagef("--payload-file: %v", err)
				}
				if json.Valid(b) {
					req.Payload = json.RawMessage(b)
				} else if len(b) > 0 {
					req.PayloadBytes = b
				}
			}
			if fl.Changed("delay") {
				if delay < 0 {
					return usagef("--delay %s: must not be negative", delay)
				}
				req.Delay = delay
			}
			if fl.Changed("run-at") {
				t, err := time.Parse(time.RFC3339Nano, runAt)
				if err != nil {
					return usagef("--run-at %q: want an RFC 3339 time like 2026-07-01T06:00:00Z", runAt)
				}
				req.RunAt = t
			}
			if fl.Changed("priority") {
				if priority < ax.PriorityHighest || priority > ax.PriorityLowest {
					return usagef("--priority %d: want 0 (highest) to 4 (lowest)", priority)
				}
				req.Priority = &priority
			}
			if fl.Changed("timeout") && timeout <= 0 {
				return usagef("--timeout %s: must be positive", timeout)
			}
			if fl.Changed("max-attempts") && maxAttempts < 1 {
				return usagef("--max-attempts %d: must be at least 1", maxAttempts)
			}
			ctx, cancel := cmdContext(cmd)
			defer cancel()
			t, err := f.client().Submit(ctx, req)
			if errors.Is(err, ax.ErrConflict) {
				return errors.New(strings.Replace(errorLine(err), `set "overwrite": true`, "use --overwrite", 1))
			}
			if err != nil {
				return err
			}
			if f.json {
				return writeJSON(cmd.OutOrStdout(), axapi.TaskFromClient(t))
			}
			v := axapi.TaskFromClient(t)
			fmt.Fprintf(cmd.OutOrStdout(), "submitted %s: %s, %s\n", t.ID, t.State, whenText(&v, time.Now()))
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&id, "id", "", "task id and idempotency key, any UTF-8 (default: a random id)")
	fl.StringVar(&payload, "payload", "", "payload, a JSON value delivered byte for byte to the executor")
	fl.StringVar(&payloadFile, "payload-file", "", "read the payload from a file (- for stdin): sent as JSON when it is valid JSON, else as binary")
	fl.DurationVar(&delay, "delay", 0, "run after this long (Go duration: 90s, 30m, 2h)")
	fl.StringVar(&runAt, "run-at", "", "run at this time, RFC 3339 (2026-07-01T06:00:00Z)")
	fl.IntVar(&priority, "priority", ax.PriorityDefault, "0 (highest) to 4 (lowest)")
	fl.DurationVar(&timeout, "timeout", 0, "bound of one attempt (default 30s)")
	fl.IntVar(&maxAttempts, "max-attempts", 0, "attempts before the task is DEAD, first one included (default 4)")
	fl.BoolVar(&overwrite, "overwrite", false, "replace an existing task with the same id and another spec")
	f.register(cmd)
	return cmd
}

func readPayloadFile(name string, stdin io.Reader) ([]byte, error) {
	if name == "-" {
		return io.ReadAll(io.LimitReader(stdin, ax.PayloadMaxBytes+1))
	}
	return os.ReadFile(name)
}

// whenText says when a task runs next, or how it ended.
func whenText(t *axapi.Task, now time.Time) string {
	switch {
	case t.State == string(ax.StateRunning):
		if t.Node != "" {
			return "running on " + t.Node
		}
		return "running"
	case t.FinishedAt != nil:
		return "finished " + fmtTime(t.FinishedAt, now)
	case t.NextRunAt != nil:
		return "runs " + fmtTime(t.NextRunAt, now)
	}
	return "-"
}

func getCmd() *cobra.Command {
	var f apiFlags
	cmd := &cobra.Command{
		Use:     "get ID",
		Short:   "Show a task: state, attempts, next run, last error, payload",
		Example: "  ax get 'order|42'\n  ax get 'order|42' --json | jq .state",
		Args:    exactArgs("ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := cmdContext(cmd)
			defer cancel()
			t, err := f.client().Get(ctx, args[0])
			if err != nil {
				return notFoundTask(err, args[0])
			}
			v := axapi.TaskFromClient(t)
			if f.json {
				return writeJSON(cmd.OutOrStdout(), v)
			}
			return printTask(cmd.OutOrStdout(), &v, time.Now())
		},
	}
	f.register(cmd)
	return cmd
}

// printTask prints one task as "Field:  value" lines.
func printTask(w io.Writer, t *axapi.Task, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s:\t%s\n", k, v) }
	row("ID", t.ID)
	row("Handler", t.Handler)
	row("State", t.State)
	row("Priority", fmt.Sprint(t.Priority))
	row("Attempts", fmt.Sprintf("%d of %d", t.Attempts, t.MaxAttempts))
	row("Timeout", t.Timeout)
	if t.Delay != "" {
		row("Delay", t.Delay)
	}
	if t.RunAt != nil {
		row("Run at", fmtTime(t.RunAt, now))
	}
	if t.NextRunAt != nil {
		row("Next run", fmtTime(t.NextRunAt, now))
	}
	if t.Node != "" {
		row("Node", t.Node)
	}
	if t.LastError != "" {
		row("Last error", oneLine(t.LastError))
	}
	row("Created", fmtTime(&t.CreatedAt, now))
	row("Updated", fmtTime(&t.UpdatedAt, now))
	if t.FinishedAt != nil {
		row("Finished", fmtTime(t.FinishedAt, now))
	}
	switch {
	case len(t.Payload) > 0:
		row("Payload", truncate(string(t.Payload), 200))
	case t.PayloadBase64 != nil:
		row("Payload", fmt.Sprintf("(binary, base64) %s", truncate(*t.PayloadBase64, 200)))
	}
	return tw.Flush()
}

// states are the task states `ax list --state` takes.
var states = []ax.State{ax.StateWaiting, ax.StateRunning, ax.StateSuccess, ax.StateDead, ax.StateFailed, ax.StateCancelled}

func listCmd() *cobra.Command {
	var f apiFlags
	var handler, state string
	var limit int
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List tasks in id order, filtered by handler and state",
		Long: `List tasks in id order as a table: id, handler, state, attempts, next run (or
when it finished) and the last error. It follows the API's pages until
--limit tasks are shown (0: all).`,
		Example: "  ax list --state dead\n  ax list --handler order.timeout --limit 0 --json",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if state != "" {
				ok := false
				for _, s := range states {
					if strings.EqualFold(state, string(s)) {
						state, ok = string(s), true
					}
				}
				if !ok {
					return usagef("--state %q: want one of %s", state, stateNames())
				}
			}
			if limit < 0 {
				return usagef("--limit %d: must be 0 (all) or more", limit)
			}
			ctx, cancel := cmdContext(cmd)
			defer cancel()
			c := f.caller()
			defer c.Close()
			var raw []json.RawMessage
			var tasks []axapi.Task
			cursor, more := "", false
			for {
				page := axapi.ListLimitMax
				if limit > 0 {
					page = min(page, limit-len(tasks))
				}
				p, err := c.List(ctx, axapi.ListQuery{Handler: handler, State: state, Limit: page, Cursor: cursor})
				if err != nil {
					return err
				}
				raw = append(raw, p.Raw...)
				tasks = append(tasks, p.Tasks...)
				cursor = p.NextCursor
				if cursor == "" {
					break
				}
				if limit > 0 && len(tasks) >= limit {
					more = true
					break
				}
			}
			if f.json {
				out := struct {
					Tasks      []json.RawMessage `json:"tasks"`
					NextCursor string            `json:"next_cursor,omitempty"`
				}{Tasks: raw, NextCursor: cursor}
				if out.Tasks == nil {
					out.Tasks = []json.RawMessage{}
				}
				return writeJSON(cmd.OutOrStdout(), out)
			}
			if len(tasks) == 0 {
				fmt.Fprintln(cmd.ErrOrStderr(), "no tasks")
				return nil
			}
			if err := printTaskTable(cmd.OutOrStdout(), tasks, time.Now()); err != nil {
				return err
			}
			if more {
				fmt.Fprintf(cmd.ErrOrStderr(), "(showing the first %d; more match: raise --limit, or --limit 0 for all)\n", len(tasks))
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&handler, "handler", "", "only tasks of this handler")
	fl.StringVar(&state, "state", "", "only tasks in this state: "+stateNames())
	fl.IntVar(&limit, "limit", 100, "show at most this many tasks (0: all)")
	f.register(cmd)
	return cmd
}

func stateNames() string {
	var s []string
	for _, st := range states {
		s = append(s, strings.ToLower(string(st)))
	}
	return strings.Join(s, ", ")
}

// printTaskTable prints tasks as the table of `ax list`.
func printTaskTable(w io.Writer, tasks []axapi.Task, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tHANDLER\tSTATE\tATTEMPTS\tNEXT RUN / FINISHED\tLAST ERROR")
	for i := range tasks {
		t := &tasks[i]
		when := "-"
		switch {
		case t.State == string(ax.StateRunning):
			when = "running"
			if t.Node != "" {
				when += " on " + t.Node
			}
		case t.FinishedAt != nil:
			when = fmtTime(t.FinishedAt, now)
		case t.NextRunAt != nil:
			when = fmtTime(t.NextRunAt, now)
		}
		lastErr := "-"
		if t.LastError != "" {
			lastErr = truncate(t.LastError, lastErrorWidth)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d/%d\t%s\t%s\n", oneLine(t.ID), t.Handler, t.State, t.Attempts, t.MaxAttempts, when, lastErr)
	}
	return tw.Flush()
}

func cancelCmd() *cobra.Command {
	var f apiFlags
	cmd := &cobra.Command{
		Use:   "cancel ID",
		Short: "Cancel a task: a waiting one never runs; a running attempt is aborted",
		Args:  exactArgs("ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := cmdContext(cmd)
			defer cancel()
			t, err := f.client().Cancel(ctx, args[0])
			if err != nil {
				return notFoundTask(err, args[0])
			}
			if f.json {
				return writeJSON(cmd.OutOrStdout(), axapi.TaskFromClient(t))
			}
			if t.State == ax.StateCancelled {
				fmt.Fprintf(cmd.OutOrStdout(), "cancelled %s\n", t.ID)
			} else {
				fmt.Fprintf(cmd.OutOrStdout(), "%s was already %s; nothing to cancel\n", t.ID, t.State)
			}
			return nil
		},
	}
	f.register(cmd)
	return cmd
}

func retryCmd() *cobra.Command {
	var f apiFlags
	cmd := &cobra.Command{
		Use:   "retry ID",
		Short: "Run a DEAD or FAILED task again, with fresh attempts",
		Args:  exactArgs("ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := cmdContext(cmd)
			defer cancel()
			t, err := f.client().Retry(ctx, args[0])
			if err != nil {
				return notFoundTask(err, args[0])
			}
			v := axapi.TaskFromClient(t)
			if f.json {
				return writeJSON(cmd.OutOrStdout(), v)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "retrying %s: %s, %s\n", t.ID, t.State, whenText(&v, time.Now()))
			return nil
		},
	}
	f.register(cmd)
	return cmd
}
