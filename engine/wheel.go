package engine

import (
	"math"
	"math/bits"
)

// Sentinels of wslot.min.
const (
	minUnknown = math.MinInt64 // the slot's minimum must be recomputed
)

// wheel is a single-level timing wheel: a ring of slots, each a vector of
// slab entry indices. Because a [TimerSet] keeps only ticks in
// (cursor, cursor+len(slots)] in the wheel, every slot holds entries of one
// tick only, and the wheel needs no "rounds" counters.
//
// A slot is a vector rather than a linked list so that inserting and
// removing touch no other timer's entry. Removing leaves a hole, linked
// into the slot's list of holes (a hole holds -2 - the next hole), and
// inserting fills the latest hole or appends: so a cancel writes only the
// removed entry and one vector element (moving the last element into the
// hole instead would also write the moved timer's entry, a cache miss
// at a million timers), and the vector stays as long as the slot's peak
// occupancy. A slot that empties resets its vector. Order inside a slot
// does not matter; the near heap orders entries when their slot comes due.
//
// Besides the vectors it keeps a two-level bitmap of non-empty slots, so
// the next non-empty slot is found in a few word operations even in a
// sparse wheel of 64Ki slots, and a cache of each slot's earliest due time,
// so the timer loop can sleep until an exact deadline instead of a tick
// boundary.
//
// Costs: insert and remove O(1) (insert amortised: a vector may grow);
// next O(slots/4096) word reads at worst; min O(1), or O(slot length) after
// the slot's earliest entry was removed. Memory: 40 bytes per slot plus a
// bit, and 4 bytes per entry (up to twice that while a vector has room to
// grow or holes).
type wheel[P any] struct {
	mask  int64
	slots []wslot
	bits  []uint64 // bit s set when slot s is non-empty
	sum   []uint64 // bit w set when bits[w] != 0
	n     int      // entries in the wheel
}

// wslot is one slot of a wheel.
type wslot struct {
	v    []int32 // entry indices, and holes (< 0)
	min  int64   // earliest due time while non-empty, or minUnknown
	hole int32   // first hole in v, or -1
	n    int32   // entries (not holes) in v
}

// wheelVecKeep is the largest capacity a slot's vector keeps when the slot
// empties; larger ones (a burst) are dropped, so memory follows the load.
const wheelVecKeep = 1024

func newWheel[P any](slots int) wheel[P] {
	words := slots / 64
	w := wheel[P]{
		mask:  int64(slots - 1),
		slots: make([]wslot, slots),
		bits:  make([]uint64, words),
		sum:   make([]uint64, (words+63)/64),
	}
	for s := range w.slots {
		w.slots[s].hole = -1
	}
	return w
}

// holeLink encodes a hole whose successor is next (-1: none); holes are
// negative, entry indices are not.
func holeLink(next int32) int32 { return -2 - next }

// insert adds entry i to slot s.
func (w *wheel[P]) insert(sl *slab[P], i int32, s int) {
	e := sl.at(i)
	ws := &w.slots[s]
	var k int32
	if h := ws.hole; h >= 0 {
		k = h
		ws.hole = holeLink(ws.v[h]) // the same encoding decodes
		ws.v[h] = i
	} else {
		k = int32(len(ws.v))
		ws.v = append(ws.v, i)
	}
	e.setPos(stWheel, k)
	if ws.n == 0 {
		ws.min = e.due
		w.bits[s>>6] |= 1 << (s & 63)
		w.sum[s>>12] |= 1 << ((s >> 6) & 63)
	} else if ws.min != minUnknown && e.due < ws.min {
		ws.min = e.due
	}
	ws.n++
	w.n++
}

// remove takes entry i out of its slot s. The entry's pos is left to the
// caller.
func (w *wheel[P]) remove(sl *slab[P], i int32, s int) {
	e := sl.at(i)
	ws := &w.slots[s]
	w.n--
	ws.n--
	if ws.n == 0 {
		w.reset(s)
		return
	}
	k := e.index()
	ws.v[k] = holeLink(ws.hole)
	ws.hole = k
	if e.due == ws.min {
		ws.min = minUnknown
	}
}

// reset empties slot s.
func (w *wheel[P]) reset(s int) {
	ws := &w.slots[s]
	if cap(ws.v) > wheelVecKeep {
		ws.v = nil
	} else {
		ws.v = ws.v[:0]
	}
	ws.hole = -1
	ws.n = 0
	wi := s >> 6
	w.bits[wi] &^= 1 << (s & 63)
	if w.bits[wi] == 0 {
		w.sum[wi>>6] &^= 1 << (wi & 63)
	}
}

// take empties slot s and returns its vector: entry indices and holes
// (< 0, to be skipped). It stays valid until the next insert into s.
func (w *wheel[P]) take(s int) []int32 {
	ws := &w.slots[s]
	if ws.n == 0 {
		return nil
	}
	v := ws.v
	w.n -= int(ws.n)
	w.reset(s)
	return v
}

// min returns the earliest due time in non-empty slot s.
func (w *wheel[P]) min(sl *slab[P], s int) int64 {
	ws := &w.slots[s]
	if ws.min != minUnknown {
		return ws.min
	}
	m := int64(math.MaxInt64)
	for _, i := range ws.v {
		if i >= 0 {
			m = min(m, sl.at(i).due)
		}
	}
	ws.min = m
	return m
}

// next returns the distance, going forward around the ring from slot from,
// to the first non-empty slot (0 if from itself is non-empty), or -1 if the
// wheel is empty.
func (w *wheel[P]) next(from int) int {
	if w.n == 0 {
		return -1
	}
	s := w.findFrom(from)
	if s < 0 {
		s = w.findFrom(0)
	}
	if s < 0 {
		return -1
	}
	return (s - from) & int(w.mask)
}

// findFrom returns the first non-empty slot >= i, or -1.
func (w *wheel[P]) findFrom(i int) int {
	wi := i >> 6
	if word := w.bits[wi] & (^uint64(0) << (i & 63)); word != 0 {
		return wi<<6 + bits.TrailingZeros64(word)
	}
	// Search the summary for the next non-zero word after wi.
	wi++
	if wi >= len(w.bits) {
		return -1
	}
	si := wi >> 6
	sword := w.sum[si] & (^uint64(0) << (wi & 63))
	for {
		if sword != 0 {
			j := si<<6 + bits.TrailingZeros64(sword)
			return j<<6 + bits.TrailingZeros64(w.bits[j])
		}
		si++
		if si >= len(w.sum) {
			return -1
		}
		sword = w.sum[si]
	}
}
