package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	ax "github.com/axsched/ax/clients/go"
)

// limitSampleEvery is how often the burst workload reads the node's
// executor gauges during a run (the limiter decides every 100 ms).
const limitSampleEvery = 100 * time.Millisecond

// LimitSample is one reading of the executor gauges of the node that runs
// the burst (summed over its executors).
type LimitSample struct {
	// At is the time since the first submit.
	At       Millis  `json:"at_ms"`
	Limit    float64 `json:"limit"`
	InFlight float64 `json:"in_flight"`
	Queue    float64 `json:"queue"`
}

// LimiterSummary says where a burst run's time went at the delivering
// node, from its gauges sampled every 100 ms and its attempt-duration
// histogram.
type LimiterSummary struct {
	// Samples is the number of readings.
	Samples int `json:"samples"`
	// Peak is the highest limit read.
	Peak int `json:"peak_limit"`
	// Ramp is the time from the first submit to the first reading of a
	// limit within 5 % of Peak (0: not measured).
	Ramp Millis `json:"ramp_ms"`
	// Dips counts readings, while attempts were queued, whose limit was
	// lower than the previous reading's.
	Dips int `json:"dips"`
	// Lowest is the lowest limit read after Ramp while attempts were queued.
	Lowest int `json:"lowest_after_ramp"`
	// MeanLimit and MeanInFlight average the readings taken while
	// attempts were queued (the executor could have been kept busy).
	MeanLimit    float64 `json:"mean_limit_backlogged"`
	MeanInFlight float64 `json:"mean_in_flight_backlogged"`
	// Callback is the mean time a callback held its slot, as the sidecar
	// measured it (ax_attempt_duration_seconds): the work plus the HTTP
	// round trip and any scheduling delay on the host.
	Callback Millis `json:"mean_callback_ms"`
	// SlotBound is count × Callback ÷ the highest limit: the makespan of
	// a pool that is full from the first instant, with callbacks as slow
	// as they were.
	SlotBound Millis `json:"slot_bound_ms"`
}

// limitSampler reads the node's executor gauges every limitSampleEvery
// until stopped.
type limitSampler struct {
	c     *ax.Client
	start time.Time

	mu      sync.Mutex
	samples []LimitSample
	done    chan struct{}
	stopped chan struct{}
}

func startLimitSampler(ctx context.Context, c *ax.Client, start time.Time) *limitSampler {
	s := &limitSampler{c: c, start: start, done: make(chan struct{}), stopped: make(chan struct{})}
	go s.run(ctx)
	return s
}

func (s *limitSampler) run(ctx context.Context) {
	defer close(s.stopped)
	t := time.NewTicker(limitSampleEvery)
	defer t.Stop()
	for {
		s.read(ctx)
		select {
		case <-ctx.Done():
			return
		case <-s.done:
			// One last reading when the run ends: a short run may end
			// between two ticks, before any reading saw its executor.
			s.read(ctx)
			return
		case <-t.C:
		}
	}
}

// read takes one reading of the gauges.
func (s *limitSampler) read(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	r, err := s.c.Call(rctx, "GET", "/metrics", nil)
	cancel()
	if err != nil || r.Status != 200 {
		return
	}
	m := parseMetrics(r.Body)
	smp := LimitSample{At: Millis(time.Since(s.start)),
		Limit:    m.sum("ax_executor_limit{"),
		InFlight: m.sum("ax_executor_in_flight{"),
		Queue:    m.sum("ax_executor_queue_length{")}
	s.mu.Lock()
	s.samples = append(s.samples, smp)
	s.mu.Unlock()
}

// stop ends the sampling and returns the readings.
func (s *limitSampler) stop() []LimitSample {
	select {
	case <-s.done:
	default:
		close(s.done)
	}
	<-s.stopped
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]LimitSample(nil), s.samples...)
}

// metricValues are sample lines of a Prometheus text page: name with
// labels → value.
type metricValues map[string]float64

func parseMetrics(body []byte) metricValues {
	out := metricValues{}
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		out[line[:i]] = v
	}
	return out
}

// sum adds up every sample whose name (with labels) starts with prefix.
func (m metricValues) sum(prefix string) float64 {
	var s float64
	for k, v := range m {
		if strings.HasPrefix(k, prefix) {
			s += v
		}
	}
	return s
}

// summarizeLimits derives the summary of a run from its readings, the mean
// callback time and the run's task count.
func summarizeLimits(samples []LimitSample, callback time.Duration, count int) *LimiterSummary {
	if len(samples) == 0 {
		return nil
	}
	s := &LimiterSummary{Samples: len(samples), Callback: Millis(callback)}
	for _, x := range samples {
		s.Peak = max(s.Peak, int(x.Limit))
	}
	if s.Peak == 0 {
		return s
	}
	rampAt := -1
	for i, x := range samples {
		if x.Limit >= 0.95*float64(s.Peak) {
			rampAt, s.Ramp = i, x.At
			break
		}
	}
	var n int
	var sumL, sumF float64
	s.Lowest = s.Peak
	for i, x := range samples {
		if x.Queue <= 0 {
			continue
		}
		n++
		sumL += x.Limit
		sumF += x.InFlight
		if i > 0 && x.Limit < samples[i-1].Limit {
			s.Dips++
		}
		if rampAt >= 0 && i > rampAt {
			s.Lowest = min(s.Lowest, int(x.Limit))
		}
	}
	if n > 0 {
		s.MeanLimit, s.MeanInFlight = sumL/float64(n), sumF/float64(n)
	}
	if callback > 0 {
		s.SlotBound = Millis(time.Duration(count) * callback / time.Duration(s.Peak))
	}
	return s
}

// meanCallback reads the mean of ax_attempt_duration_seconds for handler
// from the node's metrics (0 when unknown).
func meanCallback(ctx context.Context, c *ax.Client, handler string) time.Duration {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	r, err := c.Call(rctx, "GET", "/metrics", nil)
	if err != nil || r.Status != 200 {
		return 0
	}
	m := parseMetrics(r.Body)
	label := fmt.Sprintf("{handler=%q}", handler)
	sum, cnt := m["ax_attempt_duration_seconds_sum"+label], m["ax_attempt_duration_seconds_count"+label]
	if cnt <= 0 {
		return 0
	}
	return time.Duration(sum / cnt * float64(time.Second))
}

// writeLimitTrace writes the readings of every run as CSV: run, time since
// the first submit (ms), limit, in flight, queue.
func writeLimitTrace(w io.Writer, runs []BurstRun) error {
	if _, err := fmt.Fprintln(w, "run,at_ms,limit,in_flight,queue"); err != nil {
		return err
	}
	for _, r := range runs {
		for _, x := range r.Trace {
			if _, err := fmt.Fprintf(w, "%s,%.0f,%.0f,%.0f,%.0f\n", r.Limit, ms(time.Duration(x.At)), x.Limit, x.InFlight, x.Queue); err != nil {
				return err
			}
		}
	}
	return nil
}
