package raftstore

import (
	"sync"

	"github.com/hashicorp/raft"
)

// entrySizesMax bounds the entries whose sizes entrySizes keeps (4 bytes
// each: 4 MiB). A log holds about TrailingLogs plus SnapshotThreshold
// entries between two compactions (18 432 with the defaults), far fewer.
const entrySizesMax = 1 << 20

// entrySizes records the data length of each entry written to the Raft
// log, so that sizing the log's tail before a snapshot (trailingForBytes)
// does not read the entries back. Reading them cost the snapshot goroutine
// 16–450 ms of CPU every snapshot with 200 KB submits (an entry decoded
// and copied out of the WAL for each of thousands of entries; measured
// 2026-12-05, three nodes, --snapshot-interval 2s), time taken from the
// timers and requests on the same CPUs. The sizes are a contiguous run of
// indexes, [first, first+len(n)), kept like tailCache's entries: a write
// that does not continue the run starts a new one, DeleteRange drops what
// it deletes. Entries written before the process started are not in it;
// their sizes are read from the log as before. Safe for concurrent use.
type entrySizes struct {
	mu    sync.Mutex
	first uint64   // index of n[0]
	n     []uint32 // data lengths from first
	max   int      // entrySizesMax; less in tests
}

// stored records the entries of a successful write.
func (s *entrySizes) stored(ls []*raft.Log) {
	if len(ls) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range ls {
		if len(s.n) == 0 || l.Index != s.first+uint64(len(s.n)) {
			s.n, s.first = s.n[:0], l.Index
		}
		s.n = append(s.n, uint32(min(len(l.Data), 1<<32-1)))
	}
	if over := len(s.n) - s.limit(); over > 0 {
		s.dropHead(over)
	}
}

func (s *entrySizes) limit() int {
	if s.max > 0 {
		return s.max
	}
	return entrySizesMax
}

// dropHead forgets the k oldest sizes; mu is held.
func (s *entrySizes) dropHead(k int) {
	s.n = s.n[k:]
	s.first += uint64(k)
	if cap(s.n) > 2*s.limit() {
		// Move the run to the front of a new array so that it does not
		// grow without bound as the run walks along it.
		s.n = append(make([]uint32, 0, len(s.n)+1), s.n...)
	}
}

// deleted forgets the sizes of [lo, hi]: the head (a compaction after a
// snapshot), or the tail or all of it (a follower's conflicting suffix,
// a snapshot installed).
func (s *entrySizes) deleted(lo, hi uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.n) == 0 {
		return
	}
	last := s.first + uint64(len(s.n)) - 1
	switch {
	case hi < s.first || lo > last:
	case lo <= s.first && hi < last:
		s.dropHead(int(hi - s.first + 1))
	case lo > s.first:
		s.n = s.n[:lo-s.first]
	default:
		s.n = s.n[:0]
	}
}

// dataLen returns the data length of entry idx and true when it is
// recorded.
func (s *entrySizes) dataLen(idx uint64) (int, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if idx < s.first || idx-s.first >= uint64(len(s.n)) {
		return 0, false
	}
	return int(s.n[idx-s.first]), true
}
