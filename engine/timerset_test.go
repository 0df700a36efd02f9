package engine

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// setStep collects what a TimerSet fires at now, synchronously (no Run
// goroutine), the way Run does.
func setStep(s *TimerSet[int], now time.Time) []Fired[int] {
	var out []Fired[int]
	s.collect(unixNano(now), 0, func(i int32, e *entry[int]) {
		out = append(out, Fired[int]{
			Handle:  TimerHandle{ix: uint32(i) + 1, seq: e.seq},
			Payload: e.payload,
			Due:     time.Unix(0, e.due).UTC(),
		})
	})
	return out
}

func newTestSet(opts TimersOptions) *TimerSet[int] {
	s := NewTimerSet[int](NewFakeClock(start), opts)
	s.mc = nil // collect is called directly, without monotonic readings
	return s
}

func payloads(fs []Fired[int]) []int {
	var ps []int
	for _, f := range fs {
		ps = append(ps, f.Payload)
	}
	return ps
}

func TestTimerSet_StaleHandle(t *testing.T) {
	s := newTestSet(TimersOptions{})
	h1 := s.Arm(at(time.Second), 1)
	if !s.Cancel(h1) {
		t.Fatal("Cancel of an armed timer = false")
	}
	if s.Cancel(h1) {
		t.Fatal("second Cancel = true")
	}
	// The next Arm reuses the entry (last in, first out): same index, new
	// generation.
	h2 := s.Arm(at(2*time.Second), 2)
	if h2.ix != h1.ix || h2.seq == h1.seq {
		t.Fatalf("h1 %+v, h2 %+v: want the same index and a new generation", h1, h2)
	}
	if s.Cancel(h1) {
		t.Fatal("a stale handle cancelled the entry's new timer")
	}
	if _, ok := s.Due(h1); ok {
		t.Fatal("Due of a stale handle = ok")
	}
	if d, ok := s.Due(h2); !ok || !d.Equal(at(2*time.Second)) {
		t.Fatalf("Due(h2) = %v %v", d, ok)
	}
	if s.Len() != 1 {
		t.Fatalf("Len = %d", s.Len())
	}
	for _, h := range []TimerHandle{{}, {ix: 1 << 31, seq: h2.seq}, {ix: h2.ix + 1, seq: h2.seq}} {
		if s.Cancel(h) {
			t.Fatalf("Cancel(%+v) = true", h)
		}
		if _, ok := s.Due(h); ok {
			t.Fatalf("Due(%+v) = ok", h)
		}
	}
	if !(TimerHandle{}).IsZero() || h2.IsZero() {
		t.Fatal("IsZero")
	}
	if got := payloads(setStep(s, at(2*time.Second))); !slices.Equal(got, []int{2}) {
		t.Fatalf("fired %v, want [2]", got)
	}
}

func TestTimerSet_CancelAfterFire(t *testing.T) {
	for _, d := range []time.Duration{0, time.Second, 20 * time.Minute, 3 * time.Hour} { // near, wheel, far
		s := newTestSet(TimersOptions{})
		h := s.Arm(at(d), 7)
		fs := setStep(s, at(d))
		if len(fs) != 1 || fs[0].Handle != h || fs[0].Payload != 7 || !fs[0].Due.Equal(at(d)) {
			t.Fatalf("%v: fired %+v, want handle %+v", d, fs, h)
		}
		if s.Cancel(h) {
			t.Fatalf("%v: Cancel after fire = true", d)
		}
		// The fired timer's entry is reused; its old handle stays stale.
		h2 := s.Arm(at(d+time.Second), 8)
		if h2.ix != h.ix {
			t.Fatalf("%v: entry not reused", d)
		}
		if s.Cancel(h) {
			t.Fatalf("%v: old handle cancelled the new timer", d)
		}
		if got := payloads(setStep(s, at(d+time.Second))); !slices.Equal(got, []int{8}) {
			t.Fatalf("%v: fired %v, want [8]", d, got)
		}
	}
}

// TestTimerSet_GenerationWrap arms across the wrap of the 32-bit arm
// number: handles stay distinct and stale ones stay stale, and timers with
// equal due times still fire in arm order.
func TestTimerSet_GenerationWrap(t *testing.T) {
	s := newTestSet(TimersOptions{})
	s.seq = math.MaxUint32 - 5
	due := at(time.Second)
	var hs []TimerHandle
	for p := range 12 {
		hs = append(hs, s.Arm(due, p))
	}
	seen := map[TimerHandle]bool{}
	for _, h := range hs {
		if seen[h] || h.IsZero() {
			t.Fatalf("handle %+v repeated or zero", h)
		}
		seen[h] = true
	}
	if hs[5].seq != 0 {
		t.Fatalf("arm number after the wrap = %d, want 0", hs[5].seq)
	}
	// Cancel one on each side of the wrap, re-arm (reusing their entries),
	// and check the old handles are stale.
	for _, k := range []int{4, 7} {
		if !s.Cancel(hs[k]) {
			t.Fatalf("Cancel(hs[%d]) = false", k)
		}
	}
	r1 := s.Arm(due, 100)
	r2 := s.Arm(due, 101)
	if s.Cancel(hs[4]) || s.Cancel(hs[7]) {
		t.Fatal("stale handle across the wrap cancelled a new timer")
	}
	want := []int{0, 1, 2, 3, 5, 6, 8, 9, 10, 11, 100, 101}
	if got := payloads(setStep(s, due)); !slices.Equal(got, want) {
		t.Fatalf("fired %v, want arm order %v", got, want)
	}
	if s.Cancel(r1) || s.Cancel(r2) {
		t.Fatal("Cancel after fire = true")
	}
}

// TestTimerSet_StaleFarItemSameArmNumber forces the one case the arm
// number cannot tell apart: a far timer cancelled and its entry armed again
// with the same (wrapped) arm number and another far deadline. The stale
// heap item must not stand for the new timer.
func TestTimerSet_StaleFarItemSameArmNumber(t *testing.T) {
	s := newTestSet(TimersOptions{})
	hA := s.Arm(at(2*time.Hour), 1)
	if !s.Cancel(hA) {
		t.Fatal("Cancel")
	}
	s.seq = hA.seq - 1 // as if 2^32 arms went by
	hB := s.Arm(at(3*time.Hour), 2)
	if hB.ix != hA.ix || hB.seq != hA.seq {
		t.Fatalf("setup: hA %+v hB %+v", hA, hB)
	}
	for d := time.Duration(0); d <= 3*time.Hour; d += time.Minute {
		fs := setStep(s, at(d))
		if len(fs) > 0 && (d != 3*time.Hour || !slices.Equal(payloads(fs), []int{2})) {
			t.Fatalf("at %v: fired %v", d, payloads(fs))
		}
	}
	if s.Len() != 0 {
		t.Fatalf("Len = %d after firing", s.Len())
	}
}

// TestTimerSet_ShrinkDropsStaleFarItems empties a set whose far heap holds
// stale items: the slab shrinks, and neither old handles nor the heap may
// reach into the dropped chunks.
func TestTimerSet_ShrinkDropsStaleFarItems(t *testing.T) {
	s := newTestSet(TimersOptions{})
	var hs []TimerHandle
	for i := range 3 * slabChunk {
		hs = append(hs, s.Arm(at(time.Hour+time.Duration(i)*time.Second), i))
	}
	for _, h := range hs[:slabChunk] {
		s.Cancel(h) // stale items stay in the far heap
	}
	for _, h := range hs[slabChunk:] {
		s.Cancel(h)
	}
	if len(s.slab.chunks) != 1 || len(s.slab.tags) != slabChunk || len(s.far) != 0 || s.farLive != 0 {
		t.Fatalf("after emptying: %d chunks, %d tags, far %d, live %d", len(s.slab.chunks), len(s.slab.tags), len(s.far), s.farLive)
	}
	for _, h := range hs {
		if s.Cancel(h) {
			t.Fatal("old handle cancelled something")
		}
	}
	h := s.Arm(at(2*time.Hour), -1)
	for d := time.Duration(0); d <= 2*time.Hour; d += time.Minute {
		if fs := setStep(s, at(d)); len(fs) > 0 && (d != 2*time.Hour || fs[0].Handle != h) {
			t.Fatalf("at %v: fired %+v", d, fs)
		}
	}
}

// TestTimerSet_Model drives a TimerSet by handle through random arm,
// cancel (of live, fired and cancelled handles) and clock steps against a
// map, with a small wheel so that timers go through the far heap, the
// wheel and the near heap: every live timer fires once, in the step that
// reaches it, never early, in due then arm order; stale handles never
// cancel anything.
func TestTimerSet_Model(t *testing.T) {
	for _, opts := range []TimersOptions{{}, {Tick: time.Millisecond, Slots: 64}, {Tick: 3 * time.Millisecond, Slots: 128}} {
		rng := rand.New(rand.NewPCG(uint64(opts.Slots), 5))
		s := newTestSet(opts)
		type armed struct {
			due time.Time
			p   int
		}
		live := map[TimerHandle]armed{}
		var all []TimerHandle // live and stale
		now := start
		p := 0
		steps := 20000
		if testing.Short() {
			steps /= 4
		}
		for step := range steps {
			switch r := rng.IntN(10); {
			case r < 5:
				var d time.Duration
				switch rng.IntN(4) {
				case 0:
					d = time.Duration(rng.Int64N(int64(100*time.Millisecond))) - 10*time.Millisecond
				case 1:
					d = time.Duration(rng.Int64N(int64(time.Second)))
				case 2:
					d = time.Duration(rng.Int64N(int64(time.Hour)))
				default:
					d = time.Duration(rng.IntN(5)) * time.Millisecond // ties
				}
				due := now.Add(d)
				p++
				h := s.Arm(due, p)
				if _, dup := live[h]; dup {
					t.Fatalf("step %d: handle %+v handed out twice", step, h)
				}
				live[h] = armed{due, p}
				all = append(all, h)
			case r < 8 && len(all) > 0:
				k := rng.IntN(len(all))
				h := all[k]
				_, want := live[h]
				if got := s.Cancel(h); got != want {
					t.Fatalf("step %d: Cancel(%+v) = %v, want %v", step, h, got, want)
				}
				delete(live, h)
				all[k] = all[len(all)-1]
				all = all[:len(all)-1]
			default:
				now = now.Add(time.Duration(rng.Int64N(int64(50 * time.Millisecond))))
				if rng.IntN(50) == 0 {
					now = now.Add(time.Duration(rng.Int64N(int64(time.Hour))))
				}
				fs := setStep(s, now)
				for j, f := range fs {
					a, ok := live[f.Handle]
					switch {
					case !ok:
						t.Fatalf("step %d: %+v fired but is not armed", step, f)
					case a.p != f.Payload || !a.due.Equal(f.Due):
						t.Fatalf("step %d: fired %+v, armed %+v", step, f, a)
					case f.Due.After(now):
						t.Fatalf("step %d: fired early", step)
					}
					if j > 0 && (f.Due.Before(fs[j-1].Due) || f.Due.Equal(fs[j-1].Due) && f.Payload < fs[j-1].Payload) {
						t.Fatalf("step %d: batch out of order", step)
					}
					delete(live, f.Handle)
				}
				for h, a := range live {
					if !a.due.After(now) {
						t.Fatalf("step %d: %+v due %v not fired at %v", step, h, a.due, now)
					}
				}
			}
			if s.Len() != len(live) {
				t.Fatalf("step %d: Len %d, model %d", step, s.Len(), len(live))
			}
		}
	}
}

// TestTimerSet_Run fires through Run on a fake clock, reusing the batch.
func TestTimerSet_Run(t *testing.T) {
	clock := NewFakeClock(start)
	s := NewTimerSet[string](clock, TimersOptions{})
	got := make(chan []string, 10)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Run(ctx, func(batch []Fired[string]) {
			var ps []string
			for _, f := range batch {
				ps = append(ps, f.Payload)
			}
			got <- ps
		})
	}()
	defer func() { cancel(); <-done }()
	s.Arm(at(time.Second), "a")
	s.Arm(at(time.Second), "b")
	h := s.Arm(at(2*time.Second), "c")
	s.Arm(at(3*time.Second), "d")
	s.Cancel(h)
	clock.BlockUntil(1)
	clock.Advance(time.Second)
	if ps := <-got; !slices.Equal(ps, []string{"a", "b"}) {
		t.Fatalf("first batch %v", ps)
	}
	clock.BlockUntil(1)
	clock.Advance(2 * time.Second)
	if ps := <-got; !slices.Equal(ps, []string{"d"}) {
		t.Fatalf("second batch %v", ps)
	}
}

// TestTimerSet_TickOf checks the reciprocal division against floorDiv.
func TestTimerSet_TickOf(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	for _, tick := range []time.Duration{1, 2, 3, 7, time.Microsecond, time.Millisecond, 50 * time.Millisecond, 999_999_937, time.Hour, 1 << 40, 1<<62 + 12345} {
		s := &TimerSet[int]{tick: int64(tick), tickInv: ^uint64(0) / uint64(tick)}
		ns := []int64{0, 1, -1, int64(tick) - 1, int64(tick), int64(tick) + 1, math.MaxInt64, math.MaxInt64 - 1, math.MinInt64, math.MinInt64 + 1}
		for range 20000 {
			switch rng.IntN(3) {
			case 0:
				ns = append(ns, int64(rng.Uint64()))
			case 1:
				k := rng.Int64N(math.MaxInt64 / int64(tick))
				ns = append(ns, k*int64(tick)+rng.Int64N(3)-1)
			default:
				ns = append(ns, rng.Int64N(1<<62))
			}
		}
		for _, n := range ns {
			if got, want := s.tickOf(n), floorDiv(n, int64(tick)); got != want {
				t.Fatalf("tick %d: tickOf(%d) = %d, want %d", tick, n, got, want)
			}
		}
	}
}

// TestTimerSet_FarTagAlias: the far heap's compaction tells stale items by
// the entries' far tags, which keep 7 bits of the arm number. A far timer
// cancelled and its entry armed far again with an arm number equal in
// those bits leaves a stale item that compaction keeps; it must never
// fire, nor count in Stats, and the new timer must fire once, on time.
func TestTimerSet_FarTagAlias(t *testing.T) {
	s := newTestSet(TimersOptions{})
	s.Arm(at(3*time.Hour), 0) // keeps the set from emptying, which drops every far item
	hA := s.Arm(at(2*time.Hour), 1)
	if !s.Cancel(hA) {
		t.Fatal("Cancel")
	}
	s.seq = hA.seq + 127 // the next arm number is hA.seq + 128
	hB := s.Arm(at(3*time.Hour), 2)
	if hB.ix != hA.ix || farTag(hB.seq) != farTag(hA.seq) || hB.seq == hA.seq {
		t.Fatalf("setup: hA %+v hB %+v", hA, hB)
	}
	// Enough cancelled far timers to compact the far heap on the way, then
	// once more for the last of them.
	var hs []TimerHandle
	for i := range 3 * farCompactMin {
		hs = append(hs, s.Arm(at(time.Hour+time.Duration(i)*time.Second), 100+i))
	}
	for _, h := range hs {
		s.Cancel(h)
	}
	s.compactFar()
	if len(s.far) != 3 || s.farLive != 2 {
		t.Fatalf("after compaction: far %d items, %d live; want A's stale item kept, B live", len(s.far), s.farLive)
	}
	if st := s.Stats(); st.Heap != 2 || st.Armed != 2 {
		t.Fatalf("stats %+v", st)
	}
	for d := time.Duration(0); d <= 3*time.Hour; d += time.Minute {
		fs := setStep(s, at(d))
		if len(fs) > 0 && (d != 3*time.Hour || !slices.Equal(payloads(fs), []int{0, 2})) {
			t.Fatalf("at %v: fired %v", d, payloads(fs))
		}
	}
	if s.Len() != 0 || len(s.far) != 0 {
		t.Fatalf("Len = %d, far %d after firing", s.Len(), len(s.far))
	}
}

// Re-arming far timers round robin over a multiple of 128 of them gives
// each entry the same far tag at every arm, so every stale item aliases a
// live tag. Compaction must still drop them (it reads the entries when the
// tags keep too many), so that it runs about once per farCompactMin
// cancels, not at every cancel (which it did: O(n) per cancel), and Stats
// stays exact.
func TestTimerSet_FarTagBulkAlias(t *testing.T) {
	for _, n := range []int{1000, 1024, 8192} {
		s := newTestSet(TimersOptions{})
		hs := make([]TimerHandle, n)
		for k := range hs {
			hs[k] = s.Arm(at(time.Hour+time.Duration(k)*time.Millisecond), k)
		}
		const rounds = 10
		for r := 1; r <= rounds; r++ {
			for k := range hs {
				if !s.Cancel(hs[k]) {
					t.Fatalf("n=%d round %d: cancel of a live timer failed", n, r)
				}
				hs[k] = s.Arm(at(time.Hour+time.Duration(r)*time.Second+time.Duration(k)*time.Millisecond), k)
			}
		}
		if max := rounds*n/farCompactMin + 1; s.compacts > max {
			t.Errorf("n=%d: %d compactions of the far heap for %d cancels, want at most %d", n, s.compacts, rounds*n, max)
		}
		if len(s.far) > 2*s.farLive+farCompactMin+1 {
			t.Errorf("n=%d: far heap holds %d items for %d live timers", n, len(s.far), s.farLive)
		}
		if st := s.Stats(); st.Heap != n || st.Armed != n || s.Len() != n {
			t.Errorf("n=%d: stats %+v, Len %d", n, st, s.Len())
		}
	}
}
