package bench

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"time"
)

// Percentile returns the p-th percentile (0 < p <= 100) of sorted values by
// the nearest-rank method: the smallest value such that at least p % of
// the values are less than or equal to it. It returns 0 for no values.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	if p <= 0 {
		return sorted[0]
	}
	// The epsilon keeps float error from pushing an exact rank up by one
	// (99.9 % of 1000 is 999, not 999.0000000000001).
	rank := int(math.Ceil(p*float64(n)/100 - 1e-9))
	rank = min(max(rank, 1), n)
	return sorted[rank-1]
}

// Dist summarizes a set of durations.
type Dist struct {
	Count int
	Min   time.Duration
	Mean  time.Duration
	P50   time.Duration
	P95   time.Duration
	P99   time.Duration
	Max   time.Duration
}

// Summarize computes the distribution of values; it sorts values in place.
func Summarize(values []time.Duration) Dist {
	if len(values) == 0 {
		return Dist{}
	}
	slices.Sort(values)
	var sum float64
	for _, v := range values {
		sum += float64(v)
	}
	return Dist{
		Count: len(values),
		Min:   values[0],
		Mean:  time.Duration(sum / float64(len(values))),
		P50:   Percentile(values, 50),
		P95:   Percentile(values, 95),
		P99:   Percentile(values, 99),
		Max:   values[len(values)-1],
	}
}

// ms converts a duration to milliseconds with microsecond precision.
func ms(d time.Duration) float64 { return math.Round(float64(d)/1e3) / 1e3 }

// MarshalJSON writes the distribution in milliseconds.
func (d Dist) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Count  int     `json:"count"`
		MinMs  float64 `json:"min_ms"`
		MeanMs float64 `json:"mean_ms"`
		P50Ms  float64 `json:"p50_ms"`
		P95Ms  float64 `json:"p95_ms"`
		P99Ms  float64 `json:"p99_ms"`
		MaxMs  float64 `json:"max_ms"`
	}{d.Count, ms(d.Min), ms(d.Mean), ms(d.P50), ms(d.P95), ms(d.P99), ms(d.Max)})
}

// fmtDur prints a duration for reports: 3 significant digits, in µs, ms or s.
func fmtDur(d time.Duration) string {
	neg := ""
	if d < 0 {
		neg, d = "-", -d
	}
	switch {
	case d == 0:
		return "0"
	case d < time.Millisecond:
		return fmt.Sprintf("%s%.0fµs", neg, float64(d)/1e3)
	case d < 10*time.Millisecond:
		return fmt.Sprintf("%s%.2fms", neg, float64(d)/1e6)
	case d < time.Second:
		return fmt.Sprintf("%s%.1fms", neg, float64(d)/1e6)
	case d < time.Minute:
		return fmt.Sprintf("%s%.2fs", neg, d.Seconds())
	}
	return neg + d.Round(100*time.Millisecond).String()
}

// fmtRate prints a rate per second.
func fmtRate(r float64) string {
	switch {
	case r >= 100:
		return fmt.Sprintf("%.0f/s", r)
	case r >= 10:
		return fmt.Sprintf("%.1f/s", r)
	}
	return fmt.Sprintf("%.2f/s", r)
}

// rate is n per d, 0 when d is not positive.
func rate(n int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}
