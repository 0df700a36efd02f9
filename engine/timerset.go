package engine

import (
	"context"
	"math"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"
)

// TimerHandle names one arming of one timer of a [TimerSet]: the timer's
// slab index and its arm number, which serves as the generation. A handle
// goes stale when its timer fires or is cancelled; the entry is then
// reused by later timers, which get new arm numbers, so a stale handle
// never matches them (Cancel returns false) — unless the set's 32-bit arm
// counter has gone round exactly to the stale handle's number by the time
// the same entry is armed again, which needs 2^32 arms while the handle is
// kept. The zero TimerHandle is never valid.
type TimerHandle struct {
	ix  uint32 // slab index + 1; 0 in the zero handle
	seq uint32 // arm number of that arming
}

// IsZero reports whether h is the zero TimerHandle.
func (h TimerHandle) IsZero() bool { return h.ix == 0 }

// Fired is one timer handed to the fire callback of [TimerSet.Run].
type Fired[P any] struct {
	Handle  TimerHandle // stale by the time fire is called
	Payload P           // the payload the timer was armed with
	Due     time.Time   // its due time, UTC wall clock, no monotonic reading
}

// Sentinels of TimerSet.sleepUntil.
const (
	runBusy = math.MinInt64 // Run is awake and will look again: Arm need not wake it
	runIdle = math.MaxInt64 // Run sleeps with no deadline: any Arm wakes it
)

// farCompactMin is the number of stale far-heap items below which the far
// heap is never compacted.
const farCompactMin = 1024

// TimerSet is a set of one-shot timers named by [TimerHandle], each
// carrying a payload of type P, fired by [TimerSet.Run]. It is the timer
// structure under [Timers], which adds lookup by string key; use it
// directly where the caller can keep handles (as with *time.Timer or a
// heap item), which saves the key index's cache misses.
//
// It is a hybrid of a timing wheel for deadlines within Tick × Slots of
// now and a min-heap for deadlines beyond, whose entries migrate into the
// wheel as they come near; entries of the current tick (and overdue ones)
// sit in a small exact-order heap. The package documentation describes
// the layout.
//
// Costs, with n timers armed: Arm is O(1) when the deadline is inside the
// wheel window, O(log n) beyond it (O(1) on average for random deadlines),
// and O(log k) for a deadline in the current tick or the past (k: timers
// of the current tick, a handful); Cancel is O(1) (amortised for far
// timers, whose heap items are dropped lazily, and O(log k) in the
// current tick); Len is O(1). Firing costs O(log k) per timer, migrating
// a far timer O(log n) once. Arm and Cancel take one lock each and
// allocate nothing in a steady load (now and then a slot vector grows).
//
// Guarantees: a timer never fires before its due time by the Clock's wall
// time (Now() >= due); it fires once, unless cancelled first; timers due
// together come out in one batch, in due order (ties in arm order). All
// methods are safe for concurrent use. The zero TimerSet is not usable;
// call [NewTimerSet].
type TimerSet[P any] struct {
	clock    Clock
	mc       monoClock                 // nil if clock cannot tell monotonic time
	newTimer func(time.Duration) Timer // Run's sleep: clock.NewTimer, or newWaitTimer for RealClock
	tick     int64                     // ns
	tickInv  uint64                    // ⌊(2^64-1)/tick⌋, see tickOf
	slots    int64
	maxSleep int64 // ns; 0: no bound

	wake    chan struct{}      // Arm's nudge to Run; buffer of one
	syncC   chan chan struct{} // tests only (nil otherwise): see settle in timers_test.go
	running atomic.Bool
	runName string // for the panic of a second Run

	mu         sync.Mutex
	slab       slab[P]
	near       nearHeap[P] // tick <= cur, exact order
	w          wheel[P]    // cur < tick <= cur+slots
	far        farHeap     // tick > cur+slots; may hold stale items
	farLive    int         // live items in far (entries in state stFar)
	compacts   int         // compactions of far (for tests)
	cur        int64       // wheel cursor: tick of the latest Now seen by Run
	seq        uint32      // arm number of the latest arming
	sleepUntil int64       // Run's planned wake-up (wall ns), or runBusy/runIdle

	fired, migrated, jumps, wakeups uint64
	lastJump                        time.Duration
	lastWall                        int64
	lastMono                        time.Duration
	haveLast                        bool
}

// NewTimerSet returns an empty timer set on clock, configured like
// [NewTimers]. It panics if opts is invalid (see [TimersOptions.Validate]).
func NewTimerSet[P any](clock Clock, opts TimersOptions) *TimerSet[P] {
	s := new(TimerSet[P])
	s.init("TimerSet", clock, opts)
	return s
}

// init sets up an empty set in place (s must not move afterwards: the near
// heap points into it).
func (s *TimerSet[P]) init(name string, clock Clock, opts TimersOptions) {
	if err := opts.Validate(); err != nil {
		panic("engine: New" + name + ": " + err.Error())
	}
	opts = opts.WithDefaults()
	s.clock = clock
	s.newTimer = clock.NewTimer
	if _, ok := clock.(realClock); ok {
		s.newTimer = newWaitTimer
	}
	s.tick = int64(opts.Tick)
	s.tickInv = ^uint64(0) / uint64(s.tick)
	s.slots = int64(opts.Slots)
	s.maxSleep = int64(opts.MaxSleep)
	s.wake = make(chan struct{}, 1)
	s.runName = name
	s.slab = newSlab[P]()
	s.w = newWheel[P](opts.Slots)
	s.near.s = &s.slab
	s.sleepUntil = runIdle
	s.mc, _ = clock.(monoClock)
	s.cur = s.tickOf(unixNano(clock.Now()))
}

// Arm adds a timer due at due carrying payload, and returns its handle.
// due is judged as a wall-clock instant; its monotonic reading and
// location are ignored. A due time in the past fires at once; due times
// before 1678 or after 2262 (outside int64 nanoseconds) are clamped to
// those bounds. It may be called from any goroutine, including from
// inside the fire callback.
func (s *TimerSet[P]) Arm(due time.Time, payload P) TimerHandle {
	ns := unixNano(due)
	s.mu.Lock()
	i := s.slab.alloc()
	e := s.slab.at(i)
	e.payload = payload
	s.schedule(i, ns)
	h := TimerHandle{ix: uint32(i) + 1, seq: e.seq}
	s.mu.Unlock()
	return h
}

// Cancel removes h's timer and reports whether it was armed. A timer that
// Run has already taken for a batch is no longer armed, so Cancel returns
// false for it even if fire has not yet been called; so it does for a
// stale or zero handle. A cancelled timer never fires.
func (s *TimerSet[P]) Cancel(h TimerHandle) bool {
	s.mu.Lock()
	i, ok := s.lookup(h)
	if ok {
		s.cancel(i)
	}
	s.mu.Unlock()
	return ok
}

// Due returns the due time h's timer is armed for (UTC), and whether it is
// armed.
func (s *TimerSet[P]) Due(h TimerHandle) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i, ok := s.lookup(h)
	if !ok {
		return time.Time{}, false
	}
	return time.Unix(0, s.slab.at(i).due).UTC(), true
}

// Len returns the number of armed timers.
func (s *TimerSet[P]) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.slab.used
}

// Stats returns a snapshot of the counters.
func (s *TimerSet[P]) Stats() TimersStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return TimersStats{
		Armed:         s.slab.used,
		Wheel:         s.w.n,
		Heap:          s.near.len() + s.farLive,
		Fired:         s.fired,
		Migrated:      s.migrated,
		ClockJumps:    s.jumps,
		LastClockJump: s.lastJump,
		Wakeups:       s.wakeups,
	}
}

// Run fires timers until ctx is done, then returns; armed timers stay armed
// and a later Run picks them up. Only one Run may be active at a time (a
// second concurrent call panics).
//
// Each time Run wakes it reads the clock and calls fire, on Run's goroutine,
// with every timer whose due time is at or before Now(), in due order (ties
// in arm order); those timers are no longer armed when fire is called.
// batch is valid only until fire returns: Run reuses it (so the fire path
// allocates nothing). fire may call Arm, Cancel and the other methods.
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
func (s *TimerSet[P]) Run(ctx context.Context, fire func(batch []Fired[P])) {
	var batch []Fired[P]
	s.run(ctx, func(i int32, e *entry[P]) {
		batch = append(batch, Fired[P]{
			Handle:  TimerHandle{ix: uint32(i) + 1, seq: e.seq},
			Payload: e.payload,
			Due:     time.Unix(0, e.due).UTC(),
		})
	}, func() {
		fire(batch)
		clear(batch) // let the payloads be collected
		batch = batch[:0]
	})
}

// lookup returns the entry of h if h's timer is armed; s.mu is held.
func (s *TimerSet[P]) lookup(h TimerHandle) (int32, bool) {
	i := int64(h.ix) - 1
	if i < 0 || i >= int64(len(s.slab.chunks))*slabChunk {
		return 0, false
	}
	e := s.slab.at(int32(i))
	if e.state() == stFree || e.seq != h.seq {
		return 0, false
	}
	return int32(i), true
}

// schedule gives entry i, in no structure, due time ns and a new arm
// number, places it, and wakes Run if it now has the earliest deadline.
// s.mu is held.
func (s *TimerSet[P]) schedule(i int32, ns int64) {
	e := s.slab.at(i)
	e.due = ns
	s.seq++
	e.seq = s.seq
	s.place(i)
	if ns < s.sleepUntil || s.sleepUntil == runIdle {
		s.sleepUntil = ns
		s.nudge()
	}
}

// move gives armed entry i a new due time ns (and arm number), unless it
// already has that due time. s.mu is held.
func (s *TimerSet[P]) move(i int32, ns int64) {
	if s.slab.at(i).due == ns {
		return
	}
	s.unlink(i)
	s.schedule(i, ns)
}

// cancel removes armed entry i and frees it. s.mu is held.
func (s *TimerSet[P]) cancel(i int32) {
	if s.slab.at(i).due == s.sleepUntil {
		// Run sleeps for this timer: let it plan again, so that with
		// nothing left armed it holds no clock timer at all.
		s.nudge()
	}
	s.unlink(i)
	s.release(i)
}

// release frees entry i, which is in no structure. s.mu is held.
func (s *TimerSet[P]) release(i int32) {
	s.slab.release(i)
	if s.slab.used == 0 {
		// Nothing is armed, so every far item is stale; the slab may have
		// shrunk under them.
		if cap(s.far) > farCompactMin {
			s.far = nil
		} else {
			s.far = s.far[:0]
		}
		s.farLive = 0
	}
}

// nudge wakes Run if it sleeps; s.mu is held.
func (s *TimerSet[P]) nudge() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// run is Run with the batch handling left to the caller: collect calls
// emit, under s.mu, for each timer it takes (before freeing its entry),
// and run then calls deliver, without the lock, if there was any.
func (s *TimerSet[P]) run(ctx context.Context, emit func(i int32, e *entry[P]), deliver func()) {
	if !s.running.CompareAndSwap(false, true) {
		panic("engine: " + s.runName + ".Run called while another Run is active")
	}
	defer s.running.Store(false)
	var timer Timer
	var syncReply chan struct{}
	defer func() {
		if timer != nil {
			timer.Stop()
			if c, ok := timer.(interface{ close() }); ok {
				c.close()
			}
		}
		s.mu.Lock()
		s.sleepUntil = runIdle
		s.mu.Unlock()
	}()
	for ctx.Err() == nil {
		now := s.clock.Now()
		var mono time.Duration
		if s.mc != nil {
			mono = s.mc.mono()
		}
		nowNs := unixNano(now)
		n, wakeAt := s.collect(nowNs, mono, emit)
		if n > 0 {
			deliver()
			continue
		}
		var tc <-chan time.Time
		if wakeAt != runIdle {
			d := time.Duration(wakeAt - nowNs)
			if timer == nil {
				timer = s.newTimer(d)
			} else {
				timer.Reset(d)
			}
			if at, ok := timer.(absTimer); ok {
				at.resetAt(time.Unix(0, wakeAt)) // d is from nowNs; a fake clock may have moved since
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
			case <-s.wake:
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
		case <-s.wake:
		case syncReply = <-s.syncC:
		}
	}
}

// collect advances the structure to nowNs and takes the timers due at
// nowNs, calling emit for each and freeing it; it returns how many. If
// there are none, it plans the next wake-up (wall ns, or runIdle) and
// returns it.
func (s *TimerSet[P]) collect(nowNs int64, mono time.Duration, emit func(int32, *entry[P])) (int, int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.wakeups++
	if s.mc != nil {
		s.observe(nowNs, mono)
	}
	nt := s.tickOf(nowNs)
	switch {
	case nt > s.cur:
		s.advance(nt)
	case s.cur-nt > s.slots/4:
		// The wall clock went back a long way: re-centre the wheel on now so
		// that new deadlines land in the wheel again. O(n), rare.
		s.rebase(nt)
	}
	s.migrate()

	n := 0
	for s.near.len() > 0 {
		i := s.near.top()
		e := s.slab.at(i)
		if e.due > nowNs {
			break
		}
		s.near.pop()
		emit(i, e)
		s.release(i)
		n++
	}
	if n > 0 {
		s.fired += uint64(n)
		s.sleepUntil = runBusy
		return n, runBusy
	}

	wakeAt, armed := int64(0), true
	switch {
	case s.near.len() > 0:
		wakeAt = s.slab.at(s.near.top()).due
	case s.w.n > 0:
		from := int((s.cur + 1) & s.w.mask)
		sl := (from + s.w.next(from)) & int(s.w.mask)
		wakeAt = s.w.min(&s.slab, sl)
	default:
		if it, ok := s.farTop(); ok {
			wakeAt = it.due
		} else {
			armed = false
		}
	}
	if !armed {
		s.sleepUntil = runIdle
		return 0, runIdle
	}
	if s.maxSleep > 0 && wakeAt-nowNs > s.maxSleep {
		wakeAt = nowNs + s.maxSleep
	}
	s.sleepUntil = wakeAt
	return 0, wakeAt
}

// observe counts wall-clock jumps: a difference between the wall time and
// the monotonic time that passed since the previous wake-up. s.mu is held.
func (s *TimerSet[P]) observe(nowNs int64, mono time.Duration) {
	if s.haveLast {
		dm := mono - s.lastMono
		jump := time.Duration(nowNs-s.lastWall) - dm
		limit := ClockJumpThreshold + dm/1000
		if jump > limit || -jump > limit {
			s.jumps++
			s.lastJump = jump
		}
	}
	s.lastWall, s.lastMono, s.haveLast = nowNs, mono, true
}

// slotOf returns the wheel slot of due time ns.
func (s *TimerSet[P]) slotOf(ns int64) int { return int(s.tickOf(ns) & s.w.mask) }

// tickOf returns the tick of time ns, ⌊ns/tick⌋. It multiplies by the
// tick's reciprocal instead of dividing: Cancel computes a tick right
// after the cache miss that brings in the entry, so a 64-bit division
// (tens of cycles) would add to its latency. For ns >= 0 the product's
// high word is ⌊ns/tick⌋ or one less (the error is below 1/2 for ns <
// 2^63), which one comparison corrects.
func (s *TimerSet[P]) tickOf(ns int64) int64 {
	if ns < 0 {
		return floorDiv(ns, s.tick)
	}
	hi, _ := bits.Mul64(uint64(ns), s.tickInv)
	q := int64(hi)
	if ns-q*s.tick >= s.tick {
		q++
	}
	return q
}

// place puts entry i, whose due and seq are set, into the structure its
// tick belongs to.
func (s *TimerSet[P]) place(i int32) {
	e := s.slab.at(i)
	tk := s.tickOf(e.due)
	switch {
	case tk <= s.cur:
		s.near.push(i)
	case tk-s.cur <= s.slots:
		s.w.insert(&s.slab, i, int(tk&s.w.mask))
	default:
		e.setPos(stFar, 0)
		s.slab.tags[i] = farTag(e.seq)
		s.far.push(farItem{due: e.due, seq: e.seq, idx: i})
		s.farLive++
	}
}

// unlink takes entry i out of its structure; it is then in none (pos 0).
// A far entry's heap item stays behind, stale (see [TimerSet.live]); stale
// items are compacted away when they outnumber live ones (and number at
// least farCompactMin), which keeps this amortised O(1) and the far heap
// at most twice its live size.
func (s *TimerSet[P]) unlink(i int32) {
	e := s.slab.at(i)
	switch e.state() {
	case stNear:
		s.near.remove(i)
	case stWheel:
		s.w.remove(&s.slab, i, s.slotOf(e.due))
		e.pos = 0
	case stFar:
		e.pos = 0
		s.slab.tags[i] = tagNone
		s.farLive--
		if stale := len(s.far) - s.farLive; stale > farCompactMin && 2*stale > len(s.far) {
			s.compactFar()
		}
	}
}

// live reports whether far item it still stands for its entry: the entry
// is in the far heap with the item's arm number and due time. A cancelled
// or re-armed timer's item fails this (its entry is free, elsewhere, or
// armed again with a newer arm number); the due time is compared too, so
// that even an arm number that has wrapped round to the same value cannot
// make a stale item stand for a different deadline.
func (s *TimerSet[P]) live(it farItem) bool {
	e := s.slab.at(it.idx)
	return e.state() == stFar && e.seq == it.seq && e.due == it.due
}

// compactFar drops the stale items of the far heap in O(n). It tells them
// by the entries' far tags (see [farTag]), not the entries, so it reads no
// entry (at a million timers each would be a cache miss); the few stale
// items whose arm number aliases a live one's tag are kept, and dropped by
// farTop.
//
// The tags can alias in bulk: an entry cancelled and re-armed every 128
// arms (a round robin over 128·k far timers) gets the same tag each time,
// so every stale item of it matches. When the tag pass keeps more than
// half of the stale items, a second pass over what it kept reads the
// entries and drops them all, so each compaction at least halves the stale
// items and its cost stays amortised O(1) per cancel whatever the pattern
// (without it, compaction ran at every cancel and dropped nothing). With
// arm numbers that do not repeat a period of 128 the tags keep about 1
// stale item in 128 and the second pass never runs.
func (s *TimerSet[P]) compactFar() {
	tags := s.slab.tags
	stale := len(s.far) - s.farLive
	live := s.far[:0]
	for _, it := range s.far {
		if tags[it.idx] == farTag(it.seq) {
			live = append(live, it)
		}
	}
	if kept := len(live) - s.farLive; 2*kept > stale {
		exact := live[:0]
		for _, it := range live {
			if s.live(it) {
				exact = append(exact, it)
			}
		}
		live = exact
	}
	s.far = live
	s.far.init()
	s.compacts++
}

// farTop returns the earliest live item of the far heap, popping stale
// items on the way.
func (s *TimerSet[P]) farTop() (farItem, bool) {
	for len(s.far) > 0 {
		it := s.far[0]
		if s.live(it) {
			return it, true
		}
		s.far.pop()
	}
	return farItem{}, false
}

// advance moves the cursor forward to tick nt, moving the entries of the
// slots it passes into the near heap.
func (s *TimerSet[P]) advance(nt int64) {
	if nt-s.cur >= s.slots {
		for s.w.n > 0 {
			s.drain(s.w.next(0))
		}
	} else {
		from := int((s.cur + 1) & s.w.mask)
		span := int(nt - s.cur) // slots from..from+span-1 are passed
		for {
			d := s.w.next(from)
			if d < 0 || d >= span {
				break
			}
			s.drain((from + d) & int(s.w.mask))
		}
	}
	s.cur = nt
}

// drain moves every entry of wheel slot sl into the near heap.
func (s *TimerSet[P]) drain(sl int) {
	for _, i := range s.w.take(sl) {
		if i >= 0 {
			s.near.push(i)
		}
	}
}

// migrate moves far entries that are now inside the window into the wheel
// (or the near heap).
func (s *TimerSet[P]) migrate() {
	limit := s.cur + s.slots
	for {
		it, ok := s.farTop()
		if !ok || s.tickOf(it.due) > limit {
			return
		}
		s.far.pop()
		s.farLive--
		s.slab.tags[it.idx] = tagNone
		s.place(it.idx)
		s.migrated++
	}
}

// rebase re-centres the wheel on tick nt after a backward wall-clock step:
// every entry of the near heap and the wheel is placed again.
func (s *TimerSet[P]) rebase(nt int64) {
	all := make([]int32, 0, s.near.len()+s.w.n)
	all = append(all, s.near.h...)
	s.near.h = s.near.h[:0]
	for s.w.n > 0 {
		for _, i := range s.w.take(s.w.next(0)) {
			if i >= 0 {
				all = append(all, i)
			}
		}
	}
	s.cur = nt
	for _, i := range all {
		s.place(i)
	}
}
