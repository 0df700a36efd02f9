package ui

import (
	"fmt"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/axsched/ax/clients/go/axapi"
)

type (
	axapiHandler         = axapi.HandlerInfo
	axapiState           = axapi.State
	axapiHandlerExecutor = axapi.HandlerExecutor
)

func itoa(i int) string { return strconv.Itoa(i) }

// metricsText is a /metrics page after n more callbacks of handler mail:
// n successes, each 20 ms late (bucket 0.025); in flight 4.
func metricsText(n int) string {
	return fmt.Sprintf(`# HELP ax_lateness_seconds x
# TYPE ax_lateness_seconds histogram
ax_lateness_seconds_bucket{handler="mail",le="0.005"} 0
ax_lateness_seconds_bucket{handler="mail",le="0.025"} %d
ax_lateness_seconds_bucket{handler="mail",le="0.1"} %d
ax_lateness_seconds_bucket{handler="mail",le="+Inf"} %d
ax_lateness_seconds_sum{handler="mail"} 1
ax_lateness_seconds_count{handler="mail"} %d
ax_attempts_total{handler="mail",outcome="success"} %d
ax_attempts_total{handler="m\"x",outcome="failed"} 3
ax_executor_in_flight{executor="app"} 4
ax_executor_limit{executor="app"} 12
`, n, n, n, n, n)
}

func TestParseMetrics(t *testing.T) {
	s := parseMetrics([]byte(metricsText(10)))
	if s.lateness["mail"][0.025] != 10 || s.lateness["mail"][math.Inf(1)] != 10 {
		t.Errorf("lateness: %v", s.lateness)
	}
	if s.attempts["mail"]["success"] != 10 || s.attempts[`m"x`]["failed"] != 3 {
		t.Errorf("attempts: %v", s.attempts)
	}
	if s.inFlight["app"] != 4 || s.limit["app"] != 12 {
		t.Errorf("executors: %v %v", s.inFlight, s.limit)
	}
}

func TestQuantile(t *testing.T) {
	inf := math.Inf(1)
	cur := map[float64]float64{0.01: 50, 0.1: 99, 1: 100, inf: 100}
	if v, ok := quantile(0.5, cur, nil); !ok || math.Abs(v-0.01) > 1e-9 {
		t.Errorf("p50 = %v %v, want 0.01", v, ok)
	}
	if v, _ := quantile(0.99, cur, nil); math.Abs(v-0.1) > 1e-9 {
		t.Errorf("p99 = %v, want 0.1", v)
	}
	prev := map[float64]float64{0.01: 50, 0.1: 50, 1: 50, inf: 50}
	if v, _ := quantile(0.5, cur, prev); v <= 0.01 || v >= 0.1 {
		t.Errorf("p50 of the difference = %v, want in (0.01, 0.1)", v)
	}
	if _, ok := quantile(0.5, prev, prev); ok {
		t.Error("no observation: ok")
	}
	if v, _ := quantile(0.99, map[float64]float64{1: 0, inf: 5}, nil); v != 1 {
		t.Errorf("all above the last bucket: %v, want its bound", v)
	}
}

func TestSampler_WindowAndRates(t *testing.T) {
	sm := newSampler(time.Minute)
	t0 := time.Now()
	for i := 0; i <= 30; i++ {
		s := parseMetrics([]byte(metricsText(i * 10)))
		s.at = t0.Add(time.Duration(i) * 5 * time.Second)
		sm.add(s)
	}
	ss := sm.snapshot()
	if len(ss) != 13 {
		t.Errorf("%d samples kept for a 1 min window at 5 s, want 13", len(ss))
	}
	r := attemptRates(ss, "mail", time.Minute)
	if math.Abs(r["success"]-2) > 1e-9 {
		t.Errorf("rate %v, want 2/s", r)
	}
	pts := latenessSeries(ss, "mail")
	if len(pts) != 12 || pts[0].p99 <= 0.005 || pts[0].p99 > 0.025 {
		t.Errorf("series %v", pts)
	}
	c := newChart(pts, ss[0].at)
	if c == nil || c.Points != 12 || c.P99 == "" {
		t.Errorf("chart %+v", c)
	}
	if newChart(nil, t0) != nil {
		t.Error("chart of nothing")
	}
}
