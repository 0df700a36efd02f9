package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"
)

// Defaults of the delayed workload.
const (
	// expiredAfter: a callback later than this after its due time counts as
	// expired.
	expiredAfter = time.Second
	// delayedGrace is added to the longest delay to bound the wait for the
	// last callbacks.
	delayedGrace = 30 * time.Second
	// dupWatch is how long the bench keeps listening after the last task
	// was called back, to catch duplicates.
	dupWatch = 500 * time.Millisecond
	// submitters is how many batches are in flight at once.
	submitters = 4
)

// DelayedConfig configures the delayed workload.
type DelayedConfig struct {
	// Count is the number of tasks.
	Count int
	// SpreadMin and SpreadMax bound the delays, drawn uniformly; each task's
	// run_at is the time its batch is sent plus its delay.
	SpreadMin, SpreadMax time.Duration
	// Batch is the number of tasks per POST /v1/tasks/batch.
	Batch int
	// Record, when set, receives one CSV line per task (id, due time,
	// first callback, lateness, callbacks) for a closer look.
	Record io.Writer
}

// DelayedReport is the result of the delayed workload.
type DelayedReport struct {
	Workload   string `json:"workload"`
	Target     string `json:"target"`
	Nodes      int    `json:"nodes"`
	Count      int    `json:"count"`
	SpreadMin  Millis `json:"spread_min_ms"`
	SpreadMax  Millis `json:"spread_max_ms"`
	Batch      int    `json:"batch"`
	Submitted  int    `json:"submitted"`
	Received   int    `json:"called_back"`
	Missing    int    `json:"missing"`
	Early      int    `json:"early"`
	Expired    int    `json:"expired"`
	Duplicates int    `json:"duplicates"`
	MaxAttempt int    `json:"max_attempt"`
	Lateness   Dist   `json:"lateness"`
	// SubmitTime runs from the first batch sent to the last answered.
	SubmitTime   Millis  `json:"submit_time_ms"`
	SubmitRate   float64 `json:"submit_rate_per_s"`
	CallbackRate float64 `json:"callback_rate_per_s"`
	// Makespan runs from the first batch sent to the last callback.
	Makespan Millis   `json:"makespan_ms"`
	TimedOut bool     `json:"timed_out"`
	Errors   int      `json:"errors"`
	Samples  []string `json:"error_samples,omitempty"`
	Pass     bool     `json:"pass"`
}

// RunDelayed runs the delayed test: Count tasks due SpreadMin..SpreadMax
// after they are submitted; it waits for every callback (or SpreadMax + 30s
// after the last submit) and reports lateness, early and expired
// callbacks, duplicates and losses.
func RunDelayed(ctx context.Context, opts Options, cfg DelayedConfig) (*DelayedReport, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	if cfg.Count < 1 || cfg.SpreadMin < 0 || cfg.SpreadMax < cfg.SpreadMin {
		return nil, fmt.Errorf("delayed: want --count >= 1 and a spread MIN-MAX with 0 <= MIN <= MAX")
	}
	if cfg.Batch < 1 || cfg.Batch > 1000 {
		return nil, fmt.Errorf("--batch %d: want 1 to 1000", cfg.Batch)
	}
	e, err := newEnv(ctx, &opts, envConfig{})
	if err != nil {
		return nil, err
	}
	defer e.close()

	seed := opts.Seed
	if seed == 0 {
		seed = rand.Uint64()
	}
	rng := rand.New(rand.NewPCG(seed, seed>>1|1))
	delays := make([]time.Duration, cfg.Count)
	for i := range delays {
		delays[i] = cfg.SpreadMin + time.Duration(rng.Int64N(int64(cfg.SpreadMax-cfg.SpreadMin)+1))
	}
	rec := newRecorder(runID(), cfg.Count)
	e.exec.setRun(rec, 0)
	handler := HandlerPrefix + "delayed"

	var (
		submitted  atomic.Int64
		errs       errorSamples
		ok         = make([]bool, cfg.Count) // written by the submitter of its batch only
		firstSend  = time.Now()
		lastAnswer atomic.Int64
	)
	nBatches := (cfg.Count + cfg.Batch - 1) / cfg.Batch
	batches := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < min(submitters, nBatches); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range batches {
				lo, hi := b*cfg.Batch, min((b+1)*cfg.Batch, cfg.Count)
				items := make([]json.RawMessage, 0, hi-lo)
				base := time.Now()
				for i := lo; i < hi; i++ {
					due := ceilMs(base.Add(delays[i]))
					rec.due[i].Store(due)
					it := submitItem(rec.id(i), handler)
					it.RunAt = new(time.UnixMilli(due).UTC().Format(rfc3339Milli))
					items = append(items, raw(it))
				}
				res, err := submitBatch(ctx, e.clients[b%len(e.clients)], items)
				lastAnswer.Store(time.Now().UnixNano())
				if err != nil {
					for i := lo; i < hi; i++ {
						errs.add("submit batch: " + err.Error())
					}
					continue
				}
				for k, r := range res {
					if r.Status == 200 || r.Status == 201 {
						ok[lo+k] = true
						submitted.Add(1)
					} else if r.Error != nil {
						errs.add(fmt.Sprintf("submit %s: %s", rec.id(lo+k), r.Error.Message))
					}
				}
			}
		}()
	}
	submitDone := make(chan struct{})
	go func() {
		defer close(submitDone)
		defer wg.Wait()
		defer close(batches)
		for b := 0; b < nBatches; b++ {
			select {
			case batches <- b:
			case <-ctx.Done():
				return
			}
		}
	}()

	bar := startProgress(opts.Progress, "delayed", func() (float64, string) {
		got, sent := rec.recv.Load(), submitted.Load()
		sending := ""
		if sent < int64(cfg.Count) {
			sending = fmt.Sprintf("sent %d · ", sent)
		}
		return float64(got) / float64(cfg.Count), fmt.Sprintf("%sback %d/%d · early %d · >1s %d · dup %d · %s",
			sending, got, cfg.Count, rec.early.Load(), rec.late1s.Load(), rec.dups.Load(), time.Since(firstSend).Round(time.Second))
	})
	defer bar.Stop()

	// Wait for the submits, then for the callbacks.
	var runErr error
	select {
	case <-submitDone:
	case <-ctx.Done():
		<-submitDone
	}
	deadline := time.Now().Add(cfg.SpreadMax + delayedGrace)
	timedOut := false
	tick := time.NewTicker(50 * time.Millisecond)
	for ctx.Err() == nil && rec.recv.Load() < submitted.Load() {
		if time.Now().After(deadline) {
			timedOut = true
			break
		}
		if runErr = e.alive(); runErr != nil {
			break
		}
		<-tick.C
	}
	tick.Stop()
	if runErr == nil && ctx.Err() == nil && !timedOut {
		time.Sleep(dupWatch)
	}
	bar.Stop()
	if runErr != nil {
		return nil, runErr
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}

	r := &DelayedReport{
		Workload: "delayed", Target: opts.target(), Nodes: len(e.clients), Count: cfg.Count,
		SpreadMin: Millis(cfg.SpreadMin), SpreadMax: Millis(cfg.SpreadMax), Batch: cfg.Batch,
		Submitted: int(submitted.Load()), TimedOut: timedOut,
		Errors: errs.n + int(rec.other.Load()), Samples: errs.samples,
	}
	if e.cl != nil {
		r.Nodes = opts.Nodes
	}
	if rec.other.Load() > 0 {
		r.Samples = append(r.Samples, fmt.Sprintf("%d callbacks for tasks not of this run", rec.other.Load()))
	}
	r.SubmitTime = Millis(time.Duration(lastAnswer.Load() - firstSend.UnixNano()))
	r.SubmitRate = rate(r.Submitted, time.Duration(r.SubmitTime))
	a := rec.arrivals(ok, func(i int) int64 { return rec.due[i].Load() * 1e6 })
	r.Received, r.Missing = a.received, a.missing
	firstCb, lastCb, late := a.first, a.last, a.late
	for _, l := range late {
		switch {
		case l < 0:
			r.Early++
		case l > expiredAfter:
			r.Expired++
		}
	}
	r.Duplicates = int(rec.dups.Load())
	r.MaxAttempt = int(rec.maxAtt.Load())
	r.Lateness = Summarize(late)
	if lastCb > 0 {
		r.Makespan = Millis(time.Duration(lastCb - firstSend.UnixNano()))
		r.CallbackRate = rate(r.Received, time.Duration(lastCb-firstCb))
	}
	if cfg.Record != nil {
		if err := writeRecord(cfg.Record, rec, ok); err != nil {
			return nil, fmt.Errorf("write --record: %w", err)
		}
	}
	r.Pass = r.Submitted == cfg.Count && r.Missing == 0 && r.Early == 0 && r.Expired == 0 && r.Errors == 0
	return r, nil
}

// Print writes the report for people.
func (r *DelayedReport) Print(w io.Writer) {
	fmt.Fprintf(w, "ax bench delayed: %d tasks due %s to %s after submit, %s\n",
		r.Count, time.Duration(r.SpreadMin), time.Duration(r.SpreadMax), r.Target)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "  submitted\t%d of %d in %s (%s, batches of %d)\n", r.Submitted, r.Count, fmtDur(time.Duration(r.SubmitTime)), fmtRate(r.SubmitRate), r.Batch)
	fmt.Fprintf(tw, "  called back\t%d of %d: %d missing, %d duplicates (highest attempt %d)\n", r.Received, r.Submitted, r.Missing, r.Duplicates, r.MaxAttempt)
	fmt.Fprintf(tw, "  early\t%d (called back before the due time)\n", r.Early)
	fmt.Fprintf(tw, "  expired\t%d (called back more than %s after the due time)\n", r.Expired, expiredAfter)
	l := r.Lateness
	fmt.Fprintf(tw, "  lateness\tp50 %s  p95 %s  p99 %s  max %s  (mean %s; due time → callback received)\n",
		fmtDur(l.P50), fmtDur(l.P95), fmtDur(l.P99), fmtDur(l.Max), fmtDur(l.Mean))
	fmt.Fprintf(tw, "  throughput\t%s callbacks (first to last callback), %s submits\n", fmtRate(r.CallbackRate), fmtRate(r.SubmitRate))
	fmt.Fprintf(tw, "  makespan\t%s (first submit → last callback)\n", fmtDur(time.Duration(r.Makespan)))
	printErrors(tw, r.Errors, r.Samples)
	if r.TimedOut {
		fmt.Fprintf(tw, "  timed out\twaited %s after the longest delay\n", delayedGrace)
	}
	verdict := "PASS: none early, none expired, none lost, no errors"
	if !r.Pass {
		verdict = "FAIL"
	}
	fmt.Fprintf(tw, "  result\t%s\n", verdict)
	tw.Flush()
}

func printErrors(w io.Writer, n int, samples []string) {
	if n == 0 {
		fmt.Fprintf(w, "  errors\tnone\n")
		return
	}
	fmt.Fprintf(w, "  errors\t%d\n", n)
	for _, s := range samples {
		fmt.Fprintf(w, "\t  %s\n", s)
	}
}

// writeRecord writes the per-task CSV of --record.
func writeRecord(w io.Writer, rec *recorder, ok []bool) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintln(bw, "id,submitted,due_unix_ms,first_callback_unix_ns,lateness_ms,callbacks")
	for i := range ok {
		due, at := rec.due[i].Load(), rec.first[i].Load()
		late := ""
		if at != 0 {
			late = strconv.FormatFloat(float64(at-due*1e6)/1e6, 'f', 3, 64)
		}
		fmt.Fprintf(bw, "%s,%t,%d,%d,%s,%d\n", rec.id(i), ok[i], due, at, late, rec.calls[i].Load())
	}
	return bw.Flush()
}
