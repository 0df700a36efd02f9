package engine

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// BenchmarkLimiterBurst simulates the burst workload on the fake clock:
// 20 000 tasks queued at once, 80 ms callbacks, one executor that serves
// 200 calls at once and slows down in proportion beyond that. It reports
// the simulated makespan, the lateness (queueing delay before a call
// starts) at p50 and p99, and the peak in flight, for fixed limits and for
// the adaptive limiter. ns/op is the cost of simulating one whole burst.
//
//	go test ./engine/ -run '^$' -bench LimiterBurst -benchtime 1x
func BenchmarkLimiterBurst(b *testing.B) {
	cases := []struct {
		name string
		opts LimiterOptions
	}{
		{"fixed=32", LimiterOptions{Min: 32, Max: 32}},
		{"fixed=128", LimiterOptions{Min: 128, Max: 128}},
		{"fixed=200", LimiterOptions{Min: 200, Max: 200}},
		{"adaptive/min=4,max=200", LimiterOptions{Min: 4, Max: 200}},
		{"adaptive/min=4,max=200,slowstart=4", LimiterOptions{Min: 4, Max: 200, SlowStart: 4}},
		{"adaptive/min=4,max=200,slowstart=3", LimiterOptions{Min: 4, Max: 200, SlowStart: 3}},
		{"adaptive/min=4,max=200,slowstart=2", LimiterOptions{Min: 4, Max: 200, SlowStart: 2}},
		{"adaptive/min=4,max=400", LimiterOptions{Min: 4, Max: 400}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			var r burstResult
			for range b.N {
				r = simulateBurst(b, c.opts, 20000, 80*time.Millisecond, 200)
			}
			b.ReportMetric(r.makespan.Seconds(), "makespan-s")
			b.ReportMetric(r.p50.Seconds(), "p50-late-s")
			b.ReportMetric(r.p99.Seconds(), "p99-late-s")
			b.ReportMetric(float64(r.peak), "peak-inflight")
		})
	}
}

type burstResult struct {
	makespan, p50, p99 time.Duration
	peak               int
}

func (r burstResult) String() string {
	return fmt.Sprintf("makespan %v, lateness p50 %v p99 %v, peak in flight %d", r.makespan, r.p50, r.p99, r.peak)
}

func simulateBurst(tb testing.TB, opts LimiterOptions, tasks int, svc time.Duration, capacity int) burstResult {
	s := newLimSim(tb, opts, limSaturating(svc, capacity))
	s.recordStarts = true
	s.queue = tasks
	s.run(0)
	if s.completed != tasks {
		tb.Fatalf("completed %d of %d", s.completed, tasks)
	}
	slices.Sort(s.starts)
	return burstResult{
		makespan: s.lastEnd,
		p50:      s.starts[len(s.starts)/2],
		p99:      s.starts[len(s.starts)*99/100],
		peak:     s.peakInFlight,
	}
}

// TestLimiterBurstTable prints the table of BenchmarkLimiterBurst (go test
// -v -run LimiterBurstTable) and checks the adaptive rows against the
// issue's bound and the fixed settings.
func TestLimiterBurstTable(t *testing.T) {
	fixed32 := simulateBurst(t, LimiterOptions{Min: 32, Max: 32}, 20000, 80*time.Millisecond, 200)
	fixed128 := simulateBurst(t, LimiterOptions{Min: 128, Max: 128}, 20000, 80*time.Millisecond, 200)
	adaptive := simulateBurst(t, LimiterOptions{Min: 4, Max: 200}, 20000, 80*time.Millisecond, 200)
	t.Logf("fixed 32:  %v", fixed32)
	t.Logf("fixed 128: %v", fixed128)
	t.Logf("adaptive:  %v", adaptive)
	if adaptive.makespan > 8500*time.Millisecond || adaptive.makespan >= fixed128.makespan {
		t.Fatalf("adaptive makespan %v (fixed 128: %v)", adaptive.makespan, fixed128.makespan)
	}
}

// BenchmarkLimiterAcquireDone is the cost of one admitted call on the
// delivery path: TryAcquire, then Done with a success.
func BenchmarkLimiterAcquireDone(b *testing.B) {
	clock := NewFakeClock(limStart)
	l := NewLimiter(clock, LimiterOptions{Min: 64, Max: 64})
	l.Observe(1)
	b.ReportAllocs()
	for i := range b.N {
		tok, ok := l.TryAcquire()
		if !ok {
			b.Fatal("refused")
		}
		tok.Done(LimitSuccess, 20*time.Millisecond)
		if i%64 == 0 {
			clock.Advance(time.Millisecond)
		}
	}
}

// BenchmarkLimiterAcquireDoneParallel is the same from GOMAXPROCS
// goroutines sharing one limiter (one executor), on the real clock.
func BenchmarkLimiterAcquireDoneParallel(b *testing.B) {
	l := NewLimiter(RealClock(), LimiterOptions{Min: 1 << 16, Max: 1 << 16})
	l.Observe(1)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			tok, ok := l.TryAcquire()
			if !ok {
				b.Fatal("refused")
			}
			tok.Done(LimitSuccess, 20*time.Millisecond)
		}
	})
}
