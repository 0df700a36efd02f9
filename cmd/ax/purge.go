package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"

	ax "github.com/axsched/ax/clients/go"
	"github.com/axsched/ax/clients/go/axapi"
)

// purgeRounds bounds the requests one `ax purge` with filters sends (each
// deletes at most --limit tasks).
const purgeRounds = 10000

func purgeCmd() *cobra.Command {
	var f apiFlags
	var (
		handler, state, before string
		limit                  int
		all                    bool
	)
	cmd := &cobra.Command{
		Use:   "purge [ID]",
		Short: "Delete finished tasks now, instead of waiting for their retention",
		Long: `Delete finished tasks (SUCCESS, CANCELLED, DEAD or FAILED) now, through the
cluster. Finished tasks are otherwise deleted when their retention ends
(the sidecar's --retention and --retention-dead, or a task's own retention).

With an ID, that one task: a task that is not finished is refused (cancel
it first). Without, every finished task that matches --handler, --state and
--before (an RFC 3339 time, or a duration meaning that long ago), in
requests of at most --limit tasks until none is left; --all matches every
finished task.`,
		Example: `  ax purge 'order|42'
  ax purge --handler order.timeout --state SUCCESS --before 24h
  ax purge --state DEAD --before 2026-11-01T00:00:00Z --json
  ax purge --all`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			fl := cmd.Flags()
			filtered := fl.Changed("handler") || fl.Changed("state") || fl.Changed("before")
			ctx, cancel := cmdContext(cmd)
			defer cancel()
			if len(args) == 1 {
				if filtered || all || fl.Changed("limit") {
					return usagef("give an ID or filters (--handler, --state, --before, --limit, --all), not both")
				}
				if err := checkID(cmd, args[0]); err != nil {
					return err
				}
				c := f.caller()
				defer c.Close()
				body, _, err := c.Do(ctx, http.MethodDelete, axapi.TaskPath(args[0])+"?purge=true", nil)
				if err != nil {
					return notFoundTask(err, args[0])
				}
				if f.json {
					return writeJSON(cmd.OutOrStdout(), json.RawMessage(body))
				}
				fmt.Fprintf(cmd.OutOrStdout(), "purged %s\n", args[0])
				return nil
			}
			if !filtered && !all {
				return usagef("purge: give an ID, or filters (--handler, --state, --before), or --all for every finished task")
			}
			req := map[string]any{}
			if handler != "" {
				req["handler"] = handler
			}
			if state != "" {
				s, ok := finishedState(state)
				if !ok {
					return usagef("--state %q: want one of SUCCESS, CANCELLED, DEAD, FAILED", state)
				}
				req["state"] = s
			}
			if before != "" {
				t, err := parseBefore(before, time.Now())
				if err != nil {
					return err
				}
				req["finished_before"] = t.UTC().Format(time.RFC3339Nano)
			}
			if fl.Changed("limit") {
				if limit < 1 || limit > axapi.PurgeLimitMax {
					return usagef("--limit %d: want 1 to %d", limit, axapi.PurgeLimitMax)
				}
				req["limit"] = limit
			}
			body, err := json.Marshal(req)
			if err != nil {
				return err
			}
			c := f.caller()
			defer c.Close()
			var total ax.PurgeResult
			for range purgeRounds {
				data, _, err := c.Do(ctx, http.MethodPost, "/v1/tasks/purge", body)
				if err != nil {
					if total.Purged > 0 {
						return fmt.Errorf("%w (after purging %d)", err, total.Purged)
					}
					return err
				}
				var r ax.PurgeResult
				if err := json.Unmarshal(data, &r); err != nil {
					return fmt.Errorf("purge: cannot decode the answer: %w", err)
				}
				total.Purged += r.Purged
				total.More = r.More
				// A round may purge nothing and still say more (it read
				// its bound of tasks the filters left): its next_cursor
				// goes on from there. A sidecar without cursors gives
				// none, and a round that purged nothing then stops.
				if !r.More || (r.Purged == 0 && r.NextCursor == "") {
					break
				}
				req["cursor"] = r.NextCursor
				if body, err = json.Marshal(req); err != nil {
					return err
				}
			}
			if f.json {
				return writeJSON(cmd.OutOrStdout(), total)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "purged %d finished tasks\n", total.Purged)
			if total.More {
				fmt.Fprintln(cmd.OutOrStdout(), "more may match: run it again")
			}
			return nil
		},
	}
	f.register(cmd)
	cmd.Flags().StringVar(&handler, "handler", "", "only tasks of this handler")
	cmd.Flags().StringVar(&state, "state", "", "only tasks in this finished state: SUCCESS, CANCELLED, DEAD or FAILED")
	cmd.Flags().StringVar(&before, "before", "", "only tasks that finished before this RFC 3339 time, or this long ago (24h)")
	cmd.Flags().IntVar(&limit, "limit", axapi.PurgeLimitDefault, fmt.Sprintf("most tasks deleted per request (1 to %d); requests repeat until none is left", axapi.PurgeLimitMax))
	cmd.Flags().BoolVar(&all, "all", false, "without filters: every finished task")
	return cmd
}

// finishedState returns the finished state named s (any case).
func finishedState(s string) (string, bool) {
	for _, st := range []ax.State{ax.StateSuccess, ax.StateCancelled, ax.StateDead, ax.StateFailed} {
		if strings.EqualFold(s, string(st)) {
			return string(st), true
		}
	}
	return "", false
}

// parseBefore parses --before: an RFC 3339 time, or a duration before now.
func parseBefore(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return time.Time{}, usagef("--before %q: want an RFC 3339 time (2026-11-01T00:00:00Z) or a duration ago (24h)", s)
	}
	return now.Add(-d), nil
}
