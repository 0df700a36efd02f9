package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"
)

// Adaptive limits the burst workload asks for (issue 5: min 4, max 200).
const (
	adaptiveMin = 4
	adaptiveMax = 200
)

// BurstConfig configures the burst workload.
type BurstConfig struct {
	// Count is the number of tasks, all due at once.
	Count int
	// Work is how long the executor takes per callback.
	Work time.Duration
	// Limits are the runs, each on a fresh node: a number N is a fixed
	// per-executor limit (--delivery-min-concurrency N
	// --delivery-concurrency N: the adaptive limiter pinned at N);
	// "adaptive" is the adaptive limiter between 4 and 200
	// (--delivery-min-concurrency 4 --delivery-concurrency 200). Against
	// a running cluster there is one run, "target", with its own limits.
	Limits []string
	// Batch is the number of tasks per POST /v1/tasks/batch.
	Batch int
	// Trace, if set, receives the executor gauges of every run sampled
	// every 100 ms, as CSV (see writeLimitTrace).
	Trace io.Writer
}

// BurstRun is one row of the burst report.
type BurstRun struct {
	Limit     string `json:"limit"`
	Submitted int    `json:"submitted"`
	Received  int    `json:"called_back"`
	Missing   int    `json:"missing"`
	// Makespan runs from the first batch sent to the last callback.
	Makespan Millis `json:"makespan_ms"`
	// Bound is Count × Work ÷ limit: the makespan of a perfect executor
	// pool of that size (0 when unknown).
	Bound      Millis   `json:"bound_ms"`
	SubmitTime Millis   `json:"submit_time_ms"`
	Lateness   Dist     `json:"lateness"`
	PeakFlight int      `json:"peak_in_flight"`
	Throughput float64  `json:"callbacks_per_s"`
	Duplicates int      `json:"duplicates"`
	MaxAttempt int      `json:"max_attempt"`
	Errors     int      `json:"errors"`
	Samples    []string `json:"error_samples,omitempty"`
	TimedOut   bool     `json:"timed_out"`
	// Limiter summarizes the node's executor gauges during the run (nodes
	// the bench started only).
	Limiter *LimiterSummary `json:"limiter,omitempty"`
	// Trace is the readings behind Limiter.
	Trace []LimitSample `json:"-"`
}

// BurstReport is the result of the burst workload.
type BurstReport struct {
	Workload string     `json:"workload"`
	Target   string     `json:"target"`
	Count    int        `json:"count"`
	Work     Millis     `json:"work_ms"`
	Runs     []BurstRun `json:"runs"`
	Notes    []string   `json:"notes,omitempty"`
}

// ParseLimits parses --limits: numbers and "adaptive", comma-separated.
func ParseLimits(s string) ([]string, error) {
	var out []string
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if f != "adaptive" {
			n, err := strconv.Atoi(f)
			if err != nil || n < 1 || n > 10000 {
				return nil, fmt.Errorf("--limits: %q is neither a limit from 1 to 10000 nor \"adaptive\"", f)
			}
		}
		out = append(out, f)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--limits: give at least one limit")
	}
	return out, nil
}

// RunBurst runs the burst test once per limit, each on a fresh node (or
// once against a running cluster).
func RunBurst(ctx context.Context, opts Options, cfg BurstConfig) (*BurstReport, error) {
	if len(opts.Sockets) == 0 {
		opts.Nodes = 1 // the burst test is about one node's executor
	}
	if err := opts.validate(); err != nil {
		return nil, err
	}
	if cfg.Count < 1 || cfg.Work < 0 || cfg.Batch < 1 || cfg.Batch > 1000 {
		return nil, fmt.Errorf("burst: want --count >= 1, --work >= 0 and --batch 1..1000")
	}
	rep := &BurstReport{Workload: "burst", Target: opts.target(), Count: cfg.Count, Work: Millis(cfg.Work)}
	limits := cfg.Limits
	if len(opts.Sockets) > 0 {
		limits = []string{"target"}
		rep.Notes = append(rep.Notes, "one run with the running cluster's own limits (--limits needs nodes the bench starts)")
	}
	for _, l := range limits {
		var ec envConfig
		switch l {
		case "adaptive":
			ec.nodeArgs = limitArgs(adaptiveMin, adaptiveMax)
		case "target":
		default:
			n, _ := strconv.Atoi(l)
			ec.nodeArgs = limitArgs(n, n)
		}
		run, err := runBurstOnce(ctx, &opts, cfg, l, ec)
		if err != nil {
			return nil, fmt.Errorf("burst, limit %s: %w", l, err)
		}
		rep.Runs = append(rep.Runs, *run)
	}
	if cfg.Trace != nil {
		if err := writeLimitTrace(cfg.Trace, rep.Runs); err != nil {
			return nil, fmt.Errorf("burst: writing the trace: %w", err)
		}
	}
	if len(opts.Sockets) == 0 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("fixed N: ax sidecar --delivery-min-concurrency N --delivery-concurrency N; adaptive: --delivery-min-concurrency %d --delivery-concurrency %d (the per-executor adaptive limiter)", adaptiveMin, adaptiveMax))
	}
	return rep, nil
}

// limitArgs are the node flags of a per-executor limit between lo and hi
// (lo = hi: a fixed limit).
func limitArgs(lo, hi int) []string {
	return []string{"--delivery-min-concurrency", strconv.Itoa(lo), "--delivery-concurrency", strconv.Itoa(hi)}
}

func runBurstOnce(ctx context.Context, opts *Options, cfg BurstConfig, limit string, ec envConfig) (*BurstRun, error) {
	e, err := newEnv(ctx, opts, ec)
	if err != nil {
		return nil, err
	}
	defer e.close()
	rec := newRecorder(runID(), cfg.Count)
	e.exec.setRun(rec, cfg.Work)
	handler := HandlerPrefix + "burst"

	var (
		submitted  atomic.Int64
		errs       errorSamples
		ok         = make([]bool, cfg.Count)
		due        = make([]int64, cfg.Count) // unix ns: the task's next_run_at as answered
		lastAnswer atomic.Int64
	)
	nBatches := (cfg.Count + cfg.Batch - 1) / cfg.Batch
	batches := make(chan int, nBatches)
	for b := 0; b < nBatches; b++ {
		batches <- b
	}
	close(batches)
	first := time.Now()
	var sampler *limitSampler
	if e.cl != nil {
		sampler = startLimitSampler(ctx, e.clients[0], first)
	}
	bar := startProgress(opts.Progress, "burst "+limit, func() (float64, string) {
		got := rec.recv.Load()
		return float64(got) / float64(cfg.Count), fmt.Sprintf("back %d/%d · in flight %d (peak %d) · %s",
			got, cfg.Count, e.exec.inflight.Load(), e.exec.peak.Load(), time.Since(first).Round(time.Second))
	})
	defer bar.Stop()

	var wg sync.WaitGroup
	for w := 0; w < min(submitters, nBatches); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range batches {
				if ctx.Err() != nil {
					return
				}
				lo, hi := b*cfg.Batch, min((b+1)*cfg.Batch, cfg.Count)
				items := make([]json.RawMessage, 0, hi-lo)
				for i := lo; i < hi; i++ {
					items = append(items, raw(submitItem(rec.id(i), handler)))
				}
				sent := time.Now()
				res, err := submitBatch(ctx, e.clients[b%len(e.clients)], items)
				lastAnswer.Store(time.Now().UnixNano())
				if err != nil {
					for i := lo; i < hi; i++ {
						errs.add("submit batch: " + err.Error())
					}
					continue
				}
				for k, r := range res {
					i := lo + k
					if (r.Status != 200 && r.Status != 201) || r.Task == nil {
						if r.Error != nil {
							errs.add(fmt.Sprintf("submit %s: %s", rec.id(i), r.Error.Message))
						}
						continue
					}
					ok[i] = true
					due[i] = sent.UnixNano()
					if r.Task.NextRunAt != nil {
						due[i] = r.Task.NextRunAt.UnixNano()
					}
					submitted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// A perfect pool of L slots needs Count × Work ÷ L; allow 3× that and a
	// minute more before giving up.
	n, _ := strconv.Atoi(limit)
	if limit == "adaptive" {
		n = adaptiveMax
	}
	waitFor := time.Minute
	if n > 0 {
		waitFor += 3 * time.Duration(cfg.Count) * cfg.Work / time.Duration(n)
	} else {
		waitFor += time.Duration(cfg.Count) * cfg.Work / 16
	}
	deadline := time.Now().Add(waitFor)
	timedOut := false
	tick := time.NewTicker(20 * time.Millisecond)
	for rec.recv.Load() < submitted.Load() {
		if err := ctx.Err(); err != nil {
			tick.Stop()
			return nil, err
		}
		if err := e.alive(); err != nil {
			tick.Stop()
			return nil, err
		}
		if time.Now().After(deadline) {
			timedOut = true
			break
		}
		<-tick.C
	}
	tick.Stop()
	bar.Stop()
	var trace []LimitSample
	if sampler != nil {
		trace = sampler.stop()
	}

	r := &BurstRun{Limit: limit, Submitted: int(submitted.Load()), PeakFlight: int(e.exec.peak.Load()),
		Duplicates: int(rec.dups.Load()), MaxAttempt: int(rec.maxAtt.Load()), Errors: errs.n + int(rec.other.Load()), Samples: errs.samples, TimedOut: timedOut}
	if n > 0 {
		r.Bound = Millis(time.Duration(cfg.Count) * cfg.Work / time.Duration(n))
	}
	r.SubmitTime = Millis(time.Duration(lastAnswer.Load() - first.UnixNano()))
	a := rec.arrivals(ok, func(i int) int64 { return due[i] })
	r.Received, r.Missing = a.received, a.missing
	lastCb := a.last
	r.Lateness = Summarize(a.late)
	if lastCb > 0 {
		// The makespan ends when the last callback's work is done.
		end := lastCb + int64(cfg.Work)
		r.Makespan = Millis(time.Duration(end - first.UnixNano()))
		r.Throughput = rate(r.Received, time.Duration(end-first.UnixNano()))
	}
	if sampler != nil {
		r.Trace = trace
		r.Limiter = summarizeLimits(trace, meanCallback(ctx, e.clients[0], handler), r.Received)
	}
	return r, nil
}

// Print writes the report for people.
func (r *BurstReport) Print(w io.Writer) {
	fmt.Fprintf(w, "ax bench burst: %d tasks due at once, %s of work per callback, %s\n", r.Count, time.Duration(r.Work), r.Target)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "limit\tmakespan\tbound\tp50 late\tp99 late\tmax late\tpeak in-flight\tcallbacks/s\tmissing\tdup\terrors")
	for _, run := range r.Runs {
		name := run.Limit
		if _, err := strconv.Atoi(name); err == nil {
			name = "fixed " + name
		}
		bound := "-"
		if run.Bound > 0 {
			bound = fmtDur(time.Duration(run.Bound))
		}
		mk := fmtDur(time.Duration(run.Makespan))
		if run.TimedOut {
			mk = "timeout"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%.0f\t%d\t%d\t%d\n", name, mk, bound,
			fmtDur(run.Lateness.P50), fmtDur(run.Lateness.P99), fmtDur(run.Lateness.Max),
			run.PeakFlight, run.Throughput, run.Missing, run.Duplicates, run.Errors)
	}
	tw.Flush()
	for _, run := range r.Runs {
		for _, s := range run.Samples {
			fmt.Fprintf(w, "  error (%s): %s\n", run.Limit, s)
		}
		if run.Duplicates > 0 {
			fmt.Fprintf(w, "  duplicates (%s): %d callbacks beyond the first of their task; highest attempt seen %d\n", run.Limit, run.Duplicates, run.MaxAttempt)
		}
	}
	fmt.Fprintln(w, "  makespan: first submit → last callback done; bound: count × work ÷ limit; lateness: due → callback received")
	r.printLimiter(w)
	for _, n := range r.Notes {
		fmt.Fprintf(w, "  %s\n", n)
	}
}

// printLimiter writes where each run's time went at the node: how fast the
// limit reached its peak, how often it dipped while attempts were queued,
// and how long a callback held its slot.
func (r *BurstReport) printLimiter(w io.Writer) {
	has := false
	for _, run := range r.Runs {
		has = has || run.Limiter != nil
	}
	if !has {
		return
	}
	fmt.Fprintln(w, "where the time went (node gauges every 100 ms):")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "limit\tpeak limit\tramp to peak\tdips\tlowest after ramp\tmean limit\tmean in-flight\tmean callback\tcount × callback ÷ peak")
	for _, run := range r.Runs {
		l := run.Limiter
		if l == nil {
			continue
		}
		name := run.Limit
		if _, err := strconv.Atoi(name); err == nil {
			name = "fixed " + name
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%d\t%.0f\t%.0f\t%s\t%s\n", name, l.Peak, fmtDur(time.Duration(l.Ramp)), l.Dips, l.Lowest,
			l.MeanLimit, l.MeanInFlight, fmtDur(time.Duration(l.Callback)), fmtDur(time.Duration(l.SlotBound)))
	}
	tw.Flush()
	fmt.Fprintln(w, "  mean limit / in-flight: over the readings with attempts queued at the node; mean callback: ax_attempt_duration_seconds (work + HTTP round trip + host scheduling)")
}
