package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	ax "github.com/axsched/ax/clients/go"
)

// Settings of the processing phase of the throughput workload.
const (
	// processingBatch is the number of tasks per POST /v1/tasks/batch.
	processingBatch = 1000
	// processingRateGuess is the submit rate (tasks/s) assumed for the lead
	// time when the batch phase did not measure one.
	processingRateGuess = 20000
	// processingLeadMin and processingLeadMax bound the time from the start
	// of the submits to the common due time.
	processingLeadMin = time.Second
	processingLeadMax = 2 * time.Minute
	// processingPoll is how often the bench reads the node's metrics while
	// it waits for the completions.
	processingPoll = 10 * time.Millisecond
)

// ProcessingPhase is the processing phase of the throughput report: Tasks
// no-op tasks all due at the same millisecond (DueAt), called back by the
// bench's executor, which answers 200 at once, through Workers concurrent
// callbacks at most (the node's per-executor limit).
type ProcessingPhase struct {
	Tasks   int `json:"tasks"`
	Workers int `json:"workers"`
	// Submitted is the tasks accepted; SubmitTime runs from the first batch
	// sent to the last answered.
	Submitted  int    `json:"submitted"`
	SubmitTime Millis `json:"submit_time_ms"`
	// DueLead is the time from the first batch sent to the common due time.
	DueLead Millis `json:"due_lead_ms"`
	// SubmitPastDue is true when the last batch was answered after the due
	// time: the phase then also measures submits.
	SubmitPastDue bool `json:"submit_past_due,omitempty"`
	CalledBack    int  `json:"called_back"`
	Missing       int  `json:"missing"`
	Duplicates    int  `json:"duplicates"`
	// Completed is the tasks that became SUCCESS during the phase, from
	// ax_tasks{state="SUCCESS"} of the first node (-1: not readable).
	Completed int `json:"completed"`
	// Elapsed runs from the due time to the last completion seen (the first
	// reading of the node's metrics that counts every task SUCCESS; read
	// every 10 ms), or to the last callback when the metrics are not
	// readable.
	Elapsed  Millis  `json:"elapsed_ms"`
	TaskRate float64 `json:"tasks_per_s"`
	// CallbackRate is the callbacks per second from the due time to the
	// last first callback.
	CallbackRate float64 `json:"callbacks_per_s"`
	// Lateness is each task's first callback − the due time.
	Lateness Dist `json:"lateness"`
	// PeakInFlight and MeanInFlight are the callbacks in flight at the
	// bench's executor: the peak, and the mean of readings every 10 ms
	// while callbacks were due (below Workers: the node did not keep its
	// executor busy).
	PeakInFlight int     `json:"peak_in_flight"`
	MeanInFlight float64 `json:"mean_in_flight"`
	// NodeCPU is the CPU time the nodes used over the same span as Raft
	// (process_cpu_seconds_total, summed over the nodes read), and
	// CPUPerTask that ÷ the tasks called back: a figure that a loaded,
	// shared machine disturbs less than tasks/s (0: not readable).
	NodeCPU    Millis  `json:"node_cpu_ms,omitempty"`
	CPUPerTask float64 `json:"node_cpu_us_per_task,omitempty"`
	// Raft is the nodes' Raft work from the last submit answered to the
	// end: the fires and completions.
	Raft     *ThroughputRaft `json:"raft,omitempty"`
	Errors   int             `json:"errors"`
	Samples  []string        `json:"error_samples,omitempty"`
	TimedOut bool            `json:"timed_out"`
}

// processingLead is the time from the first submit to the common due time:
// one and a half times the submits' expected duration at rate tasks/s,
// plus a second, within [processingLeadMin, processingLeadMax].
func processingLead(n int, rate float64) time.Duration {
	if rate <= 0 {
		rate = processingRateGuess
	}
	d := time.Second + time.Duration(1.5*float64(n)/rate*float64(time.Second))
	return min(max(d, processingLeadMin), processingLeadMax)
}

// runProcessingPhase submits n tasks due at one common time, then waits
// for every callback and completion. submitRate is the batch phase's
// tasks/s (0: unknown), which sets the lead time.
func runProcessingPhase(ctx context.Context, e *env, n, workers int, submitRate float64) (*ProcessingPhase, error) {
	rec := newRecorder(runID(), n)
	e.exec.setRun(rec, 0)
	defer e.exec.run.Store(nil)
	handler := HandlerPrefix + "processing"
	succ0, serr := readSuccess(ctx, e.clients[0])

	first := time.Now()
	lead := processingLead(n, submitRate)
	dueMs := ceilMs(first.Add(lead))
	due := time.UnixMilli(dueMs)
	runAt := due.UTC().Format(rfc3339Milli)
	var (
		submitted  atomic.Int64
		errs       errorSamples
		ok         = make([]bool, n)
		lastAnswer atomic.Int64
	)
	nBatches := (n + processingBatch - 1) / processingBatch
	batches := make(chan int, nBatches)
	for b := 0; b < nBatches; b++ {
		batches <- b
	}
	close(batches)
	bar := startProgress(e.opts.Progress, "throughput processing", func() (float64, string) {
		got := rec.recv.Load()
		return float64(got) / float64(n), fmt.Sprintf("sent %d · back %d/%d · in flight %d · %s",
			submitted.Load(), got, n, e.exec.inflight.Load(), time.Since(first).Round(time.Second))
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
				lo, hi := b*processingBatch, min((b+1)*processingBatch, n)
				items := make([]json.RawMessage, 0, hi-lo)
				for i := lo; i < hi; i++ {
					rec.due[i].Store(dueMs)
					it := submitItem(rec.id(i), handler)
					it.RunAt = &runAt
					items = append(items, raw(it))
				}
				res, err := submitBatch(ctx, e.clients[b%len(e.clients)], items)
				lastAnswer.Store(time.Now().UnixNano())
				if err != nil {
					errs.add("submit batch: " + err.Error())
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
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	submitEnd := time.Unix(0, lastAnswer.Load())
	ph := &ProcessingPhase{Tasks: n, Workers: workers, Submitted: int(submitted.Load()),
		SubmitTime: Millis(submitEnd.Sub(first)), DueLead: Millis(due.Sub(first)), SubmitPastDue: submitEnd.After(due), Completed: -1}
	// The Raft work of the fires and completions: from now, the submits
	// all committed (the leader proposes fires a little ahead of the due
	// time).
	before, merr := readRaftCounters(ctx, e.clients)
	cpu0, cerr := readCPU(ctx, e.clients)
	if wait := time.Until(due); wait > 0 {
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}

	// Wait for the callbacks, then for the completions: a minute more than
	// 1 000 tasks/s would need.
	deadline := time.Now().Add(time.Minute + time.Duration(n)*time.Millisecond)
	var lastSeen time.Time
	var flightSum, flightN int64
	e.exec.peak.Store(0)
	tick := time.NewTicker(processingPoll)
	defer tick.Stop()
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if err := e.alive(); err != nil {
			return nil, err
		}
		if rec.recv.Load() < submitted.Load() {
			flightSum += e.exec.inflight.Load()
			flightN++
		} else {
			if serr != nil {
				break
			}
			s, err := readSuccess(ctx, e.clients[0])
			if err != nil {
				serr = err
				break
			}
			if ph.Completed = int(s - succ0); ph.Completed >= ph.Submitted {
				lastSeen = time.Now()
				break
			}
		}
		if time.Now().After(deadline) {
			ph.TimedOut = true
			break
		}
		<-tick.C
	}
	bar.Stop()
	if cerr == nil {
		if cpu1, err := readCPU(ctx, e.clients); err == nil {
			ph.NodeCPU = Millis(time.Duration((cpu1 - cpu0) * float64(time.Second)))
		}
	}
	if merr == nil {
		var after raftCounters
		if after, merr = readRaftCounters(ctx, e.clients); merr == nil {
			ph.Raft = raftOf(after.sub(before))
		}
	}
	a := rec.arrivals(ok, func(int) int64 { return due.UnixNano() })
	ph.CalledBack, ph.Missing = a.received, a.missing
	ph.Duplicates = int(rec.dups.Load())
	ph.PeakInFlight = int(e.exec.peak.Load())
	if flightN > 0 {
		ph.MeanInFlight = float64(flightSum) / float64(flightN)
	}
	ph.Lateness = Summarize(a.late)
	if ph.NodeCPU > 0 && ph.CalledBack > 0 {
		ph.CPUPerTask = float64(time.Duration(ph.NodeCPU).Microseconds()) / float64(ph.CalledBack)
	}
	if a.last > 0 {
		ph.CallbackRate = rate(ph.CalledBack, time.Duration(a.last-due.UnixNano()))
	}
	end := lastSeen
	if end.IsZero() && a.last > 0 {
		end = time.Unix(0, a.last)
	}
	if !end.IsZero() {
		ph.Elapsed = Millis(end.Sub(due))
		ph.TaskRate = rate(ph.CalledBack, end.Sub(due))
	}
	ph.Errors, ph.Samples = errs.n+int(rec.other.Load()), errs.samples
	if serr != nil {
		ph.Samples = append(ph.Samples, "completions not counted: "+serr.Error())
	}
	if merr != nil {
		ph.Samples = append(ph.Samples, "no Raft figures: "+merr.Error())
	}
	return ph, nil
}

// readSuccess returns ax_tasks{state="SUCCESS"} of c's node.
func readSuccess(ctx context.Context, c *ax.Client) (float64, error) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	r, err := c.Call(cctx, "GET", "/metrics", nil)
	if err != nil {
		return 0, fmt.Errorf("GET /metrics on %s: %w", c.Socket(), err)
	}
	v, ok := parseGauge(r.Body, `ax_tasks{state="SUCCESS"}`)
	if !ok {
		return 0, fmt.Errorf("GET /metrics on %s: no ax_tasks{state=\"SUCCESS\"}", c.Socket())
	}
	return v, nil
}

// readCPU returns process_cpu_seconds_total summed over the clients'
// nodes.
func readCPU(ctx context.Context, clients []*ax.Client) (float64, error) {
	var sum float64
	for _, c := range clients {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		r, err := c.Call(cctx, "GET", "/metrics", nil)
		cancel()
		if err != nil {
			return 0, err
		}
		v, ok := parseGauge(r.Body, "process_cpu_seconds_total")
		if !ok {
			return 0, fmt.Errorf("GET /metrics on %s: no process_cpu_seconds_total", c.Socket())
		}
		sum += v
	}
	return sum, nil
}

// parseGauge returns the value of the series named exactly series (name
// and labels as the text exposition writes them) in text.
func parseGauge(text []byte, series string) (float64, bool) {
	sc := bufio.NewScanner(bytes.NewReader(text))
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		name, val, found := strings.Cut(sc.Text(), " ")
		if !found || name != series {
			continue
		}
		v, err := strconv.ParseFloat(strings.Fields(val)[0], 64)
		return v, err == nil
	}
	return 0, false
}
