package raftfsm

import (
	"bytes"
	"sync"
)

// taskCacheSize bounds the task records the FSM keeps in memory after
// writing them (taskCache): about 9 MiB of records of ~250 bytes with
// their ids.
const taskCacheSize = 1 << 15

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
// (writer.commit). Restore clears it. A record is dropped first in, first
// out past taskCacheSize; a miss reads badger as before. It is memory
// only: a restarted node starts with none.
type taskCache struct {
	mu   sync.Mutex
	m    map[string]cachedRecord
	ring []cacheSlot // insertion order, for eviction
	next int         // ring's next slot
	seq  uint64
	hits uint64 // reads served (tests)
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
	delete(c.m, string(key))
	c.mu.Unlock()
}

// committed records the task writes among ops, just committed: a set's
// value is kept, a delete forgets the key.
func (c *taskCache) committed(ops []writeOp) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, op := range ops {
		if !isTaskKey(op.key) {
			continue
		}
		if op.del {
			delete(c.m, string(op.key))
			continue
		}
		if c.m == nil {
			c.m = make(map[string]cachedRecord, taskCacheSize)
			c.ring = make([]cacheSlot, taskCacheSize)
		}
		old := c.ring[c.next]
		if r, ok := c.m[old.key]; ok && r.seq == old.seq {
			delete(c.m, old.key) // the oldest record still cached as put then
		}
		c.seq++
		k := string(op.key)
		c.m[k] = cachedRecord{val: op.val, seq: c.seq}
		c.ring[c.next] = cacheSlot{key: k, seq: c.seq}
		c.next = (c.next + 1) % len(c.ring)
	}
}

// clear drops every record (a snapshot is being restored).
func (c *taskCache) clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.m)
	clear(c.ring)
	c.next = 0
}
