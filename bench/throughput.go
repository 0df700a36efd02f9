package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"
)

// throughputDelay is the delay of the tasks the throughput workload
// submits: far enough that none fires while the bench runs.
const throughputDelay = 24 * time.Hour

// ThroughputConfig configures the throughput workload.
type ThroughputConfig struct {
	// Callers are the numbers of concurrent callers of the one-task phases,
	// one phase each, in order (1, 8, 16 by default in `ax bench`). The
	// batched phase runs with the largest.
	Callers []int
	// Clients is used as Callers = [Clients] when Callers is empty (the
	// configuration before Callers existed).
	Clients int
	// Duration is how long each phase submits.
	Duration time.Duration
	// Batch is the number of tasks per request in the batched phase (1: no
	// batched phase).
	Batch int
	// BatchViews makes the batched phase ask for the full view of every
	// task in its answers, as a plain POST /v1/tasks/batch gets. By default
	// it asks for minimal answers (Prefer: return=minimal: each task's id
	// and state), as a bulk loader that only checks each item would: the
	// views cost the node 0.5–1 µs of its ~9 µs a task and the bench (the
	// client) a third or more of its CPU per batch.
	BatchViews bool
	// SyncProbe is how long the disk's synced-write rate is measured before
	// the phases, and half as long the host's speed (HostSpeed) after it
	// (0: neither is measured).
	SyncProbe time.Duration
	// Processing is the number of no-op tasks of the processing phase,
	// which runs last (0: no processing phase).
	Processing int
	// Workers is the executor's concurrency in the processing phase: the
	// nodes the bench starts get --delivery-min-concurrency and
	// --delivery-concurrency Workers (a running cluster keeps its own
	// limits).
	Workers int
	// ClientProcs is the bench process's own GOMAXPROCS during the submit
	// phases of more than one caller (0: left as it is; `ax bench` gives
	// 1): their work fits one CPU, and on one P their socket reads and
	// writes are raw system calls (fastSubmitter, internal/rawio), so the
	// bench spends less of the machine that its nodes share (three nodes,
	// 16 callers: 16–19 against 29–31 µs of the bench's CPU a request). It
	// is restored after each such phase: the single caller's blocking
	// client (58–65 against 74–78 µs a request on one P) and the
	// processing phase's executor keep the CPUs.
	ClientProcs int
}

// clientOneP is true while the submit phases run the bench on one P
// (ThroughputConfig.ClientProcs 1): fastSubmitter's connections then
// read and write raw.
var clientOneP atomic.Bool

// clientOnProcs sets the bench's GOMAXPROCS to n (0: leaves it) for the
// submit phases and returns what restores it (safe to call again).
func clientOnProcs(n int) (restore func()) {
	if n <= 0 {
		return func() {}
	}
	prev := runtime.GOMAXPROCS(n)
	clientOneP.Store(n == 1)
	return sync.OnceFunc(func() {
		clientOneP.Store(false)
		runtime.GOMAXPROCS(prev)
	})
}

// callers returns the callers of the one-task phases.
func (c ThroughputConfig) callers() []int {
	if len(c.Callers) > 0 {
		return c.Callers
	}
	return []int{c.Clients}
}

// ThroughputPhase is one row of the throughput report.
type ThroughputPhase struct {
	Mode string `json:"mode"` // "single" or "batch N"
	// BatchAnswer is what the batched phase asked its answers to carry:
	// "minimal" (Prefer: return=minimal) or "views".
	BatchAnswer string  `json:"batch_answer,omitempty"`
	Clients     int     `json:"clients"`
	Requests    int     `json:"requests"`
	Tasks       int     `json:"tasks"`
	Elapsed     Millis  `json:"elapsed_ms"`
	TaskRate    float64 `json:"tasks_per_s"`
	ReqRate     float64 `json:"requests_per_s"`
	// Latency is per request (one submit, or one batch).
	Latency Dist     `json:"request_latency"`
	Errors  int      `json:"errors"`
	Samples []string `json:"error_samples,omitempty"`
	// VsSync is TaskRate ÷ the disk's synced writes per second (0: the
	// disk was not measured).
	VsSync float64 `json:"tasks_per_synced_write,omitempty"`
	// Raft is what the nodes' metrics say about the phase (nil: not
	// readable; the report's notes say why).
	Raft *ThroughputRaft `json:"raft,omitempty"`
	// ClientCPUPerRequest is the bench process's own CPU time during the
	// phase ÷ its requests, in µs: what the callers cost the machine the
	// nodes run on (0: not measured).
	ClientCPUPerRequest float64 `json:"client_cpu_us_per_request,omitempty"`
	// NodeCPUPerTask is the nodes' CPU time during the phase (the sum of
	// their process_cpu_seconds_total, read before and after it) ÷ its
	// tasks, in µs: what ax spent per task. 0: not measured, because the
	// sockets do not reach every node of a running cluster, or the nodes
	// used under 200 ms of CPU (minPhaseCPU: the counters tick in 10 ms).
	NodeCPUPerTask float64 `json:"node_cpu_us_per_task,omitempty"`
	// NodeCPUSeconds is the nodes' CPU time during the phase, in seconds
	// (0: not measured, as above); NodeCPUPerTask is given from
	// minPhaseCPU of it.
	NodeCPUSeconds float64 `json:"node_cpu_s,omitempty"`
}

// ThroughputRaft is the Raft work of one phase, read from the nodes'
// GET /metrics before and after it (ax_raft_entry_commands,
// ax_raft_log_writes_total, ax_raft_leader).
type ThroughputRaft struct {
	// Entries is the number of Raft entries the leader proposed.
	Entries int `json:"entries"`
	// CommandsPerEntry is commands ÷ entries: how many submits one entry
	// group-commits (each task of a batch is one command).
	CommandsPerEntry float64 `json:"commands_per_entry"`
	// LeaderFsyncsPerEntry is the leader's Raft log writes (one fsync each)
	// ÷ entries: below 1 when one write carries several entries. Badger
	// does not sync (the Raft log is the durable copy), so this is the
	// fsync count of a commit on the leader; a follower adds its own, in
	// parallel.
	LeaderFsyncsPerEntry float64 `json:"leader_fsyncs_per_entry"`
	// LogWrites is the Raft log writes (fsyncs) of every node read.
	LogWrites int `json:"log_writes_all_nodes"`
}

// ThroughputReport is the result of the throughput workload.
type ThroughputReport struct {
	Workload string            `json:"workload"`
	Target   string            `json:"target"`
	Phases   []ThroughputPhase `json:"phases"`
	// DiskSync is the disk's synced-write rate measured by the bench
	// before the phases (nil: not measured).
	DiskSync *SyncRate `json:"disk_sync,omitempty"`
	// Host is the host's CPU and hand-off speed, measured with the disk's
	// sync rate (nil: not measured).
	Host *HostSpeed `json:"host,omitempty"`
	// Processing is the processing phase (nil: not run).
	Processing *ProcessingPhase `json:"processing,omitempty"`
	Notes      []string         `json:"notes,omitempty"`
}

// RunThroughput measures the submit rate of concurrent callers for
// Duration per phase: one phase per Callers entry with one task per request
// (POST /v1/tasks, each caller on its own connection: sockSubmitter for
// one caller, fastSubmitter for more),
// then one with Batch tasks per
// request (POST /v1/tasks/batch) and the largest Callers entry. Each task
// is due in 24 hours, so nothing fires meanwhile. Before the phases it
// measures the disk's synced-write rate for SyncProbe (in the nodes' data
// directory when the bench starts them, else in the temporary directory),
// and around each phase it reads the nodes' Raft metrics.
func RunThroughput(ctx context.Context, opts Options, cfg ThroughputConfig) (*ThroughputReport, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	callers := cfg.callers()
	for _, c := range callers {
		if c < 1 {
			return nil, fmt.Errorf("throughput: want --callers >= 1, got %d", c)
		}
	}
	switch {
	case cfg.Duration <= 0:
		return nil, fmt.Errorf("throughput: want --duration > 0, got %s", cfg.Duration)
	case cfg.Batch < 1 || cfg.Batch > 1000:
		return nil, fmt.Errorf("throughput: want --batch 1..1000, got %d", cfg.Batch)
	case cfg.SyncProbe < 0:
		return nil, fmt.Errorf("throughput: want --sync-probe >= 0, got %s", cfg.SyncProbe)
	}
	if cfg.Processing < 0 || cfg.Processing > 0 && (cfg.Workers < 1 || cfg.Workers > 10000) {
		return nil, fmt.Errorf("throughput: want --processing >= 0 and --workers 1..10000")
	}
	var ec envConfig
	if cfg.Processing > 0 {
		ec.nodeArgs = limitArgs(cfg.Workers, cfg.Workers)
	}
	e, err := newEnv(ctx, &opts, ec)
	if err != nil {
		return nil, err
	}
	defer e.close()
	rep := &ThroughputReport{Workload: "throughput", Target: opts.target()}
	if len(opts.Sockets) > 0 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("the submitted tasks (handler %sthroughput) stay on the cluster, due in %s", HandlerPrefix, throughputDelay))
	}
	if cfg.SyncProbe > 0 {
		dir := e.dir
		if dir == "" {
			dir = os.TempDir()
			rep.Notes = append(rep.Notes, fmt.Sprintf("disk sync probe in %s: the running cluster's data directory may be on another file system", dir))
		}
		sr, err := measureSyncRate(ctx, dir, cfg.SyncProbe)
		if err != nil {
			rep.Notes = append(rep.Notes, err.Error())
		} else {
			rep.DiskSync = sr
		}
		if hs, err := measureHostSpeed(ctx, cfg.SyncProbe/2); err != nil {
			rep.Notes = append(rep.Notes, err.Error())
		} else {
			rep.Host = hs
		}
	}
	// The nodes' CPU per task needs every node: the bench's own, or a
	// running cluster's when the sockets reach all its members.
	allNodes := e.cl != nil
	if !allNodes {
		if reached, members, err := nodesReached(ctx, e.clients); err != nil {
			rep.Notes = append(rep.Notes, "no node µs/task: "+err.Error())
		} else if allNodes = reached >= members; !allNodes {
			rep.Notes = append(rep.Notes, fmt.Sprintf("no node µs/task: the sockets reach %d of the cluster's %d nodes", reached, members))
		}
	}
	phases := throughputPhases(callers, cfg.Batch)
	prefix := runID()
	metricsNote := ""
	for i, p := range phases {
		before, merr := readRaftCounters(ctx, e.clients)
		restoreProcs := func() {}
		if p.callers > 1 { // the single caller's blocking client waits in read(2): it keeps the CPUs
			restoreProcs = clientOnProcs(cfg.ClientProcs)
		}
		ph, err := runThroughputPhase(ctx, e, cfg.Duration, p.callers, p.batch, cfg.BatchViews, fmt.Sprintf("%s%d", prefix, i))
		restoreProcs()
		if err != nil {
			return nil, err
		}
		if merr == nil {
			var after raftCounters
			if after, merr = readRaftCounters(ctx, e.clients); merr == nil {
				d := after.sub(before)
				ph.Raft = raftOf(d)
				if allNodes {
					ph.NodeCPUSeconds = d.cpuSeconds
					ph.NodeCPUPerTask = cpuPerTask(d.cpuSeconds, ph.Tasks)
				}
			}
		}
		if merr != nil && metricsNote == "" {
			metricsNote = "no Raft figures (commands per entry, fsyncs per entry): " + merr.Error()
		}
		if rep.DiskSync != nil && rep.DiskSync.PerSecond > 0 {
			ph.VsSync = ph.TaskRate / rep.DiskSync.PerSecond
		}
		rep.Phases = append(rep.Phases, *ph)
		if err := e.alive(); err != nil {
			return nil, err
		}
	}
	if metricsNote != "" {
		rep.Notes = append(rep.Notes, metricsNote)
	}
	if cfg.Processing > 0 {
		var batchRate float64 // 0 (a guess) without a batched phase
		if n := len(rep.Phases); n > 0 && rep.Phases[n-1].Mode != "single" {
			batchRate = rep.Phases[n-1].TaskRate
		}
		ph, err := runProcessingPhase(ctx, e, cfg.Processing, cfg.Workers, batchRate)
		if err != nil {
			return nil, err
		}
		rep.Processing = ph
		if len(opts.Sockets) > 0 {
			rep.Notes = append(rep.Notes, fmt.Sprintf("processing: the running cluster's own executor limits, not --workers; its tasks (handler %sprocessing) stay, SUCCESS", HandlerPrefix))
		}
		if err := e.alive(); err != nil {
			return nil, err
		}
	}
	return rep, nil
}

// throughputPhase is one phase of the throughput workload: callers
// concurrent callers, each submitting batch tasks per request.
type throughputPhase struct{ callers, batch int }

// throughputPhases returns the phases of the throughput workload: one of
// single submits per entry of callers, in order, then one of batches of
// batch tasks by the largest number of callers; with batch 1 that last
// phase would repeat a single-submit phase, and there is none.
func throughputPhases(callers []int, batch int) []throughputPhase {
	var phases []throughputPhase
	for _, c := range callers {
		phases = append(phases, throughputPhase{c, 1})
	}
	if batch > 1 {
		phases = append(phases, throughputPhase{slices.Max(callers), batch})
	}
	return phases
}

// minPhaseCPU is the least CPU a phase's nodes must use for its CPU per
// task to be given: their counters tick in 10 ms, so below 200 ms the
// figure would be off by more than 5 %.
const minPhaseCPU = 0.2

// cpuPerTask returns cpu seconds ÷ tasks in µs; 0 when there are no
// tasks or cpu is under minPhaseCPU.
func cpuPerTask(cpu float64, tasks int) float64 {
	if cpu < minPhaseCPU || tasks <= 0 {
		return 0
	}
	return cpu * 1e6 / float64(tasks)
}

// raftOf turns the counters of one phase into its report; nil when no
// entry was proposed by a node read (against a running cluster, the leader
// may not be among the sockets).
func raftOf(d raftCounters) *ThroughputRaft {
	if d.entries <= 0 {
		return nil
	}
	return &ThroughputRaft{Entries: int(d.entries), CommandsPerEntry: d.commands / d.entries,
		LeaderFsyncsPerEntry: d.leaderLogWrites / d.entries, LogWrites: int(d.logWrites)}
}

func runThroughputPhase(ctx context.Context, e *env, duration time.Duration, callers, batch int, views bool, prefix string) (*ThroughputPhase, error) {
	mode := "single"
	if batch > 1 {
		mode = fmt.Sprintf("batch %d", batch)
	}
	handler := HandlerPrefix + "throughput"
	var (
		tasks, reqs atomic.Int64
		errs        errorSamples
		lats        = make([][]time.Duration, callers)
		wg          sync.WaitGroup
	)
	cpu0, cpuOK := selfCPU()
	start := time.Now()
	end := start.Add(duration)
	bar := startProgress(e.opts.Progress, "throughput "+mode, func() (float64, string) {
		el := time.Since(start)
		return float64(el) / float64(duration), fmt.Sprintf("%d clients · %d tasks · %s · %s",
			callers, tasks.Load(), fmtRate(rate(int(tasks.Load()), el)), el.Round(time.Second))
	})
	defer bar.Stop()
	pctx, cancel := context.WithDeadline(ctx, end.Add(submitTimeout))
	defer cancel()
	for c := 0; c < callers; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Each client has its own connection, like one app; the clients
			// go round robin over the target's sockets.
			socket := e.clients[c%len(e.clients)].Socket()
			// One caller waits on every request, so the bench's own CPU
			// per request is on the measured path: it gets the leaner
			// blocking client (sockSubmitter); more callers share
			// fasthttp's poller.
			var fast submitter
			if callers == 1 {
				fast = newSockSubmitter(socket, submitTimeout)
			}
			if fast == nil {
				fast = newFastSubmitter(socket, submitTimeout)
			}
			defer fast.close()
			// Batches go through fasthttp with the answer parsed by
			// fastjson (fastSubmitter.submitBatch).
			var batcher *fastSubmitter
			var ids []string
			if batch > 1 {
				batcher = newFastSubmitter(socket, submitTimeout).(*fastSubmitter)
				defer batcher.close()
				ids = make([]string, batch)
			}
			delay := throughputDelay.String()
			for seq := 0; time.Now().Before(end); seq++ {
				t0 := time.Now()
				var err error
				if batch == 1 {
					it := submitItem(fmt.Sprintf("%s-%d-%d", prefix, c, seq), handler)
					it.Delay = &delay
					err = fast.submit(raw(it), it.ID, t0.Add(submitTimeout))
				} else {
					items := make([]json.RawMessage, batch)
					for k := range items {
						ids[k] = fmt.Sprintf("%s-b%d-%d-%d", prefix, c, seq, k)
						it := submitItem(ids[k], handler)
						it.Delay = new(throughputDelay.String())
						items[k] = raw(it)
					}
					var res []batchResultLite
					res, err = batcher.submitBatch(items, ids, !views, t0.Add(submitTimeout))
					for _, r := range res {
						if r.failed {
							errs.add(r.msg)
						}
					}
				}
				if err != nil {
					if errors.Is(err, context.Canceled) || pctx.Err() != nil {
						return
					}
					errs.add(err.Error())
					continue
				}
				lats[c] = append(lats[c], time.Since(t0))
				reqs.Add(1)
				tasks.Add(int64(batch))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	bar.Stop()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var all []time.Duration
	for _, l := range lats {
		all = append(all, l...)
	}
	ph := &ThroughputPhase{Mode: mode, Clients: callers, Requests: int(reqs.Load()), Tasks: int(tasks.Load()),
		Elapsed: Millis(elapsed), Latency: Summarize(all), Errors: errs.n, Samples: errs.samples}
	ph.TaskRate = rate(ph.Tasks, elapsed)
	if batch > 1 {
		ph.BatchAnswer = "minimal"
		if views {
			ph.BatchAnswer = "views"
		}
	}
	ph.ReqRate = rate(ph.Requests, elapsed)
	if cpu1, ok := selfCPU(); ok && cpuOK && ph.Requests > 0 {
		ph.ClientCPUPerRequest = float64((cpu1 - cpu0).Microseconds()) / float64(ph.Requests)
	}
	return ph, nil
}

type batchResultLite struct {
	failed bool
	msg    string
}

// Print writes the report for people.
func (r *ThroughputReport) Print(w io.Writer) {
	fmt.Fprintf(w, "ax bench throughput: submit rate, %s\n", r.Target)
	if d := r.DiskSync; d != nil {
		fmt.Fprintf(w, "disk: %s synced %d-byte writes (write + fsync, one writer, %d in %s, in %s)\n",
			fmtRate(d.PerSecond), d.BlockBytes, d.Writes, fmtDur(time.Duration(d.Elapsed)), d.Dir)
	}
	if h := r.Host; h != nil {
		fmt.Fprintf(w, "host: SHA-256 of 4 KiB %.1f µs; a system call %.0f ns; one byte's round trip between two goroutines over pipes %.1f µs (medians)\n",
			h.HashMicros, h.SyscallNanos, h.RoundTripMicros)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "mode\tclients\trequests\ttasks\ttasks/s\t÷ sync rate\trequests/s\tp50 latency\tp99 latency\tmax latency\tcmds/entry\tfsyncs/entry\tnode µs/task\tclient µs/req\terrors")
	for _, p := range r.Phases {
		vs, cpe, fpe := "-", "-", "-"
		if p.VsSync > 0 {
			vs = fmt.Sprintf("%.2f", p.VsSync)
		}
		if p.Raft != nil {
			cpe, fpe = fmt.Sprintf("%.1f", p.Raft.CommandsPerEntry), fmt.Sprintf("%.2f", p.Raft.LeaderFsyncsPerEntry)
		}
		cli, node := "-", "-"
		if p.ClientCPUPerRequest > 0 {
			cli = fmt.Sprintf("%.0f", p.ClientCPUPerRequest)
		}
		switch {
		case p.NodeCPUPerTask >= 10:
			node = fmt.Sprintf("%.0f", p.NodeCPUPerTask)
		case p.NodeCPUPerTask > 0:
			node = fmt.Sprintf("%.1f", p.NodeCPUPerTask)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%.0f\t%s\t%.0f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\n", p.Mode, p.Clients, p.Requests, p.Tasks,
			p.TaskRate, vs, p.ReqRate, fmtDur(p.Latency.P50), fmtDur(p.Latency.P99), fmtDur(p.Latency.Max), cpe, fpe, node, cli, p.Errors)
	}
	tw.Flush()
	for _, p := range r.Phases {
		for _, s := range p.Samples {
			fmt.Fprintf(w, "  error (%s): %s\n", p.Mode, s)
		}
	}
	fmt.Fprintln(w, "  latency: per request (one task, or one batch), until durable on a quorum")
	for _, p := range r.Phases {
		switch p.BatchAnswer {
		case "minimal":
			fmt.Fprintf(w, "  %s: answers asked with Prefer: return=minimal, each task's id and state (--batch-views: full views)\n", p.Mode)
		case "views":
			fmt.Fprintf(w, "  %s: answers with the full view of every task (--batch-views)\n", p.Mode)
		}
	}
	if r.DiskSync != nil {
		fmt.Fprintln(w, "  ÷ sync rate: tasks/s over the disk's synced writes/s")
	}
	fmt.Fprintln(w, "  cmds/entry: commands group-committed per Raft entry (each task of a batch is one); fsyncs/entry: the leader's Raft log writes per entry")
	fmt.Fprintln(w, "  node µs/task: the nodes' CPU per task (user + system, summed over every node; -: under 200 ms of it, which its 10 ms ticks make imprecise); client µs/req: the bench process's own CPU per request (its callers; the nodes not included)")
	if p := r.Processing; p != nil {
		cpe, fpe := "-", "-"
		if p.Raft != nil {
			cpe, fpe = fmt.Sprintf("%.1f", p.Raft.CommandsPerEntry), fmt.Sprintf("%.2f", p.Raft.LeaderFsyncsPerEntry)
		}
		fmt.Fprintf(w, "processing: %d no-op tasks due at once (%s after the first submit; submitted in %s), %d workers\n",
			p.Tasks, fmtDur(time.Duration(p.DueLead)), fmtDur(time.Duration(p.SubmitTime)), p.Workers)
		fmt.Fprintf(w, "  tasks %s (due → last completion, %s), callbacks %s, lateness p50 %s p99 %s max %s, cmds/entry %s, fsyncs/entry %s\n",
			fmtRate(p.TaskRate), fmtDur(time.Duration(p.Elapsed)), fmtRate(p.CallbackRate), fmtDur(p.Lateness.P50), fmtDur(p.Lateness.P99), fmtDur(p.Lateness.Max), cpe, fpe)
		fmt.Fprintf(w, "  callbacks in flight at the executor: mean %.1f, peak %d; nodes' CPU %s, %.0f µs per task\n",
			p.MeanInFlight, p.PeakInFlight, fmtDur(time.Duration(p.NodeCPU)), p.CPUPerTask)
		fmt.Fprintf(w, "  called back %d of %d, completed %d, %d missing, %d duplicates, %d errors\n", p.CalledBack, p.Submitted, p.Completed, p.Missing, p.Duplicates, p.Errors)
		if p.SubmitPastDue {
			fmt.Fprintln(w, "  the submits ended after the due time: the phase also measured submits")
		}
		if p.TimedOut {
			fmt.Fprintln(w, "  TIMED OUT waiting for the callbacks and completions")
		}
		for _, s := range p.Samples {
			fmt.Fprintf(w, "  error (processing): %s\n", s)
		}
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "  %s\n", n)
	}
}
