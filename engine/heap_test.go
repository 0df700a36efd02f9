package engine

import (
	"math/rand/v2"
	"testing"
)

// TestNearHeap pushes, removes at random positions and pops, and checks
// that pops come out ordered by due time then arm order, and that every
// entry's heap index (prev) matches its position.
func TestNearHeap(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	sl := newSlab[string]()
	h := nearHeap[string]{s: &sl}
	seq := uint32(1<<32 - 2000) // arm numbers wrap around during the test
	check := func() {
		for k, i := range h.h {
			e := sl.at(i)
			if e.index() != int32(k) || e.state() != stNear {
				t.Fatalf("h[%d]: pos %x", k, e.pos)
			}
			if k > 0 && h.less(k, (k-1)/2) {
				t.Fatalf("heap property broken at %d", k)
			}
		}
	}
	push := func(due int64) {
		seq++
		i := sl.alloc()
		e := sl.at(i)
		e.due, e.seq = due, seq
		h.push(i)
	}
	for range 5000 {
		switch r := rng.IntN(10); {
		case r < 6:
			push(rng.Int64N(100))
		case r < 8 && h.len() > 0:
			i := h.h[rng.IntN(h.len())]
			h.remove(i)
			if sl.at(i).pos != 0 {
				t.Fatal("removed entry still marked in the heap")
			}
			sl.release(i)
		case h.len() > 0:
			top := h.top()
			if i := h.pop(); i != top {
				t.Fatal("pop did not return top")
			}
			if h.len() > 0 && before(sl.at(h.top()), sl.at(top)) {
				t.Fatal("pop out of order")
			}
			sl.release(top)
		}
		check()
	}
	// Drain and check the full order, including ties in arm order.
	var prev *entry[string]
	for h.len() > 0 {
		e := *sl.at(h.pop())
		if prev != nil && before(&e, prev) {
			t.Fatalf("order: %+v after %+v", e, *prev)
		}
		prev = &e
	}
}

// TestFarHeap checks the far heap's order (due, then wrapping arm number)
// and init.
func TestFarHeap(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	var h farHeap
	seq := uint32(1<<32 - 100)
	for range 3000 {
		if rng.IntN(3) > 0 || len(h) == 0 {
			seq++
			h.push(farItem{due: rng.Int64N(50), seq: seq, idx: int32(seq)})
		} else {
			top := h[0]
			if got := h.pop(); got != top {
				t.Fatal("pop did not return top")
			}
			if len(h) > 0 && h[0].before(top) {
				t.Fatal("pop out of order")
			}
		}
		for k := 1; k < len(h); k++ {
			if h[k].before(h[(k-1)/2]) {
				t.Fatalf("heap property broken at %d", k)
			}
		}
	}
	h = h[:0]
	for i := range 100 {
		h = append(h, farItem{due: int64(100 - i), seq: uint32(i)})
	}
	h.init()
	for prev := h.pop(); len(h) > 0; {
		it := h.pop()
		if it.before(prev) {
			t.Fatalf("init: %+v after %+v", it, prev)
		}
		prev = it
	}
}

func TestSeqBefore(t *testing.T) {
	for _, c := range []struct {
		a, b uint32
		want bool
	}{{1, 2, true}, {2, 1, false}, {5, 5, false}, {1<<32 - 1, 0, true}, {0, 1<<32 - 1, false}, {1<<32 - 10, 10, true}} {
		if got := seqBefore(c.a, c.b); got != c.want {
			t.Errorf("seqBefore(%d, %d) = %v", c.a, c.b, got)
		}
	}
}
