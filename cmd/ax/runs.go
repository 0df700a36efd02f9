package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/axsched/ax/clients/go/axapi"
)

// runsCmd is `ax runs ID [RUN]`: a task's run history (GET
// /v1/tasks/{id}/runs), or one run with its attempts and result.
func runsCmd() *cobra.Command {
	var f apiFlags
	var limit int
	cmd := &cobra.Command{
		Use:   "runs ID [RUN]",
		Short: "Show a task's runs (newest first) with their lateness split, or one run with its attempts and result",
		Long: `Show the run history of a task: one line per run, newest first — its
state, when it was due, started and finished, its attempts, and where its
lateness went (parked on the leader, retries: attempts before the first
that reached an executor, Raft commit, queue on the node, connect). With RUN, that run with each attempt (node, executor, outcome,
HTTP status, error) and its result. The sidecar keeps --history-runs runs
per task (default 100).`,
		Example: "  ax runs 'report|daily'\n  ax runs 'report|daily' 2\n  ax runs 'report|daily' --json | jq '.runs[0].lateness'",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) < 1 || len(args) > 2 {
				return usagef("want ID and an optional RUN, got %d arguments", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			id := args[0]
			if err := checkID(cmd, id); err != nil {
				return err
			}
			if limit < 1 || limit > axapi.RunsLimitMax {
				return usagef("--limit %d: want 1 to %d", limit, axapi.RunsLimitMax)
			}
			ctx, cancel := cmdContext(cmd)
			defer cancel()
			c := f.caller()
			defer c.Close()
			now := time.Now()
			if len(args) == 2 {
				run, err := strconv.Atoi(args[1])
				if err != nil || run < 1 {
					return usagef("RUN %q: want a run number from 1", args[1])
				}
				body, _, err := c.Do(ctx, http.MethodGet, axapi.RunPath(id, run), nil)
				if err != nil {
					return err // the server says which: the task or the run
				}
				if f.json {
					return writeJSON(cmd.OutOrStdout(), json.RawMessage(bytes.TrimSpace(body)))
				}
				var r axapi.Run
				if err := json.Unmarshal(body, &r); err != nil {
					return fmt.Errorf("decode run: %w", err)
				}
				return printRun(cmd.OutOrStdout(), &r, now)
			}
			body, _, err := c.Do(ctx, http.MethodGet, axapi.RunsPath(id)+"?limit="+url.QueryEscape(strconv.Itoa(limit)), nil)
			if err != nil {
				return notFoundTask(err, id)
			}
			if f.json {
				return writeJSON(cmd.OutOrStdout(), json.RawMessage(bytes.TrimSpace(body)))
			}
			var page axapi.RunsPage
			if err := json.Unmarshal(body, &page); err != nil {
				return fmt.Errorf("decode runs: %w", err)
			}
			if len(page.Runs) == 0 {
				_, err := fmt.Fprintln(cmd.OutOrStdout(), "no runs on record")
				return err
			}
			return printRunsTable(cmd.OutOrStdout(), page.Runs)
		},
	}
	cmd.Flags().IntVar(&limit, "limit", axapi.RunsLimitDefault, fmt.Sprintf("runs to show, newest first (at most %d)", axapi.RunsLimitMax))
	f.register(cmd)
	return cmd
}

// fmtMs prints a duration in milliseconds: 0, 0.4ms, 12ms, 1.5s.
func fmtMs(ms float64) string {
	switch {
	case ms == 0:
		return "0"
	case ms < 1:
		return fmt.Sprintf("%.1fms", ms)
	case ms < 1000:
		return fmt.Sprintf("%.0fms", ms)
	}
	return (time.Duration(ms * float64(time.Millisecond))).Round(time.Millisecond).String()
}

// latenessText is "total = parked P [reason] [+ retries R] + commit C +
// queue Q + connect N" (retries only when there were any).
func latenessText(l *axapi.Lateness) string {
	if l == nil {
		return "-"
	}
	parked := fmtMs(l.ParkedMs)
	if l.ParkedReason != "" {
		parked += " " + l.ParkedReason
	}
	if l.RetriesMs > 0 {
		parked += " + retries " + fmtMs(l.RetriesMs)
	}
	return fmt.Sprintf("%s = parked %s + commit %s + queue %s + connect %s",
		fmtMs(l.TotalMs), parked, fmtMs(l.CommitMs), fmtMs(l.QueueMs), fmtMs(l.ConnectMs))
}

func printRunsTable(w io.Writer, runs []axapi.Run) error {
	rows := [][]string{{"RUN", "STATE", "DUE", "STARTED", "FINISHED", "ATTEMPTS", "LATENESS"}}
	for i := range runs {
		r := &runs[i]
		attempts := strconv.Itoa(len(r.Attempts) + r.AttemptsDropped)
		if n := len(r.Attempts); n > 0 && r.Attempts[n-1].Node != "" {
			attempts += " (last on " + r.Attempts[n-1].Node + ")"
		}
		rows = append(rows, []string{strconv.Itoa(r.Run), r.State, fmtUTC(r.DueAt), fmtOpt(r.StartedAt), fmtOpt(r.FinishedAt), attempts, latenessText(r.Lateness)})
	}
	return writeTable(w, rows)
}

func fmtOpt(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return fmtUTC(*t)
}

// printRun prints one run as "Field: value" lines, then its attempts.
func printRun(w io.Writer, r *axapi.Run, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s:\t%s\n", k, v) }
	row("Run", strconv.Itoa(r.Run))
	row("State", r.State)
	if r.TraceID != "" {
		row("Trace", r.TraceID)
	}
	row("Due", fmtTime(&r.DueAt, now))
	row("Fired", fmtUTC(r.FiredAt))
	row("Started", fmtOpt(r.StartedAt))
	row("Finished", fmtOpt(r.FinishedAt))
	row("Lateness", latenessText(r.Lateness))
	switch {
	case len(r.Result) > 0:
		row("Result", truncate(string(r.Result), 200))
	case r.ResultBase64 != "":
		row("Result", "(binary, base64) "+truncate(r.ResultBase64, 200))
	}
	if r.ResultTruncated {
		row("Result cut", fmt.Sprintf("yes: the executor sent more than %d bytes", axapi.ResultMaxBytes))
	}
	if r.Shards > 0 {
		ids := ""
		if len(r.ShardIDs) > 0 {
			ids = ": " + oneLine(strings.Join(r.ShardIDs, ", "))
		}
		row("Shards", fmt.Sprintf("%d (%d succeeded, %d failed)%s", r.Shards, r.ShardsSucceeded, r.ShardsFailed, ids))
	}
	if r.AttemptsDropped > 0 {
		row("Older attempts", fmt.Sprintf("%d not kept", r.AttemptsDropped))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(r.Attempts) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	rows := [][]string{{"ATTEMPT", "NODE", "EXECUTOR", "STARTED", "TOOK", "OUTCOME", "HTTP", "ERROR"}}
	for _, a := range r.Attempts {
		outcome, status, took, exec, errText := "running", "-", "-", "-", "-"
		if a.Outcome != "" {
			outcome = a.Outcome
		}
		if a.HTTPStatus != 0 {
			status = strconv.Itoa(a.HTTPStatus)
		}
		if a.DurationMs > 0 {
			took = fmtMs(a.DurationMs)
		}
		if a.Executor != "" {
			exec = a.Executor
		}
		if a.Error != "" {
			errText = truncate(oneLine(a.Error), 80)
		}
		rows = append(rows, []string{strconv.Itoa(a.Attempt), a.Node, exec, fmtOpt(a.StartedAt), took, outcome, status, errText})
	}
	return writeTable(w, rows)
}
