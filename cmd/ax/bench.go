package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"regexp"
	"runtime/pprof"
	"runtime/trace"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/axsched/ax/bench"
	ax "github.com/axsched/ax/clients/go"
	"github.com/axsched/ax/clients/go/axapi"
)

// benchFlags are the flags every `ax bench` workload shares.
type benchFlags struct {
	nodes          int
	sockets        []string
	executorListen string
	json           bool
	noProgress     bool
	keepData       bool
	keepTasks      bool
	nodeLogLevel   string
	nodeArgs       []string
	seed           uint64
	cpuProfile     string
	goTrace        string
}

func (f *benchFlags) register(cmd *cobra.Command) {
	fl := cmd.PersistentFlags()
	fl.IntVar(&f.nodes, "nodes", 1, "start a cluster of this many nodes (1 or 3) on 127.0.0.1, removed afterwards")
	fl.StringArrayVar(&f.sockets, "socket", nil, "run against a running cluster through this node's socket instead (repeatable: submits go round robin)")
	fl.StringVar(&f.executorListen, "executor-listen", "", "with --socket: where the bench's executor listens, unix:///abs/path.sock (registered on each node as executor \"ax-bench\" for handlers ax-bench.*)")
	fl.BoolVar(&f.json, "json", false, "print the report as JSON")
	fl.BoolVar(&f.noProgress, "no-progress", false, "no progress bar (there is none when stderr is not a terminal)")
	fl.BoolVar(&f.keepData, "keep-data", false, "keep the started nodes' data and logs, and print where")
	fl.BoolVar(&f.keepTasks, "keep-tasks", false, "with --socket: leave the bench's tasks that are still WAITING on the cluster (by default they are cancelled at the end)")
	fl.StringVar(&f.nodeLogLevel, "node-log-level", "warn", "--log-level of the nodes the bench starts")
	fl.StringArrayVar(&f.nodeArgs, "node-arg", nil, "extra argument for every node the bench starts, e.g. --node-arg=--fire-lead=100ms (repeatable)")
	fl.Uint64Var(&f.seed, "seed", 0, "seed of the random delays (0: random)")
	fl.StringVar(&f.cpuProfile, "cpu-profile", "", "write the bench process's own CPU profile (its callers, executor and readings, not the nodes') to this file")
	fl.StringVar(&f.goTrace, "go-trace", "", "write a Go runtime trace of the bench process (its callers, not the nodes) to this file, for go tool trace")
}

// options turns the flags into bench.Options.
func (f *benchFlags) options(cmd *cobra.Command) (bench.Options, error) {
	o := bench.Options{
		Nodes: f.nodes, Sockets: f.sockets, ExecutorListen: f.executorListen,
		KeepData: f.keepData, NodeLogLevel: f.nodeLogLevel, NodeArgs: f.nodeArgs,
		Notes: &noteFilter{w: cmd.ErrOrStderr(), dropDataDir: !f.keepData}, Seed: f.seed,
	}
	if len(f.sockets) == 0 {
		if f.keepTasks {
			return o, usagef("--keep-tasks goes with --socket (the nodes the bench starts are removed with their tasks)")
		}
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
		if f.keepData {
			return o, usagef("--keep-data is about the nodes the bench starts; with --socket it starts none")
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
	ctx, cancel := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	stops := []func(){cancel}
	start := func(flag string, begin func(io.Writer) error, end func()) {
		fl := cmd.Flags().Lookup(flag)
		if fl == nil || fl.Value.String() == "" {
			return
		}
		f, err := os.Create(fl.Value.String())
		if err == nil {
			if err = begin(f); err != nil {
				f.Close()
			}
		}
		if err != nil {
			fmt.Fprintf(cmd.ErrOrStderr(), "ax bench: --%s: %v\n", flag, err)
			return
		}
		stops = append(stops, func() { end(); f.Close() })
	}
	start("cpu-profile", pprof.StartCPUProfile, pprof.StopCPUProfile)
	start("go-trace", trace.Start, trace.Stop)
	return ctx, func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
}

func benchCmd() *cobra.Command {
	var f benchFlags
	cmd := groupCmd(&cobra.Command{
		Use:   "bench",
		Short: "Measure ax on three reference workloads: delayed, burst, throughput",
		Long: `Run a workload against a cluster the bench starts (--nodes 1 or 3, on
127.0.0.1 with free ports, data in a temporary directory removed afterwards
unless --keep-data) or against a running one (--socket with
--executor-listen). The bench serves its own executor, which records when
each callback arrives, prints a progress bar on stderr while it runs and a
report at the end (--json for a machine-readable one).

Against a running cluster the bench's tasks (handlers ax-bench.*) stay in
its task list; at the end the bench cancels those of the run that are still
WAITING (the throughput workload's are due in 24h), unless --keep-tasks.`,
		Example: `  ax bench delayed --count 50000 --spread 1s-60s --nodes 3
  ax bench burst --limits 32,128,adaptive
  ax bench throughput --nodes 3 --callers 1,8,16 --batch 1000 --duration 10s
  ax bench delayed --socket ./ax.sock --executor-listen unix:///tmp/axb.sock --count 1000 --spread 1s-10s`,
	})
	f.register(cmd)
	cmd.AddCommand(benchDelayedCmd(&f), benchBurstCmd(&f), benchThroughputCmd(&f))
	return cmd
}

func benchDelayedCmd(f *benchFlags) *cobra.Command {
	var count, batch int
	var spread, record string
	cmd := &cobra.Command{
		Use:   "delayed",
		Short: "Delayed tasks: N of them; none early, none expired (> 1s late), lateness percentiles",
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
			if batch < 1 || batch > axapi.BatchMaxTasks {
				return usagef("--batch %d: want 1 to %d", batch, axapi.BatchMaxTasks)
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
			start := time.Now()
			rep, err := bench.RunDelayed(ctx, opts, cfg)
			cerr := cleanupTarget(cmd, f, "delayed", start)
			if err != nil {
				return benchError(err)
			}
			if err := printReport(cmd, f, rep, rep.Print); err != nil {
				return err
			}
			if cerr != nil {
				return cerr
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
	var limits, trace string
	cmd := &cobra.Command{
		Use:   "burst",
		Short: "Burst: N tasks due at once on one node, slow callbacks; makespan per delivery limit",
		Long: `Submit --count tasks due now to one node whose executor takes --work per
callback, once per --limits entry, each on a fresh node: a number N is a
fixed per-executor limit (ax sidecar --delivery-min-concurrency N
--delivery-concurrency N); "adaptive" is the adaptive limiter between 4 and
200 (--delivery-min-concurrency 4 --delivery-concurrency 200). The report is
a table: makespan (first submit → last callback done) against its bound
(count × work ÷ limit), p50/p99 lateness (due → callback received) and the
peak in-flight at the executor.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ls, err := bench.ParseLimits(limits)
			if err != nil {
				return &usageError{err}
			}
			if count < 1 || work < 0 || batch < 1 || batch > axapi.BatchMaxTasks {
				return usagef("want --count >= 1, --work >= 0, --batch 1..%d", axapi.BatchMaxTasks)
			}
			if cmd.Flags().Changed("nodes") && f.nodes != 1 {
				return usagef("the burst benchmark runs on one node; --nodes %d is not supported", f.nodes)
			}
			opts, err := f.options(cmd)
			if err != nil {
				return err
			}
			cfg := bench.BurstConfig{Count: count, Work: work, Limits: ls, Batch: batch}
			if trace != "" {
				tf, err := os.Create(trace)
				if err != nil {
					return err
				}
				defer tf.Close()
				cfg.Trace = tf
			}
			ctx, cancel := signalContext(cmd)
			defer cancel()
			start := time.Now()
			rep, err := bench.RunBurst(ctx, opts, cfg)
			cerr := cleanupTarget(cmd, f, "burst", start)
			if err != nil {
				return benchError(err)
			}
			if err := printReport(cmd, f, rep, rep.Print); err != nil {
				return err
			}
			return cerr
		},
	}
	cmd.Flags().IntVar(&count, "count", 20000, "number of tasks")
	cmd.Flags().DurationVar(&work, "work", 80*time.Millisecond, "how long the executor takes per callback")
	cmd.Flags().StringVar(&limits, "limits", "32,128,adaptive", "runs, comma-separated: fixed limits N (min = max = N) and/or adaptive (min 4, max 200)")
	cmd.Flags().IntVar(&batch, "batch", 500, "tasks per POST /v1/tasks/batch")
	cmd.Flags().StringVar(&trace, "trace", "", "write the node's executor limit, in-flight and queue, sampled every 100ms, as CSV (run,at_ms,limit,in_flight,queue) to this file")
	return cmd
}

func benchThroughputCmd(f *benchFlags) *cobra.Command {
	var clients, batch, processing, workers, clientProcs int
	var callers string
	var duration, syncProbe time.Duration
	var batchViews bool
	cmd := &cobra.Command{
		Use:   "throughput",
		Short: "Highest submit rate of 1, 8 and 16 concurrent callers, one task per request and batched",
		Long: `Measure the disk's synced-write rate (4 KiB write + fsync in a loop for
--sync-probe, in the nodes' data directory) and, for half as long, the
host's speed (a SHA-256 of 4 KiB, a system call, and one byte's round
trip between two goroutines over pipes: figures that tell one host, or
day, from another), then run one phase per --callers entry in which that
many concurrent callers submit one task per request (POST /v1/tasks) as
fast as they can for --duration (each on its
own connection; a single caller through a blocking socket client, so that
the bench's own CPU stays off the path it measures; more callers with the
bench on one P, --client-procs, where their socket calls are raw), and a last phase in
which the largest number of callers submit --batch tasks per
request (POST /v1/tasks/batch; its answers asked with Prefer:
return=minimal, each task's id and state, unless --batch-views; with
--batch 1, no such phase). Tasks are
due in 24h, so nothing fires meanwhile. The report gives, per phase, tasks/s and its ratio to the synced
writes/s, requests/s, the latency of a request (until the tasks are durable
on a quorum), and from the nodes' metrics the commands per Raft entry,
the leader's Raft log fsyncs per entry, and the nodes' CPU per task.

Then the processing phase (--processing N, 0 skips it): N no-op tasks, in
batches of 1000, all due at the same millisecond (set far enough ahead for
the submits to end first, from the batch phase's rate), which the bench's
executor answers at once through --workers concurrent callbacks (the nodes'
per-executor limit). It reports tasks/s from the due time to the last
completion seen in the first node's metrics, callbacks/s, the lateness of
the first callbacks, and the commands and fsyncs per Raft entry of the
fires and completions.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cs, err := parseCallers(callers)
			if err != nil {
				return err
			}
			if cmd.Flags().Changed("clients") {
				if cmd.Flags().Changed("callers") {
					return usagef("--clients is the old spelling of --callers: give one of them")
				}
				if clients < 1 {
					return usagef("--clients %d: must be at least 1", clients)
				}
				cs = []int{clients}
			}
			switch {
			case duration <= 0:
				return usagef("--duration %s: must be more than 0", duration)
			case batch < 1 || batch > axapi.BatchMaxTasks:
				return usagef("--batch %d: must be 1..%d", batch, axapi.BatchMaxTasks)
			case syncProbe < 0:
				return usagef("--sync-probe %s: must be 0 (no probe) or more", syncProbe)
			case processing < 0:
				return usagef("--processing %d: must be 0 (no processing phase) or more", processing)
			case workers < 1 || workers > 10000:
				return usagef("--workers %d: must be 1..10000", workers)
			}
			opts, err := f.options(cmd)
			if err != nil {
				return err
			}
			ctx, cancel := signalContext(cmd)
			defer cancel()
			start := time.Now()
			rep, err := bench.RunThroughput(ctx, opts, bench.ThroughputConfig{Callers: cs, Duration: duration, Batch: batch, BatchViews: batchViews, SyncProbe: syncProbe,
				Processing: processing, Workers: workers, ClientProcs: clientProcs})
			cerr := cleanupTarget(cmd, f, "throughput", start)
			if err != nil {
				return benchError(err)
			}
			if len(f.sockets) > 0 && !f.keepTasks {
				for i, n := range rep.Notes {
					if strings.HasPrefix(n, "the submitted tasks (handler ") {
						rep.Notes[i] = fmt.Sprintf("the submitted tasks (handler %sthroughput) stay in the cluster's task list, cancelled (--keep-tasks: left WAITING)", bench.HandlerPrefix)
					}
				}
			}
			if err := printReport(cmd, f, rep, rep.Print); err != nil {
				return err
			}
			return cerr
		},
	}
	cmd.Flags().StringVar(&callers, "callers", "1,8,16", "concurrent callers of the one-task phases, comma-separated: one phase each; the batched phase runs with the largest")
	cmd.Flags().IntVar(&clients, "clients", 0, "one phase with this many callers (old spelling of --callers N)")
	_ = cmd.Flags().MarkDeprecated("clients", "use --callers")
	cmd.Flags().DurationVar(&duration, "duration", 10*time.Second, "how long each phase submits")
	cmd.Flags().IntVar(&batch, "batch", 1000, "tasks per request in the batched phase (1: no batched phase)")
	cmd.Flags().BoolVar(&batchViews, "batch-views", false, "the batched phase asks for the full view of every task in its answers (default: Prefer: return=minimal, each task's id and state)")
	cmd.Flags().DurationVar(&syncProbe, "sync-probe", time.Second, "how long to measure the disk's synced-write rate before the phases, and half as long the host's speed (0: skip both)")
	cmd.Flags().IntVar(&processing, "processing", 50000, "no-op tasks of the processing phase, all due at once (0: skip the phase)")
	cmd.Flags().IntVar(&workers, "workers", 100, "the executor's concurrency in the processing phase (the nodes' --delivery-concurrency)")
	cmd.Flags().IntVar(&clientProcs, "client-procs", 1, "the bench's own GOMAXPROCS during the submit phases of more than one caller (0: as it is): on one P its callers' socket reads and writes are raw system calls, which keeps the bench's CPU off the machine its nodes share; restored after each")
	return cmd
}

// parseCallers parses the --callers list: positive integers, comma-separated.
func parseCallers(s string) ([]int, error) {
	var out []int
	for _, p := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || n < 1 || n > 10000 {
			return nil, usagef("--callers %q: want positive numbers up to 10000, comma-separated, like 1,8,16", s)
		}
		out = append(out, n)
	}
	return out, nil
}

// printReport prints a report as text or JSON.
func printReport(cmd *cobra.Command, f *benchFlags, rep any, print func(io.Writer)) error {
	if f.json {
		return writeJSON(cmd.OutOrStdout(), rep)
	}
	print(cmd.OutOrStdout())
	return nil
}

// noteFilter passes the bench's notes on, without the location of the
// nodes' data when the bench removes it afterwards (it is only worth
// printing with --keep-data, and the bench prints it again then).
type noteFilter struct {
	w           io.Writer
	dropDataDir bool
	mu          sync.Mutex
	buf         []byte
}

// dataDirNote is the part of a note that names the nodes' directory.
var dataDirNote = regexp.MustCompile(` \(data and logs in [^)]*\)`)

func (n *noteFilter) Write(p []byte) (int, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.buf = append(n.buf, p...)
	for {
		i := bytes.IndexByte(n.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		line := n.buf[:i+1]
		if n.dropDataDir {
			line = dataDirNote.ReplaceAll(line, nil)
		}
		if _, err := n.w.Write(line); err != nil {
			return len(p), err
		}
		n.buf = n.buf[i+1:]
	}
}

// cleanupTarget cancels, after a run against a running cluster (--socket),
// the run's tasks that are still WAITING: tasks of the workload's handler,
// with a bench id, created since the run started. Without --socket, or with
// --keep-tasks, it does nothing. Ctrl-C stops it.
func cleanupTarget(cmd *cobra.Command, f *benchFlags, workload string, since time.Time) error {
	if len(f.sockets) == 0 || f.keepTasks {
		return nil
	}
	ctx, cancel := signalContext(cmd)
	defer cancel()
	handler := bench.HandlerPrefix + workload
	n, err := cancelWaiting(ctx, f.sockets[0], handler, since.Add(-time.Minute), cmd.ErrOrStderr())
	switch {
	case ctx.Err() != nil:
		fmt.Fprintf(cmd.ErrOrStderr(), "ax bench: interrupted: cancelled %d tasks; the rest of the run's tasks of handler %s stay WAITING\n", n, handler)
		return nil
	case err != nil:
		return fmt.Errorf("bench: cancel the run's waiting tasks of handler %s (%d cancelled): %w", handler, n, err)
	case n > 0:
		fmt.Fprintf(cmd.ErrOrStderr(), "ax bench: cancelled the run's %d tasks of handler %s still WAITING (--keep-tasks leaves them)\n", n, handler)
	}
	return nil
}

// benchIDPrefix starts the id of every task the bench submits.
const benchIDPrefix = "axb"

// cancelWaiting cancels the WAITING tasks of handler with a bench id
// created at since or later, and returns how many it cancelled.
func cancelWaiting(ctx context.Context, socket, handler string, since time.Time, notes io.Writer) (int, error) {
	c := newCaller(socket, requestTimeout)
	defer c.Close()
	var ids []string
	for cursor := ""; ; {
		p, err := c.List(ctx, listQuery{Handler: handler, State: string(ax.StateWaiting), Limit: axapi.ListLimitMax, Cursor: cursor})
		if err != nil {
			return 0, err
		}
		for _, t := range p.Tasks {
			if strings.HasPrefix(t.ID, benchIDPrefix) && !t.CreatedAt.Before(since) {
				ids = append(ids, t.ID)
			}
		}
		if cursor = p.NextCursor; cursor == "" {
			break
		}
	}
	if len(ids) == 0 {
		return 0, nil
	}
	if len(ids) > 1000 && notes != nil {
		fmt.Fprintf(notes, "ax bench: cancelling the run's %d tasks of handler %s still WAITING (Ctrl-C leaves them)\n", len(ids), handler)
	}
	const workers = 16
	var (
		next, done atomic.Int64
		mu         sync.Mutex
		firstErr   error
		wg         sync.WaitGroup
	)
	for range min(workers, len(ids)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(ids) || ctx.Err() != nil {
					return
				}
				_, err := c.Cancel(ctx, ids[i])
				switch {
				case err == nil:
					done.Add(1)
				case errors.Is(err, ax.ErrNotFound) || ctx.Err() != nil:
				default:
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	return int(done.Load()), firstErr
}

// benchError keeps a bench error readable: an interrupted run says so.
func benchError(err error) error {
	if err == context.Canceled {
		return fmt.Errorf("bench interrupted; nodes stopped")
	}
	return fmt.Errorf("bench: %w", err)
}
