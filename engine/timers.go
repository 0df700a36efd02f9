package engine

import (
	"context"
	"fmt"
	"math"
	"math/bits"
	"time"
)

// Defaults and limits of [TimersOptions]. The package documentation explains
// how the defaults were chosen.
const (
	// TimersTickDefault is the wheel's slot width when TimersOptions.Tick is 0.
	TimersTickDefault = 50 * time.Millisecond
	// TimersSlotsDefault is the wheel's slot count when TimersOptions.Slots
	// is 0. With TimersTickDefault the wheel spans 16384 × 50 ms ≈ 13.7 min,
	// which covers the leader's 10-minute load window plus the lead time of
	// its refill, in 640 KiB of slot tables.
	TimersSlotsDefault = 16384
	// TimersTickMin is the smallest accepted Tick.
	TimersTickMin = time.Microsecond
	// TimersSlotsMin is the smallest slot count; smaller values are raised
	// to it.
	TimersSlotsMin = 64
	// TimersSlotsMax is the largest accepted slot count (2^22, 160 MiB of
	// slot tables).
	TimersSlotsMax = 1 << 22
	// MaxSleep is the suggested value of TimersOptions.MaxSleep where a
	// forward wall-clock step or a suspend of the host must be noticed
	// quickly: Run then wakes at least once a second while timers are
	// armed, so such a step delays a timer by at most a second. By default
	// Run does not wake periodically (see the package documentation, "Idle
	// and clock jumps").
	MaxSleep = time.Second
	// ClockJumpThreshold is the smallest difference between elapsed wall
	// time and elapsed monotonic time, between two wake-ups of Run, that
	// counts as a wall-clock jump in [TimersStats]. One extra millisecond
	// per second elapsed is allowed on top, to ignore NTP slewing (at most
	// 500 ppm).
	ClockJumpThreshold = 100 * time.Millisecond
)

// TimersOptions configures [NewTimers]. The zero value selects the defaults.
type TimersOptions struct {
	// Tick is the width of one wheel slot. It does not limit precision:
	// Run sleeps until the exact earliest deadline, whatever the tick. It
	// trades memory (more slots for the same span) against per-slot work
	// (sorting a slot's entries when it comes due). Must be >= TimersTickMin.
	// Defaults to TimersTickDefault.
	Tick time.Duration
	// Slots is the number of wheel slots, rounded up to a power of two and
	// to at least TimersSlotsMin; at most TimersSlotsMax. Tick × Slots is
	// the wheel window: deadlines within it are armed in O(1), later ones
	// go to a heap in O(log n) and migrate into the wheel as they come
	// near. Each slot costs 40 bytes. Defaults to TimersSlotsDefault.
	Slots int
	// MaxSleep, if > 0, bounds how long Run sleeps while timers are
	// armed, so that it notices a forward wall-clock step (or a suspend
	// of the host, during which the monotonic clock that timers wait on
	// stands still) within MaxSleep; [MaxSleep] (1 s) is the suggested
	// value. 0, the default, means no bound: Run sleeps until the
	// earliest deadline and never wakes periodically, and such a step is
	// noticed at the next wake-up (a deadline, or an Arm that brings the
	// earliest deadline forward). Must be 0 or >= TimersTickMin.
	MaxSleep time.Duration
}

// Validate reports whether the options are usable; the error names the
// field and the bound, and wraps [ErrInvalidOptions].
func (o TimersOptions) Validate() error {
	if o.Tick < 0 || (o.Tick > 0 && o.Tick < TimersTickMin) {
		return fmt.Errorf("%w: Tick %v must be 0 (default) or >= %v", ErrInvalidOptions, o.Tick, TimersTickMin)
	}
	if o.Slots < 0 || o.Slots > TimersSlotsMax {
		return fmt.Errorf("%w: Slots %d must be in [0, %d]", ErrInvalidOptions, o.Slots, TimersSlotsMax)
	}
	if o.MaxSleep < 0 || (o.MaxSleep > 0 && o.MaxSleep < TimersTickMin) {
		return fmt.Errorf("%w: MaxSleep %v must be 0 (no bound) or >= %v", ErrInvalidOptions, o.MaxSleep, TimersTickMin)
	}
	return nil
}

// WithDefaults returns a copy of o with zero fields set to their defaults and
// Slots rounded up to a power of two (at least TimersSlotsMin).
func (o TimersOptions) WithDefaults() TimersOptions {
	if o.Tick == 0 {
		o.Tick = TimersTickDefault
	}
	if o.Slots == 0 {
		o.Slots = TimersSlotsDefault
	}
	if o.Slots < TimersSlotsMin {
		o.Slots = TimersSlotsMin
	}
	if o.Slots&(o.Slots-1) != 0 {
		o.Slots = 1 << bits.Len(uint(o.Slots))
	}
	return o
}

// Expired is one timer handed to the fire callback of [Timers.Run].
type Expired struct {
	// Key is the key the timer was armed with.
	Key string
	// Due is the due time it was armed with, as a UTC wall-clock time with
	// nanosecond precision and no monotonic reading (compare with Equal).
	Due time.Time
}

// TimersStats is a snapshot of counters of a [Timers], for metrics.
type TimersStats struct {
	Armed         int           // timers armed now (same as Len)
	Wheel         int           // of which in the wheel
	Heap          int           // of which in the heaps (due beyond the window, or in the current tick)
	Fired         uint64        // timers handed to fire since NewTimers
	Migrated      uint64        // timers moved from the far heap into the wheel
	ClockJumps    uint64        // wall-clock jumps seen by Run (needs a Clock of this package)
	LastClockJump time.Duration // size of the last jump: wall minus monotonic elapsed time
	Wakeups       uint64        // times Run woke up and looked at the clock (timer, Arm nudge, or a batch done)
}

// Timers is a set of one-shot timers keyed by string, fired by [Timers.Run].
// It is the leader's timer structure: a [TimerSet] whose payload is the
// key, plus an index from key to timer, so that the caller names timers by
// task id instead of keeping handles. Arming a key that is armed moves its
// timer.
//
// Costs, with n timers armed: those of [TimerSet] plus one lookup in the
// key index per Arm and Cancel (a hash and, at a million keys, a cache
// miss or two: the index slot, the entry and the key's bytes). Len is
// O(1).
//
// Memory: timers live by value in a slab of 32-byte entries named by int32
// index (no pointer per timer but the key), found through an
// open-addressing index of 8-byte slots at most 3/4 full; a wheel timer
// also has a 4-byte index in its slot's vector, a far timer a 16-byte heap
// item, and every entry a 1-byte far tag. That is about 59 bytes per timer
// at a million (42 for a TimerSet without the index), plus the key's bytes (which Timers shares with the
// caller), plus 40 bytes per wheel slot. Entries are recycled, so a steady Arm/Cancel/fire load allocates
// almost nothing (now and then a slot vector or an index table grows, and
// Run allocates each batch it hands to fire).
// The package documentation gives measured figures.
//
// Guarantees: a timer never fires before its due time by the Clock's wall
// time (Now() >= due); it fires once, unless re-armed or cancelled first;
// timers due together come out in one batch, in due order (ties in arm
// order). All methods are safe for concurrent use.
type Timers struct {
	set  TimerSet[string] // its mu guards keys too
	keys keyIndex
}

// NewTimers returns an empty timer set on clock. It panics if opts is
// invalid (see [TimersOptions.Validate]).
func NewTimers(clock Clock, opts TimersOptions) *Timers {
	t := &Timers{keys: newKeyIndex()}
	t.set.init("Timers", clock, opts)
	return t
}

// Arm adds a timer for key due at due, or moves key's timer to due if one is
// armed (arming again with the same due time changes nothing). due is judged
// as a wall-clock instant; its monotonic reading and location are ignored.
// A due time in the past fires at once; due times before 1678 or after
// 2262 (outside int64 nanoseconds) are clamped to those bounds. Arm is O(1) when due is inside the
// wheel window (see [TimerSet] for the other cases). It may be called from
// any goroutine, including from inside the fire callback.
func (t *Timers) Arm(key string, due time.Time) {
	ns := unixNano(due)
	h := t.keys.hash(key)
	s := &t.set
	s.mu.Lock()
	tab := t.keys.tab(h)
	tab.reserve()
	pos, i, found := tab.find(h, key, &s.slab)
	if found {
		s.move(i, ns)
	} else {
		i = s.slab.alloc()
		s.slab.at(i).payload = key
		tab.put(pos, h, i)
		t.keys.n++
		s.schedule(i, ns)
	}
	s.mu.Unlock()
}

// Cancel removes key's timer and reports whether one was armed. A timer
// that Run has already taken for a batch is no longer armed, so Cancel
// returns false for it even if fire has not yet been called. A cancelled
// timer never fires. O(1) (see [TimerSet]).
func (t *Timers) Cancel(key string) bool {
	h := t.keys.hash(key)
	s := &t.set
	s.mu.Lock()
	tab := t.keys.tab(h)
	pos, i, found := tab.find(h, key, &s.slab)
	if found {
		tab.del(pos)
		t.keys.n--
		s.cancel(i)
	}
	s.mu.Unlock()
	return found
}

// Len returns the number of armed timers.
func (t *Timers) Len() int { return t.set.Len() }

// Due returns the due time key is armed for (UTC), and whether it is armed.
func (t *Timers) Due(key string) (time.Time, bool) {
	h := t.keys.hash(key)
	s := &t.set
	s.mu.Lock()
	defer s.mu.Unlock()
	_, i, found := t.keys.tab(h).find(h, key, &s.slab)
	if !found {
		return time.Time{}, false
	}
	return time.Unix(0, s.slab.at(i).due).UTC(), true
}

// Stats returns a snapshot of the counters.
func (t *Timers) Stats() TimersStats { return t.set.Stats() }

// Run fires timers until ctx is done, then returns; armed timers stay armed
// and a later Run picks them up. Only one Run may be active at a time (a
// second concurrent call panics).
//
// Each time Run wakes it reads the clock and calls fire, on Run's goroutine,
// with every timer whose due time is at or before Now(), in due order (ties
// in arm order); those timers are no longer armed when fire is called.
// Run does not reuse batch. fire may call Arm, Cancel and the other methods.
// While fire runs, no other batch is delivered, so a slow fire delays later
// timers; it should hand work off rather than do it.
//
// Between batches Run sleeps on one clock timer until the earliest deadline
// (no timer at all while nothing is armed), and Arm wakes it when a new
// deadline is earlier. It does not wake periodically unless
// TimersOptions.MaxSleep asks it to. Every wake-up re-evaluates against
// Now(), so a wall-clock step backwards delays firing (never early) and a
// step forwards fires what became due at the next wake-up (see the
// package documentation, "Idle and clock jumps"). With [RealClock], on
// Linux, Run sleeps on a timerfd rather than a time.Timer, for wake-ups
// within about 0.25 ms that the garbage collector does not hold back (see
// the package documentation, "Lateness"); with any other Clock it sleeps
// on the Clock's timers.
func (t *Timers) Run(ctx context.Context, fire func(batch []Expired)) {
	var batch []Expired
	t.set.run(ctx, t.taker(&batch), func() {
		fire(batch)
		batch = nil
	})
}

// taker returns the emit function of TimerSet.collect for t: it drops each
// fired key from the index and appends the timer to *batch.
func (t *Timers) taker(batch *[]Expired) func(int32, *entry[string]) {
	return func(i int32, e *entry[string]) {
		h := t.keys.hash(e.payload)
		tab := t.keys.tab(h)
		tab.del(tab.findIdx(h, i))
		t.keys.n--
		*batch = append(*batch, Expired{Key: e.payload, Due: time.Unix(0, e.due).UTC()})
	}
}

// unixNano returns t as Unix nanoseconds, saturating outside the int64 range
// (years before 1678 or after 2262).
func unixNano(t time.Time) int64 {
	s := t.Unix()
	switch {
	case s >= math.MaxInt64/1_000_000_000:
		return math.MaxInt64
	case s <= math.MinInt64/1_000_000_000:
		return math.MinInt64
	}
	return t.UnixNano()
}

// floorDiv returns ⌊a/b⌋ for b > 0.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b < 0 {
		q--
	}
	return q
}
