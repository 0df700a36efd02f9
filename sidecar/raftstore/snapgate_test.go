package raftstore

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/axsched/ax/raftfsm"
	"github.com/hashicorp/raft"
	"github.com/rs/zerolog"
)

// testSnapStore is a gatedSnapshotStore over a real FileSnapshotStore in
// a temp dir, with a fake free-space source (bytes in free).
func testSnapStore(t *testing.T) (*gatedSnapshotStore, *atomic.Uint64) {
	base := t.TempDir()
	fs, err := raft.NewFileSnapshotStore(base, fileSnapshotsRetained, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var free atomic.Uint64
	s := &gatedSnapshotStore{
		SnapshotStore: fs, dir: filepath.Join(base, "snapshots"), log: zerolog.New(zerolog.NewTestWriter(t)),
		freeSpace: func() (DiskFree, error) { return DiskFree{Bytes: free.Load(), Inodes: -1}, nil },
		reserve:   func() uint64 { return testReserve },
		tasks:     func() int64 { return 1000 },
		diskSize:  func() uint64 { return 10 << 20 },
	}
	return s, &free
}

func createSnap(s *gatedSnapshotStore, index uint64) (raft.SnapshotSink, error) {
	return s.Create(1, index, 1, raft.Configuration{}, 1, nil)
}

// writeSnap stores a snapshot at index of fileBytes zero bytes, telling
// the state's size when stateBytes is not 0 (our FSM's Persist does; raft
// storing a snapshot installed from the leader does not), and returns its
// sink.
func writeSnap(t *testing.T, s *gatedSnapshotStore, index uint64, fileBytes int, stateBytes uint64) raft.SnapshotSink {
	t.Helper()
	sink, err := createSnap(s, index)
	if err != nil {
		t.Fatal(err)
	}
	sink.Write(make([]byte, fileBytes))
	if stateBytes != 0 {
		sink.(raftfsm.StateSizeSink).SetStateBytes(stateBytes)
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	return sink
}

func tmpDirs(t *testing.T, dir string) []string {
	m, err := filepath.Glob(filepath.Join(dir, "*.tmp"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// A snapshot starts only when free space covers its expected size plus
// the reserve: badger's size before any snapshot, then the last
// snapshot's size scaled by the task count.
func TestSnapshotGate(t *testing.T) {
	s, free := testSnapStore(t)
	const M = 1 << 20
	free.Store(testReserve + 10*M - 1) // badger is 10 MiB: one byte short
	if _, err := createSnap(s, 10); !errors.Is(err, errSnapshotSkipped) {
		t.Fatalf("Create with too little free space: %v", err)
	}
	if metas, _ := s.List(); len(metas) != 0 || len(tmpDirs(t, s.dir)) != 0 {
		t.Fatalf("a skipped snapshot left files: %v", metas)
	}
	if s.skipped.Load() != 1 {
		t.Fatalf("skipped %d", s.skipped.Load())
	}
	free.Store(testReserve + 10*M)
	sink, err := createSnap(s, 10)
	if err != nil {
		t.Fatalf("Create with enough free space: %v", err)
	}
	persisted := 0
	s.persisted = func() { persisted++ }
	if _, err := sink.Write(bytes.Repeat([]byte{1}, 2*M)); err != nil {
		t.Fatal(err)
	}
	sink.(raftfsm.StateSizeSink).SetStateBytes(2 * M) // as raftfsm's Persist tells
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	if metas, _ := s.List(); len(metas) != 1 || metas[0].Size != 2*M || persisted != 1 {
		t.Fatalf("snapshot not stored: %v, persisted %d", metas, persisted)
	}
	// The estimate follows the task count: a purge of 90 % of the tasks
	// makes the next snapshot expected at about a tenth.
	if got := s.est.expected(1000, func() uint64 { return 10 * M }); got != 2*M {
		t.Fatalf("expected at the same count: %d", got)
	}
	if got := s.est.expected(100, func() uint64 { return 10 * M }); got < M/5 || got > M/4 {
		t.Fatalf("expected after a purge of 90%%: %d", got)
	}
	s.tasks = func() int64 { return 100 }
	free.Store(testReserve + M/2)
	if _, err := createSnap(s, 11); err != nil {
		t.Fatalf("Create after a purge: %v", err)
	}
}

// A snapshot whose writes would take free space below the reserve is
// failed by its sink; cancelled, its temp dir is removed, and the
// estimate is raised to what it had written.
func TestSnapshotSinkStopsAtTheReserve(t *testing.T) {
	s, free := testSnapStore(t)
	const M = 1 << 20
	s.est.record(64<<10, 1000) // a small last snapshot: the estimate is low
	free.Store(testReserve + M)
	sink, err := createSnap(s, 10)
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 64<<10)
	var werr error
	written := 0
	for i := 0; i < 64 && werr == nil; i++ {
		if i == 8 { // 512 KiB written: the disk fills up meanwhile
			free.Store(testReserve + 256<<10)
		}
		var n int
		n, werr = sink.Write(chunk)
		written += n
	}
	if werr == nil || written != 512<<10 {
		t.Fatalf("sink wrote %d bytes, err %v", written, werr)
	}
	if len(tmpDirs(t, s.dir)) != 1 {
		t.Fatal("no temp dir while writing")
	}
	if err := sink.Cancel(); err != nil {
		t.Fatal(err)
	}
	if m := tmpDirs(t, s.dir); len(m) != 0 {
		t.Fatalf("temp dir left after Cancel: %v", m)
	}
	if metas, _ := s.List(); len(metas) != 0 {
		t.Fatalf("a cancelled snapshot was kept: %v", metas)
	}
	if got := s.est.expected(1000, func() uint64 { return 0 }); got != 768<<10 {
		t.Fatalf("estimate after the cancelled snapshot: %d, want 1.5 x the 512 KiB it wrote", got)
	}
	// Free space that covers what the cancelled one wrote does not start
	// another: it would be cancelled at the same point again.
	free.Store(testReserve + 600<<10)
	if _, err := createSnap(s, 12); err == nil {
		t.Fatal("a snapshot started again from the free space its cancelled predecessor filled")
	}
	// Close after a failed write cancels too.
	free.Store(testReserve + M)
	sink, err = createSnap(s, 11)
	if err != nil {
		t.Fatal(err)
	}
	free.Store(0)
	if _, err := sink.Write(chunk); err == nil {
		t.Fatal("write at 0 bytes free accepted")
	}
	if err := sink.Close(); err == nil || len(tmpDirs(t, s.dir)) != 0 {
		t.Fatalf("Close after a failed write: %v, temp dirs %v", err, tmpDirs(t, s.dir))
	}
}

// At start, temp dirs of unfinished snapshots are removed; finished
// snapshots stay.
func TestRemoveStaleSnapshotTemps(t *testing.T) {
	s, free := testSnapStore(t)
	free.Store(1 << 30)
	sink, err := createSnap(s, 10)
	if err != nil {
		t.Fatal(err)
	}
	sink.Write([]byte("state"))
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(s.dir, "2-20-1700000000000.tmp")
	if err := os.MkdirAll(stale, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(stale, "state.bin"), make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	if freed := removeStaleSnapshotTemps(s.dir, s.log); freed != 1<<20 {
		t.Fatalf("freed %d", freed)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Fatalf("stale temp dir still there: %v", err)
	}
	if metas, _ := s.List(); len(metas) != 1 {
		t.Fatalf("finished snapshot lost: %v", metas)
	}
}

// trailingForBytes keeps the newest entries that fit the byte bound, at
// most the entry bound.
func TestTrailingForBytes(t *testing.T) {
	logs := raft.NewInmemStore()
	const M = 1 << 20
	for i := uint64(1); i <= 10; i++ {
		size := M
		if i == 10 {
			size = 5 * M // the newest entry is large
		}
		if err := logs.StoreLog(&raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: make([]byte, size)}); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		maxEntries, maxBytes, want uint64
	}{
		{10240, 1 << 40, 10},
		{4, 1 << 40, 4},
		{10240, 8*M + 4*raftEntryOverhead, 4}, // 5 + 1 + 1 + 1 MiB
		{10240, 8*M + 3*raftEntryOverhead, 3},
		{10240, 4 * M, 0}, // not even the newest
	}
	for _, c := range cases {
		got, err := trailingForBytes(logs, nil, c.maxEntries, c.maxBytes)
		if err != nil || got != c.want {
			t.Errorf("trailingForBytes(%d entries, %d bytes) = %d, %v; want %d", c.maxEntries, c.maxBytes, got, err, c.want)
		}
	}
	if err := logs.DeleteRange(1, 8); err != nil {
		t.Fatal(err)
	}
	if got, _ := trailingForBytes(logs, nil, 10240, 1<<40); got != 2 {
		t.Errorf("after compaction: %d, want 2", got)
	}
	if got, _ := trailingForBytes(raft.NewInmemStore(), nil, 10240, 1<<40); got != 10240 {
		t.Errorf("empty log: %d", got)
	}
}

// The task count and state size of the newest snapshot survive a
// restart, so the estimate still follows the count (a purge before the
// restart) and the byte trigger the state's size.
func TestSnapshotEstimateSurvivesRestart(t *testing.T) {
	s, free := testSnapStore(t)
	free.Store(1 << 30)
	writeSnap(t, s, 10, 1<<20, 9<<20)
	metas, _ := s.List()
	if len(metas) != 1 {
		t.Fatalf("snapshots %v", metas)
	}
	if got := s.loadEstimate(metas[0].ID); got.Tasks != 1000 || got.StateBytes != 9<<20 || got.Size != 1<<20 {
		t.Fatalf("recorded %+v, want 1000 tasks, 9 MiB of state in a 1 MiB file", got)
	}
	if got := s.loadEstimate("1-2-3"); got.Tasks != -1 || got.StateBytes != 0 {
		t.Fatalf("record of another snapshot: %+v", got)
	}
}

// The byte trigger and the free-space estimate follow the state's size the
// FSM reports, not the compressed file's (about ten times smaller): a
// snapshot reads the whole state, so a trigger at the file's size would
// snapshot ten times as often once the state is larger than the bound, and
// the room the write gate keeps is also where the log grows until the next
// snapshot. A snapshot whose state size is not told (one installed from the
// leader) counts by the larger of its file and the estimate.
func TestByteTriggerFollowsTheStateNotTheFile(t *testing.T) {
	s, free := testSnapStore(t)
	const M = 1 << 20
	free.Store(testReserve + 1024*M)
	writeSnap(t, s, 10, 30*M, 300*M)
	if got := s.expectedSize(); got != 300*M {
		t.Fatalf("expected next snapshot %d MiB, want the state's 300 (the room the log may grow into)", got/M)
	}
	if got := s.byteTrigger(64 * M); got != 300*M {
		t.Fatalf("trigger %d MiB, want the state's 300", got/M)
	}
	writeSnap(t, s, 20, 100*M, 0)
	if got := s.byteTrigger(64 * M); got != 300*M {
		t.Fatalf("state size not told, file smaller than expected: trigger %d MiB, want the expected 300", got/M)
	}
	writeSnap(t, s, 30, 400*M, 0)
	if got := s.byteTrigger(64 * M); got != 400*M {
		t.Fatalf("state size not told, file larger than expected: trigger %d MiB, want the file's 400", got/M)
	}
}

// leakyStore is a snapshot store whose sink, like raft's FileSnapshotSink
// when its final flush fails (ENOSPC), leaves its temp dir on Cancel.
type leakyStore struct {
	raft.SnapshotStore
	dir string
}

type leakySink struct {
	bytes.Buffer
	id string
}

func (s *leakySink) ID() string    { return s.id }
func (s *leakySink) Close() error  { return errors.New("close: no space left on device") }
func (s *leakySink) Cancel() error { return errors.New("flush: no space left on device") }

func (l *leakyStore) Create(raft.SnapshotVersion, uint64, uint64, raft.Configuration, uint64, raft.Transport) (raft.SnapshotSink, error) {
	id := "1-10-1700000000000"
	if err := os.MkdirAll(filepath.Join(l.dir, id+".tmp"), 0o755); err != nil {
		return nil, err
	}
	return &leakySink{id: id}, nil
}

// A cancelled (or failed) snapshot's temp dir is removed even when the
// store's own Cancel fails before removing it (issue 12: 127 MiB left).
func TestSnapshotTempDirRemovedWhenCancelFails(t *testing.T) {
	s, free := testSnapStore(t)
	free.Store(1 << 30)
	s.SnapshotStore = &leakyStore{dir: s.dir}
	for _, end := range []string{"cancel", "close"} {
		sink, err := createSnap(s, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(tmpDirs(t, s.dir)) != 1 {
			t.Fatal("no temp dir")
		}
		if end == "cancel" {
			err = sink.Cancel()
		} else {
			err = sink.Close()
		}
		if err == nil {
			t.Fatalf("%s: the store's error was lost", end)
		}
		if m := tmpDirs(t, s.dir); len(m) != 0 {
			t.Fatalf("%s: temp dir left: %v", end, m)
		}
	}
}

// The snapshot estimate's fallback (the state dir's allocated size) is
// computed at most once per diskSizeCacheFor, not on every write's check
// (it listed and stated the badger dir on each: 29 % of CPU under load).
func TestCacheForRecomputesOnlyWhenOld(t *testing.T) {
	now := time.Unix(1000, 0)
	calls := 0
	f := dropErr(cacheFor(time.Second, func() time.Time { return now }, func() (uint64, error) { calls++; return uint64(calls), nil }))
	for range 1000 {
		if v := f(); v != 1 {
			t.Fatalf("cached value %d", v)
		}
	}
	now = now.Add(999 * time.Millisecond)
	if f(); calls != 1 {
		t.Fatalf("recomputed before a second: %d calls", calls)
	}
	now = now.Add(time.Millisecond)
	if v := f(); v != 2 || calls != 2 {
		t.Fatalf("after a second: value %d, %d calls", v, calls)
	}
	now = now.Add(-time.Hour) // the clock stepped back
	if v := f(); v != 3 {
		t.Fatalf("after a step back: value %d", v)
	}
}

// The byte trigger grows with the state: the last snapshot's size when it
// is larger than the bound and free space covers the expected snapshot
// plus that many log bytes above the reserve; the bound otherwise.
func TestByteTriggerGrowsWithTheState(t *testing.T) {
	s, free := testSnapStore(t)
	const M = 1 << 20
	s.est.record(300*M, 1000) // the expected snapshot: 300 MiB at 1000 tasks
	free.Store(testReserve + 600*M)
	if got := s.byteTrigger(64 * M); got != 64*M {
		t.Fatalf("no snapshot taken yet: trigger %d MiB, want the bound", got/M)
	}
	s.lastState.Store(10 * M)
	if got := s.byteTrigger(64 * M); got != 64*M {
		t.Fatalf("a snapshot smaller than the bound: trigger %d MiB, want the bound", got/M)
	}
	s.lastState.Store(300 * M)
	if got := s.byteTrigger(64 * M); got != 300*M {
		t.Fatalf("a 300 MiB snapshot with room: trigger %d MiB, want 300", got/M)
	}
	free.Store(testReserve + 600*M - 1) // one byte short of the snapshot plus as much log
	if got := s.byteTrigger(64 * M); got != 64*M {
		t.Fatalf("under disk pressure: trigger %d MiB, want the bound", got/M)
	}
}

// A snapshot installed from the leader on a node that held no tasks (new,
// or its data dir wiped) is not scaled by the task count the node had
// before restoring it: scaled by (tasks now + 1) / (0 + 1), the estimate of
// a 300 000-task state came out at terabytes, above any free space, and
// every write was refused (503 storage_unavailable), after a restart too.
func TestInstalledSnapshotEstimateIsNotScaledByTheTasksBeforeRestore(t *testing.T) {
	s, free := testSnapStore(t)
	const M = 1 << 20
	free.Store(testReserve + 1024*M)
	var tasks atomic.Int64 // the node holds no tasks until the restore
	s.tasks = tasks.Load
	// Raft stores the leader's snapshot (no state size told), then the
	// node restores it.
	sink := writeSnap(t, s, 10, 8*M, 0)
	tasks.Store(300_000)
	if got := s.expectedSize(); got < 8*M || got > 64*M {
		t.Fatalf("expected next snapshot %d MiB after installing an 8 MiB one, want about 8 (not scaled by the tasks before the restore)", got/M)
	}
	if err := s.admit(s.expectedSize()); err != nil {
		t.Fatalf("a snapshot refused with 1 GiB free: %v", err)
	}
	// After a restart the saved record gives the same.
	s2, _ := testSnapStore(t)
	s2.dir, s2.SnapshotStore, s2.tasks = s.dir, s.SnapshotStore, tasks.Load
	rec := s2.loadEstimate(sink.ID())
	if rec.Tasks >= 0 && rec.Tasks < 1000 {
		t.Fatalf("saved record %+v: a task count from before the restore", rec)
	}
}

// busyCount is a Config.BackgroundWork that counts the jobs in progress,
// and fails the test when a job is ended twice.
type busyCount struct {
	t      *testing.T
	jobs   atomic.Int64
	begins atomic.Int64
}

func (b *busyCount) begin() func() {
	b.begins.Add(1)
	b.jobs.Add(1)
	ended := false
	return func() {
		if ended {
			b.t.Error("a background job ended twice")
		}
		ended = true
		b.jobs.Add(-1)
	}
}

// Writing a snapshot is background work from Create to its sink's Close
// or Cancel, whichever way the snapshot ends.
func TestSnapshotWriteIsBackgroundWork(t *testing.T) {
	s, free := testSnapStore(t)
	free.Store(1 << 40)
	b := &busyCount{t: t}
	s.busy = b.begin
	sink, err := createSnap(s, 10)
	if err != nil {
		t.Fatal(err)
	}
	if b.jobs.Load() != 1 {
		t.Fatalf("jobs %d while a snapshot is written, want 1", b.jobs.Load())
	}
	if err := sink.Close(); err != nil || b.jobs.Load() != 0 {
		t.Fatalf("after Close: %v, jobs %d", err, b.jobs.Load())
	}
	sink, _ = createSnap(s, 11)
	sink.Cancel()
	sink.Cancel() // raft may cancel after a failed Persist that cancelled
	if b.jobs.Load() != 0 {
		t.Fatalf("after Cancel: jobs %d", b.jobs.Load())
	}
	sink, _ = createSnap(s, 12)
	sink.(*gatedSink).failed = errors.New("write failed")
	sink.Close() // Close after a failed write cancels
	if b.jobs.Load() != 0 {
		t.Fatalf("after a failed Close: jobs %d", b.jobs.Load())
	}
	free.Store(0) // skipped by the gate: no work began
	if _, err := createSnap(s, 13); !errors.Is(err, errSnapshotSkipped) || b.begins.Load() != 3 {
		t.Fatalf("skipped snapshot: %v, %d jobs begun, want the 3 before", err, b.begins.Load())
	}
}

// Reading a snapshot (raft restores it, at start or as received from the
// leader, or sends it to a follower) is background work from Open to the
// reader's Close; an Open that fails ends it at once.
func TestSnapshotReadIsBackgroundWork(t *testing.T) {
	s, free := testSnapStore(t)
	free.Store(1 << 40)
	sink, err := createSnap(s, 10)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sink.Write([]byte("state")); err != nil {
		t.Fatal(err)
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	b := &busyCount{t: t}
	s.busy = b.begin
	_, rc, err := s.Open(sink.ID())
	if err != nil {
		t.Fatal(err)
	}
	if b.jobs.Load() != 1 {
		t.Fatalf("jobs %d while a snapshot is read, want 1", b.jobs.Load())
	}
	if got, err := io.ReadAll(rc); err != nil || string(got) != "state" {
		t.Fatalf("read %q, %v; want the state written", got, err)
	}
	rc.Close()
	rc.Close()
	if b.jobs.Load() != 0 {
		t.Fatalf("after Close: jobs %d, want 0", b.jobs.Load())
	}
	if _, _, err := s.Open("no-such-snapshot"); err == nil || b.jobs.Load() != 0 || b.begins.Load() != 2 {
		t.Fatalf("Open of a missing snapshot: %v, jobs %d, begun %d; want an error, 0 and 2", err, b.jobs.Load(), b.begins.Load())
	}
}

// A snapshot older than the newest one stored (a leader's, installed on a
// node that holds a later one) can be opened after its sink closes, so
// raft can restore it; the next snapshot leaves one again.
func TestOlderSnapshotSurvivesUntilRestored(t *testing.T) {
	s, free := testSnapStore(t)
	free.Store(1 << 40)
	ids := func() []string {
		t.Helper()
		metas, err := s.List()
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, m := range metas {
			out = append(out, m.ID)
		}
		return out
	}
	own := writeSnap(t, s, 368, 1000, 5000)
	own2 := writeSnap(t, s, 368, 1000, 5000) // the same index again: one kept
	if got := ids(); len(got) != 1 || got[0] != own2.ID() {
		t.Fatalf("snapshots %v after two at 368, want [%s]", got, own2.ID())
	}
	if _, err := os.Stat(filepath.Join(s.dir, own.ID())); !os.IsNotExist(err) {
		t.Fatalf("the first snapshot at 368 is still there (%v)", err)
	}
	older := writeSnap(t, s, 360, 1000, 0) // the leader's, installed here
	meta, rc, err := s.Open(older.ID())
	if err != nil {
		t.Fatalf("the installed snapshot at 360 cannot be opened to restore: %v", err)
	}
	rc.Close()
	if meta.Index != 360 {
		t.Fatalf("opened index %d, want 360", meta.Index)
	}
	if got := ids(); len(got) != 2 {
		t.Fatalf("snapshots %v, want the newest (368) and the installed one (360)", got)
	}
	if n := s.newestIndex(); n != 368 {
		t.Fatalf("newestIndex = %d, want 368", n)
	}
	newer := writeSnap(t, s, 400, 1000, 5000)
	if got := ids(); len(got) != 1 || got[0] != newer.ID() {
		t.Fatalf("snapshots %v after one at 400, want [%s]", got, newer.ID())
	}
	if n := s.newestIndex(); n != 400 {
		t.Fatalf("newestIndex = %d, want 400", n)
	}
}
