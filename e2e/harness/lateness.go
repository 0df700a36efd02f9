package harness

import (
	"fmt"
	"math"
	"sort"
	"time"
)

// Latency is a lateness summary.
type Latency struct {
	N     int     `json:"n"`
	MinMs float64 `json:"min_ms"`
	P50Ms float64 `json:"p50_ms"`
	P95Ms float64 `json:"p95_ms"`
	P99Ms float64 `json:"p99_ms"`
	MaxMs float64 `json:"max_ms"`
}

// Summarize returns the percentiles of ds (zero for none).
func Summarize(ds []time.Duration) Latency {
	if len(ds) == 0 {
		return Latency{}
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	pct := func(q float64) float64 {
		i := int(math.Ceil(q*float64(len(s)))) - 1
		return Millis(s[max(i, 0)])
	}
	return Latency{N: len(s), MinMs: Millis(s[0]), P50Ms: pct(0.50), P95Ms: pct(0.95), P99Ms: pct(0.99), MaxMs: Millis(s[len(s)-1])}
}

// Millis is d in milliseconds, rounded to the microsecond.
func Millis(d time.Duration) float64 { return math.Round(float64(d)/1e3) / 1e3 }

// String is the summary in one line.
func (l Latency) String() string {
	return fmt.Sprintf("n=%d min=%.3fms p50=%.3fms p95=%.3fms p99=%.3fms max=%.3fms", l.N, l.MinMs, l.P50Ms, l.P95Ms, l.P99Ms, l.MaxMs)
}

// CallsPerNode counts rec's callbacks by the node whose executor got
// them, as "n1=12" lines sorted by node.
func CallsPerNode(rec *Recorder) []string {
	counts := map[string]int{}
	for _, c := range rec.All() {
		counts[c.Node]++
	}
	var out []string
	for n, k := range counts {
		out = append(out, fmt.Sprintf("%s=%d", n, k))
	}
	sort.Strings(out)
	return out
}
