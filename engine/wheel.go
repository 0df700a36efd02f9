package engine

import (
	"math"
	"math/bits"
)

// Sentinels of wheel.mins.
const (
	minUnknown = math.MinInt64 // the slot's minimum must be recomputed
)

// wheel is a single-level timing wheel: a ring of slots, each a doubly
// linked list of entries. Because [Timers] keeps only ticks in
// (cursor, cursor+len(slots)] in the wheel, every slot holds entries of one
// tick only, and the wheel needs no "rounds" counters.
//
// Besides the lists it keeps a two-level bitmap of non-empty slots, so the
// next non-empty slot is found in a few word operations even in a sparse
// wheel of 64Ki slots, and a cache of each slot's earliest due time, so the
// timer loop can sleep until an exact deadline instead of a tick boundary.
//
// Costs: insert and remove O(1); next O(slots/4096) word reads at worst;
// min O(1), or O(slot length) after the slot's earliest entry was removed.
type wheel struct {
	mask  int64    // len(heads)-1; len(heads) is a power of two >= 64
	heads []*entry // slot lists
	mins  []int64  // earliest due per non-empty slot, or minUnknown
	bits  []uint64 // bit s set when slot s is non-empty
	sum   []uint64 // bit w set when bits[w] != 0
	n     int      // entries in the wheel
}

func newWheel(slots int) wheel {
	words := slots / 64
	return wheel{
		mask:  int64(slots - 1),
		heads: make([]*entry, slots),
		mins:  make([]int64, slots),
		bits:  make([]uint64, words),
		sum:   make([]uint64, (words+63)/64),
	}
}

// insert links e into slot s.
func (w *wheel) insert(e *entry, s int) {
	e.where = inWheel
	e.idx = s
	e.prev = nil
	h := w.heads[s]
	e.next = h
	if h == nil {
		w.mins[s] = e.due
		w.bits[s>>6] |= 1 << (s & 63)
		w.sum[s>>12] |= 1 << ((s >> 6) & 63)
	} else {
		h.prev = e
		if m := w.mins[s]; m != minUnknown && e.due < m {
			w.mins[s] = e.due
		}
	}
	w.heads[s] = e
	w.n++
}

// remove unlinks e from its slot.
func (w *wheel) remove(e *entry) {
	s := e.idx
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		w.heads[s] = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	}
	e.prev, e.next = nil, nil
	e.where = inNone
	w.n--
	if w.heads[s] == nil {
		w.clear(s)
	} else if e.due == w.mins[s] {
		w.mins[s] = minUnknown
	}
}

// take detaches and returns the list of slot s (linked through next).
func (w *wheel) take(s int) *entry {
	h := w.heads[s]
	if h == nil {
		return nil
	}
	w.heads[s] = nil
	w.clear(s)
	for e := h; e != nil; e = e.next {
		w.n--
		e.where = inNone
	}
	return h
}

func (w *wheel) clear(s int) {
	wi := s >> 6
	w.bits[wi] &^= 1 << (s & 63)
	if w.bits[wi] == 0 {
		w.sum[wi>>6] &^= 1 << (wi & 63)
	}
}

// min returns the earliest due time in non-empty slot s.
func (w *wheel) min(s int) int64 {
	m := w.mins[s]
	if m != minUnknown {
		return m
	}
	m = math.MaxInt64
	for e := w.heads[s]; e != nil; e = e.next {
		if e.due < m {
			m = e.due
		}
	}
	w.mins[s] = m
	return m
}

// next returns the distance, going forward around the ring from slot from,
// to the first non-empty slot (0 if from itself is non-empty), or -1 if the
// wheel is empty.
func (w *wheel) next(from int) int {
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
func (w *wheel) findFrom(i int) int {
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
