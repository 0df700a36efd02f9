package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	ax "github.com/axsched/ax/clients/go"
	"github.com/axsched/ax/clients/go/axapi"
)

// pauseCmds returns `ax pause`, `ax resume` and `ax handlers`.
func pauseCmds() []*cobra.Command {
	return []*cobra.Command{pauseResumeCmd(true), pauseResumeCmd(false), handlersCmd()}
}

// pauseResumeCmd is `ax pause` (pause true) or `ax resume`, with the
// subcommands handler NAME and task ID.
func pauseResumeCmd(pause bool) *cobra.Command {
	verb, action := "resume", "resume"
	short := "Resume a paused handler or task: the runs that waited fire now"
	if pause {
		verb, action = "pause", "pause"
		short = "Pause a handler or a task: its due runs wait until resumed"
	}
	cmd := &cobra.Command{
		Use:   verb + " handler|task",
		Short: short,
		Long: `ax pause stops the runs of a handler (all its tasks, on every node) or of
one task from being delivered: due runs wait, with the waiting reason
"paused", until ax resume. An attempt that is already running is not
interrupted; submits are still accepted. A paused recurring task keeps its
schedule: on resume the run that waited fires once for every slot it
missed, then the schedule goes on. Pausing and resuming are replicated and
idempotent.`,
		Example: "  ax " + verb + " handler email.send\n  ax " + verb + " task 'order|42'",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return usagef("%s: say what to %s: handler NAME or task ID (usage: %s)", cmdName(cmd), verb, cmd.UseLine())
		},
	}
	cmd.AddCommand(pauseHandlerCmd(verb, action), pauseTaskCmd(verb, action))
	return cmd
}

func pauseHandlerCmd(verb, action string) *cobra.Command {
	var f apiFlags
	cmd := &cobra.Command{
		Use:   "handler NAME",
		Short: strings.ToUpper(verb[:1]) + verb[1:] + " every run of handler NAME",
		Args:  exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			switch {
			case name == "":
				return usagef("%s: NAME must not be empty (usage: %s)", cmdName(cmd), cmd.UseLine())
			case len(name) > axapi.HandlerMaxBytes:
				return usagef("handler: %d bytes; the limit is %d", len(name), axapi.HandlerMaxBytes)
			}
			ctx, cancel := cmdContext(cmd)
			defer cancel()
			c := f.caller()
			defer c.Close()
			data, _, err := c.Do(ctx, http.MethodPost, "/v1/handlers/"+url.PathEscape(name)+"/"+action, []byte("{}"))
			if err != nil {
				return err
			}
			if f.json {
				return writeJSON(cmd.OutOrStdout(), json.RawMessage(data))
			}
			var hp struct {
				Name   string `json:"name"`
				Paused bool   `json:"paused"`
			}
			if err := json.Unmarshal(data, &hp); err != nil || hp.Name == "" {
				return fmt.Errorf("%s handler: unexpected answer: %.200s", verb, data)
			}
			state := "resumed"
			if hp.Paused {
				state = "paused"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "handler %s: %s\n", oneLine(hp.Name), state)
			return nil
		},
	}
	f.register(cmd)
	return cmd
}

func pauseTaskCmd(verb, action string) *cobra.Command {
	var f apiFlags
	cmd := &cobra.Command{
		Use:   "task ID",
		Short: strings.ToUpper(verb[:1]) + verb[1:] + " the runs of task ID",
		Args:  exactArgs("ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkID(cmd, args[0]); err != nil {
				return err
			}
			ctx, cancel := cmdContext(cmd)
			defer cancel()
			c := f.caller()
			defer c.Close()
			data, _, err := c.Do(ctx, http.MethodPost, axapi.TaskPath(args[0])+"/"+action, []byte("{}"))
			if err != nil {
				return notFoundTask(err, args[0])
			}
			if f.json {
				return writeJSON(cmd.OutOrStdout(), json.RawMessage(data))
			}
			var t axapi.Task
			if err := json.Unmarshal(data, &t); err != nil || t.ID == "" {
				return fmt.Errorf("%s task: unexpected answer: %.200s", verb, data)
			}
			state := "resumed"
			if t.Paused {
				state = "paused"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "task %s: %s (%s, %s)\n", shellQuote(oneLine(t.ID)), state, t.State, whenText(&t, time.Now()))
			return nil
		},
	}
	f.register(cmd)
	return cmd
}

func handlersCmd() *cobra.Command {
	var f apiFlags
	cmd := &cobra.Command{
		Use:   "handlers",
		Short: "List handlers: paused, backlog, parked runs, circuit, tasks by state, executors",
		Long: `List every handler that has tasks, an executor named for it, or a pause:
whether it is paused, its backlog (due runs not yet delivered), its parked
runs by waiting reason, its circuit breaker, its tasks by state and the
executors (node/name) that run it. Backlog, parked runs and the circuit
are the leader's view; "-" when no leader answered.`,
		Example: "  ax handlers\n  ax handlers --json | jq '.handlers[] | select(.paused)'",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := cmdContext(cmd)
			defer cancel()
			c := f.caller()
			defer c.Close()
			data, _, err := c.Do(ctx, http.MethodGet, "/v1/handlers", nil)
			if err != nil {
				var apiErr *ax.APIError
				if errors.As(err, &apiErr) && isRouteMissing(err) {
					return fmt.Errorf("the sidecar has no GET /v1/handlers (it is older than this ax)")
				}
				return err
			}
			if f.json {
				return writeJSON(cmd.OutOrStdout(), json.RawMessage(data))
			}
			var doc axapi.HandlerList
			if err := json.Unmarshal(data, &doc); err != nil || doc.Handlers == nil {
				return fmt.Errorf("handlers: unexpected answer: %.200s", data)
			}
			return printHandlers(cmd.OutOrStdout(), doc.Handlers)
		},
	}
	f.register(cmd)
	return cmd
}

// stateOrder is the order of task states in `ax handlers`.
var stateOrder = []axapi.State{axapi.StateWaiting, axapi.StateRunning, axapi.StateSuccess, axapi.StateDead, axapi.StateFailed, axapi.StateCancelled}

func printHandlers(w io.Writer, hs []axapi.HandlerInfo) error {
	if len(hs) == 0 {
		_, err := fmt.Fprintln(w, "no handlers")
		return err
	}
	rows := [][]string{{"HANDLER", "PAUSED", "BACKLOG", "PARKED", "CIRCUIT", "TASKS", "EXECUTORS"}}
	for _, h := range hs {
		paused, backlog, circuit := "no", "-", "-"
		if h.Paused {
			paused = "yes"
		}
		if h.Backlog != nil {
			backlog = fmt.Sprint(*h.Backlog)
		}
		if h.Circuit != "" {
			circuit = h.Circuit
		}
		rows = append(rows, []string{truncate(h.Name, handlerWidth), paused, backlog, counts(h.Parked, nil), circuit,
			counts(h.Tasks, stateOrder), handlerExecutorsText(h)})
	}
	return writeTable(w, rows)
}

// counts renders {"a": 1, "b": 2} as "a=1 b=2": keys in order, then the
// others sorted; "-" when empty.
func counts[K ~string](m map[K]int, order []K) string {
	var parts []string
	seen := map[K]bool{}
	for _, k := range order {
		if m[k] > 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
		}
		seen[k] = true
	}
	var rest []K
	for k := range m {
		if !seen[k] && m[k] > 0 {
			rest = append(rest, k)
		}
	}
	slices.Sort(rest)
	for _, k := range rest {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, " ")
}

func handlerExecutorsText(h axapi.HandlerInfo) string {
	var parts []string
	for _, x := range h.Executors {
		s := x.Node + "/" + x.Name
		if x.Limit > 0 {
			s += fmt.Sprintf(" (limit %d)", x.Limit)
		}
		parts = append(parts, s)
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}
