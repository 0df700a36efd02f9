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
		w := newWheel(slots)
		var live []*entry
		for op := range 20000 {
			if len(live) == 0 || rng.IntN(3) > 0 {
				// Cluster entries sometimes, spread them other times.
				s := rng.IntN(slots)
				if op%2 == 0 {
					s = rng.IntN(min(slots, 200))
				}
				e := &entry{due: rng.Int64N(1000)}
				w.insert(e, s)
				live = append(live, e)
			} else {
				i := rng.IntN(len(live))
				w.remove(live[i])
				live[i] = live[len(live)-1]
				live = live[:len(live)-1]
			}
			if w.n != len(live) {
				t.Fatalf("n = %d, want %d", w.n, len(live))
			}
			from := rng.IntN(slots)
			want := -1
			for d := range slots {
				if w.heads[(from+d)%slots] != nil {
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
				for e := w.heads[s]; e != nil; e = e.next {
					m = min(m, e.due)
				}
				if got := w.min(s); got != m {
					t.Fatalf("min(%d) = %d, want %d", s, got, m)
				}
			}
		}
		// take empties slots one by one.
		for w.n > 0 {
			s := w.next(0)
			n := 0
			for e := w.take(s); e != nil; e = e.next {
				n++
			}
			if n == 0 {
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
