package raftstore

import (
	"slices"
	"testing"

	"github.com/hashicorp/raft"
)

// countingLogs counts the entries read back from a log store.
type countingLogs struct {
	raft.LogStore
	reads int
}

func (c *countingLogs) GetLog(idx uint64, l *raft.Log) error {
	c.reads++
	return c.LogStore.GetLog(idx, l)
}

// known lists the indexes in [lo, hi] whose sizes s has, with each size.
func known(s *entrySizes, lo, hi uint64) map[uint64]int {
	m := map[uint64]int{}
	for i := lo; i <= hi; i++ {
		if n, ok := s.dataLen(i); ok {
			m[i] = n
		}
	}
	return m
}

func storeSized(t *testing.T, c *tailCache, from, to uint64) {
	t.Helper()
	var ls []*raft.Log
	for i := from; i <= to; i++ {
		ls = append(ls, &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: make([]byte, 10*i)})
	}
	if err := c.StoreLogs(ls); err != nil {
		t.Fatal(err)
	}
}

// The sizes follow the log through the tail cache: writes add them,
// a head compaction and a follower's truncated suffix drop them, a write
// that does not continue the run starts a new one, and the bound keeps
// the newest.
func TestEntrySizesFollowTheLog(t *testing.T) {
	var s entrySizes
	c := newTailCache(raft.NewInmemStore(), 4, 1<<20) // caches 4 entries, sizes all
	c.sizes = &s
	storeSized(t, c, 1, 6)
	storeSized(t, c, 7, 10)
	if got := known(&s, 0, 12); len(got) != 10 || got[1] != 10 || got[10] != 100 {
		t.Fatalf("after writes: %v", got)
	}
	if err := c.DeleteRange(1, 4); err != nil { // compaction after a snapshot
		t.Fatal(err)
	}
	got := known(&s, 0, 12)
	if _, ok := got[4]; ok || len(got) != 6 || got[5] != 50 {
		t.Fatalf("after the head's deletion: %v", got)
	}
	if err := c.DeleteRange(8, 10); err != nil { // a conflicting suffix
		t.Fatal(err)
	}
	if got := known(&s, 0, 12); len(got) != 3 || got[7] != 70 {
		t.Fatalf("after the tail's deletion: %v", got)
	}
	storeSized(t, c, 8, 9) // the suffix written again
	if got := known(&s, 0, 12); len(got) != 5 || got[9] != 90 {
		t.Fatalf("after the suffix rewritten: %v", got)
	}
	if err := c.DeleteRange(5, 9); err != nil { // all of it (a snapshot installed)
		t.Fatal(err)
	}
	if got := known(&s, 0, 12); len(got) != 0 {
		t.Fatalf("after deleting all: %v", got)
	}
	storeSized(t, c, 100, 101)
	storeSized(t, c, 200, 200) // not contiguous: a new run
	if got := known(&s, 0, 300); len(got) != 1 || got[200] != 2000 {
		t.Fatalf("after a gap: %v", got)
	}

	b := entrySizes{max: 3}
	for i := uint64(1); i <= 50; i++ {
		b.stored([]*raft.Log{{Index: i, Data: make([]byte, i)}})
	}
	if got := known(&b, 0, 60); len(got) != 3 || got[48] != 48 || got[50] != 50 {
		t.Fatalf("bounded: %v", got)
	}
	if cap(b.n) > 2*b.max+1 {
		t.Fatalf("the run's array grew to %d for a bound of %d", cap(b.n), b.max)
	}
}

// With the sizes recorded, sizing the log's tail before a snapshot reads
// no entry back and gives what reading them gives; entries written before
// the record (a restarted node's) are read.
func TestTrailingForBytesFromRecordedSizes(t *testing.T) {
	logs := &countingLogs{LogStore: raft.NewInmemStore()}
	var s entrySizes
	c := newTailCache(logs, 2, 1<<20)
	c.sizes = &s
	storeSized(t, c, 1, 40)
	var want, got []uint64
	for _, maxBytes := range []uint64{0, 400 + raftEntryOverhead, 1000, 5000, 1 << 40} {
		for _, maxEntries := range []uint64{3, 10240} {
			w, err := trailingForBytes(logs, nil, maxEntries, maxBytes)
			if err != nil {
				t.Fatal(err)
			}
			want = append(want, w)
			logs.reads = 0
			g, err := trailingForBytes(logs, s.dataLen, maxEntries, maxBytes)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, g)
			if logs.reads != 0 {
				t.Fatalf("read %d entries back for %d bytes, %d entries", logs.reads, maxBytes, maxEntries)
			}
		}
	}
	if !slices.Equal(got, want) || want[len(want)-1] != 40 {
		t.Fatalf("from sizes %v, from the entries %v", got, want)
	}

	var fresh entrySizes // a restarted node: the old entries are read
	logs.reads = 0
	if n, err := trailingForBytes(logs, fresh.dataLen, 10240, 1<<40); err != nil || n != 40 || logs.reads != 40 {
		t.Fatalf("without sizes: %d entries, %v, %d reads", n, err, logs.reads)
	}
}
