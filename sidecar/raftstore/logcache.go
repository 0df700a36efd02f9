package raftstore

import (
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"
)

// Bounds of the Raft log's tail cache (tailCache): the newest entries,
// at most this many and about this many bytes of entry data (the newest
// entry is kept whatever its size).
const (
	tailCacheEntries = 4096
	tailCacheBytes   = 16 << 20
)

// tailCache keeps the newest entries written to the Raft log in memory, so
// that reading them back does not touch the WAL. raft reads every entry it
// has just written at least once more: the leader to send it to each
// follower (setNewLogs, one GetLog per entry per AppendEntries), a follower
// to apply it once committed (processLogs). raft-wal serves each GetLog with
// a pread of at least 64 KiB, so without a cache a three-node cluster pays
// about five such reads per entry (measured: 12 % of the leader's CPU and
// 4–7 % of a follower's with 16 callers; docs/perf/README.md).
//
// It is raft.LogCache's idea, bounded in bytes as well as entries (an entry
// may carry up to maxBatchBytes of batched tasks) and without rewrapping
// the store's errors (the storage guard below it reads them). The cached
// entries are a contiguous run of indexes, [first, first+len(ents)). A
// write that does not continue the run starts a new one; DeleteRange drops
// what it deletes (the whole run when it reaches the run's tail: a
// follower's conflicting suffix). An entry's Data is shared, not copied:
// raft never changes an entry once written, and neither does the FSM. The
// raft.Log itself is copied: on the leader raft hands StoreLogs a pointer
// into the entry's future (&logFuture.log), and keeping that pointer kept
// the whole future alive, with its response, the FSM's []raftfsm.Result
// of the entry, whose tasks carry their payloads: a sharded run of 256
// tasks of 1 MB left its Fires' and Completes' 512 decoded tasks (519 MB)
// held by up to 4 096 entries of a few hundred bytes each, none of it
// counted against tailCacheBytes (TestTailCacheKeepsNoFutureAlive).
type tailCache struct {
	raft.LogStore

	mu    sync.RWMutex
	first uint64      // index of ents[0]
	ents  []*raft.Log // contiguous indexes from first
	bytes int         // sum of len(Data) over ents
	maxN  int
	maxB  int

	hits, misses atomic.Uint64 // GetLogs answered from memory, passed to the store

	// writing, when set, is told when each StoreLogs starts and returns.
	writing *LogWriting
	// sizes, when set, records the data length of every entry written
	// (not only the cached ones) until DeleteRange deletes it.
	sizes *entrySizes
	// suffixDeleted, when set, is told of each DeleteRange that removes a
	// suffix of the log (a follower dropping entries its leader replaced:
	// lo is above the first index), before it runs.
	suffixDeleted func(lo, hi uint64)
}

// newTailCache wraps s with a cache of its newest maxN entries and about
// maxB bytes of entry data.
func newTailCache(s raft.LogStore, maxN, maxB int) *tailCache {
	return &tailCache{LogStore: s, maxN: maxN, maxB: maxB}
}

// GetLog answers from memory when idx is cached, else from the store;
// an index below the store's FirstIndex is raft.ErrLogNotFound.
func (c *tailCache) GetLog(idx uint64, l *raft.Log) error {
	c.mu.RLock()
	if idx >= c.first && idx-c.first < uint64(len(c.ents)) {
		*l = *c.ents[idx-c.first]
		c.mu.RUnlock()
		c.hits.Add(1)
		return nil
	}
	c.mu.RUnlock()
	c.misses.Add(1)
	if first, err := c.LogStore.FirstIndex(); err == nil && idx < first {
		// raft-wal (v0.4.1) still answers entries a compaction deleted when
		// they share a segment with the first one kept (its head truncation
		// only moves the segment's MinIndex, and GetLog reads the tail
		// segment without checking it). raft must see them as gone: a
		// leader sends a follower a snapshot only when the entry before
		// the follower's next one is not found, and with the stale entry
		// it walked that follower's next index down one refused
		// AppendEntries at a time instead (e2e
		// TestSnapshot_LaggingFollowerCatchesUp).
		return raft.ErrLogNotFound
	}
	return c.LogStore.GetLog(idx, l)
}

// StoreLog stores one entry (StoreLogs).
func (c *tailCache) StoreLog(l *raft.Log) error {
	return c.StoreLogs([]*raft.Log{l})
}

// StoreLogs writes ls to the store and, when that succeeds, caches them;
// writing (when set) is busy from its start to its return. The store's
// error is returned as it is.
func (c *tailCache) StoreLogs(ls []*raft.Log) error {
	if c.writing != nil {
		c.writing.begin()
		defer c.writing.end()
	}
	if err := c.LogStore.StoreLogs(ls); err != nil {
		return err
	}
	if len(ls) == 0 {
		return nil
	}
	if c.sizes != nil {
		c.sizes.stored(ls)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.ents) == 0 || ls[0].Index != c.first+uint64(len(c.ents)) {
		c.ents, c.bytes, c.first = c.ents[:0], 0, ls[0].Index
	}
	for i, l := range ls {
		if i > 0 && l.Index != ls[i-1].Index+1 {
			// Not contiguous (raft never writes so): keep only what follows.
			c.ents, c.bytes, c.first = c.ents[:0], 0, l.Index
		}
		cp := *l // not l: it may point into raft's future of the entry (see tailCache)
		c.ents = append(c.ents, &cp)
		c.bytes += len(l.Data)
	}
	drop := 0
	for len(c.ents)-drop > 1 && (len(c.ents)-drop > c.maxN || c.bytes > c.maxB) {
		c.bytes -= len(c.ents[drop].Data)
		drop++
	}
	c.dropHead(drop)
	return nil
}

// dropHead forgets the n oldest cached entries; mu is held.
func (c *tailCache) dropHead(n int) {
	if n == 0 {
		return
	}
	clear(c.ents[:n]) // let the entries be collected
	c.ents = c.ents[n:]
	c.first += uint64(n)
	if cap(c.ents) > 2*c.maxN {
		// The run has walked far along its array: move it to the front of a
		// new one so the array does not grow without bound.
		c.ents = append(make([]*raft.Log, 0, c.maxN+1), c.ents...)
	}
}

// DeleteRange deletes [lo, hi] from the store and from the cache (and the
// sizes) first, so no deleted entry is ever answered from memory.
func (c *tailCache) DeleteRange(lo, hi uint64) error {
	if c.suffixDeleted != nil {
		if first, err := c.LogStore.FirstIndex(); err == nil && lo > first {
			c.suffixDeleted(lo, hi)
		}
	}
	if c.sizes != nil {
		c.sizes.deleted(lo, hi)
	}
	c.mu.Lock()
	if n := len(c.ents); n > 0 {
		last := c.first + uint64(n) - 1
		switch {
		case hi < c.first || lo > last:
			// Nothing cached in the range.
		case lo <= c.first && hi < last:
			// The head (compaction after a snapshot).
			k := int(hi - c.first + 1)
			for _, l := range c.ents[:k] {
				c.bytes -= len(l.Data)
			}
			c.dropHead(k)
		default:
			// The tail or all of it (a follower's conflicting suffix).
			clear(c.ents)
			c.ents, c.bytes = c.ents[:0], 0
		}
	}
	c.mu.Unlock()
	return c.LogStore.DeleteRange(lo, hi)
}

// IsMonotonic passes on the wrapped store's raft.MonotonicLogStore
// (guardedLogStore.IsMonotonic says why it matters).
func (c *tailCache) IsMonotonic() bool {
	m, ok := c.LogStore.(raft.MonotonicLogStore)
	return ok && m.IsMonotonic()
}

var _ raft.MonotonicLogStore = (*tailCache)(nil)
