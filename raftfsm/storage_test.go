package raftfsm

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"reflect"
	"syscall"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/hashicorp/raft"
)

// errNoSpace is what a full disk looks like to a caller of Commit.
var errNoSpace = &fs.PathError{Op: "write", Path: "000001.mem", Err: syscall.ENOSPC}

// faultLog is a log of entries that touches every kind of write: creates,
// updates and deletes of index keys, node records, a configuration entry
// and one entry too big for a badger transaction (it commits in parts).
type faultStep struct {
	cmds   []Command // nil: a configuration entry
	config bool
}

func faultLog(t *testing.T, db *badger.DB) []faultStep {
	const n = 1000
	payload := bytes.Repeat([]byte("x"), 4<<10)
	if total := int64(n * len(payload)); total <= db.MaxBatchSize() {
		t.Fatalf("entry of %d bytes fits one badger transaction (%d): the test would not split", total, db.MaxBatchSize())
	}
	var big []Command
	for i := range n {
		big = append(big, submitCmd(fmt.Sprintf("big-%04d", i), Spec{Handler: "h", Payload: payload, MaxAttempts: 3}, int64(10000+i), 1000))
	}
	var bigFire []Command
	for i := range n {
		bigFire = append(bigFire, fireCmd(fmt.Sprintf("big-%04d", i), 1, 1, "n1", 20000, 60000))
	}
	return []faultStep{
		{cmds: []Command{submitCmd("a", spec("h", "p"), 5000, 1000), submitCmd("b", spec("h", "q"), 6000, 1000)}},
		{cmds: []Command{nodeCmd(Node{ID: "n1", RaftAddr: "r1", PeerAddr: "p1"})}},
		{config: true},
		{cmds: []Command{fireCmd("a", 1, 1, "n1", 5000, 40000)}},
		{cmds: big},
		{cmds: []Command{completeCmd("a", 1, 1, OutcomeRetryable, "500", 9000, 7000), cancelCmd("b", 7000)}},
		{cmds: bigFire},
		{cmds: []Command{fireCmd("a", 1, 2, "n1", 9000, 50000), completeCmd("a", 1, 2, OutcomeSuccess, "", 0, 9500)}},
	}
}

type faultRun struct {
	results [][]Result
	events  []observed
	dump    map[string]string
	applied uint64
	commits int
}

// runFaultLog applies the log on a fresh FSM. setup, when not nil, installs
// hooks; calls counts the commits (from 1).
func runFaultLog(t *testing.T, setup func(e *env, calls *int)) faultRun {
	e := newEnv(t)
	rec := &recorder{}
	e.f.SetObserver(rec)
	var calls int
	e.f.commitTxn = func(txn *badger.Txn) error { calls++; return txn.Commit() }
	if setup != nil {
		setup(e, &calls)
	}
	var run faultRun
	for i, st := range faultLog(t, e.db) {
		idx := uint64(i + 1)
		if st.config {
			e.f.StoreConfiguration(idx, raftConfiguration())
			run.results = append(run.results, nil)
			continue
		}
		out := e.f.Apply(&raft.Log{Index: idx, Term: 1, Type: raft.LogCommand, Data: mustEncode(t, st.cmds...)})
		rs, ok := out.([]Result)
		if !ok || len(rs) != len(st.cmds) {
			t.Fatalf("entry %d: Apply returned %T", idx, out)
		}
		run.results = append(run.results, rs)
	}
	e.checkIndexes()
	run.events, run.dump, run.applied, run.commits = rec.calls, e.dump(), e.f.AppliedIndex(), calls
	if got := e.f.Counts(); got != countTasks(t, e) {
		t.Fatalf("counts %v, stored tasks say %v", got, countTasks(t, e))
	}
	return run
}

// countTasks counts the stored tasks per state.
func countTasks(t *testing.T, e *env) [numStates]int64 {
	var c [numStates]int64
	for _, id := range []string{"a", "b"} {
		c[e.task(id).State]++
	}
	for i := range 1000 {
		c[e.task(fmt.Sprintf("big-%04d", i)).State]++
	}
	return c
}

func TestStorageErrorsRetriedNotSkipped(t *testing.T) {
	want := runFaultLog(t, nil)
	if want.commits <= len(faultLog(t, newEnv(t).db)) {
		t.Fatalf("%d commits for the log: no entry was split", want.commits)
	}

	// Fail every commit once (a full disk, nothing written), the commit
	// of each second part of a split entry twice, and make every fifth
	// commit land in badger but report a failure anyway (a write that
	// failed after part of it reached the memtable): each is rewritten
	// from the part's ops. The write gate refuses the first commit of
	// entry 6 three times.
	var (
		sleeps     []time.Duration
		hookCalls  []error
		failed     int
		gateRefuse = 3
	)
	got := runFaultLog(t, func(e *env, calls *int) {
		e.f.SetStorageHook(func(err error) { hookCalls = append(hookCalls, err) })
		e.f.SetWriteGate(func() error {
			if e.f.applied.Load() == 5 && gateRefuse > 0 {
				gateRefuse--
				return errors.New("data dir below its free-space reserve")
			}
			return nil
		})
		seen := map[*badger.Txn]int{}
		e.f.commitTxn = func(txn *badger.Txn) error {
			*calls++
			seen[txn]++
			switch {
			case *calls%5 == 0:
				failed++
				if err := txn.Commit(); err != nil {
					t.Errorf("real commit: %v", err)
				}
				return fmt.Errorf("sync: %w", errNoSpace)
			case seen[txn] == 1 && *calls%2 == 1:
				failed++
				return errNoSpace
			}
			return txn.Commit()
		}
		e.f.sleep = func(d time.Duration) {
			sleeps = append(sleeps, d)
			se := e.f.StorageError()
			if se == nil {
				t.Errorf("sleeping in the retry loop while not degraded")
				return
			}
			if se.Index != e.f.AppliedIndex()+1 {
				t.Errorf("degraded on entry %d while applied is %d", se.Index, e.f.AppliedIndex())
			}
			if !errors.Is(se, syscall.ENOSPC) && se.Index != 6 {
				t.Errorf("storage error %v does not wrap ENOSPC", se)
			}
		}
	})

	if failed == 0 || len(sleeps) != failed+3 {
		t.Fatalf("%d failed commits, 3 gate refusals, %d retries", failed, len(sleeps))
	}
	for i, d := range sleeps {
		if d < storageRetryMin || d > storageRetryMax {
			t.Fatalf("retry %d waited %v", i, d)
		}
	}
	if !reflect.DeepEqual(got.results, want.results) {
		t.Fatalf("results differ from a run without faults")
	}
	if !reflect.DeepEqual(got.events, want.events) {
		t.Fatalf("observer events differ from a run without faults")
	}
	if d := diffDumps(got.dump, want.dump); d != "" {
		t.Fatalf("stored state differs from a run without faults:\n%s", d)
	}
	if got.applied != want.applied {
		t.Fatalf("applied %d, want %d", got.applied, want.applied)
	}
	// The hook heard each spell begin (with the error) and end (nil).
	if len(hookCalls) == 0 || len(hookCalls)%2 != 0 {
		t.Fatalf("%d hook calls", len(hookCalls))
	}
	for i, err := range hookCalls {
		var se *StorageError
		if (i%2 == 0) != errors.As(err, &se) {
			t.Fatalf("hook call %d: %v", i, err)
		}
	}
}

func TestStorageErrorClearedAndCounted(t *testing.T) {
	e := newEnv(t)
	fails := 4
	e.f.commitTxn = func(txn *badger.Txn) error {
		if fails > 0 {
			fails--
			return errNoSpace
		}
		return txn.Commit()
	}
	var during []*StorageError
	e.f.sleep = func(time.Duration) {
		during = append(during, e.f.StorageError())
		if e.f.AppliedIndex() != 0 {
			t.Errorf("applied moved to %d before the write succeeded", e.f.AppliedIndex())
		}
	}
	e.apply1(1, submitCmd("a", spec("h", "p"), 5000, 1000))
	if len(during) != 4 {
		t.Fatalf("%d retries, want 4", len(during))
	}
	for i, se := range during {
		if se == nil || se.Attempts != i+1 || se.Index != 1 || !errors.Is(se, syscall.ENOSPC) {
			t.Fatalf("retry %d: StorageError %+v", i, se)
		}
	}
	if e.f.StorageError() != nil {
		t.Fatalf("still degraded after the write: %v", e.f.StorageError())
	}
	if e.f.StorageRetries() != 4 || e.f.AppliedIndex() != 1 {
		t.Fatalf("retries %d applied %d", e.f.StorageRetries(), e.f.AppliedIndex())
	}
	e.reopen()
	if e.f.AppliedIndex() != 1 || e.task("a").State != StateWaiting {
		t.Fatalf("after reopen: applied %d", e.f.AppliedIndex())
	}
}

// Abort ends a retrying Apply's goroutine without applying the entry, so
// raft.Shutdown can finish; a restart applies the entry again.
func TestAbortEndsRetryingApply(t *testing.T) {
	e := newEnv(t)
	e.apply1(1, submitCmd("a", spec("h", "p"), 5000, 1000))
	e.f.commitTxn = func(*badger.Txn) error { return errNoSpace }
	sleeping := make(chan struct{}, 1) // buffered: the first retry may come before the test waits for it
	release := make(chan struct{})
	e.f.sleep = func(time.Duration) {
		select {
		case sleeping <- struct{}{}:
		default:
		}
		<-release
	}
	ended := make(chan bool)
	go func() {
		returned := false
		defer func() { ended <- returned }()
		e.f.Apply(&raft.Log{Index: 2, Type: raft.LogCommand, Data: mustEncode(t, submitCmd("b", spec("h", "p"), 5000, 1000))})
		returned = true
	}()
	<-sleeping
	e.f.Abort()
	close(release)
	if returned := <-ended; returned {
		t.Fatal("Apply returned after Abort")
	}
	if e.f.AppliedIndex() != 1 {
		t.Fatalf("applied %d", e.f.AppliedIndex())
	}
	e.f.commitTxn = nil
	e.reopen()
	e.noTask("b")
	e.apply1(2, submitCmd("b", spec("h", "p"), 5000, 1000))
	e.task("b")
}

// Decode errors and unknown commands still stop the node: they are bugs or
// corruption, and a retry would fail the same way.
func TestStorageRetryDoesNotCoverBadEntries(t *testing.T) {
	e := newEnv(t)
	e.f.sleep = func(time.Duration) { t.Fatal("retried a bad entry") }
	mustPanic(t, func() {
		e.f.Apply(&raft.Log{Index: 1, Type: raft.LogCommand, Data: mustEncode(t, Command{Type: 99})})
	})
	// A stored record that does not decode (corruption) panics too. (The
	// task is submitted first: the FSM's id filter knows the ids it
	// stored, and reads no record for others; and its record is dropped
	// from the FSM's cache of the records it wrote last, to be read back.)
	e.apply1(1, submitCmd("a", spec("h", "p"), 5000, 1000))
	if err := e.db.Update(func(txn *badger.Txn) error { return txn.Set(taskKey("a"), []byte{0xff}) }); err != nil {
		t.Fatal(err)
	}
	e.f.tasks.clear()
	mustPanic(t, func() {
		e.f.Apply(&raft.Log{Index: 2, Type: raft.LogCommand, Data: mustEncode(t, cancelCmd("a", 1000))})
	})
	if e.f.StorageError() != nil {
		t.Fatal("degraded by a bad entry")
	}
}
