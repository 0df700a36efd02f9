package raftfsm

import (
	"bytes"
	"math"
	"sync"
	"time"
)

const (
	// taskCacheSize bounds the task records the FSM keeps in memory after
	// writing them (taskCache). It is sized for a burst of 50 000 tasks
	// due at once, whose submits' records must still be held when they
	// fire; a larger burst keeps the records of the tasks due first
	// (taskCache's eviction).
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
	// record: the map's entry.
	taskCacheEntryOverhead = 80
	// taskCacheSample is how many cached records an eviction looks at
	// (taskCache.makeRoom).
	taskCacheSample = 16
	// taskCacheOverdue: a record whose next command has not come this
	// long after it was due (writeOp.stale) ranks as needed last.
	taskCacheOverdue = 10 * time.Second
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
// are not kept, so they push nothing out. Restore clears it. Records over
// taskCacheMaxRecord are not kept. A miss reads badger as before. It is
// memory only: a restarted node starts with none.
//
// Each record is ranked by when its next command is expected
// (writeOp.next): a WAITING task's due time, a RUNNING one's fire time
// (its Complete may come at once). A record still cached
// taskCacheOverdue after its due time, or after its attempt's lease
// (writeOp.stale), ranks as needed last: its command did not come when
// expected (a paused handler's tasks, tasks parked for want of an
// executor, an attempt that hangs), and it must not hold its place ahead
// of records that will be read. Time is the cache's own clock: the
// latest time of the commands that wrote the records it was given
// (writeOp.at), not the node's (a node replaying old entries ranks them
// as of their time). Past taskCacheSize records or taskCacheBytes
// bytes, the record ranked latest goes first, and a write ranked no
// sooner than the record it would push out is not kept:
// the cache holds the records expected to be read soonest, as Belady's
// rule does for reads whose times are known (L. A. Belady, "A study of
// replacement algorithms for a virtual-storage computer", IBM Systems
// Journal 5(2), 1966); here they are known only as the earliest time a
// read can come. The latest is looked for among taskCacheSample records
// met from a random place in the map (Go starts each iteration of a map
// at a random place; neighbours in hash order, unrelated to their times),
// as Redis samples its keys to approximate LRU ("maxmemory-samples"),
// rather than kept in an ordered structure that every write would pay
// for. A burst larger than the cache, due in the order it was submitted,
// so keeps the submits of the tasks due first until they fire, instead
// of letting every new submit push out the oldest record, of a task that
// fires sooner, and leaving each Fire to read badger (docs/perf/README.md,
// Eighteenth session). A large record that needs several evictions may
// push out records ranked later than itself and then find one ranked no
// later, and not be kept: the room it made is left for the next write.
type taskCache struct {
	mu    sync.Mutex
	m     map[string]cachedRecord
	bytes int    // sum of the cached entries' sizes (entrySize)
	hits  uint64 // reads served (tests)
	// maxN bounds the records kept; 0: taskCacheSize (tests set less).
	maxN int
	// now is the cache's clock: the latest writeOp.at committed (Unix
	// ms).
	now int64
}

type cachedRecord struct {
	val []byte
	// next and stale are the record's writeOp.next and writeOp.stale.
	next, stale int64
}

// rank is when a record is expected to be read (Unix ms), for eviction:
// its next time, or math.MaxInt64 once the clock is past its stale time.
// c.mu is held.
func (c *taskCache) rank(next, stale int64) int64 {
	if c.now > stale {
		return math.MaxInt64
	}
	return next
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
// value is kept (when there is room for it, makeRoom), a delete forgets
// the key.
func (c *taskCache) committed(ops []writeOp) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, op := range ops {
		c.now = max(c.now, op.at)
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
		}
		size := entrySize(k, op.val)
		if !c.makeRoom(size, c.rank(op.next, op.stale)) {
			continue
		}
		c.m[k] = cachedRecord{val: op.val, next: op.next, stale: op.stale}
		c.bytes += size
	}
}

// makeRoom evicts records until one of size bytes fits (taskCache's
// bounds), each time the one ranked latest of taskCacheSample records,
// and reports whether the record, ranked rank, is to be kept: not when
// the record to evict is ranked no later than it (it would push out a
// record needed as soon or sooner). c.mu is held.
func (c *taskCache) makeRoom(size int, rank int64) bool {
	maxN := c.maxN
	if maxN <= 0 {
		maxN = taskCacheSize
	}
	for len(c.m) > 0 && (len(c.m) >= maxN || c.bytes+size > taskCacheBytes) {
		victim, latest, i := "", int64(math.MinInt64), 0
		for k, r := range c.m {
			if rk := c.rank(r.next, r.stale); rk > latest {
				victim, latest = k, rk
			}
			if i++; i == taskCacheSample {
				break
			}
		}
		if latest <= rank {
			return false
		}
		c.drop(victim)
	}
	return true
}

// clear drops every record (a snapshot is being restored).
func (c *taskCache) clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.m)
	c.bytes, c.now = 0, 0
}
