package raftfsm

import (
	"bytes"
	"sync"
)

const (
	// taskCacheSize bounds the task records the FSM keeps in memory after
	// writing them (taskCache): its eviction ring's slots, one per kept
	// write. It is sized for a burst of 50 000 tasks due at once: their
	// submits' records must still be held when they fire, or the fires,
	// in the submits' order, each push out the record of a task that
	// fires later and every one reads badger (a first-in, first-out
	// cache against a scan longer than itself).
	taskCacheSize = 1 << 16
	// taskCacheBytes bounds the bytes of the records (their buffers'
	// capacity) and ids it keeps, each counted with
	// taskCacheEntryOverhead: records of ~250 bytes (buffers of ~350)
	// fill the slots first (about 30 MiB); records with large payloads
	// (up to 1 MiB each) are held to this.
	taskCacheBytes = 32 << 20
	// taskCacheMaxRecord is the largest record it keeps: a larger one
	// would push out hundreds of small ones, and its decode costs more
	// than the read it saves.
	taskCacheMaxRecord = 64 << 10
	// taskCacheEntryOverhead is what an entry costs beyond its id and
	// record: the map's entry and the ring's slot.
	taskCacheEntryOverhead = 96
)

// taskCache keeps the encoded records of the tasks the FSM wrote last, as
// committed to badger, so that the next command on a task (the Complete
// after its Fire, the Fire after its submit) decodes the record from
// memory instead of reading it back from badger: the record is often in a
// table by then, and that read was about a tenth of the node's CPU
// processing no-op tasks (docs/perf/processing.md).
//
// It holds only committed values: a writer forgets a task's record when it
// writes or deletes it (its later reads go to its own transaction) and
// puts the new value back once the part that wrote it has committed
// (writer.commit), unless no command is likely to read it soon: a new
// task due later than newTaskCacheWithin after its creation, and a record
// in a final state (State.Terminal: SUCCESS, DEAD, FAILED, CANCELLED;
// only a resubmit, retry or purge of the id reads it again). Those writes
// are not kept, so they push nothing out. Restore clears it. Records are dropped first in, first
// out, past taskCacheSize writes or taskCacheBytes bytes; records over
// taskCacheMaxRecord are not kept. A miss reads badger as before. It is
// memory only: a restarted node starts with none.
type taskCache struct {
	mu sync.Mutex
	m  map[string]cachedRecord
	// ring holds the writes in order, for eviction: n slots from head
	// (the oldest). A slot whose seq is no longer its key's in m was
	// superseded by a later write or forgotten; evicting it frees nothing.
	ring    []cacheSlot
	head, n int
	seq     uint64
	bytes   int    // sum of the cached entries' sizes (entrySize)
	hits    uint64 // reads served (tests)
}

type cachedRecord struct {
	val []byte
	seq uint64
}

type cacheSlot struct {
	key string
	seq uint64
}

func isTaskKey(key []byte) bool { return bytes.HasPrefix(key, prefixTask) }

// entrySize is what an entry of key and val counts against taskCacheBytes:
// val's capacity, which the entry keeps alive, not only its length (an
// encoded record's buffer is about 1.5 times the record).
func entrySize(key string, val []byte) int {
	return len(key) + cap(val) + taskCacheEntryOverhead
}

// get returns the cached record of key.
func (c *taskCache) get(key []byte) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.m[string(key)]
	if ok {
		c.hits++
	}
	return r.val, ok
}

// forget drops key's record: it is being written.
func (c *taskCache) forget(key []byte) {
	c.mu.Lock()
	c.drop(string(key))
	c.mu.Unlock()
}

// drop removes key's entry, if cached. c.mu is held.
func (c *taskCache) drop(key string) {
	if r, ok := c.m[key]; ok {
		c.bytes -= entrySize(key, r.val)
		delete(c.m, key)
	}
}

// committed records the task writes among ops, just committed: a set's
// value is kept, a delete forgets the key.
func (c *taskCache) committed(ops []writeOp) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, op := range ops {
		if !isTaskKey(op.key) || op.fresh && op.uncached {
			continue // a new record, not kept: nothing to drop either
		}
		k := string(op.key)
		c.drop(k)
		if op.del || op.uncached || cap(op.val) > taskCacheMaxRecord {
			continue
		}
		if c.m == nil {
			c.m = make(map[string]cachedRecord)
			c.ring = make([]cacheSlot, taskCacheSize)
		}
		size := entrySize(k, op.val)
		for c.n == len(c.ring) || (c.n > 0 && c.bytes+size > taskCacheBytes) {
			c.evictOldest()
		}
		c.seq++
		c.m[k] = cachedRecord{val: op.val, seq: c.seq}
		c.bytes += size
		c.ring[(c.head+c.n)%len(c.ring)] = cacheSlot{key: k, seq: c.seq}
		c.n++
	}
}

// evictOldest frees the ring's oldest slot, and its entry when the slot
// is still the entry's latest write. c.mu is held; c.n > 0.
func (c *taskCache) evictOldest() {
	old := c.ring[c.head]
	if r, ok := c.m[old.key]; ok && r.seq == old.seq {
		c.drop(old.key)
	}
	c.ring[c.head] = cacheSlot{}
	c.head = (c.head + 1) % len(c.ring)
	c.n--
}

// clear drops every record (a snapshot is being restored).
func (c *taskCache) clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.m)
	clear(c.ring)
	c.head, c.n, c.bytes = 0, 0, 0
}
