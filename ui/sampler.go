package ui

import (
	"bufio"
	"bytes"
	"context"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// sample is what one read of the node's /metrics gave the dashboard.
type sample struct {
	at time.Time
	// lateness[handler][le] is ax_lateness_seconds_bucket, cumulative.
	lateness map[string]map[float64]float64
	// attempts[handler][outcome] is ax_attempts_total.
	attempts map[string]map[string]float64
	// inFlight and limit per executor of this node
	// (ax_executor_in_flight, ax_executor_limit).
	inFlight map[string]float64
	limit    map[string]float64
}

// sampler keeps the samples of the last window in a ring (oldest first).
type sampler struct {
	mu      sync.Mutex
	window  time.Duration
	samples []sample
}

func newSampler(window time.Duration) *sampler { return &sampler{window: window} }

// add appends s and drops what is older than the window (one extra kept,
// so that the oldest interval has a start).
func (sm *sampler) add(s sample) {
	sm.mu.Lock()
	defer sm.mu.Unlock()
	sm.samples = append(sm.samples, s)
	cut := 0
	for cut < len(sm.samples)-1 && s.at.Sub(sm.samples[cut+1].at) >= sm.window {
		cut++
	}
	if cut > 0 {
		sm.samples = append(sm.samples[:0:0], sm.samples[cut:]...)
	}
}

func (sm *sampler) snapshot() []sample {
	sm.mu.Lock()
	defer sm.mu.Unlock()
	return append([]sample(nil), sm.samples...)
}

// run samples every interval until ctx ends.
func (sm *sampler) run(ctx context.Context, a *api, interval time.Duration, logf func(string, ...any)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		b, err := a.metrics(ctx)
		if err == nil {
			s := parseMetrics(b)
			s.at = time.Now()
			sm.add(s)
		} else if ctx.Err() == nil {
			logf("ui: read /metrics: %v", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// parseMetrics reads the series the dashboard uses from the Prometheus
// text format; everything else is skipped.
func parseMetrics(b []byte) sample {
	s := sample{
		lateness: map[string]map[float64]float64{},
		attempts: map[string]map[string]float64{},
		inFlight: map[string]float64{},
		limit:    map[string]float64{},
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		name, labels, value, ok := parseLine(line)
		if !ok {
			continue
		}
		switch name {
		case "ax_lateness_seconds_bucket":
			le, err := strconv.ParseFloat(labels["le"], 64)
			if err != nil {
				continue
			}
			h := labels["handler"]
			if s.lateness[h] == nil {
				s.lateness[h] = map[float64]float64{}
			}
			s.lateness[h][le] = value
		case "ax_attempts_total":
			h := labels["handler"]
			if s.attempts[h] == nil {
				s.attempts[h] = map[string]float64{}
			}
			s.attempts[h][labels["outcome"]] = value
		case "ax_executor_in_flight":
			s.inFlight[labels["executor"]] = value
		case "ax_executor_limit":
			s.limit[labels["executor"]] = value
		}
	}
	return s
}

// parseLine splits `name{k="v",...} value [timestamp]`.
func parseLine(line string) (name string, labels map[string]string, value float64, ok bool) {
	labels = map[string]string{}
	i := strings.IndexAny(line, "{ ")
	if i <= 0 {
		return "", nil, 0, false
	}
	name, rest := line[:i], line[i:]
	if rest[0] == '{' {
		rest = rest[1:]
		for {
			rest = strings.TrimLeft(rest, ", ")
			if strings.HasPrefix(rest, "}") {
				rest = rest[1:]
				break
			}
			eq := strings.Index(rest, `="`)
			if eq <= 0 {
				return "", nil, 0, false
			}
			key := rest[:eq]
			rest = rest[eq+2:]
			var v strings.Builder
			j := 0
			for ; j < len(rest) && rest[j] != '"'; j++ {
				if rest[j] == '\\' && j+1 < len(rest) {
					j++
					switch rest[j] {
					case 'n':
						v.WriteByte('\n')
					default:
						v.WriteByte(rest[j])
					}
					continue
				}
				v.WriteByte(rest[j])
			}
			if j == len(rest) {
				return "", nil, 0, false
			}
			labels[key] = v.String()
			rest = rest[j+1:]
		}
	}
	f := strings.Fields(rest)
	if len(f) == 0 {
		return "", nil, 0, false
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return "", nil, 0, false
	}
	return name, labels, v, true
}

// quantile is histogram_quantile over the difference of two cumulative
// bucket sets (cur - prev; prev may be nil): q in [0, 1], in seconds. ok is
// false when no observation fell between them.
func quantile(q float64, cur, prev map[float64]float64) (v float64, ok bool) {
	les := make([]float64, 0, len(cur))
	for le := range cur {
		les = append(les, le)
	}
	sort.Float64s(les)
	if len(les) == 0 {
		return 0, false
	}
	delta := func(le float64) float64 {
		d := cur[le] - prev[le]
		if d < 0 { // a counter reset (the node restarted)
			return cur[le]
		}
		return d
	}
	total := delta(les[len(les)-1])
	if total <= 0 {
		return 0, false
	}
	rank := q * total
	lower, below := 0.0, 0.0
	for _, le := range les {
		c := delta(le)
		if c >= rank {
			if math.IsInf(le, 1) {
				return lower, true
			}
			if c == below {
				return le, true
			}
			return lower + (le-lower)*(rank-below)/(c-below), true
		}
		lower, below = le, c
	}
	return lower, true
}

// latenessPoint is p50 and p99 lateness (seconds) of the callbacks started
// between two samples, at the later one's time.
type latenessPoint struct {
	at       time.Time
	p50, p99 float64
}

// latenessSeries is handler's lateness per sample interval; intervals
// without callbacks are left out.
func latenessSeries(ss []sample, handler string) []latenessPoint {
	var out []latenessPoint
	for i := 1; i < len(ss); i++ {
		cur, prev := ss[i].lateness[handler], ss[i-1].lateness[handler]
		p50, ok := quantile(0.5, cur, prev)
		if !ok {
			continue
		}
		p99, _ := quantile(0.99, cur, prev)
		out = append(out, latenessPoint{at: ss[i].at, p50: p50, p99: p99})
	}
	return out
}

// recentSpan returns the newest sample and the oldest one at most d older
// (or the oldest kept), ok false with fewer than two samples.
func recentSpan(ss []sample, d time.Duration) (from, to sample, ok bool) {
	if len(ss) < 2 {
		return sample{}, sample{}, false
	}
	to = ss[len(ss)-1]
	from = ss[len(ss)-2]
	for i := len(ss) - 2; i >= 0 && to.at.Sub(ss[i].at) <= d; i-- {
		from = ss[i]
	}
	return from, to, true
}

// attemptRates is handler's attempts per second by outcome over the last d.
func attemptRates(ss []sample, handler string, d time.Duration) map[string]float64 {
	from, to, ok := recentSpan(ss, d)
	if !ok {
		return nil
	}
	secs := to.at.Sub(from.at).Seconds()
	if secs <= 0 {
		return nil
	}
	out := map[string]float64{}
	for outcome, v := range to.attempts[handler] {
		dv := v - from.attempts[handler][outcome]
		if dv < 0 {
			dv = v
		}
		if dv > 0 {
			out[outcome] = dv / secs
		}
	}
	return out
}
