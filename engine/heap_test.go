package engine

import (
	"math/rand/v2"
	"testing"
)

// TestEntryHeap pushes, removes at random positions and pops, and checks
// that pops come out ordered by due time then arm order, and that every
// entry's idx matches its position.
func TestEntryHeap(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var h entryHeap
	seq := uint64(0)
	check := func() {
		for i, e := range h {
			if e.idx != i {
				t.Fatalf("h[%d].idx = %d", i, e.idx)
			}
			if i > 0 && before(e, h[(i-1)/2]) {
				t.Fatalf("heap property broken at %d", i)
			}
		}
	}
	for range 5000 {
		switch r := rng.IntN(10); {
		case r < 6:
			seq++
			h.push(&entry{due: rng.Int64N(100), seq: seq})
		case r < 8 && len(h) > 0:
			h.remove(rng.IntN(len(h)))
		case len(h) > 0:
			top := h.top()
			if e := h.pop(); e != top || e.idx != -1 {
				t.Fatal("pop did not return top")
			}
			if len(h) > 0 && before(h.top(), top) {
				t.Fatal("pop out of order")
			}
		}
		check()
	}
	// Drain and check the full order, including ties in arm order.
	var prev *entry
	for len(h) > 0 {
		e := h.pop()
		if prev != nil && before(e, prev) {
			t.Fatalf("order: %+v after %+v", e, prev)
		}
		prev = e
	}
	if h.top() != nil {
		t.Fatal("top of empty heap")
	}
	// init restores order over an arbitrary slice.
	for i := range 100 {
		h = append(h, &entry{due: int64(100 - i), seq: uint64(i)})
	}
	h.init()
	check()
}
