package engine

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestWheel_AgainstBruteForce inserts and removes entries at random and
// checks next, min and the counts against a plain scan of the slots.
func TestWheel_AgainstBruteForce(t *testing.T) {
	for _, slots := range []int{64, 128, 4096, 1 << 16} {
		rng := rand.New(rand.NewPCG(uint64(slots), 1))
		sl := newSlab[string]()
		w := newWheel[string](slots)
		type placed struct {
			i int32
			s int
		}
		var live []placed
		for op := range 20000 {
			if len(live) == 0 || rng.IntN(3) > 0 {
				// Cluster entries sometimes, spread them other times.
				s := rng.IntN(slots)
				if op%2 == 0 {
					s = rng.IntN(min(slots, 200))
				}
				i := sl.alloc()
				sl.at(i).due = rng.Int64N(1000)
				w.insert(&sl, i, s)
				live = append(live, placed{i, s})
			} else {
				k := rng.IntN(len(live))
				w.remove(&sl, live[k].i, live[k].s)
				sl.at(live[k].i).pos = 0
				sl.release(live[k].i)
				live[k] = live[len(live)-1]
				live = live[:len(live)-1]
			}
			if w.n != len(live) {
				t.Fatalf("n = %d, want %d", w.n, len(live))
			}
			from := rng.IntN(slots)
			want := -1
			for d := range slots {
				if w.slots[(from+d)%slots].n > 0 {
					want = d
					break
				}
			}
			if got := w.next(from); got != want {
				t.Fatalf("slots %d op %d: next(%d) = %d, want %d", slots, op, from, got, want)
			}
			if want >= 0 {
				s := (from + want) % slots
				m := int64(math.MaxInt64)
				n, holes := 0, 0
				for k, i := range w.slots[s].v {
					if i < 0 {
						holes++
						continue
					}
					n++
					m = min(m, sl.at(i).due)
					if e := sl.at(i); e.state() != stWheel || e.index() != int32(k) {
						t.Fatalf("slot %d[%d]: pos %x", s, k, e.pos)
					}
				}
				if n != int(w.slots[s].n) {
					t.Fatalf("slot %d: %d entries, n = %d", s, n, w.slots[s].n)
				}
				// The hole list links exactly the holes.
				linked := 0
				for h := w.slots[s].hole; h >= 0; h = holeLink(w.slots[s].v[h]) {
					if w.slots[s].v[h] >= 0 {
						t.Fatalf("slot %d: hole list reaches entry at %d", s, h)
					}
					linked++
				}
				if linked != holes {
					t.Fatalf("slot %d: %d holes, %d linked", s, holes, linked)
				}
				if got := w.min(&sl, s); got != m {
					t.Fatalf("min(%d) = %d, want %d", s, got, m)
				}
			}
		}
		// take empties slots one by one.
		for w.n > 0 {
			s := w.next(0)
			if n := len(w.take(s)); n == 0 {
				t.Fatal("take of a non-empty slot returned nothing")
			}
		}
		if w.next(0) != -1 {
			t.Fatal("empty wheel: next != -1")
		}
		for i, b := range w.bits {
			if b != 0 {
				t.Fatalf("bits[%d] = %x after emptying", i, b)
			}
		}
		for i, b := range w.sum {
			if b != 0 {
				t.Fatalf("sum[%d] = %x after emptying", i, b)
			}
		}
	}
}
