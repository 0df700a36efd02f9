package main

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	ax "github.com/axsched/ax/clients/go"
	"github.com/axsched/ax/clients/go/axapi"
)

// lastErrorWidth is how many characters of a task's last error `ax list`
// shows.
const lastErrorWidth = 48

// taskCmds returns the commands about tasks: submit, get, list, cancel,
// retry, purge, pause, resume.
func taskCmds() []*cobra.Command {
	return append([]*cobra.Command{submitCmd(), getCmd(), listCmd(), runsCmd(), cancelCmd(), retryCmd(), purgeCmd(), flowCmd()}, pauseCmds()...)
}

func submitCmd() *cobra.Command {
	var f apiFlags
	var (
		id, payload, payloadFile, runAt string
		delay, timeout                  time.Duration
		priority, maxAttempts           int
		overwrite                       bool
		every                           time.Duration
		cron, timezone, until, routeKey string
		traceparent, tracestate         string
		repeats                         int
		labels                          []string
		backoffInitial, backoffMax      time.Duration
		backoffMultiplier, backoffJit   float64
		retention                       string
		shards, shardsMax               int
		shardsAsk                       bool
	)
	cmd := &cobra.Command{
		Use:   "submit HANDLER",
		Short: "Submit a task for HANDLER, now, later or on a schedule",
		Long: `Submit a task that the executor of HANDLER runs, now (the default), after
--delay, or at --run-at. The task id is the idempotency key: submitting the
same --id with the same spec again returns the existing task; with another
spec it fails unless --overwrite is given.

A recurring task has --every or --cron (with --timezone); each slot is a run
with its own attempts. --delay or --run-at set its first run; --repeats and
--until end it.`,
		Example: `  ax submit order.timeout --id 'order|42' --delay 30m --payload '{"order_id":42}'
  ax submit report.build --run-at 2026-07-01T06:00:00Z --payload-file req.json
  ax submit email.send --priority 0 --max-attempts 10 --timeout 1m --json
  ax submit cleanup --id nightly --cron '0 2 * * *' --timezone Europe/Berlin --label team=ops
  ax submit poll --every 5m --repeats 12 --backoff-initial 1s --backoff-max 1m
  ax submit reindex --payload '{"table":"orders"}' --shards 8
  ax submit reindex --shards-ask --shards-max 64`,
		Args: exactArgs("HANDLER"),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := &axapi.SubmitRequest{ID: id, Handler: args[0], Overwrite: overwrite}
			fl := cmd.Flags()
			switch {
			case args[0] == "":
				return usagef("handler: required")
			case len(args[0]) > axapi.HandlerMaxBytes:
				return usagef("handler: %d bytes; the limit is %d", len(args[0]), axapi.HandlerMaxBytes)
			case len(id) > axapi.IDMaxBytes:
				return usagef("--id: %d bytes; the limit is %d", len(id), axapi.IDMaxBytes)
			}
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
				if len(payload) > axapi.PayloadMaxBytes {
					return payloadTooLarge(int64(len(payload)))
				}
				req.Payload = json.RawMessage(payload)
			case fl.Changed("payload-file"):
				b, size, err := readPayloadFile(payloadFile, cmd.InOrStdin())
				if err != nil {
					return usagef("--payload-file: %v", err)
				}
				if size > axapi.PayloadMaxBytes {
					return payloadTooLarge(size)
				}
				// JSON text is UTF-8 (the sidecar refuses other bytes).
				if utf8.Valid(b) && json.Valid(b) {
					req.Payload = json.RawMessage(b)
				} else if len(b) > 0 {
					req.PayloadBase64 = new(base64.StdEncoding.EncodeToString(b))
				}
			}
			if fl.Changed("delay") {
				if delay < 0 {
					return usagef("--delay %s: must not be negative", delay)
				}
				req.Delay = new(delay.String())
			}
			if fl.Changed("run-at") {
				t, err := parseTime("--run-at", runAt)
				if err != nil {
					return err
				}
				req.RunAt = &t
			}
			if fl.Changed("priority") {
				if priority < ax.PriorityHighest || priority > axapi.PriorityMax {
					return usagef("--priority %d: want 0 (highest) to %d (lowest)", priority, axapi.PriorityMax)
				}
				req.Priority = &priority
			}
			if fl.Changed("timeout") {
				if timeout <= 0 || timeout > axapi.TimeoutMax {
					return usagef("--timeout %s: want more than 0 and at most %s", timeout, axapi.TimeoutMax)
				}
				req.Timeout = new(timeout.String())
			}
			if fl.Changed("max-attempts") {
				if maxAttempts < 1 || maxAttempts > axapi.MaxAttemptsMax {
					return usagef("--max-attempts %d: want 1 to %d", maxAttempts, axapi.MaxAttemptsMax)
				}
				req.MaxAttempts = &maxAttempts
			}
			if err := scheduleFlags(cmd, req, every, cron, timezone, repeats, until); err != nil {
				return err
			}
			var err error
			if req.Labels, err = parseLabels(labels); err != nil {
				return err
			}
			if len(routeKey) > axapi.RouteKeyMaxBytes {
				return usagef("--route-key: %d bytes; the limit is %d", len(routeKey), axapi.RouteKeyMaxBytes)
			}
			req.RouteKey = optional(routeKey)
			req.Retention = optional(retention)                       // the sidecar validates it
			req.TraceParent, req.TraceState = traceparent, tracestate // so does it these
			if req.Backoff, err = backoffFlags(cmd, backoffInitial, backoffMax, backoffMultiplier, backoffJit); err != nil {
				return err
			}
			// The sidecar validates the shards (400 invalid_shards).
			if fl.Changed("shards") || fl.Changed("shards-ask") || fl.Changed("shards-max") {
				req.Shards = &axapi.ShardsRequest{Ask: shardsAsk}
				if fl.Changed("shards") {
					req.Shards.Count = &shards
				}
				if fl.Changed("shards-max") {
					req.Shards.Max = &shardsMax
				}
			}

			ctx, cancel := cmdContext(cmd)
			defer cancel()
			c := f.caller()
			defer c.Close()
			a, err := c.Submit(ctx, req)
			if errors.Is(err, ax.ErrConflict) {
				return errors.New(strings.Replace(errorLine(err), `set "overwrite": true`, "use --overwrite", 1))
			}
			if err != nil {
				return err
			}
			if a.BacklogWarning != "" {
				fmt.Fprintf(cmd.ErrOrStderr(), "ax: warning: the backlog of handler %s is at %s (due runs not yet delivered); slow down before submits fail with queue_full\n", a.Task.Handler, a.BacklogWarning)
			}
			if f.json {
				return writeJSON(cmd.OutOrStdout(), a.Raw)
			}
			t := &a.Task
			if !a.Created() {
				fmt.Fprintf(cmd.OutOrStdout(), "task %s already exists with the same spec (%s)\n", t.ID, t.State)
				return nil
			}
			fmt.Fprintf(cmd.OutOrStdout(), "submitted %s: %s, %s\n", t.ID, t.State, whenText(t, time.Now()))
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&id, "id", "", "task id and idempotency key, any UTF-8 (default: a random id)")
	fl.StringVar(&payload, "payload", "", "payload, a JSON value delivered byte for byte to the executor (at most 1 MiB)")
	fl.StringVar(&payloadFile, "payload-file", "", "read the payload from a file (- for stdin): sent as JSON when it is valid JSON, else as binary (at most 1 MiB)")
	fl.DurationVar(&delay, "delay", 0, "run after this long (Go duration: 90s, 30m, 2h)")
	fl.StringVar(&runAt, "run-at", "", "run at this time, RFC 3339 (2026-07-01T06:00:00Z)")
	fl.IntVar(&priority, "priority", ax.PriorityDefault, "0 (highest) to 4 (lowest)")
	fl.DurationVar(&timeout, "timeout", 0, "bound of one attempt, at most 24h (default 30s)")
	fl.IntVar(&maxAttempts, "max-attempts", 0, "attempts before the task is DEAD, first one included: 1 to 1000 (default 4)")
	fl.BoolVar(&overwrite, "overwrite", false, "replace an existing task with the same id and another spec")
	fl.DurationVar(&every, "every", 0, "recurring: run at this fixed interval, at least 1s (Go duration: 5m, 1h)")
	fl.StringVar(&cron, "cron", "", "recurring: run on this cron schedule ('0 2 * * *', 6 fields with seconds, or @daily)")
	fl.StringVar(&timezone, "timezone", "", "IANA time zone of --cron (default UTC): Europe/Berlin")
	fl.IntVar(&repeats, "repeats", 0, "recurring: stop after this many runs (0: no limit)")
	fl.StringVar(&until, "until", "", "recurring: no run after this time, RFC 3339")
	fl.StringArrayVar(&labels, "label", nil, "KEY=VALUE kept with the task (repeatable, at most 32)")
	fl.StringVar(&routeKey, "route-key", "", "route the task's attempts by consistent hashing on this key")
	fl.StringVar(&retention, "retention", "", "keep the task this long once finished, then purge it (Go duration: 1h; default: the sidecar's --retention or --retention-dead)")
	fl.StringVar(&traceparent, "traceparent", "", "W3C trace context of the task (00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>): every callback carries its trace id")
	fl.StringVar(&tracestate, "tracestate", "", "W3C tracestate going with --traceparent (vendor=value,...)")
	fl.DurationVar(&backoffInitial, "backoff-initial", 0, "retry backoff: wait before the first retry (default 2s)")
	fl.DurationVar(&backoffMax, "backoff-max", 0, "retry backoff: longest wait (default 30s)")
	fl.Float64Var(&backoffMultiplier, "backoff-multiplier", 0, "retry backoff: growth of the wait per retry, 1 or more (default 2)")
	fl.Float64Var(&backoffJit, "backoff-jitter", 0, "retry backoff: random spread, a fraction from 0 to 1 (default 0.2)")
	fl.IntVar(&shards, "shards", 0, "run each run as this many shard tasks, 1 to 1024 (callbacks carry Ax-Shard-Index and Ax-Shard-Total)")
	fl.BoolVar(&shardsAsk, "shards-ask", false, "ask the executor (POST /ax/v1/shards) how many shards each run gets; needs --shards-max")
	fl.IntVar(&shardsMax, "shards-max", 0, "with --shards-ask: at most this many shards, 1 to 1024")
	f.register(cmd)
	return cmd
}

// checkID refuses an empty task id (the API's path would have no id).
func checkID(cmd *cobra.Command, id string) error {
	if id == "" {
		return usagef("%s: ID must not be empty (usage: %s)", cmdName(cmd), cmd.UseLine())
	}
	return nil
}

// payloadTooLarge is the error of a payload over the API's limit, found
// before sending it (the sidecar would close the connection mid-body).
func payloadTooLarge(n int64) error {
	return usagef("payload is %d bytes; the limit is 1 MiB", n)
}

// parseTime parses an RFC 3339 time given to flag.
func parseTime(flag, s string) (string, error) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return "", usagef("%s %q: want an RFC 3339 time like 2026-07-01T06:00:00Z", flag, s)
	}
	return t.UTC().Format(time.RFC3339Nano), nil
}

// scheduleFlags checks and sets the recurring schedule of a submit.
func scheduleFlags(cmd *cobra.Command, req *axapi.SubmitRequest, every time.Duration, cron, timezone string, repeats int, until string) error {
	fl := cmd.Flags()
	if fl.Changed("every") && fl.Changed("cron") {
		return usagef("give --every or --cron, not both")
	}
	if fl.Changed("every") {
		if every < axapi.EveryMin {
			return usagef("--every %s: must be at least %s", every, axapi.EveryMin)
		}
		req.Every = new(every.String())
	}
	if fl.Changed("cron") {
		if strings.TrimSpace(cron) == "" {
			return usagef("--cron: empty; want a cron expression like '0 2 * * *'")
		}
		req.Cron = &cron
	}
	recurring := req.Every != nil || req.Cron != nil
	if fl.Changed("timezone") {
		if req.Cron == nil {
			return usagef("--timezone goes with --cron")
		}
		req.Timezone = optional(timezone)
	}
	if fl.Changed("repeats") {
		if !recurring {
			return usagef("--repeats goes with --every or --cron")
		}
		if repeats < 0 {
			return usagef("--repeats %d: must be 0 (no limit) or more", repeats)
		}
		if repeats > 0 {
			req.Repeats = &repeats
		}
	}
	if fl.Changed("until") {
		if !recurring {
			return usagef("--until goes with --every or --cron")
		}
		t, err := parseTime("--until", until)
		if err != nil {
			return err
		}
		req.Until = &t
	}
	return nil
}

// optional is a flag's value for an optional field of a request: nil (left
// out) when empty.
func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// parseLabels parses --label KEY=VALUE flags.
func parseLabels(labels []string) (map[string]string, error) {
	if len(labels) == 0 {
		return nil, nil
	}
	if len(labels) > axapi.LabelsMax {
		return nil, usagef("--label: %d labels; the limit is %d", len(labels), axapi.LabelsMax)
	}
	m := make(map[string]string, len(labels))
	for _, l := range labels {
		k, v, ok := strings.Cut(l, "=")
		switch {
		case !ok || k == "":
			return nil, usagef("--label %q: want KEY=VALUE", l)
		case len(k) > axapi.LabelMaxBytes || len(v) > axapi.LabelMaxBytes:
			return nil, usagef("--label %q: key and value are at most %d bytes each", truncate(l, 40), axapi.LabelMaxBytes)
		}
		if _, dup := m[k]; dup {
			return nil, usagef("--label %q: key %q given twice", l, k)
		}
		m[k] = v
	}
	return m, nil
}

// backoffFlags checks the --backoff-* flags; nil when none is given.
func backoffFlags(cmd *cobra.Command, initial, maxWait time.Duration, multiplier, jitter float64) (*axapi.BackoffRequest, error) {
	fl := cmd.Flags()
	var b axapi.BackoffRequest
	set := false
	if fl.Changed("backoff-initial") {
		if initial <= 0 {
			return nil, usagef("--backoff-initial %s: must be positive", initial)
		}
		b.Initial, set = new(initial.String()), true
	}
	if fl.Changed("backoff-max") {
		if maxWait <= 0 {
			return nil, usagef("--backoff-max %s: must be positive", maxWait)
		}
		if fl.Changed("backoff-initial") && maxWait < initial {
			return nil, usagef("--backoff-max %s: must not be less than --backoff-initial %s", maxWait, initial)
		}
		b.Max, set = new(maxWait.String()), true
	}
	if fl.Changed("backoff-multiplier") {
		if multiplier < 1 || math.IsInf(multiplier, 0) || math.IsNaN(multiplier) {
			return nil, usagef("--backoff-multiplier %v: must be 1 or more", multiplier)
		}
		b.Multiplier, set = &multiplier, true
	}
	if fl.Changed("backoff-jitter") {
		if !(jitter >= 0 && jitter <= 1) {
			return nil, usagef("--backoff-jitter %v: want a fraction from 0 to 1", jitter)
		}
		b.Jitter, set = &jitter, true
	}
	if !set {
		return nil, nil
	}
	return &b, nil
}

// readPayloadFile reads a payload file (- for stdin) and returns its bytes
// and size. Over the payload limit it reads no more than needed to tell
// the size, and returns no bytes.
func readPayloadFile(name string, stdin io.Reader) ([]byte, int64, error) {
	r := stdin
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return nil, 0, err
		}
		defer f.Close()
		if st, err := f.Stat(); err == nil && st.Mode().IsRegular() && st.Size() > axapi.PayloadMaxBytes {
			return nil, st.Size(), nil
		}
		r = f
	}
	b, err := io.ReadAll(io.LimitReader(r, axapi.PayloadMaxBytes+1))
	if err != nil {
		return nil, 0, err
	}
	if len(b) <= axapi.PayloadMaxBytes {
		return b, int64(len(b)), nil
	}
	rest, err := io.Copy(io.Discard, r)
	if err != nil {
		return nil, 0, err
	}
	return nil, int64(len(b)) + rest, nil
}

// waitingText says why a due task waits, since when and until when:
// "no_executor since 3m ago", "circuit_open since 5s ago, until in 25s".
func waitingText(t *axapi.Task, now time.Time) string {
	s := t.WaitingReason
	if t.WaitingSince != nil {
		s += " since " + fmtTime(t.WaitingSince, now)
	}
	if t.WaitingUntil != nil {
		s += ", until " + fmtTime(t.WaitingUntil, now)
	}
	return s
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
	var consistency string
	cmd := &cobra.Command{
		Use:     "get ID",
		Short:   "Show a task: state, attempts, next run, schedule, last error, payload",
		Example: "  ax get 'order|42'\n  ax get 'order|42' --json | jq .state\n  ax get 'order|42' --consistency strong",
		Args:    exactArgs("ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkID(cmd, args[0]); err != nil {
				return err
			}
			if cmd.Flags().Changed("consistency") && consistency != "local" && consistency != "strong" {
				return usagef("--consistency %q: want local or strong", consistency)
			}
			ctx, cancel := cmdContext(cmd)
			defer cancel()
			c := f.caller()
			defer c.Close()
			a, err := c.Get(ctx, args[0], consistency)
			if err != nil {
				return notFoundTask(err, args[0])
			}
			if f.json {
				return writeJSON(cmd.OutOrStdout(), a.Raw)
			}
			return printTask(cmd.OutOrStdout(), &a.Task, time.Now())
		},
	}
	cmd.Flags().StringVar(&consistency, "consistency", "", "local (the default: this node's state) or strong (linearizable: read through the leader)")
	f.register(cmd)
	return cmd
}

// printTask prints one task as "Field:  value" lines.
func printTask(w io.Writer, t *axapi.Task, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s:\t%s\n", k, v) }
	row("ID", oneLine(t.ID))
	row("Handler", t.Handler)
	row("State", t.State)
	if t.Paused {
		row("Paused", "yes (ax resume task to let its runs fire)")
	}
	row("Priority", fmt.Sprint(t.Priority))
	row("Attempts", fmt.Sprintf("%d of %d", t.Attempts, t.MaxAttempts))
	if t.Run > 0 {
		row("Run", fmt.Sprint(t.Run))
	}
	if t.Snoozes > 0 {
		row("Snoozes", fmt.Sprint(t.Snoozes))
	}
	row("Timeout", t.Timeout)
	if t.Delay != "" {
		row("Delay", t.Delay)
	}
	if t.RunAt != nil {
		row("Run at", fmtTime(t.RunAt, now))
	}
	switch {
	case t.Every != "":
		row("Every", t.Every)
	case t.Cron != "":
		tz := t.Timezone
		if tz == "" {
			tz = "UTC"
		}
		row("Cron", fmt.Sprintf("%s (%s)", t.Cron, tz))
	}
	if t.Every != "" || t.Cron != "" {
		if t.Repeats > 0 {
			row("Repeats", fmt.Sprintf("%d runs", t.Repeats))
		} else {
			row("Repeats", "no limit")
		}
		if t.Until != nil {
			row("Until", fmtTime(t.Until, now))
		}
	}
	if t.NextRunAt != nil {
		row("Next run", fmtTime(t.NextRunAt, now))
	}
	if t.WaitingReason != "" {
		row("Waiting", waitingText(t, now))
	}
	if t.Node != "" {
		row("Node", t.Node)
	}
	if t.RouteKey != "" {
		row("Route key", oneLine(t.RouteKey))
	}
	if sh := t.Shards; sh != nil {
		how := fmt.Sprintf("%d per run", sh.Count)
		if sh.Ask {
			how = fmt.Sprintf("asked of the executor, at most %d", sh.Max)
		}
		if sh.Total > 0 {
			how += fmt.Sprintf("; this run: %d (%d succeeded, %d failed, %d running)", sh.Total, sh.Succeeded, sh.Failed, sh.Running)
		}
		row("Shards", how)
	}
	if t.ShardIndex != nil {
		row("Shard", fmt.Sprintf("%d of %d", *t.ShardIndex, t.ShardTotal))
	}
	if len(t.Labels) > 0 {
		keys := make([]string, 0, len(t.Labels))
		for k := range t.Labels {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for i, k := range keys {
			keys[i] = k + "=" + t.Labels[k]
		}
		row("Labels", oneLine(strings.Join(keys, ", ")))
	}
	if b := t.Backoff; b != nil {
		row("Backoff", fmt.Sprintf("%s, ×%g per retry, at most %s, jitter ±%g%%", b.Initial, b.Multiplier, b.Max, b.Jitter*100))
	}
	if t.LastError != "" {
		row("Last error", oneLine(t.LastError))
	}
	if t.TraceID != "" {
		trace := t.TraceID
		if t.TraceParent == "" {
			trace += " (from the task id)"
		}
		row("Trace", trace)
	}
	row("Created", fmtTime(&t.CreatedAt, now))
	row("Updated", fmtTime(&t.UpdatedAt, now))
	if t.FinishedAt != nil {
		row("Finished", fmtTime(t.FinishedAt, now))
	}
	switch {
	case t.PayloadBase64:
		row("Payload", fmt.Sprintf("(binary, base64) %s", truncate(base64.StdEncoding.EncodeToString(t.Payload), 200)))
	case len(t.Payload) > 0:
		row("Payload", truncate(string(t.Payload), 200))
	}
	return tw.Flush()
}

// states are the task states `ax list --state` takes.
var states = []ax.State{ax.StateWaiting, ax.StateRunning, ax.StateSuccess, ax.StateDead, ax.StateFailed, ax.StateCancelled}

func listCmd() *cobra.Command {
	var f apiFlags
	var handler, state, startCursor string
	var limit int
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List tasks in id order, filtered by handler and state",
		Long: `List tasks in id order as a table: id, handler, state, attempts, next run (or
when it finished) and the last error. It follows the API's pages until
--limit tasks are shown (0: all); --cursor continues after an earlier list
(the next_cursor of --json, or the cursor it names when more match).`,
		Example: "  ax list --state dead\n  ax list --handler order.timeout --limit 0 --json\n  ax list --limit 100 --cursor 'order|41'",
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
			cursor, more := startCursor, false
			for {
				page := axapi.ListLimitMax
				if limit > 0 {
					page = min(page, limit-len(tasks))
				}
				p, err := c.List(ctx, listQuery{Handler: handler, State: state, Limit: page, Cursor: cursor})
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
				fmt.Fprintf(cmd.ErrOrStderr(), "(showing the first %d; more match: raise --limit, --limit 0 for all, or continue with --cursor %s)\n", len(tasks), shellQuote(cursor))
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&handler, "handler", "", "only tasks of this handler")
	fl.StringVar(&state, "state", "", "only tasks in this state: "+stateNames())
	fl.IntVar(&limit, "limit", 100, "show at most this many tasks (0: all)")
	fl.StringVar(&startCursor, "cursor", "", "start after this cursor: the next_cursor of an earlier list")
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

// Widths of the columns of `ax list` that can be long: longer cells are
// cut (the full values are in `ax get` and --json).
const (
	idWidth      = 64
	handlerWidth = 40
)

// printTaskTable prints tasks as the table of `ax list`, aligned by display
// width (wide characters and emoji take two columns).
func printTaskTable(w io.Writer, tasks []axapi.Task, now time.Time) error {
	rows := [][]string{{"ID", "HANDLER", "STATE", "ATTEMPTS", "NEXT RUN / FINISHED", "LAST ERROR"}}
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
			if t.WaitingReason != "" {
				when += ", waiting: " + t.WaitingReason
			}
		}
		lastErr := "-"
		if t.LastError != "" {
			lastErr = truncate(t.LastError, lastErrorWidth)
		}
		state := t.State
		if t.Paused {
			state += " (paused)"
		}
		rows = append(rows, []string{truncate(t.ID, idWidth), truncate(t.Handler, handlerWidth), state,
			fmt.Sprintf("%d/%d", t.Attempts, t.MaxAttempts), when, lastErr})
	}
	return writeTable(w, rows)
}

// shellQuote quotes s for a shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:@%+=,", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func cancelCmd() *cobra.Command {
	var f apiFlags
	cmd := &cobra.Command{
		Use:   "cancel ID",
		Short: "Cancel a task: a waiting one never runs; a running attempt is aborted",
		Long: `Cancel a task: a waiting one never runs, a running attempt is aborted, and a
recurring task has no further runs. A task that is already finished
(SUCCESS, DEAD, FAILED or CANCELLED) stays as it is.`,
		Args: exactArgs("ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkID(cmd, args[0]); err != nil {
				return err
			}
			ctx, cancel := cmdContext(cmd)
			defer cancel()
			c := f.caller()
			defer c.Close()
			// The answer of a cancel is the task either way; its state
			// before tells a cancel from a task that was already cancelled.
			before := ""
			if !f.json {
				a, err := c.Get(ctx, args[0], "")
				if err != nil {
					return notFoundTask(err, args[0])
				}
				before = a.Task.State
			}
			a, err := c.Cancel(ctx, args[0])
			if err != nil {
				return notFoundTask(err, args[0])
			}
			if f.json {
				return writeJSON(cmd.OutOrStdout(), a.Raw)
			}
			t := &a.Task
			switch {
			case before == string(ax.StateCancelled) || t.State != string(ax.StateCancelled) && ax.State(t.State).Terminal():
				fmt.Fprintf(cmd.OutOrStdout(), "%s was already %s; nothing to cancel\n", t.ID, t.State)
			case t.State == string(ax.StateCancelled):
				fmt.Fprintf(cmd.OutOrStdout(), "cancelled %s\n", t.ID)
			default:
				fmt.Fprintf(cmd.OutOrStdout(), "cancelling %s: %s\n", t.ID, t.State)
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
			if err := checkID(cmd, args[0]); err != nil {
				return err
			}
			ctx, cancel := cmdContext(cmd)
			defer cancel()
			c := f.caller()
			defer c.Close()
			a, err := c.Retry(ctx, args[0])
			if err != nil {
				return notFoundTask(err, args[0])
			}
			if f.json {
				return writeJSON(cmd.OutOrStdout(), a.Raw)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "retrying %s: %s, %s\n", a.Task.ID, a.Task.State, whenText(&a.Task, time.Now()))
			return nil
		},
	}
	f.register(cmd)
	return cmd
}
