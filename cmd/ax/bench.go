package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/axsched/ax/bench"
)

// benchFlags are the flags every `ax bench` workload shares.
type benchFlags struct {
	nodes          int
	sockets        []string
	executorListen string
	json           bool
	noProgress     bool
	keepData       bool
	nodeLogLevel   string
	nodeArgs       []string
	seed           uint64
}

func (f *benchFlags) register(cmd *cobra.Command) {
	fl := cmd.PersistentFlags()
	fl.IntVar(&f.nodes, "nodes", 1, "start a cluster of this many nodes (1 or 3) on 127.0.0.1, removed afterwards")
	fl.StringArrayVar(&f.sockets, "socket", nil, "run against a running cluster through this node's socket instead (repeatable: submits go round robin)")
	fl.StringVar(&f.executorListen, "executor-listen", "", "with --socket: where the bench's executor listens, unix:///abs/path.sock (registered on each node as executor \"ax-bench\" for handlers ax-bench.*)")
	fl.BoolVar(&f.json, "json", false, "print the report as JSON")
	fl.BoolVar(&f.noProgress, "no-progress", false, "no progress bar (there is none when stderr is not a terminal)")
	fl.BoolVar(&f.keepData, "keep-data", false, "keep the started nodes' data and logs, and print where")
	fl.StringVar(&f.nodeLogLevel, "node-log-level", "warn", "--log-level of the nodes the bench starts")
	fl.StringArrayVar(&f.nodeArgs, "node-arg", nil, "extra argument for every node the bench starts, e.g. --node-arg=--fire-lead=100ms (repeatable)")
	fl.Uint64Var(&f.seed, "seed", 0, "seed of the random delays (0: random)")
}

// options turns the flags into bench.Options.
func (f *benchFlags) options(cmd *cobra.Command) (bench.Options, error) {
	o := bench.Options{
		Nodes: f.nodes, Sockets: f.sockets, ExecutorListen: f.executorListen,
		KeepData: f.keepData, NodeLogLevel: f.nodeLogLevel, NodeArgs: f.nodeArgs,
		Notes: cmd.ErrOrStderr(), Seed: f.seed,
	}
	if len(f.sockets) == 0 {
		if f.nodes != 1 && f.nodes != 3 {
			return o, usagef("--nodes %d: want 1 or 3", f.nodes)
		}
		if f.executorListen != "" {
			return o, usagef("--executor-listen goes with --socket (a running cluster); without it the bench starts its own nodes")
		}
		exe, err := os.Executable()
		if err != nil {
			return o, fmt.Errorf("find the ax binary to start nodes with: %w", err)
		}
		o.Binary = exe
	} else {
		if cmd.Flags().Changed("nodes") {
			return o, usagef("--nodes starts a cluster; with --socket the bench uses a running one: give one or the other")
		}
		if !strings.HasPrefix(f.executorListen, "unix:///") {
			return o, usagef("--socket needs --executor-listen unix:///abs/path.sock: where the bench's executor listens")
		}
	}
	if !f.noProgress && isTerminal(cmd.ErrOrStderr()) {
		o.Progress = cmd.ErrOrStderr()
	}
	return o, nil
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// signalContext is cancelled by Ctrl-C or SIGTERM, so that the bench stops
// its nodes and removes their data.
func signalContext(cmd *cobra.Command) (context.Context, context.CancelFunc) {
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	return signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
}

func benchCmd() *cobra.Command {
	var f benchFlags
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure ax on the seed workloads: delayed, burst, throughput",
		Long: `Run a workload against a cluster the bench starts (--nodes 1 or 3, on
127.0.0.1 with free ports, data in a temporary directory removed afterwards)
or against a running one (--socket with --executor-listen). The bench serves
its own executor, which records when each callback arrives, prints a
progress bar on stderr while it runs and a report at the end (--json for a
machine-readable one).`,
		Example: `  ax bench delayed --count 50000 --spread 1s-60s --nodes 3
  ax bench burst --limits 32,128
  ax bench throughput --nodes 3 --clients 16 --duration 10s
  ax bench delayed --socket ./ax.sock --executor-listen unix:///tmp/axb.sock --count 1000 --spread 1s-10s`,
		Args: noArgs,
	}
	f.register(cmd)
	cmd.AddCommand(benchDelayedCmd(&f), benchBurstCmd(&f), benchThroughputCmd(&f))
	return cmd
}

func benchDelayedCmd(f *benchFlags) *cobra.Command {
	var count, batch int
	var spread, record string
	cmd := &cobra.Command{
		Use:   "delayed",
		Short: "Seed 003: N delayed tasks; none early, none expired (> 1s late), lateness percentiles",
		Long: `Submit --count tasks in batches, each with an explicit run_at drawn uniformly
from --spread after its batch is sent, and wait for every callback (at most
the longest delay + 30s). The report counts early callbacks (before the due
time: must be 0), expired ones (more than 1s late), duplicates and lost
tasks, and gives p50/p95/p99/max lateness (due time → callback received).
Exit code 1 when any task was early, expired or lost.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			lo, hi, err := parseSpread(spread)
			if err != nil {
				return err
			}
			if count < 1 {
				return usagef("--count %d: must be at least 1", count)
			}
			if batch < 1 || batch > 1000 {
				return usagef("--batch %d: want 1 to 1000", batch)
			}
			opts, err := f.options(cmd)
			if err != nil {
				return err
			}
			cfg := bench.DelayedConfig{Count: count, SpreadMin: lo, SpreadMax: hi, Batch: batch}
			if record != "" {
				rf, err := os.Create(record)
				if err != nil {
					return err
				}
				defer rf.Close()
				cfg.Record = rf
			}
			ctx, cancel := signalContext(cmd)
			defer cancel()
			rep, err := bench.RunDelayed(ctx, opts, cfg)
			if err != nil {
				return benchError(err)
			}
			if err := printReport(cmd, f, rep, rep.Print); err != nil {
				return err
			}
			if !rep.Pass {
				return fmt.Errorf("bench delayed failed: %d early, %d expired, %d missing of %d submitted (%d not submitted), %d errors",
					rep.Early, rep.Expired, rep.Missing, rep.Submitted, rep.Count-rep.Submitted, rep.Errors)
			}
			return nil
		},
	}
	cmd.Flags().IntVar(&count, "count", 50000, "number of tasks")
	cmd.Flags().StringVar(&spread, "spread", "1s-5m", "range of the delays, MIN-MAX (Go durations): 1s-60s")
	cmd.Flags().IntVar(&batch, "batch", 500, "tasks per POST /v1/tasks/batch")
	cmd.Flags().StringVar(&record, "record", "", "write one CSV line per task (due time, first callback, lateness, callbacks) to this file")
	return cmd
}

// parseSpread parses MIN-MAX, two Go durations.
func parseSpread(s string) (time.Duration, time.Duration, error) {
	a, b, ok := strings.Cut(s, "-")
	if !ok {
		return 0, 0, usagef("--spread %q: want MIN-MAX, like 1s-60s", s)
	}
	lo, err1 := time.ParseDuration(strings.TrimSpace(a))
	hi, err2 := time.ParseDuration(strings.TrimSpace(b))
	if err1 != nil || err2 != nil {
		return 0, 0, usagef("--spread %q: want MIN-MAX with Go durations, like 1s-60s", s)
	}
	if lo < 0 || hi < lo {
		return 0, 0, usagef("--spread %q: want 0 <= MIN <= MAX", s)
	}
	return lo, hi, nil
}

func benchBurstCmd(f *benchFlags) *cobra.Command {
	var count, batch int
	var work time.Duration
	var limits string
	cmd := &cobra.Command{
		Use:   "burst",
		Short: "Seed 004: N tasks due at once on one node, slow callbacks; makespan per delivery limit",
		Long: `Submit --count tasks due now to one node whose executor takes --work per
callback, once per --limits entry, each on a fresh node: a number is a fixed
per-executor limit (ax sidecar --delivery-concurrency N); "adaptive"
registers the executor through the API with min_concurrency 4 and
max_concurrency 200. The report is a table: makespan (first submit → last
callback done) against its bound (count × work ÷ limit), p50/p99 lateness
(due → callback received) and the peak in-flight at the executor.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ls, err := bench.ParseLimits(limits)
			if err != nil {
				return &usageError{err}
			}
			if count < 1 || work < 0 || batch < 1 || batch > 1000 {
				return usagef("want --count >= 1, --work >= 0, --batch 1..1000")
			}
			if cmd.Flags().Changed("nodes") && f.nodes != 1 {
				return usagef("burst runs on one node (seed 004); --nodes %d is not supported", f.nodes)
			}
			opts, err := f.options(cmd)
			if err != nil {
				return err
			}
			ctx, cancel := signalContext(cmd)
			defer cancel()
			rep, err := bench.RunBurst(ctx, opts, bench.BurstConfig{Count: count, Work: work, Limits: ls, Batch: batch})
			if err != nil {
				return benchError(err)
			}
			return printReport(cmd, f, rep, rep.Print)
		},
	}
	cmd.Flags().IntVar(&count, "count", 20000, "number of tasks")
	cmd.Flags().DurationVar(&work, "work", 80*time.Millisecond, "how long the executor takes per callback")
	cmd.Flags().StringVar(&limits, "limits", "32,128", "runs, comma-separated: fixed limits and/or adaptive")
	cmd.Flags().IntVar(&batch, "batch", 500, "tasks per POST /v1/tasks/batch")
	return cmd
}

func benchThroughputCmd(f *benchFlags) *cobra.Command {
	var clients, batch int
	var duration time.Duration
	cmd := &cobra.Command{
		Use:   "throughput",
		Short: "Highest submit rate of N concurrent clients, one task per request and batched",
		Long: `Run --clients concurrent clients that submit as fast as they can for
--duration, first one task per request (POST /v1/tasks), then --batch tasks
per request (POST /v1/tasks/batch). Tasks are due in 24h, so nothing fires
meanwhile. The report gives tasks/s, requests/s and the latency of a request
(until the tasks are durable on a quorum).`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if clients < 1 || duration <= 0 || batch < 1 || batch > 1000 {
				return usagef("want --clients >= 1, --duration > 0, --batch 1..1000")
			}
			opts, err := f.options(cmd)
			if err != nil {
				return err
			}
			ctx, cancel := signalContext(cmd)
			defer cancel()
			rep, err := bench.RunThroughput(ctx, opts, bench.ThroughputConfig{Clients: clients, Duration: duration, Batch: batch})
			if err != nil {
				return benchError(err)
			}
			return printReport(cmd, f, rep, rep.Print)
		},
	}
	cmd.Flags().IntVar(&clients, "clients", 16, "concurrent clients")
	cmd.Flags().DurationVar(&duration, "duration", 10*time.Second, "how long each phase (single, batched) submits")
	cmd.Flags().IntVar(&batch, "batch", 100, "tasks per request in the batched phase")
	return cmd
}

// printReport prints a report as text or JSON.
func printReport(cmd *cobra.Command, f *benchFlags, rep any, print func(io.Writer)) error {
	if f.json {
		return writeJSON(cmd.OutOrStdout(), rep)
	}
	print(cmd.OutOrStdout())
	return nil
}

// benchError keeps a bench error readable: an interrupted run says so.
func benchError(err error) error {
	if err == context.Canceled {
		return fmt.Errorf("bench interrupted; nodes stopped")
	}
	return fmt.Errorf("bench: %w", err)
}
