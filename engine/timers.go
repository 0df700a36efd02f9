package engine

import (
	"context"
	"fmt"
	"math"
	"math/bits"
	"sync"
	"sync/atomic"
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
	// its refill, in 256 KiB of slot tables.
	TimersSlotsDefault = 16384
	// TimersTickMin is the smallest accepted Tick.
	TimersTickMin = time.Microsecond
	// TimersSlotsMin is the smallest slot count; smaller values are raised
	// to it.
	TimersSlotsMin = 64
	// TimersSlotsMax is the largest accepted slot count (2^22, 48 MiB of
	// slot tables).
	TimersSlotsMax = 1 << 22
	// MaxSleep bounds how long [Timers.Run] sleeps while timers are armed.
	// Timers wait on the monotonic clock, but due times are wall-clock
	// instants; waking at least this often lets Run notice a forward
	// wall-clock step and fire what became due at most MaxSleep late. With
	// nothing armed Run sleeps without a timer.
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
	// near. Each slot costs 16 bytes. Defaults to TimersSlotsDefault.
	Slots int
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
}

// Sentinels of Timers.sleepUntil.
const (
	runBusy = math.MinInt64 // Run is awake and will look again: Arm need not wake it
	runIdle = math.MaxInt64 // Run sleeps with no deadline: any Arm wakes it
)

// Timers is a set of one-shot timers keyed by string, fired by [Timers.Run].
// It is the leader's timer structure: a hybrid of a timing wheel for
// deadlines within Tick × Slots of now, and a min-heap for deadlines beyond,
// whose entries migrate into the wheel as they come near. Entries of the
// current tick (and overdue ones) sit in a small exact-order heap.
//
// Costs, with n timers armed: Arm is O(1) when the deadline is inside the
// wheel window, O(log n) beyond it, and O(log k) for a deadline in the
// current tick or the past (k: timers of the current tick, a handful);
// Cancel is O(1) (amortised for far timers, which are dropped lazily, and
// O(log k) in the current tick); Len is O(1). Firing costs O(log k) per
// timer, migrating a far timer O(log n) once. Memory is about 120 bytes per
// timer plus the key, and 16 bytes per slot. Entries are recycled, so a
// steady Arm/Cancel/fire load allocates almost nothing. The package
// documentation gives measured figures.
//
// Guarantees: a timer never fires before its due time by the Clock's wall
// time (Now() >= due); it fires once, unless re-armed or cancelled first;
// timers due together come out in one batch, in due order (ties in arm
// order). All methods are safe for concurrent use.
type Timers struct {
	clock Clock
	mc    monoClock // nil if clock cannot tell monotonic time
	tick  int64     // ns
	slots int64

	wake    chan struct{}      // Arm's nudge to Run; buffer of one
	syncC   chan chan struct{} // tests only (nil otherwise): see settle in timers_test.go
	running atomic.Bool

	mu         sync.Mutex
	m          map[string]*entry
	near       entryHeap // tick <= cur, exact order
	w          wheel     // cur < tick <= cur+slots
	far        entryHeap // tick > cur+slots; may hold tombstones
	free       []*entry  // unused entries, for reuse
	farDead    int       // tombstones in far
	cur        int64     // wheel cursor: tick of the latest Now seen by Run
	seq        uint64
	sleepUntil int64 // Run's planned wake-up (wall ns), or runBusy/runIdle

	fired, migrated, jumps uint64
	lastJump               time.Duration
	lastWall               int64
	lastMono               time.Duration
	haveLast               bool
}

// NewTimers returns an empty timer set on clock. It panics if opts is
// invalid (see [TimersOptions.Validate]).
func NewTimers(clock Clock, opts TimersOptions) *Timers {
	if err := opts.Validate(); err != nil {
		panic("engine: NewTimers: " + err.Error())
	}
	opts = opts.WithDefaults()
	t := &Timers{
		clock:      clock,
		tick:       int64(opts.Tick),
		slots:      int64(opts.Slots),
		wake:       make(chan struct{}, 1),
		m:          make(map[string]*entry),
		w:          newWheel(opts.Slots),
		sleepUntil: runIdle,
	}
	t.mc, _ = clock.(monoClock)
	t.cur = floorDiv(unixNano(clock.Now()), t.tick)
	return t
}

// Arm adds a timer for key due at due, or moves key's timer to due if one is
// armed (arming again with the same due time changes nothing). due is judged
// as a wall-clock instant; its monotonic reading and location are ignored.
// A due time in the past fires at once; due times before 1678 or after
// 2262 (outside int64 nanoseconds) are clamped to those bounds. Arm is O(1) when due is inside the
// wheel window (see [Timers] for the other cases). It may be called from
// any goroutine, including from inside the fire callback.
func (t *Timers) Arm(key string, due time.Time) {
	ns := unixNano(due)
	t.mu.Lock()
	e := t.m[key]
	switch {
	case e == nil:
		e = t.newEntry(key)
		t.m[key] = e
	case e.due == ns:
		t.mu.Unlock()
		return
	case !t.unlink(e):
		e = t.newEntry(key) // e may already be on the free list (compactFar)
		t.m[key] = e
	}
	e.due = ns
	t.seq++
	e.seq = t.seq
	t.place(e)
	if ns < t.sleepUntil || t.sleepUntil == runIdle {
		t.sleepUntil = ns
		select {
		case t.wake <- struct{}{}:
		default:
		}
	}
	t.mu.Unlock()
}

// Cancel removes key's timer and reports whether one was armed. A timer
// that Run has already taken for a batch is no longer armed, so Cancel
// returns false for it even if fire has not yet been called. A cancelled
// timer never fires. O(1) (see [Timers]).
func (t *Timers) Cancel(key string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.m[key]
	if e == nil {
		return false
	}
	if t.unlink(e) {
		t.freeEntry(e)
	}
	delete(t.m, key)
	return true
}

// Len returns the number of armed timers.
func (t *Timers) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.m)
}

// Due returns the due time key is armed for (UTC), and whether it is armed.
func (t *Timers) Due(key string) (time.Time, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.m[key]
	if e == nil {
		return time.Time{}, false
	}
	return time.Unix(0, e.due).UTC(), true
}

// Stats returns a snapshot of the counters.
func (t *Timers) Stats() TimersStats {
	t.mu.Lock()
	defer t.mu.Unlock()
	return TimersStats{
		Armed:         len(t.m),
		Wheel:         t.w.n,
		Heap:          len(t.near) + len(t.far) - t.farDead,
		Fired:         t.fired,
		Migrated:      t.migrated,
		ClockJumps:    t.jumps,
		LastClockJump: t.lastJump,
	}
}

// Run fires timers until ctx is done, then returns; armed timers stay armed
// and a later Run picks them up. Only one Run may be active at a time (a
// second concurrent call panics).
//
// Each time Run wakes it reads the clock and calls fire, on Run's goroutine,
// with every timer whose due time is at or before Now(), in due order (ties
// in arm order); those timers are no longer armed when fire is called. Run
// does not reuse batch. fire may call Arm, Cancel and the other methods.
// While fire runs, no other batch is delivered, so a slow fire delays later
// timers; it should hand work off rather than do it.
//
// Between batches Run sleeps on one clock timer until the earliest deadline
// (at most [MaxSleep] while timers are armed, with no timer at all while
// none are), and Arm wakes it when a new deadline is earlier. Every wake-up
// re-evaluates against Now(), so a wall-clock step backwards delays firing
// (never early) and a step forwards fires what became due within MaxSleep.
func (t *Timers) Run(ctx context.Context, fire func(batch []Expired)) {
	if !t.running.CompareAndSwap(false, true) {
		panic("engine: Timers.Run called while another Run is active")
	}
	defer t.running.Store(false)
	var timer Timer
	var syncReply chan struct{}
	defer func() {
		if timer != nil {
			timer.Stop()
		}
		t.mu.Lock()
		t.sleepUntil = runIdle
		t.mu.Unlock()
	}()
	for ctx.Err() == nil {
		now := t.clock.Now()
		var mono time.Duration
		if t.mc != nil {
			mono = t.mc.mono()
		}
		batch, wakeAt := t.collect(unixNano(now), mono)
		if len(batch) > 0 {
			fire(batch)
			continue
		}
		var tc <-chan time.Time
		if wakeAt != runIdle {
			d := time.Duration(wakeAt - unixNano(now))
			if timer == nil {
				timer = t.clock.NewTimer(d)
			} else {
				timer.Reset(d)
			}
			tc = timer.C()
		} else if timer != nil {
			timer.Stop()
		}
		if syncReply != nil {
			// A test waits until Run has consumed everything pending.
			select {
			case <-tc:
				continue
			case <-t.wake:
				continue
			default:
				close(syncReply)
				syncReply = nil
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tc:
		case <-t.wake:
		case syncReply = <-t.syncC:
		}
	}
}

// collect advances the structure to nowNs, removes and returns the timers
// due at nowNs, and, if there are none, plans the next wake-up (wall ns, or
// runIdle) and returns it.
func (t *Timers) collect(nowNs int64, mono time.Duration) ([]Expired, int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.mc != nil {
		t.observe(nowNs, mono)
	}
	nt := floorDiv(nowNs, t.tick)
	switch {
	case nt > t.cur:
		t.advance(nt)
	case t.cur-nt > t.slots/4:
		// The wall clock went back a long way: re-centre the wheel on now so
		// that new deadlines land in the wheel again. O(n), rare.
		t.rebase(nt)
	}
	t.migrate()

	var batch []Expired
	for len(t.near) > 0 && t.near[0].due <= nowNs {
		e := t.near.pop()
		delete(t.m, e.key)
		batch = append(batch, Expired{Key: e.key, Due: time.Unix(0, e.due).UTC()})
		t.freeEntry(e)
	}
	if len(batch) > 0 {
		t.fired += uint64(len(batch))
		t.sleepUntil = runBusy
		return batch, runBusy
	}

	wakeAt, armed := int64(0), true
	switch {
	case len(t.near) > 0:
		wakeAt = t.near[0].due
	case t.w.n > 0:
		from := int((t.cur + 1) & t.w.mask)
		s := (from + t.w.next(from)) & int(t.w.mask)
		wakeAt = t.w.min(s)
	default:
		if e := t.farTop(); e != nil {
			wakeAt = e.due
		} else {
			armed = false
		}
	}
	if !armed {
		t.sleepUntil = runIdle
		return nil, runIdle
	}
	if limit := nowNs + int64(MaxSleep); wakeAt > limit {
		wakeAt = limit
	}
	t.sleepUntil = wakeAt
	return nil, wakeAt
}

// observe counts wall-clock jumps: a difference between the wall time and
// the monotonic time that passed since the previous wake-up. t.mu is held.
func (t *Timers) observe(nowNs int64, mono time.Duration) {
	if t.haveLast {
		dm := mono - t.lastMono
		jump := time.Duration(nowNs-t.lastWall) - dm
		limit := ClockJumpThreshold + dm/1000
		if jump > limit || -jump > limit {
			t.jumps++
			t.lastJump = jump
		}
	}
	t.lastWall, t.lastMono, t.haveLast = nowNs, mono, true
}

// place puts e, whose due is set, into the structure its tick belongs to.
func (t *Timers) place(e *entry) {
	tk := floorDiv(e.due, t.tick)
	switch {
	case tk <= t.cur:
		e.where = inNear
		t.near.push(e)
	case tk-t.cur <= t.slots:
		t.w.insert(e, int(tk&t.w.mask))
	default:
		e.where = inFar
		t.far.push(e)
	}
}

// unlink removes e from its structure and reports whether e may be reused;
// an entry of the far heap is left there as a tombstone and may not.
func (t *Timers) unlink(e *entry) bool {
	switch e.where {
	case inNear:
		t.near.remove(e.idx)
		e.where = inNone
	case inWheel:
		t.w.remove(e)
	case inFar:
		e.where = inDead
		t.farDead++
		if t.farDead > 1024 && t.farDead > len(t.far)/2 {
			t.compactFar()
		}
		return false
	}
	return true
}

// freeListMax bounds the free list of entries.
const freeListMax = 4096

// newEntry returns a blank entry for key, from the free list if it can.
// Reusing entries keeps the garbage collector out of Arm/Cancel churn.
func (t *Timers) newEntry(key string) *entry {
	if n := len(t.free); n > 0 {
		e := t.free[n-1]
		t.free[n-1] = nil
		t.free = t.free[:n-1]
		e.key = key
		return e
	}
	return &entry{key: key}
}

// freeEntry returns e, no longer referenced by any structure, to the free
// list.
func (t *Timers) freeEntry(e *entry) {
	if len(t.free) < freeListMax {
		*e = entry{}
		t.free = append(t.free, e)
	}
}

// compactFar drops the tombstones of the far heap in O(n), which keeps
// Cancel amortised O(1) and the heap at most twice its live size.
func (t *Timers) compactFar() {
	live := t.far[:0]
	for _, e := range t.far {
		if e.where == inFar {
			live = append(live, e)
		} else {
			t.freeEntry(e)
		}
	}
	clear(t.far[len(live):])
	t.far = live
	t.far.init()
	t.farDead = 0
}

// farTop returns the earliest live entry of the far heap, popping
// tombstones on the way, or nil.
func (t *Timers) farTop() *entry {
	for len(t.far) > 0 && t.far[0].where == inDead {
		t.freeEntry(t.far.pop())
		t.farDead--
	}
	return t.far.top()
}

// advance moves the cursor forward to tick nt, moving the entries of the
// slots it passes into the near heap.
func (t *Timers) advance(nt int64) {
	if nt-t.cur >= t.slots {
		for t.w.n > 0 {
			t.drain(t.w.next(0))
		}
	} else {
		from := int((t.cur + 1) & t.w.mask)
		span := int(nt - t.cur) // slots from..from+span-1 are passed
		for {
			d := t.w.next(from)
			if d < 0 || d >= span {
				break
			}
			t.drain((from + d) & int(t.w.mask))
		}
	}
	t.cur = nt
}

// drain moves every entry of wheel slot s into the near heap.
func (t *Timers) drain(s int) {
	for e := t.w.take(s); e != nil; {
		next := e.next
		e.prev, e.next = nil, nil
		e.where = inNear
		t.near.push(e)
		e = next
	}
}

// migrate moves far entries that are now inside the window into the wheel
// (or the near heap).
func (t *Timers) migrate() {
	limit := t.cur + t.slots
	for {
		e := t.farTop()
		if e == nil || floorDiv(e.due, t.tick) > limit {
			return
		}
		t.far.pop()
		t.place(e)
		t.migrated++
	}
}

// rebase re-centres the wheel on tick nt after a backward wall-clock step:
// every entry of the near heap and the wheel is placed again.
func (t *Timers) rebase(nt int64) {
	var all []*entry
	for _, e := range t.near {
		all = append(all, e)
	}
	clear(t.near)
	t.near = t.near[:0]
	for t.w.n > 0 {
		for e := t.w.take((t.w.next(0))); e != nil; {
			next := e.next
			e.prev, e.next = nil, nil
			all = append(all, e)
			e = next
		}
	}
	t.cur = nt
	for _, e := range all {
		t.place(e)
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
