package raftstore

import (
	"bytes"
	"errors"
	"runtime"
	"strings"
	"testing"
	"weak"

	"github.com/hashicorp/raft"
	"github.com/rs/zerolog"

	"github.com/axsched/ax/internal/fsmtest"
	"github.com/axsched/ax/raftfsm"
)

// failingLogStore refuses writes while fail is set.
type failingLogStore struct {
	raft.LogStore
	fail error
}

func (s *failingLogStore) StoreLogs(ls []*raft.Log) error {
	if s.fail != nil {
		return s.fail
	}
	return s.LogStore.StoreLogs(ls)
}

// getLog reads idx through c and checks it against want (nil: absent).
func getLog(t *testing.T, c *tailCache, idx uint64, want *raft.Log) {
	t.Helper()
	var got raft.Log
	err := c.GetLog(idx, &got)
	if want == nil {
		if !errors.Is(err, raft.ErrLogNotFound) {
			t.Fatalf("GetLog(%d) = %v, want raft.ErrLogNotFound", idx, err)
		}
		return
	}
	if err != nil {
		t.Fatalf("GetLog(%d): %v", idx, err)
	}
	if got.Index != want.Index || got.Term != want.Term || got.Type != want.Type || !bytes.Equal(got.Data, want.Data) {
		t.Fatalf("GetLog(%d) = index %d term %d, want index %d term %d (or other data)", idx, got.Index, got.Term, want.Index, want.Term)
	}
}

// The entries just written are read back from memory, the older ones from
// the store, and the cache keeps to its bounds in entries and in bytes.
func TestTailCacheAnswersTheNewestEntriesFromMemory(t *testing.T) {
	c := newTailCache(raft.NewInmemStore(), 8, 1<<30)
	all := testEntries(1, 20)
	for i := 0; i < len(all); i += 5 {
		if err := c.StoreLogs(all[i : i+5]); err != nil {
			t.Fatal(err)
		}
	}
	for _, l := range all[12:] {
		getLog(t, c, l.Index, l)
	}
	if h, m := c.hits.Load(), c.misses.Load(); h != 8 || m != 0 {
		t.Fatalf("the 8 newest entries: %d hits, %d misses; want 8, 0", h, m)
	}
	getLog(t, c, 3, all[2])
	if m := c.misses.Load(); m != 1 {
		t.Fatalf("an entry past the cache's 8: %d misses, want 1 (read from the store)", m)
	}

	// In bytes: entries 1..20 carry idx*97 bytes; a bound of 4 000 keeps
	// 20, 19 (3 783 bytes) and not 18.
	c = newTailCache(raft.NewInmemStore(), 100, 4000)
	if err := c.StoreLogs(all); err != nil {
		t.Fatal(err)
	}
	if c.first != 19 || len(c.ents) != 2 || c.bytes != (19+20)*97 {
		t.Fatalf("cache of 4 000 bytes holds from %d, %d entries, %d bytes; want from 19, 2, %d", c.first, len(c.ents), c.bytes, (19+20)*97)
	}
	// The newest entry stays whatever its size.
	c = newTailCache(raft.NewInmemStore(), 100, 10)
	if err := c.StoreLogs(all); err != nil {
		t.Fatal(err)
	}
	if c.first != 20 || len(c.ents) != 1 {
		t.Fatalf("cache of 10 bytes holds from %d, %d entries; want the newest one", c.first, len(c.ents))
	}
}

// No deleted entry is answered from memory: compaction drops the head, a
// follower's truncated suffix drops the run, and a write that does not
// continue the run replaces it.
func TestTailCacheForgetsDeletedEntries(t *testing.T) {
	c := newTailCache(raft.NewInmemStore(), 100, 1<<30)
	all := testEntries(1, 10)
	if err := c.StoreLogs(all); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteRange(1, 4); err != nil { // compaction
		t.Fatal(err)
	}
	getLog(t, c, 4, nil)
	getLog(t, c, 5, all[4])
	if c.first != 5 || len(c.ents) != 6 {
		t.Fatalf("after compacting 1..4 the cache holds from %d, %d entries; want from 5, 6", c.first, len(c.ents))
	}
	if err := c.DeleteRange(8, 10); err != nil { // a conflicting suffix
		t.Fatal(err)
	}
	getLog(t, c, 8, nil)
	getLog(t, c, 10, nil)
	// The leader's entries 8..9 of a later term replace them.
	repl := []*raft.Log{{Index: 8, Term: 7, Type: raft.LogCommand, Data: []byte("new 8")}, {Index: 9, Term: 7, Type: raft.LogCommand, Data: []byte("new 9")}}
	if err := c.StoreLogs(repl); err != nil {
		t.Fatal(err)
	}
	getLog(t, c, 8, repl[0])
	getLog(t, c, 9, repl[1])
	getLog(t, c, 10, nil)
	getLog(t, c, 7, all[6]) // from the store
	if c.first != 8 || len(c.ents) != 2 {
		t.Fatalf("after the new suffix the cache holds from %d, %d entries; want from 8, 2", c.first, len(c.ents))
	}
}

// A write the store refuses is not cached, and its error reaches raft
// unchanged (the storage guard and raft's logs read it).
func TestTailCacheKeepsTheStoresError(t *testing.T) {
	inner := &failingLogStore{LogStore: raft.NewInmemStore()}
	c := newTailCache(inner, 100, 1<<30)
	all := testEntries(1, 4)
	if err := c.StoreLogs(all[:2]); err != nil {
		t.Fatal(err)
	}
	full := errors.New("no space left on device")
	inner.fail = full
	if err := c.StoreLogs(all[2:]); err != full {
		t.Fatalf("StoreLogs on a refusing store = %v, want the store's own error", err)
	}
	getLog(t, c, 3, nil)
	getLog(t, c, 2, all[1])
	if m, ok := any(newTailCache(guardedLogStore{LogStore: raft.NewInmemStore()}, 1, 1)).(raft.MonotonicLogStore); !ok || m.IsMonotonic() {
		t.Fatal("the cache over a store with gaps claims to be monotonic (or is no MonotonicLogStore)")
	}
}

// BenchmarkTailCacheGetLog reads back an entry just written to the WAL,
// as raft does once per follower and once per apply: through the cache,
// and straight from raft-wal.
func BenchmarkTailCacheGetLog(b *testing.B) {
	for _, cached := range []bool{true, false} {
		name := "wal"
		if cached {
			name = "cache"
		}
		b.Run(name, func(b *testing.B) {
			w, err := openWAL(b.TempDir(), testHlog, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer w.Close()
			var s raft.LogStore = w
			if cached {
				s = newTailCache(w, tailCacheEntries, tailCacheBytes)
			}
			ls := make([]*raft.Log, 256)
			for i := range ls {
				ls[i] = &raft.Log{Index: uint64(i + 1), Term: 1, Type: raft.LogCommand, Data: bytes.Repeat([]byte("x"), 200)}
			}
			if err := s.StoreLogs(ls); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			var l raft.Log
			for i := 0; i < b.N; i++ {
				if err := s.GetLog(uint64(i%256+1), &l); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// DeleteRange tells suffixDeleted of a suffix deletion (a follower's
// conflicting entries), not of a compaction of the log's head.
func TestTailCacheReportsSuffixDeletions(t *testing.T) {
	c := newTailCache(raft.NewInmemStore(), 8, 1<<20)
	var got [][2]uint64
	c.suffixDeleted = func(lo, hi uint64) { got = append(got, [2]uint64{lo, hi}) }
	var ls []*raft.Log
	for i := uint64(1); i <= 20; i++ {
		ls = append(ls, &raft.Log{Index: i, Term: 1, Type: raft.LogCommand})
	}
	if err := c.StoreLogs(ls); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteRange(1, 5); err != nil { // compaction
		t.Fatal(err)
	}
	if err := c.DeleteRange(15, 20); err != nil { // a conflicting suffix
		t.Fatal(err)
	}
	if len(got) != 1 || got[0] != [2]uint64{15, 20} {
		t.Fatalf("suffixDeleted calls %v, want [[15 20]]", got)
	}
}

// A suffix deleted from above the applied index is raft's usual repair of
// a follower's log; one from at or below it means the node applied an
// entry the cluster replaced: an error line and the counter.
func TestSuffixDeletedBelowAppliedIsReported(t *testing.T) {
	f := fsmtest.Open(t)
	for i := uint64(1); i <= 10; i++ {
		fsmtest.Apply(t, f, i, raftfsm.Command{Type: raftfsm.CmdPause, Pause: &raftfsm.Pause{Handler: "h", Paused: i%2 == 1, AtMs: int64(i)}})
	}
	var buf bytes.Buffer
	st := &Store{FSM: f, log: zerolog.New(&buf)}
	st.checkSuffixDeleted(11, 20)
	if st.appliedReplaced.Load() != 0 || strings.Contains(buf.String(), `"level":"error"`) {
		t.Fatalf("a suffix above the applied index reported: %d, %s", st.appliedReplaced.Load(), buf.String())
	}
	st.checkSuffixDeleted(10, 20)
	if st.appliedReplaced.Load() != 1 || !strings.Contains(buf.String(), `"level":"error"`) || !strings.Contains(buf.String(), `"applied":10`) {
		t.Fatalf("a suffix from the applied index not reported: %d, %s", st.appliedReplaced.Load(), buf.String())
	}
}

// An entry a compaction deleted is not found, even when raft-wal still
// holds it: its head truncation leaves the deleted entries of the segment
// it keeps readable. A leader that read one sent a follower that had just
// installed a snapshot AppendEntries after AppendEntries, one index lower
// each, instead of its snapshot (e2e TestSnapshot_LaggingFollowerCatchesUp
// did not converge in 30 s).
func TestTailCacheDeletedHeadIsNotFoundInRaftWAL(t *testing.T) {
	w, err := openLogStore(t.TempDir(), zerolog.Nop(), testHlog, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	all := testEntries(1, 300)
	// A cache of 10 entries, so that what is read below comes from the WAL.
	c := newTailCache(w, 10, 1<<30)
	for i := 0; i < len(all); i += 50 {
		if err := c.StoreLogs(all[i : i+50]); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.DeleteRange(1, 250); err != nil { // raft's compaction after a snapshot
		t.Fatal(err)
	}
	if first, _ := w.FirstIndex(); first != 251 {
		t.Fatalf("FirstIndex = %d after deleting 1..250, want 251", first)
	}
	// The premise: raft-wal itself still answers a deleted entry.
	var l raft.Log
	if err := w.GetLog(200, &l); err != nil {
		t.Logf("raft-wal no longer answers deleted entry 200 (%v): the check in tailCache.GetLog may be unneeded", err)
	}
	for _, idx := range []uint64{1, 200, 250} {
		getLog(t, c, idx, nil)
	}
	getLog(t, c, 251, all[250])
	getLog(t, c, 290, all[289])
}

// copyingLogStore keeps copies of the entries it stores, as the WAL keeps
// their bytes: it holds no pointer its caller gave it.
type copyingLogStore struct{ *raft.InmemStore }

func (s copyingLogStore) StoreLogs(ls []*raft.Log) error {
	cps := make([]*raft.Log, len(ls))
	for i, l := range ls {
		cp := *l
		cp.Data = bytes.Clone(l.Data)
		cps[i] = &cp
	}
	return s.InmemStore.StoreLogs(cps)
}

// fakeFuture is laid out as raft's logFuture is: the entry the leader
// hands StoreLogs (&f.log) inside the future that also holds the FSM's
// response.
type fakeFuture struct {
	log      raft.Log
	response []byte
}

// The cache keeps no pointer into what raft gave StoreLogs: on the leader
// that is the entry's future, whose response (the FSM's results, with the
// tasks of the entry and their payloads) it would keep alive with the
// entry. Fails with the cache keeping the raft.Log pointers it is given.
func TestTailCacheKeepsNoFutureAlive(t *testing.T) {
	c := newTailCache(copyingLogStore{raft.NewInmemStore()}, 100, 1<<20)
	f := &fakeFuture{log: raft.Log{Index: 1, Term: 1, Type: raft.LogCommand, Data: []byte("entry")}, response: make([]byte, 1<<20)}
	if err := c.StoreLogs([]*raft.Log{&f.log}); err != nil {
		t.Fatal(err)
	}
	gone := weak.Make(f)
	f = nil
	runtime.GC()
	if gone.Value() != nil {
		t.Fatal("the cached entry keeps the future StoreLogs was given (and its response) alive")
	}
	getLog(t, c, 1, &raft.Log{Index: 1, Term: 1, Type: raft.LogCommand, Data: []byte("entry")})
	if c.hits.Load() != 1 {
		t.Fatal("the entry is not answered from memory")
	}
}
