// Package procs sets how many CPUs an ax process runs its goroutines on
// (GOMAXPROCS) from its load (--adaptive-procs, on by default): one while
// the load fits in one CPU and no timer is due soon, all of them (the
// runtime's default: the machine's CPUs or the container's CPU limit)
// otherwise.
//
// # Why
//
// A request to a sidecar passes from goroutine to goroutine: the socket's
// reader, the group commit, raft's leader loop (which writes and fsyncs
// the log), raft's FSM goroutine, and back to the reader that answers.
// With two or more Ps, each hand-off that finds another P idle wakes a
// sleeping thread on another CPU (a futex wake, and on a virtual machine
// an inter-processor interrupt to a halted vCPU), and threads spin looking
// for work; on one P the next goroutine simply runs when the current one
// blocks. On the project's 2-CPU virtual machine (a node of its own, the
// bench's callers in another process) one caller's submits ran at
// 4 300–4 500/s on two Ps and 5 400–5 900/s on one (p50 0.21–0.22 against
// 0.15–0.17 ms), 16 callers' at 18 700–20 600 and 22 600–27 000/s, with
// less CPU on one P (0.78–0.80 against 1.01–1.03 for 16 callers), while
// batches of 1 000, which keep both CPUs busy, ran 30 % slower on one
// (docs/perf/README.md, "One P while the load fits"). Redis keeps its
// command path on one thread for the same reason.
//
// # The rule
//
// Every Interval (20 ms) the controller takes a Reading: the process's CPU
// time (user + system, getrusage) and how many goroutines the scheduler
// made runnable and how many of them waited Wait (1 ms) or more for a P
// (runtime/metrics' /sched/latencies:seconds). The process starts on one
// P (Run sets it), and:
//   - while the process is not quiet (Config.Quiet: a task is due within
//     2 s or a callback is in flight, the node's NothingDueWithin) or
//     heavy background work runs (Busy: a snapshot being written, a
//     compaction), it is on the maximum: it goes there at the next
//     reading, or at once when Busy is called;
//   - on one P, the P is saturated (the load grew, or a burst of work)
//     when, averaged over UseWindow (200 ms), UpWaited (10 %) or more of
//     the goroutines made runnable waited (and MinRunnable, 20, were made
//     runnable per interval at least), or the process's use on one P,
//     averaged over UseWindow since it came down (200 ms of it at least),
//     reached Full (0.95 CPUs: the P was busy all the time, as with a few
//     goroutines that decode big batches and seldom wait for each other);
//     GOMAXPROCS then goes to the maximum, 40 ms to a few hundred after
//     the load grew (longer the nearer the load is to the bounds);
//   - on more, when the process's use, averaged over the last UseWindow
//     (200 ms), stayed under Fit (1.2 CPUs) for Hold in a row, the load
//     may fit in one P again: GOMAXPROCS goes to 1. Hold is 1 s; it
//     doubles (up to HoldMax, 64 s) each time the process goes back up
//     within Bounce (1 s) of coming down, and is 1 s again after a stay
//     on one P of Bounce or more.
//
// The same load uses more CPU on several Ps than on one (spinning,
// wake-ups): 16 callers used 1.02 CPU on two Ps and 0.80 on one. Fit is
// set above what such loads use on two, so they come back to one P after
// a short burst took them up; a load that needs more than one P fails the
// next try within the averages' time (200 ms and more), and its tries
// space out (Hold doubles).
// A change stops the world for a moment (runtime.GOMAXPROCS).
//
// # Timers first
//
// On one P, background work (a badger memtable flush or compaction, a
// snapshot) shares the P with timers and callbacks until the controller
// sees the P saturated. With only the rules on CPU and waits, a review
// measured under heavy background load (200 KB submits, a purge every
// 3 s, a snapshot every 2 s, three nodes, a Python executor) p99 lateness
// 12.6–32.1 ms against 4.1–14.7 ms on all CPUs, and the worst callback
// 127–311 ms against 22–84 ms. Telling the controller of the node's own
// heavy work (Busy) halved that, no more: badger's flushes and
// compactions cannot be seen coming. So the process runs on one P only
// while nothing is due soon: lateness is then measured on all the CPUs,
// as without the controller (the same load, three pairs one after the
// other: p99 4.6, 5.4, 7.2 ms with it against 4.0, 5.3, 9.2 ms without;
// docs/perf/README.md), and what one P gains, it gains for requests while
// the node's timers are far off (a backlog of submits for later, a
// follower's share of the callers).
//
// The controller is off with --adaptive-procs=false, when the maximum is
// 1 (one CPU, or a container limit of one), when GOMAXPROCS is set in the
// environment (the operator chose), and when the process's CPU time or
// the scheduler's latencies cannot be read.
//
// # Imports
//
// procs imports only the standard library.
package procs

import (
	"context"
	"math"
	"os"
	"runtime"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of Config.
const (
	IntervalDefault    = 20 * time.Millisecond
	WaitDefault        = time.Millisecond
	UpWaitedDefault    = 0.1
	MinRunnableDefault = 20
	FullDefault        = 0.95
	FitDefault         = 1.2
	UseWindowDefault   = 200 * time.Millisecond
	HoldDefault        = time.Second
	HoldMaxDefault     = 64 * time.Second
	BounceDefault      = time.Second
)

// Config tunes a Controller; zero fields take the defaults.
type Config struct {
	// Max is the GOMAXPROCS to use under load; 0: runtime.GOMAXPROCS(0)
	// when the controller is made (the runtime's default).
	Max int
	// Interval is how often Run takes a Reading.
	Interval time.Duration
	// Wait is how long a runnable goroutine must wait for a P to count
	// as waiting (Reading.Waited).
	Wait time.Duration
	// UpWaited is the share of the goroutines made runnable that waited
	// (0.1 is one in ten), averaged over UseWindow, from which, on one
	// P, the controller goes to Max. Averaged, because one interval's
	// share is noisy: two of twenty goroutines waiting behind a 20 ms
	// stall took a node whose load fitted in one P to Max, a second at
	// a time (docs/perf/README.md, "Saturation averaged over 200 ms").
	UpWaited float64
	// MinRunnable is how many goroutines must have been made runnable
	// per Interval, averaged over UseWindow, for the share to count: one
	// of two waiting is noise.
	MinRunnable uint64
	// Full is the use (CPUs) on one P, averaged over UseWindow since the
	// process came down to it (for UseWindow at least), from which the
	// controller goes to Max: the P is busy all the time, though few
	// goroutines may wait (a caller's batch of 1 000 tasks keeps one
	// goroutine on the CPU for milliseconds).
	Full float64
	// Fit is the CPU use (CPUs: 1.2 is one and a fifth) under which, on
	// more than one P, for Hold in a row, the controller goes to one P;
	// the use is averaged exponentially over UseWindow (its time
	// constant), so that one busy interval does not start Hold over.
	Fit       float64
	UseWindow time.Duration
	// Hold starts at Hold, doubles up to HoldMax when the process goes
	// back up within Bounce of coming down, and starts over after a stay
	// on one P of Bounce or more.
	Hold, HoldMax, Bounce time.Duration
	// Read takes a Reading; nil: getrusage and runtime/metrics. ok false:
	// it cannot be read (Run then stays off).
	Read func() (Reading, bool)
	// Set sets GOMAXPROCS; nil: runtime.GOMAXPROCS(1) for one P and
	// runtime.SetDefaultGOMAXPROCS for Max (which also turns the
	// runtime's own updates from the container's CPU limit back on).
	Set func(n int)
	// OnChange, when set, is called after each change with the new value,
	// why (Why*), and the averages over UseWindow when it was decided
	// (use in CPUs, waited as a share; 0 for a change no reading
	// decided).
	OnChange func(procs int, why string, use, waited float64)
	// Busy returns how many heavy background jobs are in progress; nil:
	// the process's count (the package's Busy).
	Busy func() int
	// Quiet reports whether the process may run on one P as far as its
	// timers go: nothing is due soon and no callback is in flight. While
	// it reports false the process stays on, or goes to, Max (checked at
	// each Step, under the controller's lock). Nil: always quiet.
	Quiet func() bool
}

// Why a controller changed GOMAXPROCS (Config.OnChange).
const (
	WhyStart     = "start"     // Run put the process on one P
	WhySaturated = "saturated" // goroutines waited for the one P (UpWaited)
	WhyFull      = "full"      // the one P was busy all the time (Full)
	WhyFits      = "fits"      // the use stayed under Fit for Hold
	WhyBusy      = "busy"      // heavy background work began (Busy)
	WhyDue       = "due"       // something falls due soon (Config.Quiet)
	WhyStop      = "stop"      // Run ended
)

// Reading is what the controller reads every Interval: cumulative values
// since any fixed origin, so that two readings give the interval's.
type Reading struct {
	// Wall is a monotonic time.
	Wall time.Duration
	// CPU is the process's CPU time (user + system).
	CPU time.Duration
	// Runnable counts the goroutines the scheduler made runnable (a
	// sample of them); Waited those of them that waited Wait or more
	// before they ran.
	Runnable, Waited uint64
}

// Controller decides GOMAXPROCS from Readings. Step is the rule; Run
// takes a Reading every Interval. Step and Run are for one goroutine;
// Procs, Hold and the package's Busy may be called from any other.
type Controller struct {
	// mu guards the state below against Busy, which raises a running
	// controller from another goroutine.
	mu    sync.Mutex
	cfg   Config
	procs int // the GOMAXPROCS in force, as the controller set it
	last  Reading
	// primed is set by the first reading; avg is the use averaged over
	// UseWindow, runRate and waitRate the goroutines made runnable and
	// those of them that waited, per second, averaged likewise. oneAvg
	// is the use averaged over UseWindow since the process last went to
	// one P, over oneTime, started at 0 (oneUse corrects for that): Full
	// is judged on it, not on avg, which holds the use on Max for a
	// while after coming down (the same load uses more CPU there). below
	// is how long avg has stayed under Fit on more than one P; hold is
	// the current Hold; atOne how long the process has been on one P
	// since it came down (Bounce at Run's start, which is not a try).
	primed            bool
	avg               float64
	runRate, waitRate float64
	oneAvg            float64
	oneTime           time.Duration
	below             time.Duration
	hold              time.Duration
	atOne             time.Duration
	// live is set while Run is in progress: only then does set keep
	// OnOneP.
	live bool
	// sched reads the scheduler's latencies (Run's default Read).
	sched []metrics.Sample
}

// New returns a controller for cfg, at cfg.Max Ps until Run (or a Step)
// changes it: the process's GOMAXPROCS is not touched before.
func New(cfg Config) *Controller {
	if cfg.Max <= 0 {
		cfg.Max = runtime.GOMAXPROCS(0)
	}
	if cfg.Interval <= 0 {
		cfg.Interval = IntervalDefault
	}
	if cfg.Wait <= 0 {
		cfg.Wait = WaitDefault
	}
	if cfg.UpWaited <= 0 {
		cfg.UpWaited = UpWaitedDefault
	}
	if cfg.MinRunnable == 0 {
		cfg.MinRunnable = MinRunnableDefault
	}
	if cfg.Full <= 0 {
		cfg.Full = FullDefault
	}
	if cfg.Fit <= 0 {
		cfg.Fit = FitDefault
	}
	if cfg.UseWindow <= 0 {
		cfg.UseWindow = UseWindowDefault
	}
	if cfg.Hold <= 0 {
		cfg.Hold = HoldDefault
	}
	if cfg.HoldMax < cfg.Hold {
		cfg.HoldMax = max(HoldMaxDefault, cfg.Hold)
	}
	if cfg.Bounce <= 0 {
		cfg.Bounce = BounceDefault
	}
	if cfg.Busy == nil {
		cfg.Busy = busyJobs
	}
	if cfg.Set == nil {
		max := cfg.Max
		cfg.Set = func(n int) {
			if n == max {
				// The runtime's default again, with its own updates
				// (a container's CPU limit changed in place) back on.
				runtime.SetDefaultGOMAXPROCS()
				return
			}
			runtime.GOMAXPROCS(n)
		}
	}
	c := &Controller{cfg: cfg, procs: cfg.Max, hold: cfg.Hold}
	if c.cfg.Read == nil {
		c.sched = []metrics.Sample{{Name: "/sched/latencies:seconds"}}
		start := time.Now()
		c.cfg.Read = func() (Reading, bool) { return c.read(start) }
	}
	return c
}

// Procs returns the GOMAXPROCS in force as the controller set it (Max
// before its first change).
func (c *Controller) Procs() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.procs
}

// Hold returns how long the use must stay under Fit on more than one P
// before the controller tries one P again.
func (c *Controller) Hold() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hold
}

// Step applies the rule (see the package comment) to the interval since
// the previous Reading, changes GOMAXPROCS when the rule says so, and
// returns the GOMAXPROCS in force. The first Reading only primes the
// controller; one whose wall time did not advance is ignored. While
// heavy background work is in progress (Config.Busy) or the process is
// not quiet (Config.Quiet), it stays on, or goes to, Max.
func (c *Controller) Step(r Reading) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.primed {
		c.last, c.primed = r, true
		return c.procs
	}
	dw := r.Wall - c.last.Wall
	if dw <= 0 {
		return c.procs
	}
	use := float64(r.CPU-c.last.CPU) / float64(dw)
	var ran, waits float64
	if r.Runnable >= c.last.Runnable && r.Waited >= c.last.Waited {
		ran, waits = float64(r.Runnable-c.last.Runnable), float64(r.Waited-c.last.Waited)
	}
	c.last = r
	// Exponential moving averages with time constant UseWindow
	// (irregular intervals: weight 1 - e^(-dw/UseWindow)).
	w := -math.Expm1(-float64(dw) / float64(c.cfg.UseWindow))
	c.avg += (use - c.avg) * w
	sec := dw.Seconds()
	c.runRate += (ran/sec - c.runRate) * w
	c.waitRate += (waits/sec - c.waitRate) * w
	waited := 0.0
	if c.runRate*c.cfg.Interval.Seconds() >= float64(c.cfg.MinRunnable) {
		waited = c.waitRate / c.runRate
	}
	if c.procs > 1 && c.avg >= c.cfg.Fit {
		// The load needs more than one P: it stays up, whatever
		// Busy and Quiet say (Quiet is not asked: it reads the store).
		c.below = 0
		return c.procs
	}
	why := ""
	switch {
	case c.cfg.Busy() > 0:
		why = WhyBusy
	case c.cfg.Quiet != nil && !c.cfg.Quiet():
		why = WhyDue
	}
	if why != "" {
		if c.procs == 1 {
			c.set(c.cfg.Max, why, c.avg, waited)
		}
		c.below = 0
		return c.procs
	}
	if c.procs == 1 {
		c.oneAvg += (use - c.oneAvg) * w
		c.oneTime += dw
		c.atOne += dw
		if c.atOne >= c.cfg.Bounce {
			c.hold = c.cfg.Hold
		}
		why := ""
		switch {
		case waited >= c.cfg.UpWaited:
			why = WhySaturated
		case c.oneTime >= c.cfg.UseWindow && c.oneUse() >= c.cfg.Full:
			why = WhyFull
		}
		if why != "" {
			if c.atOne < c.cfg.Bounce {
				c.hold = min(2*c.hold, c.cfg.HoldMax)
			}
			c.set(c.cfg.Max, why, c.oneUse(), waited)
		}
		return c.procs
	}
	c.below += dw
	if c.below >= c.hold {
		c.set(1, WhyFits, c.avg, waited)
	}
	return c.procs
}

// oneUse is the use on one P since the process came down, averaged over
// UseWindow: oneAvg started at 0, so it is divided by the weight its
// readings have together, 1 - e^(-oneTime/UseWindow) (the bias
// correction of an exponential average started at zero, as in Adam,
// Kingma and Ba 2015), which weighs each interval as a full window's
// average would; mu is held.
func (c *Controller) oneUse() float64 {
	wt := -math.Expm1(-float64(c.oneTime) / float64(c.cfg.UseWindow))
	if wt <= 0 {
		return 0
	}
	return c.oneAvg / wt
}

// set changes GOMAXPROCS to n; mu is held. Under Run it keeps OnOneP
// true only while the process is on one P: set after the change to one,
// cleared before a change up.
func (c *Controller) set(n int, why string, use, waited float64) {
	c.procs, c.below, c.atOne = n, 0, 0
	if n == 1 {
		c.oneAvg, c.oneTime = 0, 0
	}
	if c.live && n != 1 {
		onOne.Store(false)
	}
	c.cfg.Set(n)
	if c.live && n == 1 {
		onOne.Store(true)
	}
	if c.cfg.OnChange != nil {
		c.cfg.OnChange(n, why, use, waited)
	}
}

// busyUp takes the process to Max at once when it is on one P (Busy).
// It is not a bounce: Hold is unchanged.
func (c *Controller) busyUp() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.procs == 1 {
		c.set(c.cfg.Max, WhyBusy, 0, 0)
	}
}

// The process's heavy background jobs in progress (Busy) and the
// controller whose Run is in progress, if any.
var (
	busyMu  sync.Mutex
	busyN   int
	running *Controller
)

// onOne is true while a controller's Run has the process on one P
// (OnOneP).
var onOne atomic.Bool

// OnOneP reports whether a controller's Run has this process on one P
// now: from its change to one P (after runtime.GOMAXPROCS(1) returned)
// until its next change up (cleared before the call). False without a
// running controller, whatever GOMAXPROCS is. The Raft log's writes and
// fsyncs (sidecar/raftstore/walsync.go) and the connections' reads and
// writes (internal/rawio) keep their P only then: on one P while nothing
// is due soon. Safe for concurrent use: an atomic load.
func OnOneP() bool { return onOne.Load() }

func busyJobs() int {
	busyMu.Lock()
	defer busyMu.Unlock()
	return busyN
}

// Busy marks the start of heavy background work in this process — work
// that keeps a CPU busy for tens of milliseconds or more, such as writing
// a snapshot or compacting the store — and returns the function that
// marks its end (calling it more than once counts once). While any such
// work is in progress a running controller keeps the process on all its
// Ps, and Busy takes it there at once from one P: on one P the work would
// hold the P that timers and requests need until the controller saw it
// saturated (what that cost: the package comment, "Timers first").
// Without a running controller Busy only counts. Safe for
// concurrent use; a change costs a stop of the world (runtime.GOMAXPROCS).
func Busy() (done func()) {
	busyMu.Lock()
	busyN++
	c := running
	busyMu.Unlock()
	if c != nil {
		c.busyUp()
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			busyMu.Lock()
			busyN--
			busyMu.Unlock()
		})
	}
}

// read is the default Read: getrusage, and the scheduler's latencies
// histogram (buckets from Wait up count as waited).
func (c *Controller) read(start time.Time) (Reading, bool) {
	cpu, ok := processCPU()
	if !ok {
		return Reading{}, false
	}
	r := Reading{Wall: time.Since(start), CPU: cpu}
	metrics.Read(c.sched)
	if c.sched[0].Value.Kind() != metrics.KindFloat64Histogram {
		// No latencies in this runtime: saturation could not be seen,
		// so the controller must not run (one P for ever).
		return Reading{}, false
	}
	h := c.sched[0].Value.Float64Histogram()
	wait := c.cfg.Wait.Seconds()
	for i, n := range h.Counts {
		r.Runnable += n
		// Bucket i holds [Buckets[i], Buckets[i+1]).
		if h.Buckets[i] >= wait {
			r.Waited += n
		}
	}
	return r, true
}

// Enabled reports whether a controller should run in this process: the
// maximum is more than one P, GOMAXPROCS is not set in the environment,
// and the process's CPU time can be read.
func Enabled() bool {
	if os.Getenv("GOMAXPROCS") != "" || runtime.GOMAXPROCS(0) < 2 {
		return false
	}
	_, ok := processCPU()
	return ok
}

// Run puts the process on one P, then takes a Reading every Interval
// until ctx ends, and gives the process its maximum back. It returns at
// once when Max is 1 or the first Reading fails.
func (c *Controller) Run(ctx context.Context) {
	if c.cfg.Max < 2 {
		return
	}
	r, ok := c.cfg.Read()
	if !ok {
		return
	}
	c.Step(r)
	c.mu.Lock()
	c.live = true
	if c.cfg.Busy() == 0 && (c.cfg.Quiet == nil || c.cfg.Quiet()) {
		c.set(1, WhyStart, 0, 0)
		c.atOne = c.cfg.Bounce // the start is not a try: going up soon does not double Hold
	}
	c.mu.Unlock()
	busyMu.Lock()
	running = c
	busyMu.Unlock()
	t := time.NewTicker(c.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			busyMu.Lock()
			if running == c {
				running = nil
			}
			busyMu.Unlock()
			c.mu.Lock()
			if c.procs != c.cfg.Max {
				c.set(c.cfg.Max, WhyStop, 0, 0)
			}
			c.live = false
			onOne.Store(false)
			c.mu.Unlock()
			return
		case <-t.C:
		}
		if r, ok := c.cfg.Read(); ok {
			c.Step(r)
		}
	}
}
