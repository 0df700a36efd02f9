package engine

// nearHeap is a binary min-heap of slab entries ordered by [before]: the
// timers of the current tick and overdue ones, a handful at a time. Each
// entry keeps its heap index in its position, so removal by entry is
// O(log n). It is
// written out rather than built on container/heap to avoid interface calls
// on the hot path.
type nearHeap[P any] struct {
	s *slab[P]
	h []int32
}

func (h *nearHeap[P]) len() int { return len(h.h) }

// top returns the smallest entry; the heap must not be empty.
func (h *nearHeap[P]) top() int32 { return h.h[0] }

func (h *nearHeap[P]) less(i, j int) bool { return before(h.s.at(h.h[i]), h.s.at(h.h[j])) }

// push adds entry i in O(log n).
func (h *nearHeap[P]) push(i int32) {
	h.s.at(i).setPos(stNear, int32(len(h.h)))
	h.h = append(h.h, i)
	h.up(len(h.h) - 1)
}

// pop removes and returns the smallest entry in O(log n).
func (h *nearHeap[P]) pop() int32 {
	i := h.h[0]
	h.removeAt(0)
	return i
}

// remove deletes entry i, which is in the heap, in O(log n).
func (h *nearHeap[P]) remove(i int32) { h.removeAt(int(h.s.at(i).index())) }

func (h *nearHeap[P]) removeAt(k int) {
	n := len(h.h) - 1
	i := h.h[k]
	if k != n {
		h.swap(k, n)
	}
	h.h = h.h[:n]
	if k != n && !h.down(k) {
		h.up(k)
	}
	h.s.at(i).pos = 0
}

func (h *nearHeap[P]) swap(i, j int) {
	h.h[i], h.h[j] = h.h[j], h.h[i]
	h.s.at(h.h[i]).setPos(stNear, int32(i))
	h.s.at(h.h[j]).setPos(stNear, int32(j))
}

func (h *nearHeap[P]) up(j int) {
	for j > 0 {
		i := (j - 1) / 2
		if !h.less(j, i) {
			break
		}
		h.swap(i, j)
		j = i
	}
}

// down sifts h[i0] down and reports whether it moved.
func (h *nearHeap[P]) down(i0 int) bool {
	i := i0
	n := len(h.h)
	for {
		l := 2*i + 1
		if l >= n || l < 0 {
			break
		}
		j := l
		if r := l + 1; r < n && h.less(r, l) {
			j = r
		}
		if !h.less(j, i) {
			break
		}
		h.swap(i, j)
		i = j
	}
	return i > i0
}

// farItem is an element of the far heap. It carries the due time and arm
// number of its entry, so that sifting never reads the slab (the far heap
// can hold hundreds of thousands of timers; reading their entries would
// miss the cache at every level), and so that an item whose timer was
// cancelled or re-armed is recognised as stale (its entry no longer has
// that arm number) without a tombstone entry: cancelling a far timer
// frees its entry at once.
type farItem struct {
	due int64
	seq uint32
	idx int32
}

func (a farItem) before(b farItem) bool {
	if a.due != b.due {
		return a.due < b.due
	}
	return seqBefore(a.seq, b.seq)
}

// farHeap is a binary min-heap of far timers, 16 bytes each. Items are
// removed lazily: Cancel frees the entry and leaves its item here, stale
// (see [TimerSet] for when stale items are compacted away).
type farHeap []farItem

// push adds it in O(log n).
func (h *farHeap) push(it farItem) {
	*h = append(*h, it)
	h.up(len(*h) - 1)
}

// pop removes and returns the smallest item in O(log n).
func (h *farHeap) pop() farItem {
	old := *h
	n := len(old) - 1
	it := old[0]
	old[0] = old[n]
	*h = old[:n]
	if n > 0 {
		h.down(0)
	}
	return it
}

// init restores the heap property over the whole slice in O(n).
func (h farHeap) init() {
	for i := len(h)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

func (h farHeap) up(j int) {
	it := h[j]
	for j > 0 {
		i := (j - 1) / 2
		if !it.before(h[i]) {
			break
		}
		h[j] = h[i]
		j = i
	}
	h[j] = it
}

func (h farHeap) down(i int) {
	n := len(h)
	it := h[i]
	for {
		l := 2*i + 1
		if l >= n || l < 0 {
			break
		}
		j := l
		if r := l + 1; r < n && h[r].before(h[l]) {
			j = r
		}
		if !h[j].before(it) {
			break
		}
		h[i] = h[j]
		i = j
	}
	h[i] = it
}
