package bench

import (
	"strings"
	"testing"
	"time"
)

func TestParseMetricsAndSum(t *testing.T) {
	m := parseMetrics([]byte(`# HELP ax_executor_limit x
# TYPE ax_executor_limit gauge
ax_executor_limit{executor="flag:*"} 150
ax_executor_limit{executor="api"} 4
ax_executor_in_flight{executor="flag:*"} 149
ax_attempt_duration_seconds_sum{handler="h"} 9.5
ax_attempt_duration_seconds_count{handler="h"} 100
garbage line
`))
	if got := m.sum("ax_executor_limit{"); got != 154 {
		t.Errorf("limit sum %v", got)
	}
	if got := m.sum("ax_executor_in_flight{"); got != 149 {
		t.Errorf("in flight %v", got)
	}
	if got := m[`ax_attempt_duration_seconds_count{handler="h"}`]; got != 100 {
		t.Errorf("count %v", got)
	}
}

func TestSummarizeLimits(t *testing.T) {
	at := func(ms int) Millis { return Millis(time.Duration(ms) * time.Millisecond) }
	samples := []LimitSample{
		{At: at(100), Limit: 4, InFlight: 0, Queue: 0},
		{At: at(200), Limit: 12, InFlight: 12, Queue: 500},
		{At: at(300), Limit: 100, InFlight: 100, Queue: 900},
		{At: at(400), Limit: 200, InFlight: 200, Queue: 800},
		{At: at(500), Limit: 160, InFlight: 160, Queue: 700}, // a dip
		{At: at(600), Limit: 200, InFlight: 200, Queue: 500},
		{At: at(700), Limit: 200, InFlight: 50, Queue: 0}, // drained: not counted
	}
	s := summarizeLimits(samples, 100*time.Millisecond, 2000)
	if s.Peak != 200 || time.Duration(s.Ramp) != 400*time.Millisecond || s.Dips != 1 || s.Lowest != 160 {
		t.Errorf("summary %+v", s)
	}
	if want := (12.0 + 100 + 200 + 160 + 200) / 5; s.MeanLimit != want {
		t.Errorf("mean limit %v, want %v", s.MeanLimit, want)
	}
	if time.Duration(s.SlotBound) != time.Second { // 2000 × 100 ms ÷ 200
		t.Errorf("slot bound %v", time.Duration(s.SlotBound))
	}
	if summarizeLimits(nil, 0, 1) != nil {
		t.Error("a summary without samples")
	}
	var b strings.Builder
	if err := writeLimitTrace(&b, []BurstRun{{Limit: "adaptive", Trace: samples[:2]}}); err != nil {
		t.Fatal(err)
	}
	if want := "run,at_ms,limit,in_flight,queue\nadaptive,100,4,0,0\nadaptive,200,12,12,500\n"; b.String() != want {
		t.Errorf("trace %q, want %q", b.String(), want)
	}
}
