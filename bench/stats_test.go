package bench

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

func durs(ms ...int) []time.Duration {
	out := make([]time.Duration, len(ms))
	for i, m := range ms {
		out[i] = time.Duration(m) * time.Millisecond
	}
	return out
}

func TestPercentileNearestRank(t *testing.T) {
	// The textbook example of the nearest-rank method.
	v := durs(15, 20, 35, 40, 50)
	for _, c := range []struct {
		p    float64
		want int
	}{{5, 15}, {30, 20}, {40, 20}, {50, 35}, {95, 50}, {100, 50}} {
		if got := Percentile(v, c.p); got != time.Duration(c.want)*time.Millisecond {
			t.Errorf("p%v of %v = %v, want %dms", c.p, v, got, c.want)
		}
	}
	if got := Percentile(nil, 99); got != 0 {
		t.Errorf("p99 of nothing = %v, want 0", got)
	}
	if got := Percentile(durs(7), 99); got != 7*time.Millisecond {
		t.Errorf("p99 of one value = %v", got)
	}
}

func TestPercentileOneToHundred(t *testing.T) {
	var v []time.Duration
	for i := 1; i <= 100; i++ {
		v = append(v, time.Duration(i))
	}
	for _, p := range []float64{1, 50, 95, 99, 100} {
		if got := Percentile(v, p); got != time.Duration(p) {
			t.Errorf("p%v of 1..100 = %d, want %d", p, got, int(p))
		}
	}
	// 1000 values: p99 is the 990th, so 10 values lie above it.
	v = v[:0]
	for i := 1; i <= 1000; i++ {
		v = append(v, time.Duration(i))
	}
	if got := Percentile(v, 99); got != 990 {
		t.Errorf("p99 of 1..1000 = %d, want 990", got)
	}
	if got := Percentile(v, 99.9); got != 999 {
		t.Errorf("p99.9 of 1..1000 = %d, want 999", got)
	}
}

func TestSummarizeSortsAndAverages(t *testing.T) {
	v := durs(40, 10, 30, 20)
	rand.Shuffle(len(v), func(i, j int) { v[i], v[j] = v[j], v[i] })
	d := Summarize(v)
	want := Dist{Count: 4, Min: 10 * time.Millisecond, Mean: 25 * time.Millisecond,
		P50: 20 * time.Millisecond, P95: 40 * time.Millisecond, P99: 40 * time.Millisecond, Max: 40 * time.Millisecond}
	if d != want {
		t.Errorf("Summarize = %+v, want %+v", d, want)
	}
	if (Summarize(nil) != Dist{}) {
		t.Error("Summarize(nil) is not zero")
	}
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"p99_ms":40`) || !strings.Contains(string(b), `"count":4`) {
		t.Errorf("JSON %s", b)
	}
}

func TestFmtDur(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want string
	}{
		{0, "0"}, {350 * time.Microsecond, "350µs"}, {2345 * time.Microsecond, "2.35ms"},
		{123456 * time.Microsecond, "123.5ms"}, {1500 * time.Millisecond, "1.50s"},
		{-3 * time.Millisecond, "-3.00ms"}, {90 * time.Second, "1m30s"},
	} {
		if got := fmtDur(c.d); got != c.want {
			t.Errorf("fmtDur(%v) = %q, want %q", c.d, got, c.want)
		}
	}
}
