package raftfsm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/klauspost/compress/s2"
)

// bufSink is a raft.SnapshotSink over a buffer.
type bufSink struct {
	bytes.Buffer
	closed, cancelled int
	failWrite         error
}

func (s *bufSink) ID() string { return "test" }

func (s *bufSink) Write(p []byte) (int, error) {
	if s.failWrite != nil {
		return 0, s.failWrite
	}
	return s.Buffer.Write(p)
}

func (s *bufSink) Close() error  { s.closed++; return nil }
func (s *bufSink) Cancel() error { s.cancelled++; return nil }

var _ raft.SnapshotSink = (*bufSink)(nil)

// persist runs Persist and Release on snap and returns the stream.
func persist(t testing.TB, snap raft.FSMSnapshot) []byte {
	t.Helper()
	defer snap.Release()
	var sink bufSink
	if err := snap.Persist(&sink); err != nil {
		t.Fatalf("persist: %v", err)
	}
	if sink.closed != 1 || sink.cancelled != 0 {
		t.Fatalf("sink closed %d times, cancelled %d times", sink.closed, sink.cancelled)
	}
	return sink.Bytes()
}

func (e *env) snapshot() raft.FSMSnapshot {
	e.t.Helper()
	snap, err := e.f.Snapshot()
	if err != nil {
		e.t.Fatalf("snapshot: %v", err)
	}
	return snap
}

func (e *env) restore(stream []byte) error {
	return e.f.Restore(io.NopCloser(bytes.NewReader(stream)))
}

// plainStream returns the axsnap01 form of an axsnap02 stream: the same
// header and records, uncompressed (what ax wrote before 2026-12-05).
func plainStream(t testing.TB, stream []byte) []byte {
	t.Helper()
	if !bytes.HasPrefix(stream, snapMagic) {
		t.Fatalf("stream does not start with %q", snapMagic)
	}
	body, err := io.ReadAll(s2.NewReader(bytes.NewReader(stream[16:])))
	if err != nil {
		t.Fatalf("decompress the stream: %v", err)
	}
	return append(append(append([]byte(nil), snapMagicV1...), stream[8:16]...), body...)
}

// packStream returns the axsnap02 form of a header and records written
// uncompressed after it (an axsnap01 stream, well formed or not).
func packStream(t testing.TB, plain []byte) []byte {
	t.Helper()
	if len(plain) < 16 {
		t.Fatalf("stream of %d bytes has no header", len(plain))
	}
	var buf bytes.Buffer
	buf.Write(snapMagic)
	buf.Write(plain[8:16])
	zw := s2.NewWriter(&buf, s2.WriterConcurrency(1))
	if _, err := zw.Write(plain[16:]); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// sizeSink is a bufSink that takes the state's size (raftfsm.StateSizeSink).
type sizeSink struct {
	bufSink
	stateBytes []uint64
}

func (s *sizeSink) SetStateBytes(n uint64) { s.stateBytes = append(s.stateBytes, n) }

var _ StateSizeSink = (*sizeSink)(nil)

// fillState gives e waiting, running, retried, terminal tasks and nodes,
// using entries 1..9 and a configuration at 10.
func fillState(e *env) {
	e.apply(1,
		submitCmd("w1", spec("h", "p1"), 5000, 1000),
		submitCmd("w2", spec("h2", "p2"), 7000, 1000),
		submitCmd("order|42", spec("order.timeout", `{"id":42}`), 5000, 1000),
		submitCmd("run", spec("h", "p"), 4000, 1000),
		submitCmd("retry", spec("h", "p"), 4000, 1000),
		submitCmd("done", spec("h", "p"), 4000, 1000),
		submitCmd("gone", spec("h", "p"), 4000, 1000),
		submitCmd("задача", spec("h", "p"), 4500, 1000),
	)
	e.apply(2, fireCmd("run", 1, 1, "n1", 4000, 34000), fireCmd("retry", 1, 1, "n2", 4000, 34000),
		fireCmd("done", 1, 1, "n1", 4000, 34000))
	e.apply(3, completeCmd("retry", 1, 1, OutcomeRetryable, "500", 9000, 4100),
		completeCmd("done", 1, 1, OutcomeSuccess, "", 0, 4200))
	e.apply(5, cancelCmd("gone", 4300))
	e.apply(7, nodeCmd(Node{ID: "n1", RaftAddr: "a:1", PeerAddr: "a:2", Executors: flagExec("*"), UpdateMs: 1}),
		nodeCmd(Node{ID: "n2", RaftAddr: "b:1", PeerAddr: "b:2", Executors: flagExec("h"), UpdateMs: 2}))
	e.f.StoreConfiguration(10, raftConfiguration())
}

// moreApplies changes every kind of record after a snapshot.
func moreApplies(e *env, from uint64) {
	e.apply(from+1, submitCmd("after", spec("h", "p"), 1000, 5000), fireCmd("w1", 1, 1, "n2", 5000, 35000),
		cancelCmd("w2", 5000), completeCmd("run", 1, 1, OutcomeSuccess, "", 0, 5000),
		overwriteCmd("order|42", spec("order.timeout", "v2"), 8000, 5000))
	e.apply(from+2, nodeCmd(Node{ID: "n3", Executors: flagExec("x")}), nodeCmd(Node{ID: "n1"}))
}

type fsmView struct {
	tasks   map[string]Task
	due     []dueEntry
	running []string
	nodes   []Node
	applied uint64
}

func (e *env) view(ids []string) fsmView {
	e.t.Helper()
	v := fsmView{tasks: map[string]Task{}, due: e.due(), running: e.running(), nodes: e.nodes(), applied: e.f.AppliedIndex()}
	for _, id := range ids {
		if tk, err := e.f.Task(id); err == nil {
			v.tasks[id] = *tk
		}
	}
	return v
}

func viewsEqual(t *testing.T, got, want fsmView) {
	t.Helper()
	if got.applied != want.applied {
		t.Errorf("applied %d, want %d", got.applied, want.applied)
	}
	if !slices.Equal(got.due, want.due) {
		t.Errorf("due %v, want %v", got.due, want.due)
	}
	if !slices.Equal(got.running, want.running) {
		t.Errorf("running %v, want %v", got.running, want.running)
	}
	if !slices.EqualFunc(got.nodes, want.nodes, nodeEqual) {
		t.Errorf("nodes %+v, want %+v", got.nodes, want.nodes)
	}
	if len(got.tasks) != len(want.tasks) {
		t.Errorf("%d tasks, want %d", len(got.tasks), len(want.tasks))
	}
	for id, w := range want.tasks {
		if g, ok := got.tasks[id]; !ok || !taskEqual(g, w) {
			t.Errorf("task %q: %+v, want %+v", id, g, w)
		}
	}
}

var snapIDs = []string{"w1", "w2", "order|42", "run", "retry", "done", "gone", "задача", "after", "other", "x"}

func TestSnapshotRestore(t *testing.T) {
	src := newEnv(t)
	fillState(src)
	atSnap := src.dump()
	viewAtSnap := src.view(snapIDs)
	snap := src.snapshot()

	// Applies after Snapshot() and before Persist must not leak into the
	// stream.
	moreApplies(src, 10)
	finalDump := src.dump()
	stream := persist(t, snap)

	t.Run("fresh FSM", func(t *testing.T) {
		dst := newEnv(t)
		if err := dst.restore(stream); err != nil {
			t.Fatal(err)
		}
		if d := diffDumps(dst.dump(), atSnap); d != "" {
			t.Fatalf("restored state differs from the state at Snapshot():\n%s", d)
		}
		viewsEqual(t, dst.view(snapIDs), viewAtSnap)
		dst.checkIndexes()
		// Applying the same later entries gives the same state as the
		// source: the FSM is deterministic.
		moreApplies(dst, 10)
		if d := diffDumps(dst.dump(), finalDump); d != "" {
			t.Fatalf("replica differs from the source:\n%s", d)
		}
		// And the restored state survives a restart.
		dst.reopen()
		if d := diffDumps(dst.dump(), finalDump); d != "" {
			t.Fatalf("after reopen:\n%s", d)
		}
		if dst.f.AppliedIndex() != 12 {
			t.Fatalf("applied %d", dst.f.AppliedIndex())
		}
	})

	t.Run("FSM with other data", func(t *testing.T) {
		dst := newEnv(t)
		dst.apply(1, submitCmd("other", spec("h", "p"), 1, 1), submitCmd("w1", spec("zzz", "p"), 2, 2),
			nodeCmd(Node{ID: "n9"}))
		dst.apply(2, fireCmd("other", 1, 1, "n9", 3, 4))
		dst.apply(50, fireCmd("w1", 1, 1, "n9", 3, 4)) // applied index above the snapshot's
		ch := dst.f.AppliedCh()
		if err := dst.restore(stream); err != nil {
			t.Fatal(err)
		}
		select {
		case <-ch:
		default:
			t.Fatal("AppliedCh not closed by Restore")
		}
		if d := diffDumps(dst.dump(), atSnap); d != "" {
			t.Fatalf("restored state differs from the state at Snapshot():\n%s", d)
		}
		viewsEqual(t, dst.view(snapIDs), viewAtSnap)
		dst.noTask("other")
		dst.checkIndexes()
		// Entries after the snapshot index apply again; entries at or
		// below it are skipped.
		if out := dst.applyEntry(10, submitCmd("x", spec("h", "p"), 1, 1)); out != nil {
			t.Fatalf("entry 10 returned %v", out)
		}
		dst.apply(11, submitCmd("x", spec("h", "p"), 1, 1))
		dst.reopen()
		if dst.f.AppliedIndex() != 11 {
			t.Fatalf("after reopen applied %d", dst.f.AppliedIndex())
		}
	})

	t.Run("restore twice", func(t *testing.T) {
		dst := newEnv(t)
		for range 2 {
			if err := dst.restore(stream); err != nil {
				t.Fatal(err)
			}
		}
		if d := diffDumps(dst.dump(), atSnap); d != "" {
			t.Fatalf("%s", d)
		}
	})

	t.Run("snapshot of a restored FSM", func(t *testing.T) {
		dst := newEnv(t)
		if err := dst.restore(stream); err != nil {
			t.Fatal(err)
		}
		again := persist(t, dst.snapshot())
		if !bytes.Equal(again, stream) {
			t.Fatal("snapshot of the restored state differs from the stream it was restored from")
		}
	})
}

// Persist writes the records compressed (axsnap02), tells a StateSizeSink
// their size before compression, before it closes the sink; a snapshot an
// older node wrote (axsnap01, uncompressed) still restores: after an
// upgrade, from the node's own snapshot or from a leader's.
func TestSnapshotCompressedAndOlderFormat(t *testing.T) {
	src := newEnv(t)
	fillState(src)
	for i := range 20 {
		src.apply(uint64(20+i), submitCmd(fmt.Sprintf("bulk%03d", i), spec("order.timeout", `{"order":1234}`), 90_000, 1000))
	}
	want := src.dump()
	snap := src.snapshot()
	defer snap.Release()
	var sink sizeSink
	if err := snap.Persist(&sink); err != nil {
		t.Fatal(err)
	}
	stream := sink.Bytes()
	if !bytes.HasPrefix(stream, []byte("axsnap02")) {
		t.Fatalf("stream starts with %q, want axsnap02", stream[:8])
	}
	plain := plainStream(t, stream)
	if len(sink.stateBytes) != 1 || sink.stateBytes[0] != uint64(len(plain)-16) {
		t.Fatalf("state bytes reported %v, want once %d (the records before compression)", sink.stateBytes, len(plain)-16)
	}
	if sink.closed != 1 {
		t.Fatalf("sink closed %d times", sink.closed)
	}
	if len(stream) >= len(plain) {
		t.Fatalf("compressed stream of %d bytes, uncompressed %d: not compressed", len(stream), len(plain))
	}
	for name, data := range map[string][]byte{"axsnap02": stream, "axsnap01": plain} {
		t.Run(name, func(t *testing.T) {
			dst := newEnv(t)
			dst.apply(1, submitCmd("mine", spec("h", "p"), 1, 1))
			if err := dst.restore(data); err != nil {
				t.Fatal(err)
			}
			if d := diffDumps(dst.dump(), want); d != "" {
				t.Fatalf("restored state differs:\n%s", d)
			}
			dst.checkIndexes()
			if again := persist(t, dst.snapshot()); !bytes.Equal(again, stream) {
				t.Fatal("the restored state persists to another stream")
			}
		})
	}
}

// A compressed snapshot whose bytes changed (a torn or corrupted file, a
// bad transfer) is refused by S2's block checksum, wherever the change is:
// it never restores other data than was written. (A few changed bytes
// decode to the same records, say a copy turned into a repeat of the same
// offset: those restore the written state.)
func TestRestoreRejectsCorruptCompressedStream(t *testing.T) {
	src := newEnv(t)
	fillState(src)
	want := src.dump()
	stream := persist(t, src.snapshot())
	dst := newEnv(t)
	refused, tried := 0, 0
	for i := 16; i < len(stream); i += 3 { // every third byte: a restore takes milliseconds
		tried++
		bad := slices.Clone(stream)
		bad[i] ^= 0x20
		if err := dst.restore(bad); err != nil {
			refused++
			continue
		}
		if d := diffDumps(dst.dump(), want); d != "" {
			t.Fatalf("byte %d of %d changed: restored without error, and the state differs:\n%s", i, len(stream), d)
		}
	}
	if refused < tried*9/10 {
		t.Fatalf("%d of %d changed bytes refused", refused, tried)
	}
	if err := dst.restore(stream); err != nil {
		t.Fatal(err)
	}
	if d := diffDumps(dst.dump(), want); d != "" {
		t.Fatalf("%s", d)
	}
}

func TestSnapshotEmptyFSM(t *testing.T) {
	src := newEnv(t)
	stream := persist(t, src.snapshot())
	dst := newEnv(t)
	dst.apply(3, submitCmd("a", spec("h", "p"), 1, 1))
	if err := dst.restore(stream); err != nil {
		t.Fatal(err)
	}
	if dst.f.AppliedIndex() != 0 || len(dst.dump()) != 0 {
		t.Fatalf("applied %d, %d keys", dst.f.AppliedIndex(), len(dst.dump()))
	}
	dst.apply(1, submitCmd("b", spec("h", "p"), 1, 1))
	dst.task("b")
}

func TestSnapshotPersistConcurrentWithApply(t *testing.T) {
	src := newEnv(t)
	fillState(src)
	atSnap := src.dump()
	snap := src.snapshot()
	done := make(chan []byte)
	go func() {
		defer snap.Release()
		var sink bufSink
		if err := snap.Persist(&sink); err != nil {
			t.Errorf("persist: %v", err)
		}
		done <- sink.Bytes()
	}()
	// Raft applies while Persist runs.
	for i := range 200 {
		idx := uint64(11 + i)
		id := fmt.Sprintf("c%03d", i)
		src.apply(idx, submitCmd(id, spec("h", "p"), int64(i), 1), fireCmd("w1", 1, 1, "n1", 1, 2), cancelCmd("w2", 3))
	}
	stream := <-done
	dst := newEnv(t)
	if err := dst.restore(stream); err != nil {
		t.Fatal(err)
	}
	if d := diffDumps(dst.dump(), atSnap); d != "" {
		t.Fatalf("restored state differs from the state at Snapshot():\n%s", d)
	}
}

func TestSnapshotPersistWriteError(t *testing.T) {
	src := newEnv(t)
	fillState(src)
	snap := src.snapshot()
	defer snap.Release()
	boom := errors.New("disk full")
	sink := &bufSink{failWrite: boom}
	err := snap.Persist(sink)
	if !errors.Is(err, boom) {
		t.Fatalf("Persist = %v, want %v", err, boom)
	}
	if sink.cancelled != 1 || sink.closed != 0 {
		t.Fatalf("sink closed %d, cancelled %d; want cancelled", sink.closed, sink.cancelled)
	}
}

func TestRestoreRejectsBadStreams(t *testing.T) {
	src := newEnv(t)
	fillState(src)
	// The bad records are built uncompressed (axsnap01) and each is
	// tried in both forms, so that the compressed form fails on its
	// records, not only on its compression.
	stream := plainStream(t, persist(t, src.snapshot()))

	var huge []byte
	huge = append(huge, stream[:16]...)
	huge = binary.AppendUvarint(huge, 1<<62) // key length
	// A length the runtime would try to allocate: 64 GiB, an out-of-memory
	// crash where the machine has less.
	bigKey := binary.AppendUvarint(slices.Clone(stream[:16]), 1<<36)
	var hugeValue []byte
	hugeValue = append(hugeValue, stream[:16]...)
	hugeValue = binary.AppendUvarint(hugeValue, 3)
	hugeValue = append(hugeValue, "t/a"...)
	hugeValue = binary.AppendUvarint(hugeValue, 1<<62)
	wrongHeader := slices.Clone(stream)
	binary.BigEndian.PutUint64(wrongHeader[8:16], 11)
	badMagic := slices.Clone(stream)
	badMagic[0] = 'X'
	noEnd := slices.Clone(stream[:len(stream)-1])
	overlongVarint := append(slices.Clone(stream[:16]), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01)

	cases := map[string][]byte{
		"empty":                       nil,
		"bad magic":                   badMagic,
		"magic only":                  stream[:8],
		"header only":                 stream[:16],
		"no end mark":                 noEnd,
		"huge key length":             huge,
		"64 GiB key length":           bigKey,
		"huge value length":           hugeValue,
		"overlong varint":             overlongVarint,
		"header index does not match": wrongHeader,
	}
	for name, data := range cases {
		if len(data) >= 16 && bytes.HasPrefix(data, snapMagicV1) {
			cases[name+", compressed"] = packStream(t, data)
		}
	}
	cases["compressed, records cut short"] = append(slices.Clone(snapMagic), stream[8:16]...)
	cases["compressed, not S2"] = append(append(slices.Clone(snapMagic), stream[8:16]...), stream[16:]...)
	for name, data := range cases {
		t.Run(name, func(t *testing.T) {
			dst := newEnv(t)
			var err error
			func() {
				defer func() {
					if v := recover(); v != nil {
						t.Fatalf("Restore panicked: %v", v)
					}
				}()
				err = dst.restore(data)
			}()
			if err == nil {
				t.Fatal("Restore accepted a bad stream")
			}
		})
	}
}

func TestRestoreRejectsEveryTruncation(t *testing.T) {
	src := newEnv(t)
	src.apply(1, submitCmd("a", spec("h", "p"), 5000, 1000), nodeCmd(Node{ID: "n1", Executors: flagExec("*")}))
	src.apply(2, fireCmd("a", 1, 1, "n1", 5000, 9000), submitCmd("b", spec("h", "q"), 6000, 1000))
	stream := persist(t, src.snapshot())
	dst := newEnv(t)
	for n := 0; n < len(stream); n++ {
		if err := dst.restore(stream[:n]); err == nil {
			t.Fatalf("stream truncated to %d of %d bytes restored without error", n, len(stream))
		}
	}
	if err := dst.restore(stream); err != nil {
		t.Fatal(err)
	}
	if d := diffDumps(dst.dump(), src.dump()); d != "" {
		t.Fatalf("%s", d)
	}
}

// A restore that fails part way must not leave a stored applied index that
// claims state badger does not hold: after a restart the FSM would skip the
// entries that state came from.
func TestFailedRestoreDoesNotClaimAppliedIndex(t *testing.T) {
	src := newEnv(t)
	payload := bytes.Repeat([]byte("p"), 4<<10)
	const n = 1500 // about 6 MiB of task records: more than one badger batch
	for i := range n {
		src.apply(uint64(i+1), submitCmd(fmt.Sprintf("t%05d", i), Spec{Handler: "h", Payload: payload}, int64(i), 1))
	}
	stream := persist(t, src.snapshot())
	if raw := int64(len(plainStream(t, stream))); raw < 2*src.db.MaxBatchSize() {
		t.Fatalf("records of %d bytes are too few to be restored in several batches", raw)
	}

	dst := newEnv(t)
	dst.apply(1, submitCmd("mine", spec("h", "p"), 1, 1))
	if err := dst.restore(stream[:len(stream)-100]); err == nil {
		t.Fatal("truncated stream restored")
	}
	// Whatever the failed restore left, the FSM must not claim the
	// snapshot's index for it, in memory or on disk.
	check := func(stage string) {
		t.Helper()
		if idx := dst.f.AppliedIndex(); idx == uint64(n) {
			if _, err := dst.f.Task(fmt.Sprintf("t%05d", n-1)); err != nil {
				t.Fatalf("%s: applied index %d claimed, but the last task is missing: %v", stage, idx, err)
			}
		}
	}
	check("after the failed restore")
	if idx := dst.f.AppliedIndex(); idx != 0 {
		t.Fatalf("after the failed restore applied %d, want 0: badger holds no applied index", idx)
	}
	dst.reopen()
	check("after reopen")
	if idx := dst.f.AppliedIndex(); idx != 0 {
		t.Fatalf("after reopen applied %d, want 0", idx)
	}

	// A good restore afterwards gives the whole state.
	if err := dst.restore(stream); err != nil {
		t.Fatal(err)
	}
	if d := diffDumps(dst.dump(), src.dump()); d != "" {
		t.Fatalf("%s", d)
	}
	if dst.f.AppliedIndex() != n {
		t.Fatalf("applied %d", dst.f.AppliedIndex())
	}
}

// After a restore fails part way, badger holds neither the old state nor the
// snapshot's: applying further entries (or taking a snapshot) would silently
// diverge, so the FSM fails closed until a restore succeeds.
func TestFailedRestoreFailsClosed(t *testing.T) {
	src := newEnv(t)
	fillState(src)
	stream := persist(t, src.snapshot())

	dst := newEnv(t)
	dst.apply(1, submitCmd("mine", spec("h", "p"), 1, 1))
	dst.apply(2, fireCmd("mine", 1, 1, "n1", 1, 2))
	if err := dst.restore(stream[:len(stream)-3]); err == nil {
		t.Fatal("truncated stream restored")
	}
	mustPanic(t, func() { dst.applyEntry(11, submitCmd("x", spec("h", "p"), 1, 1)) })
	mustPanic(t, func() { dst.f.StoreConfiguration(12, raftConfiguration()) })
	if snap, err := dst.f.Snapshot(); err == nil {
		snap.Release()
		t.Fatal("Snapshot of a half-restored FSM succeeded")
	}
	// A bad stream rejected before anything was dropped keeps the FSM
	// usable.
	ok := newEnv(t)
	ok.apply(1, submitCmd("mine", spec("h", "p"), 1, 1))
	if err := ok.restore([]byte("not a snapshot at all")); err == nil {
		t.Fatal("garbage restored")
	}
	ok.task("mine")
	ok.apply(2, fireCmd("mine", 1, 1, "n1", 1, 2))

	// A good restore ends it.
	if err := dst.restore(stream); err != nil {
		t.Fatal(err)
	}
	dst.apply(11, submitCmd("x", spec("h", "p"), 1, 1))
	persist(t, dst.snapshot())
	dst.checkIndexes()
}

// Raft persists a snapshot on its own goroutine while the FSM goroutine may
// restore another one (InstallSnapshot). Badger's read view pins versions,
// not data, so DropAll empties it: Persist must then fail rather than close
// the sink on a stream that holds nothing but the header's applied index.
func TestPersistAfterRestoreOfTheSameFSM(t *testing.T) {
	src := newEnv(t)
	fillState(src)
	atSnap := src.dump()
	other := newEnv(t)
	other.apply(20, submitCmd("other", spec("h", "p"), 1, 1))
	otherStream := persist(t, other.snapshot())

	snap := src.snapshot()
	defer snap.Release()
	if err := src.restore(otherStream); err != nil {
		t.Fatal(err)
	}
	var sink bufSink
	if err := snap.Persist(&sink); err != nil {
		if sink.cancelled != 1 || sink.closed != 0 {
			t.Fatalf("Persist failed (%v) but the sink was closed %d, cancelled %d times", err, sink.closed, sink.cancelled)
		}
		return
	}
	// If Persist succeeds, the stream must be the state as of Snapshot().
	dst := newEnv(t)
	if err := dst.restore(sink.Bytes()); err != nil {
		t.Fatalf("Persist succeeded with a stream that does not restore: %v", err)
	}
	if d := diffDumps(dst.dump(), atSnap); d != "" {
		t.Fatalf("Persist succeeded with a stream that is not the state at Snapshot():\n%s", d)
	}
}
