package engine

import (
	"math"
	"math/bits"
)

// Sentinels of wheel.mins.
const (
	minUnknown = math.MinInt64 // the slot's minimum must be recomputed
)

// wheel is a single-level timing wheel: a ring of slots, each a vector of
// slab entry indices. Because [Timers] keeps only ticks in
// (cursor, cursor+len(slots)] in the wheel, every slot holds entries of one
// tick only, and the wheel needs no "rounds" counters.
//
// A slot is a vector rather than a linked list so that inserting touches
// only the end of that vector, not another timer's entry: insert appends,
// and remove moves the slot's last index into the hole (each entry knows
// its index in its slot). Order inside a slot does not matter; the near
// heap orders entries when their slot comes due.
//
// Besides the vectors it keeps a two-level bitmap of non-empty slots, so
// the next non-empty slot is found in a few word operations even in a
// sparse wheel of 64Ki slots, and a cache of each slot's earliest due time,
// so the timer loop can sleep until an exact deadline instead of a tick
// boundary.
//
// Costs: insert and remove O(1) (insert amortised: a vector may grow);
// next O(slots/4096) word reads at worst; min O(1), or O(slot length) after
// the slot's earliest entry was removed. Memory: 32 bytes per slot plus a
// bit, and 4 bytes per entry (up to twice that while a vector has room to
// grow).
type wheel struct {
	mask int64
	vecs [][]int32 // entry indices per slot; len is a power of two >= 64
	mins []int64   // earliest due per non-empty slot, or minUnknown
	bits []uint64  // bit s set when slot s is non-empty
	sum  []uint64  // bit w set when bits[w] != 0
	n    int       // entries in the wheel
}

// wheelVecKeep is the largest capacity a slot's vector keeps when the slot
// is drained; larger ones (a burst) are dropped, so memory follows the
// load.
const wheelVecKeep = 1024

func newWheel(slots int) wheel {
	words := slots / 64
	return wheel{
		mask: int64(slots - 1),
		vecs: make([][]int32, slots),
		mins: make([]int64, slots),
		bits: make([]uint64, words),
		sum:  make([]uint64, (words+63)/64),
	}
}

// insert adds entry i to slot s.
func (w *wheel) insert(sl *slab, i int32, s int) {
	e := sl.at(i)
	v := w.vecs[s]
	e.setPos(stWheel, int32(len(v)))
	if len(v) == 0 {
		w.mins[s] = e.due
		w.bits[s>>6] |= 1 << (s & 63)
		w.sum[s>>12] |= 1 << ((s >> 6) & 63)
	} else if m := w.mins[s]; m != minUnknown && e.due < m {
		w.mins[s] = e.due
	}
	w.vecs[s] = append(v, i)
	w.n++
}

// remove takes entry i out of its slot s.
func (w *wheel) remove(sl *slab, i int32, s int) {
	e := sl.at(i)
	v := w.vecs[s]
	k := e.index()
	last := len(v) - 1
	if int(k) != last {
		j := v[last]
		v[k] = j
		sl.at(j).setPos(stWheel, k)
	}
	w.vecs[s] = v[:last]
	e.pos = 0
	w.n--
	if last == 0 {
		w.clear(s)
	} else if e.due == w.mins[s] {
		w.mins[s] = minUnknown
	}
}

// take empties slot s and returns its entry indices, valid until the next
// insert into s. The caller re-places every entry.
func (w *wheel) take(s int) []int32 {
	v := w.vecs[s]
	if len(v) == 0 {
		return nil
	}
	if cap(v) > wheelVecKeep {
		w.vecs[s] = nil
	} else {
		w.vecs[s] = v[:0]
	}
	w.clear(s)
	w.n -= len(v)
	return v
}

func (w *wheel) clear(s int) {
	wi := s >> 6
	w.bits[wi] &^= 1 << (s & 63)
	if w.bits[wi] == 0 {
		w.sum[wi>>6] &^= 1 << (wi & 63)
	}
}

// min returns the earliest due time in non-empty slot s.
func (w *wheel) min(sl *slab, s int) int64 {
	m := w.mins[s]
	if m != minUnknown {
		return m
	}
	m = math.MaxInt64
	for _, i := range w.vecs[s] {
		m = min(m, sl.at(i).due)
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
