package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

// flowView is the part of GET /v1/flows/{id} the CLI prints.
type flowView struct {
	ID            string `json:"id"`
	State         string `json:"state"`
	Run           int    `json:"run"`
	RunDueAt      string `json:"run_due_at"`
	Every         string `json:"every"`
	Cron          string `json:"cron"`
	Timezone      string `json:"timezone"`
	SucceededRuns int    `json:"succeeded_runs"`
	FailedRuns    int    `json:"failed_runs"`
	Stages        []struct {
		Name      string   `json:"name"`
		Handler   string   `json:"handler"`
		DependsOn []string `json:"depends_on"`
		OnFailure string   `json:"on_failure"`
		State     string   `json:"state"`
		TaskID    string   `json:"task_id"`
	} `json:"stages"`
}

func flowPath(id string) string { return "/v1/flows/" + url.PathEscape(id) }

// flowCmd is `ax flow submit|get|list|cancel|purge`: flows (POST/GET
// /v1/flows, GET/DELETE /v1/flows/{id}).
func flowCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "flow",
		Short: "Submit, show, list and cancel flows (stages with dependencies)",
		Long: `A flow is a set of stages, each a task that runs once the stages it
depends on succeeded (README, "Flows"). The flow file is the JSON body of
POST /v1/flows: {"id": ..., "stages": [{"name", "handler", "depends_on", ...}]}.`,
	}
	cmd.AddCommand(flowSubmitCmd(), flowGetCmd(), flowListCmd(), flowCancelCmd(), flowPurgeCmd())
	return cmd
}

func flowSubmitCmd() *cobra.Command {
	var f apiFlags
	var file string
	cmd := &cobra.Command{
		Use:     "submit -f FILE",
		Short:   "Submit a flow from a JSON file ('-' for stdin)",
		Example: "  ax flow submit -f etl.json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if file == "" {
				return usagef("flow submit: -f FILE is required")
			}
			var body []byte
			var err error
			if file == "-" {
				body, err = io.ReadAll(cmd.InOrStdin())
			} else {
				body, err = os.ReadFile(file)
			}
			if err != nil {
				return fmt.Errorf("read %s: %w", file, err)
			}
			ctx, cancel := cmdContext(cmd)
			defer cancel()
			c := f.caller()
			defer c.Close()
			out, status, err := c.Do(ctx, http.MethodPost, "/v1/flows", body)
			if err != nil {
				return err
			}
			if f.json {
				return writeJSON(cmd.OutOrStdout(), json.RawMessage(bytes.TrimSpace(out)))
			}
			var v flowView
			if err := json.Unmarshal(out, &v); err != nil {
				return fmt.Errorf("decode flow: %w", err)
			}
			verb := "created"
			if status == http.StatusOK {
				verb = "exists (same spec)"
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "flow %s %s: %d stages, %s\n", v.ID, verb, len(v.Stages), v.State)
			return err
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "the flow's JSON body ('-': stdin)")
	f.register(cmd)
	return cmd
}

func flowGetCmd() *cobra.Command {
	return flowIDCmd("get ID", "Show a flow and every stage's state", "  ax flow get etl-daily", http.MethodGet)
}

func flowCancelCmd() *cobra.Command {
	return flowIDCmd("cancel ID", "Cancel a flow: its pending, waiting and running stages", "  ax flow cancel etl-daily", http.MethodDelete)
}

// flowPurgeCmd is `ax flow purge ID`: DELETE /v1/flows/{id}?purge=true.
func flowPurgeCmd() *cobra.Command {
	var f apiFlags
	cmd := &cobra.Command{
		Use:     "purge ID",
		Short:   "Delete a finished flow now (its stage tasks are left to the task retention)",
		Example: "  ax flow purge etl-daily",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkID(cmd, args[0]); err != nil {
				return err
			}
			ctx, cancel := cmdContext(cmd)
			defer cancel()
			c := f.caller()
			defer c.Close()
			out, _, err := c.Do(ctx, http.MethodDelete, flowPath(args[0])+"?purge=true", nil)
			if err != nil {
				return err
			}
			if f.json {
				return writeJSON(cmd.OutOrStdout(), json.RawMessage(bytes.TrimSpace(out)))
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "flow %s purged\n", args[0])
			return err
		},
	}
	f.register(cmd)
	return cmd
}

// flowIDCmd is a command that sends method to the flow its one argument
// names and prints the flow it gets back.
func flowIDCmd(use, short, example, method string) *cobra.Command {
	var f apiFlags
	cmd := &cobra.Command{
		Use:     use,
		Short:   short,
		Example: example,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return flowDo(cmd, &f, method, args[0])
		},
	}
	f.register(cmd)
	return cmd
}

func flowDo(cmd *cobra.Command, f *apiFlags, method, id string) error {
	if err := checkID(cmd, id); err != nil {
		return err
	}
	ctx, cancel := cmdContext(cmd)
	defer cancel()
	c := f.caller()
	defer c.Close()
	out, _, err := c.Do(ctx, method, flowPath(id), nil)
	if err != nil {
		return err
	}
	if f.json {
		return writeJSON(cmd.OutOrStdout(), json.RawMessage(bytes.TrimSpace(out)))
	}
	var v flowView
	if err := json.Unmarshal(out, &v); err != nil {
		return fmt.Errorf("decode flow: %w", err)
	}
	return printFlow(cmd.OutOrStdout(), &v)
}

// schedule describes a recurring flow's schedule ("every 1h", "cron \"0 3
// * * *\" Europe/Berlin"), "" for a one-off flow.
func (v *flowView) schedule() string {
	switch {
	case v.Every != "":
		return "every " + v.Every
	case v.Cron != "" && v.Timezone != "":
		return fmt.Sprintf("cron %q %s", v.Cron, v.Timezone)
	case v.Cron != "":
		return fmt.Sprintf("cron %q", v.Cron)
	}
	return ""
}

func printFlow(w io.Writer, v *flowView) error {
	every := ""
	if sc := v.schedule(); sc != "" {
		every = ", " + sc
	}
	fmt.Fprintf(w, "flow %s: %s, run %d due %s%s (%d succeeded, %d failed)\n", v.ID, v.State, v.Run, v.RunDueAt, every, v.SucceededRuns, v.FailedRuns)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STAGE\tSTATE\tHANDLER\tDEPENDS ON\tON FAILURE\tTASK")
	for _, s := range v.Stages {
		deps := strings.Join(s.DependsOn, ",")
		if deps == "" {
			deps = "-"
		}
		task := s.TaskID
		if task == "" {
			task = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", s.Name, s.State, s.Handler, deps, s.OnFailure, task)
	}
	return tw.Flush()
}

func flowListCmd() *cobra.Command {
	var f apiFlags
	var limit int
	var cursor string
	cmd := &cobra.Command{
		Use:     "list",
		Short:   "List flows in id order",
		Example: "  ax flow list\n  ax flow list --limit 10 --cursor etl-daily",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := cmdContext(cmd)
			defer cancel()
			c := f.caller()
			defer c.Close()
			q := "?limit=" + strconv.Itoa(limit)
			if cursor != "" {
				q += "&cursor=" + url.QueryEscape(cursor)
			}
			out, _, err := c.Do(ctx, http.MethodGet, "/v1/flows"+q, nil)
			if err != nil {
				return err
			}
			if f.json {
				return writeJSON(cmd.OutOrStdout(), json.RawMessage(bytes.TrimSpace(out)))
			}
			var page struct {
				Flows      []flowView `json:"flows"`
				NextCursor string     `json:"next_cursor"`
			}
			if err := json.Unmarshal(out, &page); err != nil {
				return fmt.Errorf("decode flows: %w", err)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tSTATE\tRUN\tSTAGES\tSCHEDULE")
			for _, v := range page.Flows {
				every := v.schedule()
				if every == "" {
					every = "-"
				}
				fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\n", v.ID, v.State, v.Run, len(v.Stages), every)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if page.NextCursor != "" {
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "more: --cursor %s\n", page.NextCursor)
			}
			return err
		},
	}
	cmd.Flags().IntVar(&limit, "limit", 100, "flows per page (at most 1000)")
	cmd.Flags().StringVar(&cursor, "cursor", "", "start after this flow id (the previous page's next cursor)")
	f.register(cmd)
	return cmd
}
