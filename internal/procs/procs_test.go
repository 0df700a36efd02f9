package procs

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"
)

// feed drives a controller with readings 20 ms apart: each step adds
// use CPUs of CPU time and n runnable goroutines of which waited waited.
type feed struct {
	t    *testing.T
	c    *Controller
	r    Reading
	sets []int
}

func newFeed(t *testing.T, cfg Config) *feed {
	f := &feed{t: t}
	cfg.Max = 4
	cfg.Set = func(n int) { f.sets = append(f.sets, n) }
	cfg.Read = func() (Reading, bool) { return f.r, true }
	f.c = New(cfg)
	f.c.Step(f.r) // prime
	return f
}

// step advances 20 ms at use CPUs with runnable goroutines of which
// waited waited, and returns the GOMAXPROCS in force.
func (f *feed) step(use float64, runnable, waited uint64) int {
	const dw = 20 * time.Millisecond
	f.r.Wall += dw
	f.r.CPU += time.Duration(use * float64(dw))
	f.r.Runnable += runnable
	f.r.Waited += waited
	return f.c.Step(f.r)
}

// steps runs step k times and returns the last GOMAXPROCS.
func (f *feed) steps(k int, use float64, runnable, waited uint64) int {
	var p int
	for range k {
		p = f.step(use, runnable, waited)
	}
	return p
}

// down takes the controller to one P by a quiet spell.
func (f *feed) down() {
	f.t.Helper()
	if p := f.steps(int(f.c.Hold()/(20*time.Millisecond))+20, 0.2, 100, 0); p != 1 {
		f.t.Fatalf("after a quiet spell: GOMAXPROCS %d, want 1", p)
	}
}

func TestStartsAtMaxUntilAStepDecides(t *testing.T) {
	f := newFeed(t, Config{})
	if f.c.Procs() != 4 || len(f.sets) != 0 {
		t.Fatalf("new controller: procs %d, sets %v; want 4 and none", f.c.Procs(), f.sets)
	}
	// Busy: it stays.
	if p := f.steps(100, 1.9, 100, 0); p != 4 || len(f.sets) != 0 {
		t.Fatalf("busy at 1.9 CPU: procs %d, sets %v; want 4, none", p, f.sets)
	}
}

func TestGoesToOnePAfterHoldUnderFit(t *testing.T) {
	f := newFeed(t, Config{})
	// The average starts at 0: 1 s of 0.5 CPU (50 intervals) is Hold.
	if p := f.steps(49, 0.5, 100, 0); p != 4 {
		t.Fatalf("after 0.98 s under Fit: procs %d, want 4 (Hold is 1 s)", p)
	}
	if p := f.step(0.5, 100, 0); p != 1 {
		t.Fatalf("after 1 s under Fit: procs %d, want 1", p)
	}
	if len(f.sets) != 1 || f.sets[0] != 1 {
		t.Fatalf("sets %v, want [1]", f.sets)
	}
}

func TestOneBusyIntervalDoesNotStartHoldOver(t *testing.T) {
	f := newFeed(t, Config{})
	f.steps(25, 1.0, 100, 0) // 0.5 s at 1.0
	f.step(2.0, 100, 0)      // one interval at two CPUs: the average stays under 1.2
	if p := f.steps(24, 1.0, 100, 0); p != 1 {
		t.Fatalf("1 s at 1.0 CPU with one busy interval: procs %d, want 1", p)
	}
	g := newFeed(t, Config{})
	g.steps(25, 1.0, 100, 0)
	g.steps(10, 2.0, 100, 0) // 200 ms at two CPUs: the average passes Fit
	if p := g.steps(24, 1.0, 100, 0); p != 4 {
		t.Fatalf("a busy 200 ms inside the second: procs %d, want 4 (Hold starts over)", p)
	}
}

func TestSaturatedOnePGoesUpAtOnce(t *testing.T) {
	var whys []string
	f := newFeed(t, Config{OnChange: func(_ int, why string, _, _ float64) { whys = append(whys, why) }})
	f.down()
	// 9 % of the goroutines waited, for a second: not saturated.
	if p := f.steps(50, 0.8, 100, 9); p != 1 {
		t.Fatalf("9%% waited: procs %d, want 1", p)
	}
	// 30 %: the average passes 10 % in that interval, and it goes up.
	if p := f.step(0.9, 100, 30); p != 4 {
		t.Fatalf("30%% waited after 9%%: procs %d, want 4", p)
	}
	if got := f.sets; len(got) != 2 || got[0] != 1 || got[1] != 4 {
		t.Fatalf("sets %v, want [1 4]", got)
	}
	if whys[len(whys)-1] != WhySaturated {
		t.Fatalf("why %q, want %q", whys[len(whys)-1], WhySaturated)
	}
}

// One interval in which many goroutines waited (a 20 ms stall: a badger
// memtable flush, a pause) among intervals in which none did is noise:
// the share is averaged over UseWindow, and only a few such intervals in
// a row take the process up.
func TestOneStalledIntervalIsNotSaturation(t *testing.T) {
	f := newFeed(t, Config{})
	f.down()
	if p := f.step(0.9, 20, 2); p != 1 {
		t.Fatalf("2 of 20 waited in one interval after none: procs %d, want 1", p)
	}
	f.steps(20, 0.7, 100, 0)
	if p := f.step(1.0, 100, 50); p != 1 {
		t.Fatalf("half waited in one interval after none: procs %d, want 1", p)
	}
	f.steps(20, 0.7, 100, 0)
	if p := f.steps(3, 1.0, 100, 50); p != 4 {
		t.Fatalf("half waited in three intervals in a row: procs %d, want 4", p)
	}
}

// A P busy all the time goes up though no goroutine waits (a few
// goroutines decoding big batches); one that is busy 90 % of the time
// stays.
func TestFullOnePGoesUp(t *testing.T) {
	var whys []string
	f := newFeed(t, Config{OnChange: func(_ int, why string, _, _ float64) { whys = append(whys, why) }})
	f.down()
	if p := f.steps(200, 0.9, 5, 0); p != 1 {
		t.Fatalf("4 s at 0.9 CPU: procs %d, want 1", p)
	}
	// From 0.9 the average reaches 0.95 in about 140 ms at 1.0.
	if p := f.steps(5, 1.0, 5, 0); p != 1 {
		t.Fatalf("100 ms at 1.0 CPU: procs %d, want 1", p)
	}
	if p := f.steps(5, 1.0, 5, 0); p != 4 {
		t.Fatalf("200 ms at 1.0 CPU: procs %d, want 4", p)
	}
	if whys[len(whys)-1] != WhyFull {
		t.Fatalf("why %q, want %q", whys[len(whys)-1], WhyFull)
	}
}

func TestNoRunnableGoroutinesIsNotSaturated(t *testing.T) {
	f := newFeed(t, Config{})
	f.down()
	if p := f.steps(10, 1.0, 0, 0); p != 1 {
		t.Fatalf("no goroutine made runnable: procs %d, want 1", p)
	}
}

func TestBounceDoublesHoldUpToMaxAndAStayResetsIt(t *testing.T) {
	f := newFeed(t, Config{HoldMax: 4 * time.Second})
	f.down()
	want := time.Second
	for _, next := range []time.Duration{2 * time.Second, 4 * time.Second, 4 * time.Second} {
		// Back up 100 ms after coming down: a bounce.
		f.steps(4, 0.5, 100, 0)
		if p := f.steps(2, 0.9, 100, 100); p != 4 {
			t.Fatalf("saturated: procs %d, want 4", p)
		}
		if f.c.Hold() != next {
			t.Fatalf("after a bounce with Hold %v: Hold %v, want %v", want, f.c.Hold(), next)
		}
		want = next
		f.down()
	}
	// A stay of a second on one P: Hold is 1 s again.
	f.steps(50, 0.5, 100, 0)
	if f.c.Hold() != time.Second {
		t.Fatalf("after 1 s on one P: Hold %v, want 1s", f.c.Hold())
	}
	f.steps(2, 0.9, 100, 100)
	if f.c.Procs() != 4 || f.c.Hold() != time.Second {
		t.Fatalf("up after a stay: Hold %v, want 1s (not a bounce)", f.c.Hold())
	}
}

func TestStepIgnoresReadingsThatDoNotAdvance(t *testing.T) {
	f := newFeed(t, Config{})
	f.down()
	// A reading at the same wall time with a huge CPU jump is ignored.
	f.r.CPU += time.Hour
	f.r.Runnable += 100
	f.r.Waited += 100
	if p := f.c.Step(f.r); p != 1 {
		t.Fatalf("a reading that did not advance: procs %d, want 1", p)
	}
}

// runSome runs c.Run with cfg's Read replaced by one that moves a
// reading by next (1 ms of wall time each) until a few readings were
// taken, then ends Run and returns the controller.
func runSome(cfg Config, next func(*Reading)) *Controller {
	var r Reading
	reads := 0
	stepped := make(chan struct{}, 1)
	cfg.Interval = time.Millisecond
	cfg.Read = func() (Reading, bool) {
		reads++
		r.Wall += time.Millisecond
		next(&r)
		if reads > 3 {
			select {
			case stepped <- struct{}{}:
			default:
			}
		}
		return r, true
	}
	c := New(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	<-stepped
	cancel()
	<-done
	return c
}

func TestRunStartsOnOnePAndGivesMaxBack(t *testing.T) {
	var mu sync.Mutex
	var sets []int
	runSome(Config{Max: 3, Set: func(n int) { mu.Lock(); sets = append(sets, n); mu.Unlock() }}, func(*Reading) {})
	mu.Lock()
	defer mu.Unlock()
	if len(sets) != 2 || sets[0] != 1 || sets[1] != 3 {
		t.Fatalf("sets %v, want [1 3]: one P at start, the maximum back at the end", sets)
	}
}

func TestRunIsOffWithOneP(t *testing.T) {
	called := false
	c := New(Config{Max: 1, Set: func(int) { called = true }, Read: func() (Reading, bool) { return Reading{}, true }})
	c.Run(context.Background()) // returns at once
	if called {
		t.Fatal("Run with Max 1 set GOMAXPROCS")
	}
	c = New(Config{Max: 2, Set: func(int) { called = true }, Read: func() (Reading, bool) { return Reading{}, false }})
	c.Run(context.Background())
	if called {
		t.Fatal("Run without readings set GOMAXPROCS")
	}
}

func TestEnabledHonoursTheEnvironment(t *testing.T) {
	t.Setenv("GOMAXPROCS", "2")
	if Enabled() {
		t.Fatal("Enabled with GOMAXPROCS set in the environment")
	}
}

func TestDefaultReadCounts(t *testing.T) {
	c := New(Config{Max: 2, Set: func(int) {}})
	a, ok := c.cfg.Read()
	if !ok {
		t.Skip("no process CPU time here")
	}
	// Make work for the scheduler and the CPU.
	var wg sync.WaitGroup
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			x := 0
			for i := range 200000 {
				x += i
			}
			runtime.KeepAlive(x)
		}()
	}
	wg.Wait()
	b, _ := c.cfg.Read()
	if b.Wall <= a.Wall || b.CPU <= a.CPU || b.Runnable <= a.Runnable || b.Waited > b.Runnable {
		t.Fatalf("readings %+v then %+v: want wall, CPU and runnable to grow, waited ≤ runnable", a, b)
	}
}

// The start on one P is not a try of one P: going up at once leaves Hold
// at its start.
func TestUpRightAfterTheStartIsNotABounce(t *testing.T) {
	var mu sync.Mutex
	var whys []string
	c := runSome(Config{Max: 2, Set: func(int) {}, UseWindow: time.Millisecond,
		OnChange: func(_ int, why string, _, _ float64) { mu.Lock(); whys = append(whys, why); mu.Unlock() }},
		func(r *Reading) {
			r.Runnable += 40 // MinRunnable at least
			r.Waited += 20   // saturated from the start
		})
	mu.Lock()
	defer mu.Unlock()
	if len(whys) < 2 || whys[0] != WhyStart || whys[1] != WhySaturated {
		t.Fatalf("changes %v, want start, then saturated", whys)
	}
	if c.Hold() != time.Second {
		t.Fatalf("Hold %v after going up right after the start, want 1s", c.Hold())
	}
}

// With fewer than MinRunnable goroutines made runnable per interval the
// share does not count: one waiting of two is noise (the review saw a
// node go up at 0.04 CPU that way).
func TestFewRunnableGoroutinesDoNotCount(t *testing.T) {
	f := newFeed(t, Config{})
	f.down()
	if p := f.steps(100, 0.05, 2, 1); p != 1 {
		t.Fatalf("1 of 2 goroutines waited: procs %d, want 1", p)
	}
	if p := f.steps(100, 0.5, 19, 19); p != 1 {
		t.Fatalf("19 of 19 waited: procs %d, want 1 (under MinRunnable)", p)
	}
	if p := f.steps(40, 0.5, 25, 5); p != 4 {
		t.Fatalf("5 of 25 waited: procs %d, want 4", p)
	}
}

// While heavy background work runs (Config.Busy), the process goes to Max
// at the next step and stays there however quiet it is; afterwards it
// comes down after Hold as usual, and Hold did not double: going up for
// such work is not a failed try of one P.
func TestBusyWorkKeepsMax(t *testing.T) {
	jobs := 0
	f := newFeed(t, Config{Busy: func() int { return jobs }})
	f.down()
	jobs = 1
	if p := f.step(0.05, 100, 0); p != 4 {
		t.Fatalf("busy work began: procs %d, want 4", p)
	}
	if p := f.steps(500, 0.05, 100, 0); p != 4 {
		t.Fatalf("10 s of busy work at 0.05 CPU: procs %d, want 4", p)
	}
	jobs = 0
	if f.c.Hold() != time.Second {
		t.Fatalf("Hold %v after busy work, want 1s", f.c.Hold())
	}
	f.down()
}

// Busy raises a running controller at once, on the caller's goroutine,
// without waiting for its next reading; the count it adds is taken back
// once, however often done is called.
func TestBusyRaisesARunningControllerAtOnce(t *testing.T) {
	sets := make(chan int, 8)
	c := New(Config{Max: 3, Interval: time.Hour, Set: func(n int) { sets <- n },
		Read: func() (Reading, bool) { return Reading{}, true }})
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { c.Run(ctx); close(ran) }()
	if n := <-sets; n != 1 {
		t.Fatalf("Run set %d first, want 1", n)
	}
	for { // Run registers itself just after its first set
		busyMu.Lock()
		r := running
		busyMu.Unlock()
		if r == c {
			break
		}
		time.Sleep(time.Millisecond)
	}
	done := Busy()
	select {
	case n := <-sets:
		if n != 3 {
			t.Fatalf("Busy set %d, want 3", n)
		}
	default:
		t.Fatal("Busy returned and GOMAXPROCS was not raised")
	}
	if c.Procs() != 3 || busyJobs() != 1 {
		t.Fatalf("procs %d, jobs %d; want 3 and 1", c.Procs(), busyJobs())
	}
	done()
	done()
	if busyJobs() != 0 {
		t.Fatalf("jobs %d after done twice, want 0", busyJobs())
	}
	cancel()
	<-ran
	busyMu.Lock()
	defer busyMu.Unlock()
	if running != nil {
		t.Fatal("a stopped controller is still the running one")
	}
}

// While the process is not quiet (Config.Quiet: a timer due soon, a
// callback in flight) it goes to Max at the next step and stays there,
// and Run does not start it on one P.
func TestNotQuietKeepsMax(t *testing.T) {
	quiet := true
	f := newFeed(t, Config{Quiet: func() bool { return quiet }})
	f.down()
	quiet = false
	if p := f.step(0.05, 100, 0); p != 4 {
		t.Fatalf("a timer due soon: procs %d, want 4", p)
	}
	if p := f.steps(500, 0.05, 100, 0); p != 4 {
		t.Fatalf("10 s not quiet at 0.05 CPU: procs %d, want 4", p)
	}
	quiet = true
	f.down()

	var sets []int
	runSome(Config{Max: 3, Quiet: func() bool { return false }, Set: func(n int) { sets = append(sets, n) }}, func(*Reading) {})
	if len(sets) != 0 {
		t.Fatalf("Run of a process that is not quiet set %v, want nothing", sets)
	}
}

// A load that uses more on Max than on one P (16 callers: 0.9–1.03 CPU
// on two Ps, 0.80 on one) comes down after Hold and stays down: Full is
// judged on the use since the process came down, not on an average that
// still holds the use on Max (it went back up 20 ms after each "fits",
// Hold doubling each time).
func TestComingDownFromAFullerMaxIsNotFull(t *testing.T) {
	for _, onMax := range []float64{0.98, 1.02, 1.10} {
		f := newFeed(t, Config{})
		f.down()
		f.steps(3, 1.0, 100, 100) // saturated: up
		if f.c.Procs() != 4 {
			t.Fatalf("not up after saturation")
		}
		p := 4
		for range 250 { // 5 s at onMax on Max, 0.80 on one P
			if p == 1 {
				p = f.step(0.80, 100, 0)
			} else {
				p = f.step(onMax, 100, 0)
			}
		}
		if p != 1 || len(f.sets) != 3 {
			t.Fatalf("%.2f CPU on Max, 0.80 on one P: procs %d, sets %v; want one P after a single 'fits'", onMax, p, f.sets)
		}
	}
}

// Scheduler counts that go backwards (a runtime that reset its
// histogram) are an interval with nothing counted, not a huge one.
func TestCountsGoingBackwardsCountNothing(t *testing.T) {
	f := newFeed(t, Config{})
	f.down()
	f.steps(20, 0.5, 100, 3) // 3 % waited: not saturated
	f.r.Waited -= 50         // of the 60 counted so far
	if p := f.step(0.5, 100, 0); p != 1 {
		t.Fatalf("waited counts went backwards: procs %d, want 1", p)
	}
	if p := f.steps(10, 0.5, 100, 0); p != 1 {
		t.Fatalf("after counts went backwards: procs %d, want 1", p)
	}
}

// Full needs UseWindow on one P: a load busy all the time goes up on the
// tenth interval (200 ms) after coming down, not before; and one busy
// interval right after coming down (kernel time in system calls can put
// one P's use above 1) weighs as one interval of a 200 ms average, so a
// load that fits stays.
func TestFullNeedsAWindowOnOneP(t *testing.T) {
	// comeDown steps at 0.2 CPU until the process has just come down.
	comeDown := func(f *feed) {
		for f.step(0.2, 100, 0) != 1 {
		}
	}
	f := newFeed(t, Config{})
	comeDown(f)
	if p := f.steps(9, 1.0, 5, 0); p != 1 {
		t.Fatalf("180 ms at 1.0 CPU after coming down: procs %d, want 1", p)
	}
	if p := f.step(1.0, 5, 0); p != 4 {
		t.Fatalf("200 ms at 1.0 CPU after coming down: procs %d, want 4", p)
	}
	for _, first := range []float64{1.03, 1.17} {
		g := newFeed(t, Config{})
		comeDown(g)
		g.step(first, 5, 0)
		if p := g.steps(100, 0.90, 5, 0); p != 1 {
			t.Fatalf("one interval at %.2f then 0.90 CPU: procs %d, want 1", first, p)
		}
	}
}

// OnOneP follows a running controller: true from its change to one P
// (after Set(1) returned) until its change up (before Set(n) is called),
// false once Run has returned; a controller driven by Step alone, without
// Run, never sets it.
func TestOnOnePFollowsTheRunningController(t *testing.T) {
	type set struct {
		n      int
		before bool // OnOneP as Set was called
	}
	sets := make(chan set, 8)
	c := New(Config{Max: 3, Interval: time.Hour, Set: func(n int) { sets <- set{n, OnOneP()} },
		Read: func() (Reading, bool) { return Reading{}, true }})
	if OnOneP() {
		t.Fatal("OnOneP before any controller ran")
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { c.Run(ctx); close(ran) }()
	if s := <-sets; s.n != 1 || s.before {
		t.Fatalf("Run's first set: %+v, want to 1 with OnOneP still false", s)
	}
	for i := 0; !OnOneP(); i++ { // stored just after Set(1) returned
		if i == 5000 {
			t.Fatal("OnOneP still false 5 s after Run's change to one P")
		}
		time.Sleep(time.Millisecond)
	}
	done := Busy()
	if s := <-sets; s.n != 3 || s.before {
		t.Fatalf("Busy's set: %+v, want to 3 with OnOneP already false", s)
	}
	done()
	if OnOneP() {
		t.Fatal("OnOneP on 3 Ps")
	}
	c.mu.Lock()
	c.set(1, WhyFits, 0, 0)
	c.mu.Unlock()
	<-sets
	if !OnOneP() {
		t.Fatal("OnOneP false after a change to one P")
	}
	cancel()
	<-ran
	if OnOneP() {
		t.Fatal("OnOneP true after Run returned")
	}

	f := newFeed(t, Config{})
	f.down()
	if OnOneP() {
		t.Fatal("a controller without Run set OnOneP")
	}
}
