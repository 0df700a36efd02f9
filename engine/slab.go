package engine

import "hash/maphash"

// entry is one timer of a [TimerSet], stored by value in a [slab] and named
// by its int32 index there. The structures refer to entries by index, not
// by pointer, so an entry with a string payload is 32 bytes (half a cache
// line, never straddling two) and the garbage collector sees no pointer
// per timer beyond those in the payload.
//
// seq is the timer's arm number, a global wrapping counter: it orders
// timers with equal due times, and it is the generation of a
// [TimerHandle], so a handle names one arming of one entry and goes stale
// when the timer fires, is cancelled or is re-armed.
//
// pos packs the entry's state (which structure holds it) in its top three
// bits and a position in the low 29:
//
//   - stNear: the near heap; position = index in the heap;
//   - stWheel: a wheel slot (the slot follows from due); position = index
//     in the slot's vector;
//   - stFar: the far heap (position unused; the heap item names the entry
//     by index and arm number, see [farItem]);
//   - stFree: on the slab's free list; position = next free entry.
//
// An entry that is in no structure (between unlinking and placing again)
// has pos 0, state stFree with position 0; it is never on the free list
// then.
type entry[P any] struct {
	due     int64  // wall-clock due time, Unix nanoseconds (see unixNano)
	seq     uint32 // arm number, wrapping: generation and tie-break (see seqBefore)
	pos     uint32 // state<<posBits | position
	payload P
}

const (
	posBits = 29
	posMask = 1<<posBits - 1
	posNone = posMask // "no position": the end of the free list
)

func (e *entry[P]) state() entryState { return entryState(e.pos >> posBits) }

// index returns the position part of pos.
func (e *entry[P]) index() int32 { return int32(e.pos & posMask) }

func (e *entry[P]) setPos(st entryState, index int32) {
	e.pos = uint32(st)<<posBits | uint32(index)&posMask
}

// entryState tells which structure holds an entry.
type entryState uint8

const (
	stFree  entryState = iota
	stNear             // near heap: tick <= cursor
	stWheel            // wheel: cursor < tick <= cursor+slots
	stFar              // far heap: tick > cursor+slots
)

// seqBefore reports whether arm number a came before b. Arm numbers wrap
// around at 2^32; the comparison is right while the two were armed less
// than 2^31 arms apart, which is all it is used for: ordering timers with
// the same due time that are armed at the same time.
func seqBefore(a, b uint32) bool { return int32(a-b) < 0 }

// before orders entries by due time, then by arm order.
func before[P any](a, b *entry[P]) bool {
	if a.due != b.due {
		return a.due < b.due
	}
	return seqBefore(a.seq, b.seq)
}

// Slab geometry: entries are allocated in chunks of slabChunk, so the slab
// grows without copying and wastes at most one chunk.
const (
	slabChunkBits = 10
	slabChunk     = 1 << slabChunkBits
	slabMax       = posNone // indices must fit in a position; posNone is the list end
)

// slab stores entries in fixed chunks and recycles them through a free
// list (last in, first out, so a cancel followed by an arm reuses the
// entry the cancel just touched), so a steady arm/cancel/fire load
// allocates nothing.
type slab[P any] struct {
	chunks []*[slabChunk]entry[P]
	tags   []uint8 // one per entry: farTag of its far item, or tagNone
	free   int32   // head of the free list, -1 if empty
	used   int     // entries not on the free list
}

// Far tags: a side array of one byte per entry (1 MiB at a million, so it
// stays in the CPU's caches where the 32 MiB of entries do not), telling
// the far heap's compaction which items are live without reading their
// entries. An entry in the far heap has the tag farTag(seq) of its arm
// number; any other entry has tagNone. A far item whose tag differs from
// farTag(item.seq) is stale; one whose tag matches is live, or stale with
// an arm number equal to the live one's in the low 7 bits (about 1 stale
// item in 128 of those whose entry is far again with random arm numbers;
// all of them when an entry is re-armed every 128·k arms): compaction
// keeps those, and [TimerSet.farTop], which reads the entry, drops them,
// or compaction itself when they are many (see compactFar).
const tagNone = 0

// farTag is the tag of an entry whose live far item has arm number seq.
func farTag(seq uint32) uint8 { return 0x80 | uint8(seq&0x7F) }

func newSlab[P any]() slab[P] { return slab[P]{free: -1} }

// at returns entry i. The pointer stays valid until the slab shrinks, which
// it does only when every entry is free.
func (s *slab[P]) at(i int32) *entry[P] {
	return &s.chunks[i>>slabChunkBits][i&(slabChunk-1)]
}

// alloc returns the index of an entry in no structure. Its payload is the
// zero value; due and seq are left over and must be set.
func (s *slab[P]) alloc() int32 {
	if s.free < 0 {
		s.grow()
	}
	i := s.free
	e := s.at(i)
	if n := e.index(); n == posNone {
		s.free = -1
	} else {
		s.free = n
	}
	e.pos = 0
	s.used++
	return i
}

// release returns entry i, no longer referenced by any structure, to the
// free list. It clears the payload so that what it points to can be
// collected, and keeps seq, so that a stale handle or heap item never
// matches the free entry by arm number alone (see [TimerSet.live]).
func (s *slab[P]) release(i int32) {
	e := s.at(i)
	var zero P
	e.payload = zero
	e.setPos(stFree, s.freeLink())
	s.free = i
	s.used--
	if s.used == 0 && len(s.chunks) > 1 {
		s.shrink()
	}
}

// freeLink returns the free list head as a position.
func (s *slab[P]) freeLink() int32 {
	if s.free < 0 {
		return posNone
	}
	return s.free
}

func (s *slab[P]) grow() {
	n := len(s.chunks)
	if (n+1)*slabChunk > slabMax {
		panic("engine: TimerSet: too many timers")
	}
	c := new([slabChunk]entry[P])
	base := int32(n * slabChunk)
	for j := range c {
		c[j].setPos(stFree, base+int32(j)+1)
	}
	c[slabChunk-1].setPos(stFree, s.freeLink())
	s.chunks = append(s.chunks, c)
	s.tags = append(s.tags, make([]uint8, slabChunk)...) // tagNone
	s.free = base
}

// shrink drops every chunk but the first once the slab is empty, so that a
// set that held a million timers once does not keep their memory. The
// caller must drop every index into the dropped chunks (the far heap's
// stale items, see [TimerSet.release]).
func (s *slab[P]) shrink() {
	clear(s.chunks[1:])
	s.chunks = s.chunks[:1]
	s.tags = make([]uint8, slabChunk) // tagNone; drops the large array
	c := s.chunks[0]
	for j := range c {
		c[j] = entry[P]{seq: c[j].seq}
		c[j].setPos(stFree, int32(j)+1)
	}
	c[slabChunk-1].setPos(stFree, posNone)
	s.free = 0
}

// keyIndex maps keys to slab indices: an open-addressing hash table with
// linear probing, split by the top bits of the hash into keyTabs tables that
// grow independently (so growing never rehashes more than 1/keyTabs of the
// keys at once). A slot holds the low 32 bits of the key's hash and the
// entry's index + 1 (0 marks an empty slot), 8 bytes; the hash bits let a
// probe skip other keys without reading their entries, and let deletion
// and growth move slots without rehashing keys. Deletion shifts the
// following slots back, so there are no tombstones. Tables are kept at most
// 3/4 full: 8 bytes / load = 10.7 to 21.3 bytes per key.
type keyIndex struct {
	seed maphash.Seed
	tabs [keyTabs]keyTab
	n    int
}

const (
	keyTabBits = 6
	keyTabs    = 1 << keyTabBits
	keyTabMin  = 8 // slots of a table's first allocation
	// keyTabShrink: a table larger than this drops its slots when it
	// empties; smaller ones keep them, so a table that keeps emptying and
	// refilling does not allocate each time.
	keyTabShrink = 256
)

type keyTab struct {
	slots []uint64 // hash32<<32 | idx+1, or 0
	n     int
}

func newKeyIndex() keyIndex { return keyIndex{seed: maphash.MakeSeed()} }

// hash returns key's 64-bit hash. It reads only the seed, which never
// changes, so it may be called without the Timers' lock.
func (k *keyIndex) hash(key string) uint64 { return maphash.String(k.seed, key) }

// tab returns the table for hash h.
func (k *keyIndex) tab(h uint64) *keyTab { return &k.tabs[h>>(64-keyTabBits)] }

// find looks key (with hash h) up in t. It returns the slot and the entry
// index if found; otherwise the empty slot where key would go (or -1 if t
// has no slots yet) and found = false.
func (t *keyTab) find(h uint64, key string, s *slab[string]) (pos int, idx int32, found bool) {
	if len(t.slots) == 0 {
		return -1, -1, false
	}
	mask := len(t.slots) - 1
	h32 := uint32(h)
	for i := int(h32) & mask; ; i = (i + 1) & mask {
		v := t.slots[i]
		if v == 0 {
			return i, -1, false
		}
		if uint32(v>>32) == h32 {
			if j := int32(uint32(v)) - 1; s.at(j).payload == key {
				return i, j, true
			}
		}
	}
}

// findIdx returns the slot of t that holds entry idx, whose key hashes to h.
// The entry must be in t.
func (t *keyTab) findIdx(h uint64, idx int32) int {
	mask := len(t.slots) - 1
	want := uint64(uint32(h))<<32 | uint64(uint32(idx)+1)
	for i := int(uint32(h)) & mask; ; i = (i + 1) & mask {
		if t.slots[i] == want {
			return i
		}
	}
}

// reserve makes room for one more key: it grows t if adding a key would
// fill it beyond 3/4. Call it before find when the key may be added, since
// growing moves slots.
func (t *keyTab) reserve() {
	if (t.n+1)*4 <= len(t.slots)*3 {
		return
	}
	old := t.slots
	size := max(2*len(old), keyTabMin)
	t.slots = make([]uint64, size)
	mask := size - 1
	for _, v := range old {
		if v == 0 {
			continue
		}
		i := int(uint32(v>>32)) & mask
		for t.slots[i] != 0 {
			i = (i + 1) & mask
		}
		t.slots[i] = v
	}
}

// put stores idx for hash h at pos, an empty slot returned by find after
// reserve.
func (t *keyTab) put(pos int, h uint64, idx int32) {
	t.slots[pos] = uint64(uint32(h))<<32 | uint64(uint32(idx)+1)
	t.n++
}

// del empties slot pos and shifts back the slots after it that probed past
// it (backward-shift deletion: no tombstones).
func (t *keyTab) del(pos int) {
	mask := len(t.slots) - 1
	hole := pos
	for j := (pos + 1) & mask; ; j = (j + 1) & mask {
		v := t.slots[j]
		if v == 0 {
			break
		}
		home := int(uint32(v>>32)) & mask
		// v may move to the hole unless its home lies cyclically in
		// (hole, j].
		if (j-home)&mask >= (j-hole)&mask {
			t.slots[hole] = v
			hole = j
		}
	}
	t.slots[hole] = 0
	t.n--
	if t.n == 0 && len(t.slots) > keyTabShrink {
		t.slots = nil // a big table that emptied returns its memory
	}
}
