package raftstore

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	wal "github.com/hashicorp/raft-wal"
	"github.com/rs/zerolog"

	"github.com/axsched/ax/raftfsm"
)

var testHlog = hclog.NewNullLogger()

// testEntries are n log entries from first on, of every type the log
// holds, with data of growing size (up to 64 KiB).
func testEntries(first, n uint64) []*raft.Log {
	types := []raft.LogType{raft.LogCommand, raft.LogNoop, raft.LogConfiguration, raft.LogBarrier}
	var ls []*raft.Log
	for i := range n {
		idx := first + i
		data := bytes.Repeat([]byte{byte(idx)}, int(idx*97%(64<<10)))
		ls = append(ls, &raft.Log{Index: idx, Term: 1 + idx/100, Type: types[idx%4], Data: data, Extensions: []byte(fmt.Sprint("ext", idx))})
	}
	return ls
}

// writeBoltLog writes a raft.db as an earlier version left it: the
// entries, and the term and vote when term > 0 (over the guard, if any).
func writeBoltLog(t *testing.T, path string, ls []*raft.Log, term uint64, cand string) {
	t.Helper()
	if isBoltGuard(path) {
		os.Remove(path)
	}
	b, err := raftboltdb.New(raftboltdb.Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if len(ls) > 0 {
		if err := b.StoreLogs(ls); err != nil {
			t.Fatal(err)
		}
	}
	if term > 0 {
		for k, v := range map[string]uint64{"CurrentTerm": term, "LastVoteTerm": term - 1} {
			if err := b.SetUint64([]byte(k), v); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.Set([]byte("LastVoteCand"), []byte(cand)); err != nil {
			t.Fatal(err)
		}
	}
}

// checkWAL opens dir/wal and checks it holds exactly want, the term and
// the vote.
func checkWAL(t *testing.T, dataDir string, want []*raft.Log, term uint64, cand string) {
	t.Helper()
	w, err := openWAL(filepath.Join(dataDir, walDirName), testHlog, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	first, _ := w.FirstIndex()
	last, _ := w.LastIndex()
	if len(want) == 0 {
		if last != 0 {
			t.Fatalf("WAL holds %d..%d, want nothing", first, last)
		}
	} else if first != want[0].Index || last != want[len(want)-1].Index {
		t.Fatalf("WAL holds %d..%d, want %d..%d", first, last, want[0].Index, want[len(want)-1].Index)
	}
	for _, e := range want {
		var got raft.Log
		if err := w.GetLog(e.Index, &got); err != nil {
			t.Fatalf("entry %d: %v", e.Index, err)
		}
		if got.Index != e.Index || got.Term != e.Term || got.Type != e.Type || !bytes.Equal(got.Data, e.Data) || !bytes.Equal(got.Extensions, e.Extensions) {
			t.Fatalf("entry %d: got index %d term %d type %v %d bytes, want term %d type %v %d bytes",
				e.Index, got.Index, got.Term, got.Type, len(got.Data), e.Term, e.Type, len(e.Data))
		}
	}
	if v, err := w.GetUint64([]byte("CurrentTerm")); err != nil || v != term {
		t.Fatalf("CurrentTerm %d (%v), want %d", v, err, term)
	}
	wantVote := uint64(0)
	if term > 0 {
		wantVote = term - 1
	}
	if v, err := w.GetUint64([]byte("LastVoteTerm")); err != nil || v != wantVote {
		t.Fatalf("LastVoteTerm %d (%v), want %d", v, err, wantVote)
	}
	if v, err := w.Get([]byte("LastVoteCand")); err != nil || string(v) != cand {
		t.Fatalf("LastVoteCand %q (%v), want %q", v, err, cand)
	}
}

func exists(path string) bool { _, err := os.Stat(path); return err == nil }

// An earlier version's raft.db is migrated to the WAL: every entry (a log
// compacted to start past 1, spanning several segments and migration
// batches), the term and the vote; raft.db is the guard and the temporary
// dir is gone.
// A bolt log without entries or without a vote migrates too.
func TestMigrateBoltLogCopiesEntriesTermAndVote(t *testing.T) {
	for _, tc := range []struct {
		name  string
		ls    []*raft.Log
		term  uint64
		cand  string
		check func(t *testing.T, dir string)
	}{
		{name: "entries", ls: testEntries(37, 700), term: 9, cand: "s2"},
		{name: "empty log", term: 3, cand: "s1"},
		{name: "never voted", ls: testEntries(1, 5)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeBoltLog(t, filepath.Join(dir, boltLogName), tc.ls, tc.term, tc.cand)
			if err := migrateBoltLog(dir, zerolog.New(zerolog.NewTestWriter(t)), testHlog); err != nil {
				t.Fatal(err)
			}
			if !isBoltGuard(filepath.Join(dir, boltLogName)) || exists(filepath.Join(dir, walMigrateName)) {
				t.Fatal("raft.db not the guard, or wal.migrating left, after the migration")
			}
			checkWAL(t, dir, tc.ls, tc.term, tc.cand)
			// Migrating again changes nothing.
			if err := migrateBoltLog(dir, zerolog.Nop(), testHlog); err != nil {
				t.Fatal(err)
			}
			checkWAL(t, dir, tc.ls, tc.term, tc.cand)
		})
	}
	// The entries span more than one segment and one migration batch.
	var sum int
	for _, l := range testEntries(37, 700) {
		sum += len(l.Data)
	}
	if sum < 2*walSegmentSize || sum < 2*migrateBatchBytes {
		t.Fatalf("test entries hold %d bytes: not enough to span segments and batches", sum)
	}
}

// A crash during the migration leaves a dir that starts: a partial
// wal.migrating beside raft.db is dropped and the migration runs again;
// a wal beside a bolt raft.db (a crash before its replacement) is kept,
// raft.db replaced by the guard. A dir with neither is a new node:
// nothing is made; nor with the guard alone, which is removed.
func TestMigrateBoltLogAfterACrash(t *testing.T) {
	ls := testEntries(1, 50)
	log := zerolog.New(zerolog.NewTestWriter(t))

	dir := t.TempDir()
	writeBoltLog(t, filepath.Join(dir, boltLogName), ls, 4, "s3")
	partial := filepath.Join(dir, walMigrateName)
	w, err := openWAL(mkdir(t, partial), testHlog, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.StoreLogs(testEntries(1, 3)); err != nil { // other entries, a copy cut short
		t.Fatal(err)
	}
	w.Close()
	if err := migrateBoltLog(dir, log, testHlog); err != nil {
		t.Fatal(err)
	}
	checkWAL(t, dir, ls, 4, "s3")

	// Crash after the rename: raft.db is still there, and is stale.
	writeBoltLog(t, filepath.Join(dir, boltLogName), testEntries(1, 2), 1, "s9")
	if err := migrateBoltLog(dir, log, testHlog); err != nil {
		t.Fatal(err)
	}
	if !isBoltGuard(filepath.Join(dir, boltLogName)) {
		t.Fatal("raft.db beside wal not replaced by the guard")
	}
	checkWAL(t, dir, ls, 4, "s3")

	empty := t.TempDir()
	if err := migrateBoltLog(empty, log, testHlog); err != nil {
		t.Fatal(err)
	}
	if names, _ := os.ReadDir(empty); len(names) != 0 {
		t.Fatalf("a new data dir got %v", names)
	}
	if err := writeBoltGuard(empty); err != nil {
		t.Fatal(err)
	}
	if hasLogStore(empty) {
		t.Fatal("the guard alone counts as a Raft log")
	}
	if err := migrateBoltLog(empty, log, testHlog); err != nil {
		t.Fatal(err)
	}
	if names, _ := os.ReadDir(empty); len(names) != 0 {
		t.Fatalf("the guard alone left %v", names)
	}
}

// Beside the WAL, raft.db is the guard, which an earlier version (it
// opened raft.db with raftboltdb.NewBoltStore, creating it when absent)
// cannot open: started on the dir after a downgrade it exits instead of
// starting a new Raft log over the applied state. A new node's dir gets
// it when the WAL is made, a migrated one in place of the bolt log; a
// raft.db.compact left by an earlier version's compaction is removed; the
// guard changes nothing at the next open.
func TestLogStoreLeavesARaftDBEarlierVersionsRefuse(t *testing.T) {
	log := zerolog.New(zerolog.NewTestWriter(t))
	fresh := t.TempDir()
	migrated := t.TempDir()
	writeBoltLog(t, filepath.Join(migrated, boltLogName), testEntries(1, 20), 2, "s1")
	if err := os.WriteFile(filepath.Join(migrated, boltCompactName), []byte("half a copy"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{fresh, migrated} {
		for range 2 {
			w, err := openLogStore(dir, log, testHlog, nil)
			if err != nil {
				t.Fatal(err)
			}
			w.Close()
			path := filepath.Join(dir, boltLogName)
			if !isBoltGuard(path) {
				t.Fatalf("%s: raft.db is not the guard", dir)
			}
			if b, err := raftboltdb.NewBoltStore(path); err == nil {
				b.Close()
				t.Fatalf("%s: an earlier version opens raft.db beside the WAL", dir)
			}
			if !isBoltGuard(path) || exists(filepath.Join(dir, boltCompactName)) || exists(filepath.Join(dir, boltGuardTmp)) {
				t.Fatalf("%s: raft.db changed by the refused open, or raft.db.compact or the guard's temporary file left", dir)
			}
		}
	}
	checkWAL(t, migrated, testEntries(1, 20), 2, "s1")
}

// A raft.db that cannot be read is an error and is kept, with no wal.
func TestMigrateBoltLogFailsOnABadFile(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, boltLogName), []byte("not a bolt file, not at all, no"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := migrateBoltLog(dir, zerolog.Nop(), testHlog)
	if err == nil || !strings.Contains(err.Error(), "migrate") {
		t.Fatalf("migrating a bad raft.db: %v", err)
	}
	if !exists(filepath.Join(dir, boltLogName)) || exists(filepath.Join(dir, walDirName)) || exists(filepath.Join(dir, walMigrateName)) {
		t.Fatal("a failed migration changed the dir")
	}
}

func mkdir(t *testing.T, dir string) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	return dir
}

// walToBolt turns a stopped node's data dir into what an earlier version
// wrote: its WAL copied into raft.db (entries, term, vote), wal and the
// guard removed.
func walToBolt(t *testing.T, dataDir string) (entries int) {
	t.Helper()
	if err := os.Remove(filepath.Join(dataDir, boltLogName)); err != nil {
		t.Fatal(err)
	}
	w, err := openWAL(filepath.Join(dataDir, walDirName), testHlog, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dataDir, boltLogName)})
	if err != nil {
		t.Fatal(err)
	}
	first, _ := w.FirstIndex()
	last, _ := w.LastIndex()
	for i := first; i <= last && last > 0; i++ {
		l := new(raft.Log)
		if err := w.GetLog(i, l); err != nil {
			t.Fatal(err)
		}
		if err := b.StoreLog(l); err != nil {
			t.Fatal(err)
		}
		entries++
	}
	for _, k := range raftStableUintKeys {
		v, err := w.GetUint64(k)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.SetUint64(k, v); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range raftStableKeys {
		v, err := w.Get(k)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Set(k, v); err != nil {
			t.Fatal(err)
		}
	}
	b.Close()
	w.Close()
	if err := os.RemoveAll(filepath.Join(dataDir, walDirName)); err != nil {
		t.Fatal(err)
	}
	return entries
}

// A node whose data dir an earlier version wrote (raft.db, no wal) starts
// on the migrated log: it has Raft state (no new bootstrap), and with its
// badger state wiped, the state comes back from the migrated entries
// alone; it then takes writes. Through Recover's dry run first (ax
// recover migrates too) and through StartRaft directly.
func TestNodeStartsOnAMigratedDataDir(t *testing.T) {
	for _, viaRecover := range []bool{false, true} {
		t.Run(fmt.Sprintf("recover=%v", viaRecover), func(t *testing.T) {
			dir := t.TempDir()
			cfg := testStoreConfig(t, dir)
			st := startTestStore(t, cfg, nil)
			p := NewProposer(ProposerConfig{Raft: st.Raft, Guard: st.Guard, Clock: cfg.Clock})
			ctx, cancel := context.WithCancel(context.Background())
			go p.Run(ctx)
			for i := range 30 {
				if _, err := p.Propose(ctx, []raftfsm.Command{nodeCmd(fmt.Sprint("n", i))}); err != nil {
					t.Fatal(err)
				}
			}
			cancel()
			stopTestStore(t, st)

			n := walToBolt(t, dir)
			if n < 30 {
				t.Fatalf("%d entries in the log, want 30 or more", n)
			}
			if err := os.RemoveAll(filepath.Join(dir, "state")); err != nil { // only the log holds the state now
				t.Fatal(err)
			}
			if viaRecover {
				res, err := Recover(cfg, "", false)
				if err != nil {
					t.Fatal(err)
				}
				if len(res.Old.Servers) != 1 || string(res.Old.Servers[0].ID) != cfg.NodeID {
					t.Fatalf("configuration read from the migrated log: %v", res.Old.Servers)
				}
			}
			st = startTestStore(t, cfg, nil)
			defer stopTestStore(t, st)
			if !st.HasState {
				t.Fatal("no Raft state after the migration")
			}
			if !isBoltGuard(filepath.Join(dir, boltLogName)) {
				t.Fatal("raft.db still there (not replaced by the guard)")
			}
			if err := st.Raft.Barrier(0).Error(); err != nil {
				t.Fatal(err)
			}
			if nodes, err := st.FSM.Nodes(); err != nil || len(nodes) != 30 {
				t.Fatalf("%d nodes after the migration (%v), want 30", len(nodes), err)
			}
			p = NewProposer(ProposerConfig{Raft: st.Raft, Guard: st.Guard, Clock: cfg.Clock})
			ctx, cancel = context.WithCancel(context.Background())
			defer cancel()
			go p.Run(ctx)
			if _, err := p.Propose(ctx, []raftfsm.Command{nodeCmd("after")}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A fresh node's Raft log takes one preallocated segment and the WAL's
// small meta file on disk.
func TestFreshWALFootprint(t *testing.T) {
	dir := t.TempDir()
	w, err := openLogStore(dir, zerolog.Nop(), testHlog, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.StoreLogs(testEntries(1, 1)); err != nil {
		t.Fatal(err)
	}
	w.Close()
	var size int64
	filepath.Walk(filepath.Join(dir, walDirName), func(_ string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			size += fi.Size()
		}
		return nil
	})
	if size > walSegmentSize+(1<<20) {
		t.Fatalf("a fresh WAL takes %d bytes, want at most a segment (%d) plus 1 MiB", size, walSegmentSize)
	}
	t.Logf("fresh WAL: %d KiB", size>>10)
}

// A log whose tail raft truncated (a follower's "clearing log suffix"
// after an election), then appended to and reopened, reads every entry:
// raft-wal v0.4.0 marked the truncated tail sealed without its index and
// failed every read of it after a restart (raft-wal#31), so a killed node
// could not start again.
func TestWALTailTruncationSurvivesReopen(t *testing.T) {
	dir := t.TempDir()
	w, err := openWAL(dir, testHlog, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.StoreLogs(testEntries(1, 10)); err != nil {
		t.Fatal(err)
	}
	if err := w.DeleteRange(9, 10); err != nil {
		t.Fatal(err)
	}
	want := append(testEntries(1, 8), testEntries(9, 4)...)
	for _, l := range want[8:] {
		l.Term += 5 // the new leader's entries
	}
	if err := w.StoreLogs(want[8:]); err != nil {
		t.Fatal(err)
	}
	w.Close()
	w, err = openWAL(dir, testHlog, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for _, e := range want {
		var got raft.Log
		if err := w.GetLog(e.Index, &got); err != nil {
			t.Fatalf("entry %d after the reopen: %v", e.Index, err)
		}
		if got.Term != e.Term || !bytes.Equal(got.Data, e.Data) {
			t.Fatalf("entry %d after the reopen: term %d, want %d", e.Index, got.Term, e.Term)
		}
	}
	if err := w.StoreLogs(testEntries(13, 1)); err != nil {
		t.Fatalf("append after the reopen: %v", err)
	}
}

// Raft sees the guarded WAL as a store without gaps (so a follower's
// installed snapshot clears its log rather than leaving a gap the WAL
// refuses); a store that allows gaps stays one.
func TestGuardedLogStoreIsMonotonic(t *testing.T) {
	w, err := openWAL(t.TempDir(), testHlog, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	var s raft.LogStore = guardedLogStore{LogStore: w}
	if m, ok := s.(raft.MonotonicLogStore); !ok || !m.IsMonotonic() {
		t.Fatal("the guarded WAL is not a MonotonicLogStore to raft")
	}
	s = guardedLogStore{LogStore: raft.NewInmemStore()}
	if s.(raft.MonotonicLogStore).IsMonotonic() {
		t.Fatal("the guarded in-memory store claims to be monotonic")
	}
}

var _ raft.LogStore = (*wal.WAL)(nil)

// BenchmarkLogAppend appends one 200-byte entry per op, synced, to the
// WAL and, for comparison, to the raft-boltdb store of earlier versions.
func BenchmarkLogAppend(b *testing.B) {
	data := bytes.Repeat([]byte{7}, 200)
	run := func(b *testing.B, s raft.LogStore) {
		b.ReportAllocs()
		for i := range b.N {
			if err := s.StoreLogs([]*raft.Log{{Index: uint64(i) + 1, Term: 1, Type: raft.LogCommand, Data: data}}); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("wal", func(b *testing.B) {
		w, err := openWAL(b.TempDir(), testHlog, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer w.Close()
		run(b, w)
	})
	b.Run("bolt", func(b *testing.B) {
		s, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(b.TempDir(), boltLogName)})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		run(b, s)
	})
}

// A guard that cannot be written (here its temporary file's name is taken
// by a dir; on a full disk, ENOSPC) does not stop the node: the log store
// opens, and a migrated raft.db is removed instead of replaced.
func TestLogStoreOpensWithoutTheGuard(t *testing.T) {
	dir := t.TempDir()
	writeBoltLog(t, filepath.Join(dir, boltLogName), testEntries(1, 5), 1, "s1")
	mkdir(t, filepath.Join(dir, boltGuardTmp, "x"))
	w, err := openLogStore(dir, zerolog.New(zerolog.NewTestWriter(t)), testHlog, nil)
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	if exists(filepath.Join(dir, boltLogName)) {
		t.Fatal("the migrated raft.db left beside the WAL")
	}
	checkWAL(t, dir, testEntries(1, 5), 1, "s1")
	w, err = openLogStore(dir, zerolog.Nop(), testHlog, nil)
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
}
