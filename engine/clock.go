package engine

import (
	"context"
	"sort"
	"sync"
	"time"
)

// Clock is the engine's only source of time. Production code uses
// [RealClock]; tests use a [FakeClock] so that they run on fake time and
// never sleep.
//
// The engine follows one rule for the two kinds of time a [time.Time] can
// carry (the same rule as river's TimeGenerator): deadlines that come from
// storage are wall-clock UTC instants and are compared against Now() as wall
// time; waiting is done with timers, which run on the monotonic clock. Now()
// may carry a monotonic reading (time.Now does); the engine strips it before
// comparing with a due time, so a due time is always judged by the wall
// clock. Convert to UTC milliseconds only at the storage boundary.
//
// Implementations must be safe for concurrent use.
type Clock interface {
	// Now returns the current wall-clock time. It may carry a monotonic
	// clock reading.
	Now() time.Time
	// NewTimer returns a timer that sends the current time on its channel
	// once, after at least d has elapsed on the monotonic clock. d <= 0
	// fires at once.
	NewTimer(d time.Duration) Timer
}

// Timer is a one-shot timer made by a [Clock]. It behaves like a
// [time.Timer] in Go 1.23 and later: C has a buffer of one, and after Stop
// or Reset returns no stale value is received from C.
type Timer interface {
	// C returns the channel on which the fire time is delivered.
	C() <-chan time.Time
	// Stop prevents the timer from firing. It reports whether the call
	// stopped the timer (false if it had already fired or been stopped).
	Stop() bool
	// Reset changes the timer to fire after d. It reports whether the timer
	// had been active.
	Reset(d time.Duration) bool
}

// monoClock is implemented by the clocks of this package. It returns a
// monotonic reading, used by [Timers] to tell a wall-clock step from time
// that really passed. Clocks from other packages need not implement it;
// without it the engine still never fires early, it just cannot count jumps.
type monoClock interface {
	mono() time.Duration
}

// RealClock returns the Clock backed by the time package: Now is time.Now
// (with a monotonic reading) and timers are [time.Timer]s.
func RealClock() Clock { return realClock{} }

type realClock struct{}

// processStart anchors realClock's monotonic readings.
var processStart = time.Now()

// Now returns time.Now().
func (realClock) Now() time.Time { return time.Now() }

// NewTimer returns a time.Timer.
func (realClock) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

func (realClock) mono() time.Duration { return time.Since(processStart) }

// realTimer adapts *time.Timer to Timer.
type realTimer struct{ t *time.Timer }

// C returns the timer's channel.
func (r realTimer) C() <-chan time.Time { return r.t.C }

// Stop is time.Timer.Stop.
func (r realTimer) Stop() bool { return r.t.Stop() }

// Reset is time.Timer.Reset.
func (r realTimer) Reset(d time.Duration) bool { return r.t.Reset(d) }

// FakeClock is a [Clock] whose time moves only when the test says so. It
// models the two clocks of a real machine separately:
//
//   - monotonic time, which only [FakeClock.Advance] moves and which drives
//     timers;
//   - wall time (what Now returns), which Advance moves by the same amount
//     and [FakeClock.Set] steps to any value, as an NTP step or an operator
//     would, without firing timers.
//
// Times returned by Now carry no monotonic reading. A FakeClock is safe for
// concurrent use. The zero value is not usable; call [NewFakeClock].
type FakeClock struct {
	mu      sync.Mutex
	cond    *sync.Cond    // signalled whenever the set of armed timers changes
	wall    time.Time     // what Now returns
	monoNow time.Duration // monotonic time since NewFakeClock
	armed   map[*fakeTimer]struct{}
	created int // timers ever created, for tie-breaking in Advance
}

// NewFakeClock returns a FakeClock whose wall time is start (its monotonic
// reading, if any, is dropped) and with no armed timers.
func NewFakeClock(start time.Time) *FakeClock {
	c := &FakeClock{wall: start.Round(0), armed: make(map[*fakeTimer]struct{})}
	c.cond = sync.NewCond(&c.mu)
	return c
}

// Now returns the fake wall time.
func (c *FakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.wall
}

func (c *FakeClock) mono() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.monoNow
}

// NewTimer returns a timer that fires when the fake monotonic time has moved
// forward by d (at once if d <= 0).
func (c *FakeClock) NewTimer(d time.Duration) Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.created++
	t := &fakeTimer{c: c, ch: make(chan time.Time, 1), seq: c.created}
	c.arm(t, d)
	return t
}

// Advance moves both the wall and the monotonic time forward by d and fires,
// in deadline order, every timer that is then due. Each fire is a
// non-blocking send of the new wall time on the timer's one-slot channel,
// like [time.Timer], so Advance never waits for the goroutines that own the
// timers; a goroutine that re-arms in response sees the clock already at
// its new time. A negative d panics.
func (c *FakeClock) Advance(d time.Duration) {
	if d < 0 {
		panic("engine: FakeClock.Advance with a negative duration")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.wall = c.wall.Add(d)
	c.monoNow += d
	var due []*fakeTimer
	for t := range c.armed {
		if t.deadline <= c.monoNow {
			due = append(due, t)
		}
	}
	sort.Slice(due, func(i, j int) bool {
		if due[i].deadline != due[j].deadline {
			return due[i].deadline < due[j].deadline
		}
		return due[i].seq < due[j].seq
	})
	for _, t := range due {
		c.fire(t)
	}
	if len(due) > 0 {
		c.cond.Broadcast()
	}
}

// Set steps the wall time to t (its monotonic reading, if any, is dropped),
// forward or backward, without moving the monotonic time: armed timers do
// not fire, exactly as real timers ignore a wall-clock step. Use Advance to
// let time pass.
func (c *FakeClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.wall = t.Round(0)
}

// Armed returns the number of timers that are armed: created or reset and
// neither fired nor stopped.
func (c *FakeClock) Armed() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.armed)
}

// BlockUntil blocks until at least n timers are armed. Tests use it to wait
// until the goroutine under test has gone to sleep on the clock, instead of
// sleeping themselves. It never returns if that does not happen; see
// [FakeClock.BlockUntilContext] for a bounded wait.
func (c *FakeClock) BlockUntil(n int) {
	_ = c.BlockUntilContext(context.Background(), n)
}

// BlockUntilContext is [FakeClock.BlockUntil] with a way out: it returns
// ctx.Err() if ctx is done first, nil otherwise.
func (c *FakeClock) BlockUntilContext(ctx context.Context, n int) error {
	stop := context.AfterFunc(ctx, func() {
		c.mu.Lock()
		c.cond.Broadcast()
		c.mu.Unlock()
	})
	defer stop()
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.armed) < n {
		if err := ctx.Err(); err != nil {
			return err
		}
		c.cond.Wait()
	}
	return nil
}

// arm (re)arms t to fire d after the current monotonic time; c.mu is held.
func (c *FakeClock) arm(t *fakeTimer, d time.Duration) {
	if d <= 0 {
		c.fire(t)
		return
	}
	t.deadline = c.monoNow + d
	c.armed[t] = struct{}{}
	c.cond.Broadcast()
}

// fire sends the current wall time on t's channel without blocking and
// disarms t; c.mu is held.
func (c *FakeClock) fire(t *fakeTimer) {
	delete(c.armed, t)
	select {
	case t.ch <- c.wall:
	default:
	}
}

type fakeTimer struct {
	c        *FakeClock
	ch       chan time.Time
	deadline time.Duration // monotonic
	seq      int
}

// C returns the timer's one-slot channel.
func (t *fakeTimer) C() <-chan time.Time { return t.ch }

// Stop disarms the timer and drops a fired, unreceived value.
func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	_, active := t.c.armed[t]
	if active {
		delete(t.c.armed, t)
		t.c.cond.Broadcast()
	}
	t.drain()
	return active
}

// Reset drops a fired, unreceived value and re-arms the timer d from now.
func (t *fakeTimer) Reset(d time.Duration) bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	_, active := t.c.armed[t]
	delete(t.c.armed, t)
	t.drain()
	t.c.arm(t, d)
	return active
}

// resetAt re-arms the timer for the wall-clock instant at, read against
// the fake clock's time when it is called: [TimerSet.Run] computes its
// sleep from an earlier Now, and a test's Advance in between would
// otherwise arm the timer late by the advance (or drain a fire that the
// advance had just delivered), leaving Run asleep past its deadline.
func (t *fakeTimer) resetAt(at time.Time) {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	delete(t.c.armed, t)
	t.drain()
	t.c.arm(t, at.Sub(t.c.wall))
}

// absTimer is a Timer that can be armed for an instant rather than a
// duration (the fake clock's; real timers measure durations from a clock
// that does not jump).
type absTimer interface{ resetAt(at time.Time) }

// drain drops a fired but unreceived value, as time.Timer does since Go 1.23.
func (t *fakeTimer) drain() {
	select {
	case <-t.ch:
	default:
	}
}
