package engine

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// start is the fake clock's start time in all tests: a wall-clock UTC
// instant that is not aligned to any tick.
var start = time.Date(2026, 11, 30, 12, 0, 0, 123_456_789, time.UTC)

// firing is one call of fire as seen by a test.
type firing struct {
	at    time.Time // clock.Now() when fire was called
	batch []Expired
}

// harness runs a Timers on a FakeClock and records every batch.
type harness struct {
	t      testing.TB
	clock  *FakeClock
	tm     *Timers
	mu     sync.Mutex
	fires  []firing
	onFire func(h *harness, batch []Expired) // optional, called from Run's goroutine
}

func newHarness(t testing.TB, opts TimersOptions) *harness {
	t.Helper()
	h := &harness{t: t, clock: NewFakeClock(start)}
	h.tm = NewTimers(h.clock, opts)
	h.tm.set.syncC = make(chan chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.tm.Run(ctx, func(batch []Expired) {
			h.mu.Lock()
			h.fires = append(h.fires, firing{at: h.clock.Now(), batch: batch})
			h.mu.Unlock()
			if h.onFire != nil {
				h.onFire(h, batch)
			}
		})
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return h
}

// settle waits until Run has consumed every wake-up caused so far (Arm
// nudges, fired clock timers) and is asleep with nothing pending.
func (h *harness) settle() {
	h.t.Helper()
	reply := make(chan struct{})
	select {
	case h.tm.set.syncC <- reply:
	case <-time.After(10 * time.Second):
		h.t.Fatal("settle: Run does not take the sync request")
	}
	select {
	case <-reply:
	case <-time.After(10 * time.Second):
		h.t.Fatal("settle: Run does not settle")
	}
}

// advance moves the clock and waits for Run to settle.
func (h *harness) advance(d time.Duration) {
	h.t.Helper()
	h.clock.Advance(d)
	h.settle()
}

// take returns and forgets the batches recorded so far.
func (h *harness) take() []firing {
	h.mu.Lock()
	defer h.mu.Unlock()
	f := h.fires
	h.fires = nil
	return f
}

// keys flattens batches into keys.
func keys(fs []firing) []string {
	var out []string
	for _, f := range fs {
		for _, e := range f.batch {
			out = append(out, e.Key)
		}
	}
	return out
}

func (h *harness) expectKeys(want ...string) {
	h.t.Helper()
	got := keys(h.take())
	if len(got) == 0 && len(want) == 0 {
		return
	}
	if !slices.Equal(got, want) {
		h.t.Fatalf("fired %q, want %q (now %v)", got, want, h.clock.Now().Sub(start))
	}
}

func at(d time.Duration) time.Time { return start.Add(d) }

func TestTimers_FiresInDueOrder(t *testing.T) {
	h := newHarness(t, TimersOptions{})
	h.tm.Arm("c", at(300*time.Millisecond))
	h.tm.Arm("a", at(100*time.Millisecond))
	h.tm.Arm("d", at(2*time.Second))
	h.tm.Arm("b", at(200*time.Millisecond))
	h.settle()
	if got := h.tm.Len(); got != 4 {
		t.Fatalf("Len = %d, want 4", got)
	}
	h.advance(99 * time.Millisecond)
	h.expectKeys()
	h.advance(time.Millisecond)
	h.expectKeys("a")
	h.advance(150 * time.Millisecond)
	h.expectKeys("b")
	h.advance(time.Hour) // c and d are due: one batch, in due order
	fs := h.take()
	if len(fs) != 1 || !slices.Equal(keys(fs), []string{"c", "d"}) {
		t.Fatalf("got %+v, want one batch [c d]", fs)
	}
	if !fs[0].batch[0].Due.Equal(at(300*time.Millisecond)) || fs[0].batch[0].Due.Location() != time.UTC {
		t.Fatalf("Due = %v, want %v in UTC", fs[0].batch[0].Due, at(300*time.Millisecond))
	}
	if got := h.tm.Len(); got != 0 {
		t.Fatalf("Len = %d, want 0", got)
	}
}

func TestTimers_SameInstantIsOneBatchInArmOrder(t *testing.T) {
	h := newHarness(t, TimersOptions{})
	due := at(5 * time.Second)
	for _, k := range []string{"x", "b", "z", "a"} {
		h.tm.Arm(k, due)
	}
	h.tm.Arm("later", due.Add(time.Nanosecond))
	h.tm.Arm("earlier", due.Add(-time.Nanosecond))
	h.advance(5*time.Second - time.Nanosecond)
	h.expectKeys("earlier")
	h.advance(time.Nanosecond)
	fs := h.take()
	if len(fs) != 1 || !slices.Equal(keys(fs), []string{"x", "b", "z", "a"}) {
		t.Fatalf("got %+v, want one batch [x b z a]", fs)
	}
	h.advance(time.Nanosecond)
	h.expectKeys("later")
}

func TestTimers_ReplaceAndRearm(t *testing.T) {
	tests := []struct {
		name       string
		first, now time.Duration
	}{
		{"later in wheel", 1 * time.Second, 3 * time.Second},
		{"earlier in wheel", 3 * time.Second, 1 * time.Second},
		{"wheel to far", 1 * time.Second, time.Hour},
		{"far to wheel", time.Hour, 1 * time.Second},
		{"far to far", 2 * time.Hour, time.Hour},
		// Not "due now to later": Run may take a timer that is already due
		// before the re-arm reaches it (the documented race of Arm and
		// Cancel with a due timer; the model test covers it).
		{"next tick to later", time.Millisecond, 2 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, TimersOptions{Tick: time.Millisecond, Slots: 1024})
			h.tm.Arm("k", at(tc.first))
			h.tm.Arm("k", at(tc.now))
			if h.tm.Len() != 1 {
				t.Fatalf("Len = %d, want 1", h.tm.Len())
			}
			if d, ok := h.tm.Due("k"); !ok || !d.Equal(at(tc.now)) {
				t.Fatalf("Due = %v %v, want %v", d, ok, at(tc.now))
			}
			h.settle()
			// Walk past both times in small steps; it must fire once, at tc.now.
			end := max(tc.first, tc.now) + time.Second
			for el := time.Duration(0); el < end; {
				step := 50 * time.Millisecond
				if el < tc.now && el+step > tc.now {
					step = tc.now - el
				}
				h.advance(step)
				el += step
				fs := h.take()
				switch {
				case el == tc.now:
					if len(fs) != 1 || !slices.Equal(keys(fs), []string{"k"}) {
						t.Fatalf("at %v fired %+v, want [k]", el, fs)
					}
				case len(fs) != 0:
					t.Fatalf("at %v fired %+v, want nothing", el, fs)
				}
			}
		})
	}
}

func TestTimers_ArmSameDueKeepsPosition(t *testing.T) {
	h := newHarness(t, TimersOptions{})
	h.tm.Arm("a", at(time.Second))
	h.tm.Arm("b", at(time.Second))
	h.tm.Arm("a", at(time.Second)) // no-op: a stays first
	h.advance(time.Second)
	h.expectKeys("a", "b")
}

func TestTimers_Cancel(t *testing.T) {
	h := newHarness(t, TimersOptions{Tick: time.Millisecond, Slots: 64})
	h.tm.Arm("near", at(10*time.Millisecond))
	h.tm.Arm("far", at(time.Hour))
	h.tm.Arm("now", at(0))
	h.tm.Arm("keep", at(20*time.Millisecond))
	h.settle()
	h.expectKeys("now")
	if h.tm.Cancel("now") {
		t.Fatal("Cancel of a fired timer reported true")
	}
	if !h.tm.Cancel("near") || !h.tm.Cancel("far") {
		t.Fatal("Cancel of an armed timer reported false")
	}
	if h.tm.Cancel("near") || h.tm.Cancel("missing") {
		t.Fatal("second Cancel reported true")
	}
	if h.tm.Len() != 1 {
		t.Fatalf("Len = %d, want 1", h.tm.Len())
	}
	h.advance(2 * time.Hour)
	h.expectKeys("keep")
	// A cancelled key can be armed again.
	h.tm.Arm("far", at(2*time.Hour+time.Second))
	h.advance(time.Second)
	h.expectKeys("far")
}

func TestTimers_FarTimersMigrate(t *testing.T) {
	// A 64 ms window: nearly everything starts in the far heap.
	h := newHarness(t, TimersOptions{Tick: time.Millisecond, Slots: 64})
	dues := []time.Duration{
		24 * time.Hour, time.Hour, 10 * time.Minute, 65 * time.Millisecond,
		time.Second + 7*time.Nanosecond, time.Second, 30 * time.Millisecond,
	}
	for i, d := range dues {
		h.tm.Arm(strconv.Itoa(i), at(d))
	}
	h.settle()
	if st := h.tm.Stats(); st.Heap < 5 {
		t.Fatalf("Stats = %+v, want most timers in the heap", st)
	}
	sorted := slices.Clone(dues)
	slices.Sort(sorted)
	el := time.Duration(0)
	for _, d := range sorted {
		// Jump close, then creep up to the deadline.
		if d-el > 2*time.Millisecond {
			h.advance(d - el - 2*time.Millisecond)
			el = d - 2*time.Millisecond
		}
		h.advance(d - el - time.Nanosecond)
		el = d - time.Nanosecond
		h.expectKeys()
		h.advance(time.Nanosecond)
		el = d
		fs := h.take()
		if len(fs) != 1 || len(fs[0].batch) != 1 || !fs[0].batch[0].Due.Equal(at(d)) {
			t.Fatalf("at %v fired %+v", d, fs)
		}
	}
	if st := h.tm.Stats(); st.Migrated < 4 || st.Armed != 0 || st.Fired != uint64(len(dues)) {
		t.Fatalf("Stats = %+v", st)
	}
}

func TestTimers_PastDueFiresAtOnce(t *testing.T) {
	h := newHarness(t, TimersOptions{})
	h.tm.Arm("old", start.Add(-time.Hour))
	h.tm.Arm("ancient", time.Date(1500, 1, 1, 0, 0, 0, 0, time.UTC))
	h.tm.Arm("now", start)
	h.settle()
	// Run is live while the test arms, so the three may come in one batch
	// or in several; each fires once, at once, and a batch is in due order.
	var got []string
	for _, f := range h.take() {
		if !f.at.Equal(start) {
			t.Fatalf("fired at %v, want at once (%v)", f.at, start)
		}
		for i, e := range f.batch {
			if i > 0 && e.Due.Before(f.batch[i-1].Due) {
				t.Fatalf("batch not in due order: %+v", f.batch)
			}
			got = append(got, e.Key)
		}
	}
	slices.Sort(got)
	if !slices.Equal(got, []string{"ancient", "now", "old"}) {
		t.Fatalf("fired %v, want ancient, now and old once each", got)
	}
}

func TestTimers_ExtremeDueTimes(t *testing.T) {
	h := newHarness(t, TimersOptions{})
	h.tm.Arm("y3000", time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC))
	h.tm.Arm("local", start.Add(time.Second).In(time.FixedZone("x", 5*3600)))
	h.settle()
	h.advance(time.Second)
	h.expectKeys("local")
	h.advance(1000 * 24 * time.Hour)
	h.expectKeys()
	if h.tm.Len() != 1 {
		t.Fatalf("Len = %d, want 1", h.tm.Len())
	}
}

func TestTimers_MonotonicReadingIgnored(t *testing.T) {
	// A due time from time.Now carries a monotonic reading; only its wall
	// time counts.
	h := newHarness(t, TimersOptions{})
	due := time.Now()
	h.clock.Set(due.Add(-time.Second))
	h.tm.Arm("k", due)
	h.settle()
	h.expectKeys()
	h.advance(time.Second)
	h.expectKeys("k")
}

func TestTimers_ArmFromInsideFire(t *testing.T) {
	h := newHarness(t, TimersOptions{Tick: time.Millisecond, Slots: 64})
	var n atomic.Int32
	h.onFire = func(h *harness, batch []Expired) {
		for _, e := range batch {
			if e.Key == "tick" && n.Add(1) < 5 {
				h.tm.Arm("tick", e.Due.Add(100*time.Millisecond)) // periodic
				h.tm.Arm("now", e.Due)                            // already due: fires at once
			}
			if e.Key == "now" {
				h.tm.Cancel("victim")
				_ = h.tm.Len()
				_ = h.tm.Stats()
			}
		}
	}
	h.tm.Arm("tick", at(100*time.Millisecond))
	h.tm.Arm("victim", at(time.Hour))
	for i := 1; i <= 6; i++ {
		h.advance(100 * time.Millisecond)
		fs := h.take()
		switch {
		case i <= 4:
			if !slices.Equal(keys(fs), []string{"tick", "now"}) || len(fs) != 2 {
				t.Fatalf("step %d fired %+v, want [tick] then [now]", i, fs)
			}
		case i == 5:
			if !slices.Equal(keys(fs), []string{"tick"}) {
				t.Fatalf("step %d fired %+v, want [tick]", i, fs)
			}
		default:
			if len(fs) != 0 {
				t.Fatalf("step %d fired %+v", i, fs)
			}
		}
	}
	if h.tm.Len() != 0 {
		t.Fatalf("Len = %d, want 0 (victim cancelled)", h.tm.Len())
	}
}

func TestTimers_IdleHoldsNoTimer(t *testing.T) {
	h := newHarness(t, TimersOptions{})
	h.settle()
	if n := h.clock.Armed(); n != 0 {
		t.Fatalf("idle Run holds %d timers, want 0", n)
	}
	h.tm.Arm("k", at(time.Hour))
	h.settle()
	if n := h.clock.Armed(); n != 1 {
		t.Fatalf("Run holds %d timers, want 1", n)
	}
	h.tm.Cancel("k")
	h.advance(MaxSleep) // Run wakes, finds nothing, drops its timer
	if n := h.clock.Armed(); n != 0 {
		t.Fatalf("Run holds %d timers after cancel, want 0", n)
	}
}

func TestTimers_SleepsUntilDeadline(t *testing.T) {
	// With a timer 300 ms out, Run wakes exactly then: no ticking.
	h := newHarness(t, TimersOptions{Tick: time.Millisecond})
	h.tm.Arm("k", at(300*time.Millisecond))
	h.clock.BlockUntil(1)
	h.settle()
	h.clock.Advance(299 * time.Millisecond)
	h.settle()
	if n := h.clock.Armed(); n != 1 {
		t.Fatalf("timer fired early: %d armed", n)
	}
	h.expectKeys()
	h.advance(time.Millisecond)
	h.expectKeys("k")
}

func TestTimers_BlockUntilWithPublicAPIOnly(t *testing.T) {
	// The pattern a user of the package can follow without settle.
	clock := NewFakeClock(start)
	tm := NewTimers(clock, TimersOptions{})
	got := make(chan []Expired, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go tm.Run(ctx, func(b []Expired) { got <- b })
	tm.Arm("k", at(10*time.Second))
	clock.BlockUntil(1)
	clock.Advance(10 * time.Second)
	select {
	case b := <-got:
		if len(b) != 1 || b[0].Key != "k" {
			t.Fatalf("fired %+v", b)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("timer did not fire")
	}
}

func TestTimers_WallClockStepBackward(t *testing.T) {
	h := newHarness(t, TimersOptions{Tick: time.Millisecond, Slots: 1024})
	h.tm.Arm("a", at(500*time.Millisecond))
	h.tm.Arm("b", at(2*time.Second))
	h.settle()
	h.advance(100 * time.Millisecond)
	h.clock.Set(start.Add(-time.Hour)) // NTP step back by ~1 h
	// Run's timer still fires on the monotonic clock, but by the wall clock
	// nothing is due: nothing may fire.
	h.advance(400 * time.Millisecond)
	h.advance(2 * time.Second)
	h.expectKeys()
	if st := h.tm.Stats(); st.ClockJumps != 1 || st.LastClockJump > -time.Hour || st.LastClockJump < -time.Hour-time.Second {
		t.Fatalf("Stats = %+v, want one jump of about -1h", st)
	}
	// New timers armed in the stepped-back time work, and the old ones fire
	// when the wall clock reaches them again.
	now := h.clock.Now()
	h.tm.Arm("c", now.Add(time.Second))
	h.advance(time.Second)
	h.expectKeys("c")
	h.advance(time.Hour - 3*time.Second)
	h.expectKeys()
	for h.clock.Now().Before(at(2 * time.Second)) {
		h.advance(100 * time.Millisecond)
		for _, f := range h.take() {
			for _, e := range f.batch {
				if f.at.Before(e.Due) {
					t.Fatalf("%s fired early at %v", e.Key, f.at)
				}
			}
		}
	}
	if h.tm.Len() != 0 {
		t.Fatalf("Len = %d, want 0", h.tm.Len())
	}
}

func TestTimers_WallClockStepForward(t *testing.T) {
	h := newHarness(t, TimersOptions{})
	h.tm.Arm("a", at(10*time.Minute))
	h.tm.Arm("b", at(50*time.Minute))
	h.tm.Arm("c", at(2*time.Hour))
	h.settle()
	h.clock.Set(at(time.Hour)) // step forward by 1 h
	// settle wakes Run, which sees the step at once. Without a wake-up a
	// tickless Run notices it at its next deadline, or within MaxSleep
	// if that option is set: see TestTimers_TicklessForwardStep.
	h.settle()
	h.advance(MaxSleep)
	h.expectKeys("a", "b")
	if st := h.tm.Stats(); st.ClockJumps != 1 {
		t.Fatalf("Stats = %+v, want one jump", st)
	}
	h.advance(time.Hour - MaxSleep - time.Nanosecond)
	h.expectKeys()
	h.advance(time.Nanosecond)
	h.expectKeys("c")
}

func TestTimers_RunStopsAndResumes(t *testing.T) {
	clock := NewFakeClock(start)
	tm := NewTimers(clock, TimersOptions{})
	tm.Arm("k", at(time.Second))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); tm.Run(ctx, func([]Expired) { t.Error("fired") }) }()
	clock.BlockUntil(1)
	cancel()
	<-done
	if tm.Len() != 1 || clock.Armed() != 0 {
		t.Fatalf("after Run: Len = %d, armed clock timers = %d", tm.Len(), clock.Armed())
	}
	clock.Advance(time.Second)
	got := make(chan []Expired, 1)
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	go tm.Run(ctx, func(b []Expired) { got <- b })
	select {
	case b := <-got:
		if len(b) != 1 || b[0].Key != "k" {
			t.Fatalf("fired %+v", b)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("resumed Run did not fire")
	}
}

func TestTimers_ConcurrentRunPanics(t *testing.T) {
	h := newHarness(t, TimersOptions{})
	h.settle()
	defer func() {
		if recover() == nil {
			t.Fatal("second Run did not panic")
		}
	}()
	h.tm.Run(context.Background(), func([]Expired) {})
}

func TestTimersOptions(t *testing.T) {
	tests := []struct {
		in      TimersOptions
		want    TimersOptions
		wantErr bool
	}{
		{TimersOptions{}, TimersOptions{Tick: TimersTickDefault, Slots: TimersSlotsDefault}, false},
		{TimersOptions{Tick: time.Millisecond, Slots: 1000}, TimersOptions{Tick: time.Millisecond, Slots: 1024}, false},
		{TimersOptions{Slots: 1}, TimersOptions{Tick: TimersTickDefault, Slots: 64}, false},
		{TimersOptions{Slots: TimersSlotsMax}, TimersOptions{Tick: TimersTickDefault, Slots: TimersSlotsMax}, false},
		{TimersOptions{MaxSleep: MaxSleep}, TimersOptions{Tick: TimersTickDefault, Slots: TimersSlotsDefault, MaxSleep: MaxSleep}, false},
		{TimersOptions{MaxSleep: -1}, TimersOptions{}, true},
		{TimersOptions{MaxSleep: time.Nanosecond}, TimersOptions{}, true},
		{TimersOptions{Tick: -1}, TimersOptions{}, true},
		{TimersOptions{Tick: time.Nanosecond}, TimersOptions{}, true},
		{TimersOptions{Slots: -1}, TimersOptions{}, true},
		{TimersOptions{Slots: TimersSlotsMax + 1}, TimersOptions{}, true},
	}
	for _, tc := range tests {
		err := tc.in.Validate()
		if (err != nil) != tc.wantErr {
			t.Errorf("%+v.Validate() = %v, want error %v", tc.in, err, tc.wantErr)
		}
		if tc.wantErr {
			continue
		}
		if got := tc.in.WithDefaults(); got != tc.want {
			t.Errorf("%+v.WithDefaults() = %+v, want %+v", tc.in, got, tc.want)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("NewTimers with invalid options did not panic")
		}
	}()
	NewTimers(RealClock(), TimersOptions{Tick: -1})
}

// TestTimers_Many arms 100k timers over 20 minutes (through the wheel and
// the heap), walks the clock in random steps and checks that each fires
// exactly once, never early, and in the first step that reaches it.
func TestTimers_Many(t *testing.T) {
	n := 100_000
	if testing.Short() {
		n = 10_000
	}
	for _, opts := range []TimersOptions{{}, {Tick: time.Millisecond, Slots: 4096}} {
		t.Run(fmt.Sprintf("tick=%v,slots=%d", opts.Tick, opts.Slots), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, 2))
			h := newHarness(t, opts)
			span := 20 * time.Minute
			due := make(map[string]time.Time, n)
			for i := range n {
				k := "task-" + strconv.Itoa(i)
				off := time.Duration(rng.Int64N(int64(span)))
				if i%10 == 0 {
					off = off.Truncate(time.Second) + time.Second // many share an instant
				}
				d := at(off)
				due[k] = d
				h.tm.Arm(k, d)
			}
			seen := make(map[string]bool, n)
			prev := start
			for h.clock.Now().Before(at(span + time.Second)) {
				h.advance(time.Duration(rng.Int64N(int64(300 * time.Millisecond))))
				now := h.clock.Now()
				for _, f := range h.take() {
					if !f.at.Equal(now) {
						t.Fatalf("batch delivered at %v, want %v", f.at, now)
					}
					for i, e := range f.batch {
						if seen[e.Key] {
							t.Fatalf("%s fired twice", e.Key)
						}
						seen[e.Key] = true
						if !e.Due.Equal(due[e.Key]) {
							t.Fatalf("%s: Due %v, want %v", e.Key, e.Due, due[e.Key])
						}
						if e.Due.After(now) {
							t.Fatalf("%s fired early: due %v, now %v", e.Key, e.Due, now)
						}
						if !e.Due.After(prev) {
							t.Fatalf("%s fired late: due %v, previous step %v", e.Key, e.Due, prev)
						}
						if i > 0 && e.Due.Before(f.batch[i-1].Due) {
							t.Fatalf("batch out of order at %d", i)
						}
					}
				}
				prev = now
			}
			if len(seen) != n || h.tm.Len() != 0 {
				t.Fatalf("fired %d of %d, %d still armed", len(seen), n, h.tm.Len())
			}
		})
	}
}

// TestTimers_Model runs random operations against a Timers and a trivial
// model (a map of key to due time) and checks after every operation that
// what fired is exactly what the model says is due, in order.
func TestTimers_Model(t *testing.T) {
	seeds := 20
	if testing.Short() {
		seeds = 3
	}
	configs := []TimersOptions{{}, {Tick: time.Millisecond, Slots: 64}, {Tick: 7 * time.Millisecond, Slots: 100}}
	for seed := range seeds {
		opts := configs[seed%len(configs)]
		t.Run(strconv.Itoa(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(seed), 99))
			h := newHarness(t, opts)
			type armed struct {
				due time.Time
				seq int
			}
			model := map[string]armed{}
			seq := 0
			lastStep := time.Duration(-1) // monotonic time of the last wall-clock step
			mono := time.Duration(0)
			randDur := func() time.Duration {
				switch rng.IntN(4) {
				case 0:
					return time.Duration(rng.Int64N(int64(10 * time.Millisecond)))
				case 1:
					return time.Duration(rng.Int64N(int64(time.Second)))
				case 2:
					return time.Duration(rng.Int64N(int64(time.Minute)))
				default:
					return time.Duration(rng.Int64N(int64(2 * time.Hour)))
				}
			}
			for op := 0; op < 3000; op++ {
				now := h.clock.Now()
				switch r := rng.IntN(100); {
				case r < 45:
					k := "k" + strconv.Itoa(rng.IntN(200))
					d := now.Add(randDur() - 5*time.Millisecond)
					if a, ok := model[k]; !ok || !a.due.Equal(d) {
						seq++
						model[k] = armed{d, seq}
					}
					h.tm.Arm(k, d)
				case r < 60:
					k := "k" + strconv.Itoa(rng.IntN(200))
					_, ok := model[k]
					delete(model, k)
					if got := h.tm.Cancel(k); got != ok {
						t.Fatalf("op %d: Cancel(%s) = %v, model says %v", op, k, got, ok)
					}
				case r < 97:
					d := randDur() / 10
					h.clock.Advance(d)
					mono += d
				default:
					h.clock.Set(now.Add(randDur() - time.Hour))
					lastStep = mono
				}
				h.settle()
				now = h.clock.Now()
				// Everything fired must be due, in order, and in the model.
				var last armed
				for _, f := range h.take() {
					for _, e := range f.batch {
						a, ok := model[e.Key]
						if !ok {
							t.Fatalf("op %d: %s fired but is not armed", op, e.Key)
						}
						if !a.due.Equal(e.Due) {
							t.Fatalf("op %d: %s fired with due %v, armed for %v", op, e.Key, e.Due, a.due)
						}
						if e.Due.After(f.at) {
							t.Fatalf("op %d: %s fired early: due %v at %v", op, e.Key, e.Due, f.at)
						}
						if last.seq != 0 && (a.due.Before(last.due) || a.due.Equal(last.due) && a.seq < last.seq) {
							t.Fatalf("op %d: %s out of order", op, e.Key)
						}
						last = a
						delete(model, e.Key)
					}
				}
				// Unless the wall clock was stepped less than MaxSleep ago,
				// nothing due may remain.
				if lastStep < 0 || mono-lastStep >= MaxSleep {
					for k, a := range model {
						if !a.due.After(now) {
							t.Fatalf("op %d: %s due %v not fired at %v", op, k, a.due, now)
						}
					}
				}
				if h.tm.Len() != len(model) {
					t.Fatalf("op %d: Len = %d, model has %d", op, h.tm.Len(), len(model))
				}
			}
		})
	}
}

// TestTimers_ConcurrentArmCancel hammers Arm and Cancel from several
// goroutines while Run fires (and arms from inside fire) and the clock moves;
// run it with -race. Each goroutine owns its keys and records what it armed,
// so the test can check every fire against the arms: a fired due time must
// be one that was armed, must not fire twice, and the last arm of a key fires
// unless a Cancel reported it removed.
func TestTimers_ConcurrentArmCancel(t *testing.T) {
	clock := NewFakeClock(start)
	tm := NewTimers(clock, TimersOptions{Tick: time.Millisecond, Slots: 256})
	var mu sync.Mutex
	var stopInner atomic.Bool
	fired := map[string][]time.Time{}
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan struct{})
	go func() {
		defer close(runDone)
		tm.Run(ctx, func(b []Expired) {
			now := clock.Now()
			mu.Lock()
			for _, e := range b {
				if e.Due.After(now) {
					t.Errorf("%s fired early", e.Key)
				}
				fired[e.Key] = append(fired[e.Key], e.Due)
			}
			mu.Unlock()
			if k := b[0].Key; k[0] == 'w' && !stopInner.Load() { // arm from inside fire
				tm.Arm(fmt.Sprintf("inner-%s-%d", k, b[0].Due.UnixNano()), now.Add(time.Millisecond))
			}
		})
	}()
	stopClock := make(chan struct{})
	clockDone := make(chan struct{})
	go func() {
		defer close(clockDone)
		for {
			select {
			case <-stopClock:
				return
			default:
				clock.Advance(time.Millisecond)
				runtime.Gosched()
			}
		}
	}()
	type history struct {
		dues      []time.Time
		cancelled bool // the last operation was a Cancel that reported true
	}
	const workers, perWorker = 4, 3000
	hist := make([]map[string]*history, workers)
	var wg sync.WaitGroup
	for w := range workers {
		hist[w] = map[string]*history{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for i := range perWorker {
				k := fmt.Sprintf("w%d-%d", w, rng.IntN(perWorker/3))
				hk := hist[w][k]
				if hk == nil {
					hk = &history{}
					hist[w][k] = hk
				}
				if rng.IntN(4) == 0 {
					if tm.Cancel(k) {
						hk.cancelled = true
					}
					continue
				}
				// i nanoseconds make every due of a key distinct.
				due := clock.Now().Add(time.Duration(rng.IntN(300))*time.Millisecond + time.Duration(i))
				tm.Arm(k, due)
				hk.dues = append(hk.dues, due)
				hk.cancelled = false
				_ = tm.Len()
			}
		}()
	}
	wg.Wait()
	close(stopClock)
	<-clockDone
	// Let everything still armed come due. Len is 0 for a moment while
	// Run holds a batch, so look twice, after any fire in flight is done.
	stopInner.Store(true)
	deadline := time.Now().Add(20 * time.Second)
	for empty := 0; empty < 2 && time.Now().Before(deadline); {
		clock.Advance(100 * time.Millisecond)
		time.Sleep(10 * time.Millisecond)
		if tm.Len() == 0 {
			empty++
		} else {
			empty = 0
		}
	}
	cancel()
	<-runDone
	if tm.Len() != 0 {
		t.Fatalf("%d timers still armed", tm.Len())
	}
	mu.Lock()
	defer mu.Unlock()
	for w := range workers {
		for k, hk := range hist[w] {
			got := fired[k]
			for i, d := range got {
				if !slices.ContainsFunc(hk.dues, d.Equal) {
					t.Fatalf("%s fired with due %v, never armed", k, d)
				}
				for _, d2 := range got[:i] {
					if d2.Equal(d) {
						t.Fatalf("%s fired twice for due %v", k, d)
					}
				}
			}
			if len(hk.dues) == 0 {
				continue
			}
			last := hk.dues[len(hk.dues)-1]
			if firedLast := slices.ContainsFunc(got, last.Equal); firedLast == hk.cancelled {
				t.Fatalf("%s: last due fired = %v, but cancelled = %v", k, firedLast, hk.cancelled)
			}
		}
	}
	for k, got := range fired {
		if k[0] == 'i' && len(got) != 1 {
			t.Fatalf("%s fired %d times", k, len(got))
		}
	}
}

func TestTimers_RealClock(t *testing.T) {
	tm := NewTimers(RealClock(), TimersOptions{})
	got := make(chan Expired, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go tm.Run(ctx, func(b []Expired) {
		for _, e := range b {
			if now := time.Now(); now.Before(e.Due) {
				t.Errorf("fired early: now %v, due %v", now, e.Due)
			}
			got <- e
		}
	})
	due := time.Now().Add(20 * time.Millisecond).UTC().Round(0)
	tm.Arm("k", due)
	select {
	case e := <-got:
		if e.Key != "k" || !e.Due.Equal(due) {
			t.Fatalf("fired %+v", e)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("timer 20 ms out did not fire within 5 s")
	}
}

func TestUnixNanoAndFloorDiv(t *testing.T) {
	if got := unixNano(time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC)); got != 1<<63-1 {
		t.Errorf("year 3000 = %d, want MaxInt64", got)
	}
	if got := unixNano(time.Date(1000, 1, 1, 0, 0, 0, 0, time.UTC)); got != -1<<63 {
		t.Errorf("year 1000 = %d, want MinInt64", got)
	}
	if got := unixNano(start); got != start.UnixNano() {
		t.Errorf("start = %d, want %d", got, start.UnixNano())
	}
	for _, c := range [][3]int64{{7, 2, 3}, {-7, 2, -4}, {-8, 2, -4}, {0, 5, 0}, {-1, 5, -1}} {
		if got := floorDiv(c[0], c[1]); got != c[2] {
			t.Errorf("floorDiv(%d, %d) = %d, want %d", c[0], c[1], got, c[2])
		}
	}
}
