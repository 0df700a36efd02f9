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
	// its refill, in 512 KiB of slot tables.
	TimersSlotsDefault = 16384
	// TimersTickMin is the smallest accepted Tick.
	TimersTickMin = time.Microsecond
	// TimersSlotsMin is the smallest slot count; smaller values are raised
	// to it.
	TimersSlotsMin = 64
	// TimersSlotsMax is the largest accepted slot count (2^22, 128 MiB of
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
	// near. Each slot costs 32 bytes. Defaults to TimersSlotsDefault.
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

// Sentinels of Timers.sleepUntil.
const (
	runBusy = math.MinInt64 // Run is awake and will look again: Arm need not wake it
	runIdle = math.MaxInt64 // Run sleeps with no deadline: any Arm wakes it
)

// farCompactMin is the number of far-heap tombstones below which the far
// heap is never compacted.
const farCompactMin = 1024

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
// timer, migrating a far timer O(log n) once.
//
// Memory: timers live by value in a slab of 32-byte entries named by int32
// index (no pointer per timer but the key), found through an
// open-addressing index of 8-byte slots at most 3/4 full; a wheel timer
// also has a 4-byte index in its slot's vector, a far timer a 16-byte heap
// item. That is about 57 bytes per timer at a million, plus the key's
// bytes (which Timers shares with the caller), plus 32 bytes per wheel
// slot. Entries are recycled, so a steady Arm/Cancel/fire load allocates
// almost nothing (now and then a slot vector or an index table grows).
// The package documentation gives measured figures.
//
// Guarantees: a timer never fires before its due time by the Clock's wall
// time (Now() >= due); it fires once, unless re-armed or cancelled first;
// timers due together come out in one batch, in due order (ties in arm
// order). All methods are safe for concurrent use.
type Timers struct {
	clock    Clock
	mc       monoClock // nil if clock cannot tell monotonic time
	tick     int64     // ns
	slots    int64
	maxSleep int64 // ns; 0: no bound

	wake    chan struct{}      // Arm's nudge to Run; buffer of one
	syncC   chan chan struct{} // tests only (nil otherwise): see settle in timers_test.go
	running atomic.Bool

	mu         sync.Mutex
	keys       keyIndex
	slab       slab
	near       nearHeap // tick <= cur, exact order
	w          wheel    // cur < tick <= cur+slots
	far        farHeap  // tick > cur+slots; may hold tombstones
	farDead    int      // tombstones in far
	cur        int64    // wheel cursor: tick of the latest Now seen by Run
	seq        uint32
	sleepUntil int64 // Run's planned wake-up (wall ns), or runBusy/runIdle

	fired, migrated, jumps, wakeups uint64
	lastJump                        time.Duration
	lastWall                        int64
	lastMono                        time.Duration
	haveLast                        bool
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
		maxSleep:   int64(opts.MaxSleep),
		wake:       make(chan struct{}, 1),
		keys:       newKeyIndex(),
		slab:       newSlab(),
		w:          newWheel(opts.Slots),
		sleepUntil: runIdle,
	}
	t.near.s = &t.slab
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
	h := t.keys.hash(key)
	t.mu.Lock()
	tab := t.keys.tab(h)
	tab.reserve()
	pos, i, found := tab.find(h, key, &t.slab)
	if found {
		e := t.slab.at(i)
		if e.due == ns {
			t.mu.Unlock()
			return
		}
		if e.state() == stFar {
			// Far entries are dropped lazily: leave a tombstone and take
			// a new entry.
			t.bury(i)
			i = t.slab.alloc()
			t.slab.at(i).key = key
			tab.set(pos, i)
		} else {
			t.unlink(i)
		}
	} else {
		i = t.slab.alloc()
		t.slab.at(i).key = key
		tab.put(pos, h, i)
		t.keys.n++
	}
	e := t.slab.at(i)
	e.due = ns
	t.seq++
	e.seq = t.seq
	t.place(i)
	if ns < t.sleepUntil || t.sleepUntil == runIdle {
		t.sleepUntil = ns
		t.nudge()
	}
	t.mu.Unlock()
}

// Cancel removes key's timer and reports whether one was armed. A timer
// that Run has already taken for a batch is no longer armed, so Cancel
// returns false for it even if fire has not yet been called. A cancelled
// timer never fires. O(1) (see [Timers]).
func (t *Timers) Cancel(key string) bool {
	h := t.keys.hash(key)
	t.mu.Lock()
	defer t.mu.Unlock()
	tab := t.keys.tab(h)
	pos, i, found := tab.find(h, key, &t.slab)
	if !found {
		return false
	}
	e := t.slab.at(i)
	if e.due == t.sleepUntil {
		// Run sleeps for this timer: let it plan again, so that with
		// nothing left armed it holds no clock timer at all.
		t.nudge()
	}
	if e.state() == stFar {
		t.bury(i)
	} else {
		t.unlink(i)
		t.slab.release(i)
	}
	tab.del(pos)
	t.keys.n--
	return true
}

// nudge wakes Run if it sleeps; t.mu is held.
func (t *Timers) nudge() {
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

// Len returns the number of armed timers.
func (t *Timers) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.keys.n
}

// Due returns the due time key is armed for (UTC), and whether it is armed.
func (t *Timers) Due(key string) (time.Time, bool) {
	h := t.keys.hash(key)
	t.mu.Lock()
	defer t.mu.Unlock()
	_, i, found := t.keys.tab(h).find(h, key, &t.slab)
	if !found {
		return time.Time{}, false
	}
	return time.Unix(0, t.slab.at(i).due).UTC(), true
}

// Stats returns a snapshot of the counters.
func (t *Timers) Stats() TimersStats {
	t.mu.Lock()
	defer t.mu.Unlock()
	return TimersStats{
		Armed:         t.keys.n,
		Wheel:         t.w.n,
		Heap:          t.near.len() + len(t.far) - t.farDead,
		Fired:         t.fired,
		Migrated:      t.migrated,
		ClockJumps:    t.jumps,
		LastClockJump: t.lastJump,
		Wakeups:       t.wakeups,
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
// (no timer at all while nothing is armed), and Arm wakes it when a new
// deadline is earlier. It does not wake periodically unless
// TimersOptions.MaxSleep asks it to. Every wake-up re-evaluates against
// Now(), so a wall-clock step backwards delays firing (never early) and a
// step forwards fires what became due at the next wake-up (see the
// package documentation, "Idle and clock jumps").
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
	t.wakeups++
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
	for t.near.len() > 0 {
		i := t.near.top()
		e := t.slab.at(i)
		if e.due > nowNs {
			break
		}
		t.near.pop()
		h := t.keys.hash(e.key)
		tab := t.keys.tab(h)
		tab.del(tab.findIdx(h, i))
		t.keys.n--
		batch = append(batch, Expired{Key: e.key, Due: time.Unix(0, e.due).UTC()})
		t.slab.release(i)
	}
	if len(batch) > 0 {
		t.fired += uint64(len(batch))
		t.sleepUntil = runBusy
		return batch, runBusy
	}

	wakeAt, armed := int64(0), true
	switch {
	case t.near.len() > 0:
		wakeAt = t.slab.at(t.near.top()).due
	case t.w.n > 0:
		from := int((t.cur + 1) & t.w.mask)
		s := (from + t.w.next(from)) & int(t.w.mask)
		wakeAt = t.w.min(&t.slab, s)
	default:
		if it, ok := t.farTop(); ok {
			wakeAt = it.due
		} else {
			armed = false
		}
	}
	if !armed {
		t.sleepUntil = runIdle
		return nil, runIdle
	}
	if t.maxSleep > 0 && wakeAt-nowNs > t.maxSleep {
		wakeAt = nowNs + t.maxSleep
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

// slotOf returns the wheel slot of due time ns.
func (t *Timers) slotOf(ns int64) int { return int(floorDiv(ns, t.tick) & t.w.mask) }

// place puts entry i, whose due and seq are set, into the structure its
// tick belongs to.
func (t *Timers) place(i int32) {
	e := t.slab.at(i)
	tk := floorDiv(e.due, t.tick)
	switch {
	case tk <= t.cur:
		t.near.push(i)
	case tk-t.cur <= t.slots:
		t.w.insert(&t.slab, i, int(tk&t.w.mask))
	default:
		e.setPos(stFar, 0)
		t.far.push(farItem{due: e.due, seq: e.seq, idx: i})
	}
}

// unlink removes entry i from the near heap or the wheel; it is then in no
// structure (far entries are buried instead, see bury).
func (t *Timers) unlink(i int32) {
	e := t.slab.at(i)
	switch e.state() {
	case stNear:
		t.near.remove(i)
	case stWheel:
		t.w.remove(&t.slab, i, t.slotOf(e.due))
	}
}

// bury turns far entry i into a tombstone, which stays in the far heap until
// it is popped or compacted away. Tombstones are compacted when there are
// more of them than live far timers (and at least farCompactMin), which
// keeps Cancel amortised O(1) and the far heap at most twice its live size.
func (t *Timers) bury(i int32) {
	e := t.slab.at(i)
	e.setPos(stDead, 0)
	e.key = "" // let the key be collected
	t.farDead++
	if t.farDead > farCompactMin && t.farDead > len(t.far)-t.farDead {
		t.compactFar()
	}
}

// compactFar drops the tombstones of the far heap in O(n).
func (t *Timers) compactFar() {
	live := t.far[:0]
	for _, it := range t.far {
		if t.slab.at(it.idx).state() == stFar {
			live = append(live, it)
		} else {
			t.slab.release(it.idx)
		}
	}
	t.far = live
	t.far.init()
	t.farDead = 0
}

// farTop returns the earliest live item of the far heap, popping
// tombstones on the way.
func (t *Timers) farTop() (farItem, bool) {
	for len(t.far) > 0 {
		it := t.far[0]
		if t.slab.at(it.idx).state() == stFar {
			return it, true
		}
		t.far.pop()
		t.slab.release(it.idx)
		t.farDead--
	}
	return farItem{}, false
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
	for _, i := range t.w.take(s) {
		t.near.push(i)
	}
}

// migrate moves far entries that are now inside the window into the wheel
// (or the near heap).
func (t *Timers) migrate() {
	limit := t.cur + t.slots
	for {
		it, ok := t.farTop()
		if !ok || floorDiv(it.due, t.tick) > limit {
			return
		}
		t.far.pop()
		t.place(it.idx)
		t.migrated++
	}
}

// rebase re-centres the wheel on tick nt after a backward wall-clock step:
// every entry of the near heap and the wheel is placed again.
func (t *Timers) rebase(nt int64) {
	all := make([]int32, 0, t.near.len()+t.w.n)
	all = append(all, t.near.h...)
	t.near.h = t.near.h[:0]
	for t.w.n > 0 {
		all = append(all, t.w.take(t.w.next(0))...)
	}
	t.cur = nt
	for _, i := range all {
		t.place(i)
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
