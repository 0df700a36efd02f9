package engine

// entry is one armed timer. It lives in exactly one of the structures of
// [Timers] (the near heap, the wheel or the far heap), as told by where; a
// cancelled entry of the far heap stays there as a tombstone (where ==
// inDead) until it is popped or compacted away.
type entry struct {
	key   string
	due   int64  // wall-clock due time, Unix nanoseconds (see unixNano)
	seq   uint64 // arm order; breaks ties between equal due times (FIFO)
	where place
	idx   int    // index in its heap, or slot in the wheel
	prev  *entry // wheel slot list
	next  *entry // wheel slot list
}

// place tells which structure holds an entry.
type place uint8

const (
	inNone  place = iota
	inNear        // near heap: tick <= cursor
	inWheel       // wheel: cursor < tick <= cursor+slots
	inFar         // far heap: tick > cursor+slots
	inDead        // tombstone in the far heap
)

// before orders entries by due time, then by arm order.
func before(a, b *entry) bool {
	if a.due != b.due {
		return a.due < b.due
	}
	return a.seq < b.seq
}

// entryHeap is a binary min-heap of entries ordered by [before]. Each entry
// knows its index, so removal by entry is O(log n). It is written out rather
// than built on container/heap to avoid the interface calls on the hot path.
type entryHeap []*entry

func (h entryHeap) top() *entry {
	if len(h) == 0 {
		return nil
	}
	return h[0]
}

// push adds e in O(log n).
func (h *entryHeap) push(e *entry) {
	e.idx = len(*h)
	*h = append(*h, e)
	h.up(e.idx)
}

// pop removes and returns the smallest entry in O(log n).
func (h *entryHeap) pop() *entry {
	old := *h
	n := len(old) - 1
	e := old[0]
	h.swap(0, n)
	old[n] = nil
	*h = old[:n]
	if n > 0 {
		h.down(0)
	}
	e.idx = -1
	return e
}

// remove deletes the entry at index i in O(log n).
func (h *entryHeap) remove(i int) {
	old := *h
	n := len(old) - 1
	e := old[i]
	if i != n {
		h.swap(i, n)
	}
	old[n] = nil
	*h = old[:n]
	if i != n {
		if !h.down(i) {
			h.up(i)
		}
	}
	e.idx = -1
}

// init restores the heap property over the whole slice in O(n).
func (h entryHeap) init() {
	for i := range h {
		h[i].idx = i
	}
	for i := len(h)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

func (h entryHeap) swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx = i
	h[j].idx = j
}

func (h entryHeap) up(j int) {
	for j > 0 {
		i := (j - 1) / 2
		if !before(h[j], h[i]) {
			break
		}
		h.swap(i, j)
		j = i
	}
}

// down sifts h[i0] down and reports whether it moved.
func (h entryHeap) down(i0 int) bool {
	i := i0
	n := len(h)
	for {
		l := 2*i + 1
		if l >= n || l < 0 {
			break
		}
		j := l
		if r := l + 1; r < n && before(h[r], h[l]) {
			j = r
		}
		if !before(h[j], h[i]) {
			break
		}
		h.swap(i, j)
		i = j
	}
	return i > i0
}
