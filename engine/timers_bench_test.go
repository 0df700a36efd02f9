package engine

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"
)

// benchKeys returns n distinct keys shaped like task ids.
// benchOffsets returns BenchmarkTimers' 64Ki due offsets: 70 % within a
// minute, 30 % within an hour, from a fixed seed.
func benchOffsets() []time.Duration {
	rng := rand.New(rand.NewPCG(11, 12))
	offs := make([]time.Duration, 1<<16)
	for i := range offs {
		span := time.Minute
		if rng.IntN(10) >= 7 {
			span = time.Hour
		}
		offs[i] = 1 + time.Duration(rng.Int64N(int64(span)))
	}
	return offs
}

func benchKeys(prefix string, n int) []string {
	ks := make([]string, n)
	for i := range ks {
		ks[i] = prefix + "-" + strconv.Itoa(i) + "-0190f2a3-7c1e-7b4e"
	}
	return ks
}

const benchArmed = 1_000_000

// benchSpread is how the due times of a benchmark are drawn.
type benchSpread struct {
	name     string
	min, max time.Duration // offsets from start
}

var (
	spreadNear = benchSpread{"near", time.Second, 10 * time.Minute}   // inside the default window
	spreadFar  = benchSpread{"far", 11 * time.Minute, 24 * time.Hour} // beyond it: the heap
	spreads    = []benchSpread{spreadNear, spreadFar}
	benchOpts  = TimersOptions{} // the defaults
)

func (s benchSpread) due(rng *rand.Rand) time.Time {
	return start.Add(s.min + time.Duration(rng.Int64N(int64(s.max-s.min))))
}

// loaded returns a Timers (not running) with benchArmed timers due within s.
func loaded(b *testing.B, opts TimersOptions, s benchSpread) (*Timers, []string, *rand.Rand) {
	b.Helper()
	rng := rand.New(rand.NewPCG(1, 1))
	tm := NewTimers(NewFakeClock(start), opts)
	ks := benchKeys("armed", benchArmed)
	for _, k := range ks {
		tm.Arm(k, s.due(rng))
	}
	return tm, ks, rng
}

// BenchmarkTimersArm re-arms one of 1M armed timers to a new due time in the
// same region (replace: unlink + insert).
func BenchmarkTimersArm(b *testing.B) {
	for _, s := range spreads {
		b.Run(s.name, func(b *testing.B) {
			tm, ks, rng := loaded(b, benchOpts, s)
			dues := make([]time.Time, 1<<16)
			for i := range dues {
				dues[i] = s.due(rng)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				tm.Arm(ks[(i*7919)%benchArmed], dues[i&(1<<16-1)])
			}
		})
	}
}

// BenchmarkTimersCancel cancels armed timers, with 1M armed (refilled,
// off the clock, when it runs out).
func BenchmarkTimersCancel(b *testing.B) {
	for _, s := range spreads {
		b.Run(s.name, func(b *testing.B) {
			tm, ks, rng := loaded(b, benchOpts, s)
			extra := benchKeys("extra", benchArmed)
			refill := func() {
				for _, k := range extra {
					tm.Arm(k, s.due(rng))
				}
			}
			refill()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				j := i % benchArmed
				if j == 0 && i > 0 {
					b.StopTimer()
					refill()
					b.StartTimer()
				}
				if !tm.Cancel(extra[(j*7919)%benchArmed]) {
					b.Fatal("not armed")
				}
			}
			_ = ks
		})
	}
}

// BenchmarkTimersArmCancel arms a new key and cancels it, with 1M armed: the
// cost of a task that is submitted and cancelled before it fires.
func BenchmarkTimersArmCancel(b *testing.B) {
	for _, s := range spreads {
		b.Run(s.name, func(b *testing.B) {
			tm, _, rng := loaded(b, benchOpts, s)
			ks := benchKeys("new", 1<<16)
			dues := make([]time.Time, 1<<16)
			for i := range dues {
				dues[i] = s.due(rng)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				k := ks[i&(1<<16-1)]
				tm.Arm(k, dues[i&(1<<16-1)])
				tm.Cancel(k)
			}
		})
	}
}

// BenchmarkTimersArmParallel arms and cancels from all Ps at once against
// one set of 1M timers: the cost of the single mutex under contention.
func BenchmarkTimersArmParallel(b *testing.B) {
	tm, _, _ := loaded(b, benchOpts, spreadNear)
	var mu sync.Mutex
	seed := uint64(0)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		mu.Lock()
		seed++
		rng := rand.New(rand.NewPCG(seed, 9))
		prefix := "p" + strconv.FormatUint(seed, 10)
		mu.Unlock()
		ks := benchKeys(prefix, 1024)
		i := 0
		for pb.Next() {
			k := ks[i&1023]
			tm.Arm(k, spreadNear.due(rng))
			tm.Cancel(k)
			i++
		}
	})
}

// BenchmarkTimersConfig chooses Tick and Slots: for each pair it runs the
// whole life of a workload on fake time without goroutines: arm every
// timer, then walk the clock in 1 ms steps through the span, collecting
// (migrate + drain + fire) at each step. It reports the cost per timer
// (ns/timer) and the wheel's fixed memory (wheel-bytes); lateness does not
// depend on the pair, since Run sleeps until the exact earliest deadline.
//
// Workloads: "10min" spreads 1M timers over the leader's 10-minute load
// window; "12min" over 12 minutes, as when the next window is loaded 2
// minutes before it is needed; "burst" puts 200k timers in a 2-second span
// (a cron minute boundary, a batch submit).
func BenchmarkTimersConfig(b *testing.B) {
	type workload struct {
		name string
		n    int
		span time.Duration
	}
	workloads := []workload{
		{"10min", 1_000_000, 10 * time.Minute},
		{"12min", 1_000_000, 12 * time.Minute}, // a 10-minute window loaded 2 minutes early
		{"burst", 200_000, 2 * time.Second},
	}
	type config struct {
		tick  time.Duration
		slots int
	}
	configs := []config{
		{100 * time.Millisecond, 512},   // the delayed benchmark's first choice: 51 s window
		{time.Millisecond, 4096},        // 4 s
		{time.Millisecond, 65536},       // 65 s
		{10 * time.Millisecond, 4096},   // 41 s
		{10 * time.Millisecond, 65536},  // 10.9 min
		{10 * time.Millisecond, 131072}, // 21.8 min
		{50 * time.Millisecond, 16384},  // the 10.9-minute windows
		{100 * time.Millisecond, 8192},
		{time.Second, 1024},
	}
	for _, w := range workloads {
		rng := rand.New(rand.NewPCG(2, 2))
		offs := make([]time.Duration, w.n)
		for i := range offs {
			offs[i] = time.Duration(rng.Int64N(int64(w.span)))
		}
		ks := benchKeys("cfg", w.n)
		for _, c := range configs {
			{
				tick, slots := c.tick, c.slots
				name := fmt.Sprintf("%s/tick=%v/slots=%d", w.name, tick, slots)
				b.Run(name, func(b *testing.B) {
					for b.Loop() {
						clock := NewFakeClock(start)
						tm := NewTimers(clock, TimersOptions{Tick: tick, Slots: slots})
						tm.set.mc = nil // no jump accounting: collect gets no monotonic time here
						var batch []Expired
						take := tm.taker(&batch)
						for i, k := range ks {
							tm.Arm(k, start.Add(offs[i]))
						}
						fired := 0
						for el := time.Duration(0); el <= w.span; el += time.Millisecond {
							tm.set.collect(unixNano(start.Add(el)), 0, take)
							fired += len(batch)
							batch = batch[:0]
						}
						if fired != w.n {
							b.Fatalf("fired %d of %d", fired, w.n)
						}
					}
					b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(w.n), "ns/timer")
					b.ReportMetric(float64(slots*40+slots/8), "wheel-bytes") // wslot, and a bit
				})
			}
		}
	}
}

// latencies collects lateness samples from a fire callback.
type latencies struct {
	mu sync.Mutex
	d  []time.Duration
}

func (l *latencies) add(batch []Expired) {
	now := time.Now()
	l.mu.Lock()
	for _, e := range batch {
		l.d = append(l.d, now.Sub(e.Due))
	}
	l.mu.Unlock()
}

func (l *latencies) report(b *testing.B) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.d) == 0 {
		return
	}
	slices.Sort(l.d)
	q := func(p float64) float64 {
		return float64(l.d[int(p*float64(len(l.d)-1))].Nanoseconds()) / 1e3
	}
	if l.d[0] < 0 {
		b.Errorf("a timer fired %v early", -l.d[0])
	}
	b.ReportMetric(q(0.50), "p50-lateness-µs")
	b.ReportMetric(q(0.99), "p99-lateness-µs")
	b.ReportMetric(q(1), "max-lateness-µs")
}

// BenchmarkTimersLateness measures lateness on the real clock: the time from
// a timer's due time to the start of the fire call that delivers it.
//
//   - sparse: one timer at a time, due 2–5 ms ahead (an idle leader);
//   - sparse-1M: the same with 1M other timers armed (due beyond the window);
//   - dense: timers due every 100 µs (10k/s) with a random phase, armed
//     ahead of time, as a busy leader sees them.
func BenchmarkTimersLateness(b *testing.B) {
	sparse := func(b *testing.B, tm *Timers) {
		var lat latencies
		got := make(chan struct{}, 1)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			tm.Run(ctx, func(batch []Expired) { lat.add(batch); got <- struct{}{} })
		}()
		rng := rand.New(rand.NewPCG(4, 4))
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			due := time.Now().Add(2*time.Millisecond + time.Duration(rng.Int64N(int64(3*time.Millisecond))))
			tm.Arm("sparse-"+strconv.Itoa(i), due)
			<-got
		}
		b.StopTimer()
		cancel()
		<-done
		lat.report(b)
	}
	dense := func(b *testing.B, tm *Timers) {
		var lat latencies
		var wg sync.WaitGroup
		wg.Add(b.N)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			tm.Run(ctx, func(batch []Expired) {
				lat.add(batch)
				wg.Add(-len(batch))
			})
		}()
		rng := rand.New(rand.NewPCG(5, 5))
		first := time.Now().Add(20 * time.Millisecond)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			due := first.Add(time.Duration(i)*100*time.Microsecond + time.Duration(rng.Int64N(int64(100*time.Microsecond))))
			tm.Arm("dense-"+strconv.Itoa(i), due)
		}
		wg.Wait()
		b.StopTimer()
		cancel()
		<-done
		lat.report(b)
	}
	// Lateness does not depend on the tick: a coarse 100 ms × 512 wheel
	// gives the same figures as the default.
	configs := []struct {
		name string
		opts TimersOptions
	}{
		{"default", benchOpts},
		{"tick=100ms,slots=512", TimersOptions{Tick: 100 * time.Millisecond, Slots: 512}},
	}
	for _, c := range configs {
		b.Run("sparse/"+c.name, func(b *testing.B) { sparse(b, NewTimers(RealClock(), c.opts)) })
		b.Run("dense/"+c.name, func(b *testing.B) { dense(b, NewTimers(RealClock(), c.opts)) })
	}
	b.Run("sparse-1M/default", func(b *testing.B) {
		tm := NewTimers(RealClock(), benchOpts)
		now := time.Now()
		for i, k := range benchKeys("far", benchArmed) {
			tm.Arm(k, now.Add(15*time.Minute+time.Duration(i)*time.Millisecond))
		}
		sparse(b, tm)
	})
}

// BenchmarkTimerSetHandleOps is BenchmarkTimers/wheel's timed loop alone,
// without the background Run (nothing fires: the clock is fake and still):
// 1M pending (70 % within a minute, 30 % within an hour), each op cancels
// by handle the timer armed 1M ops earlier and arms a new one. It isolates
// the data structure's cost from the real-clock harness.
func BenchmarkTimerSetHandleOps(b *testing.B) {
	const pending = 1_000_000
	offs := benchOffsets()
	ks := benchKeys("h", 1<<16)
	ts := NewTimerSet[string](NewFakeClock(start), TimersOptions{})
	ring := make([]TimerHandle, pending)
	for i := range ring {
		ring[i] = ts.Arm(start.Add(offs[i&(1<<16-1)]), ks[i&(1<<16-1)])
	}
	b.ReportAllocs()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	c0 := threadCPU()
	i := 0
	for b.Loop() {
		r := i % pending
		ts.Cancel(ring[r])
		ring[r] = ts.Arm(start.Add(offs[(i+r)&(1<<16-1)]), ks[i&(1<<16-1)])
		i++
	}
	b.ReportMetric(float64(threadCPU()-c0)/float64(b.N), "cpu-ns/op")
}
