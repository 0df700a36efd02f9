package raftfsm

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/dgraph-io/badger/v4"
	"github.com/hashicorp/raft"
)

// env is one FSM over a badger database in a temporary directory.
type env struct {
	t   testing.TB
	dir string
	db  *badger.DB
	f   *FSM
}

func newEnv(t testing.TB) *env {
	t.Helper()
	e := &env{t: t, dir: t.TempDir()}
	e.open()
	t.Cleanup(func() {
		if e.db != nil {
			e.db.Close()
		}
	})
	return e
}

func (e *env) open() {
	e.t.Helper()
	db, err := OpenDB(e.dir, nil)
	if err != nil {
		e.t.Fatalf("open badger: %v", err)
	}
	f, err := Open(db)
	if err != nil {
		db.Close()
		e.t.Fatalf("open fsm: %v", err)
	}
	e.db, e.f = db, f
}

// reopen closes badger and opens it and the FSM again, as a restart does.
func (e *env) reopen() {
	e.t.Helper()
	if err := e.db.Close(); err != nil {
		e.t.Fatalf("close badger: %v", err)
	}
	e.db = nil
	e.open()
}

// apply applies cmds as the entry at idx and returns its results, failing
// the test when the entry was skipped.
func (e *env) apply(idx uint64, cmds ...Command) []Result {
	e.t.Helper()
	out := e.applyEntry(idx, cmds...)
	rs, ok := out.([]Result)
	if !ok {
		e.t.Fatalf("entry %d: Apply returned %T (%v), want []Result", idx, out, out)
	}
	if len(rs) != len(cmds) {
		e.t.Fatalf("entry %d: %d results for %d commands", idx, len(rs), len(cmds))
	}
	for i, r := range rs {
		if r.Index != idx {
			e.t.Fatalf("entry %d: result %d has Index %d", idx, i, r.Index)
		}
	}
	return rs
}

// apply1 applies one command as the entry at idx and returns its result.
func (e *env) apply1(idx uint64, c Command) Result {
	e.t.Helper()
	return e.apply(idx, c)[0]
}

// applyEntry applies cmds as the entry at idx and returns what Apply returned.
func (e *env) applyEntry(idx uint64, cmds ...Command) any {
	e.t.Helper()
	return e.f.Apply(&raft.Log{Index: idx, Term: 1, Type: raft.LogCommand, Data: mustEncode(e.t, cmds...)})
}

func mustEncode(t testing.TB, cmds ...Command) []byte {
	t.Helper()
	b, err := EncodeEntry(cmds)
	if err != nil {
		t.Fatalf("encode entry: %v", err)
	}
	return b
}

func (e *env) task(id string) *Task {
	e.t.Helper()
	tk, err := e.f.Task(id)
	if err != nil {
		e.t.Fatalf("task %q: %v", id, err)
	}
	return tk
}

func (e *env) noTask(id string) {
	e.t.Helper()
	if tk, err := e.f.Task(id); !errors.Is(err, ErrNotFound) {
		e.t.Fatalf("task %q: got %+v, %v; want ErrNotFound", id, tk, err)
	}
}

type dueEntry struct {
	ID    string
	DueMs int64
}

// due lists the whole due index through the query.
func (e *env) due() []dueEntry {
	e.t.Helper()
	var out []dueEntry
	err := e.f.Due(math.MaxInt64, func(id string, due int64) bool {
		out = append(out, dueEntry{id, due})
		return true
	})
	if err != nil {
		e.t.Fatalf("due: %v", err)
	}
	return out
}

// running lists the ids the Running query returns, sorted.
func (e *env) running() []string {
	e.t.Helper()
	var out []string
	err := e.f.Running(func(tk *Task) bool {
		out = append(out, tk.ID)
		return true
	})
	if err != nil {
		e.t.Fatalf("running: %v", err)
	}
	sort.Strings(out)
	return out
}

func (e *env) nodes() []Node {
	e.t.Helper()
	ns, err := e.f.Nodes()
	if err != nil {
		e.t.Fatalf("nodes: %v", err)
	}
	return ns
}

// dump returns every key and value in badger.
func (e *env) dump() map[string]string {
	e.t.Helper()
	return dumpDB(e.t, e.db)
}

func dumpDB(t testing.TB, db *badger.DB) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.DefaultIteratorOptions)
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			v, err := it.Item().ValueCopy(nil)
			if err != nil {
				return err
			}
			out[string(it.Item().KeyCopy(nil))] = string(v)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("dump: %v", err)
	}
	return out
}

// withoutApplied returns d without the applied-index key.
func withoutApplied(d map[string]string) map[string]string {
	out := make(map[string]string, len(d))
	for k, v := range d {
		if k != string(keyApplied) {
			out[k] = v
		}
	}
	return out
}

// diffDumps describes how two dumps differ ("" when equal).
func diffDumps(got, want map[string]string) string {
	var b strings.Builder
	keys := map[string]bool{}
	for k := range got {
		keys[k] = true
	}
	for k := range want {
		keys[k] = true
	}
	sorted := make([]string, 0, len(keys))
	for k := range keys {
		sorted = append(sorted, k)
	}
	sort.Strings(sorted)
	n := 0
	for _, k := range sorted {
		g, gok := got[k]
		w, wok := want[k]
		switch {
		case gok && !wok:
			fmt.Fprintf(&b, "  extra key %q\n", k)
		case !gok && wok:
			fmt.Fprintf(&b, "  missing key %q\n", k)
		case g != w:
			fmt.Fprintf(&b, "  key %q: value differs\n", k)
		default:
			continue
		}
		if n++; n == 20 {
			b.WriteString("  ...\n")
			break
		}
	}
	return b.String()
}

// assertUnchanged fails when anything but the applied index differs.
func (e *env) assertUnchanged(before map[string]string) {
	e.t.Helper()
	if d := diffDumps(withoutApplied(e.dump()), withoutApplied(before)); d != "" {
		e.t.Fatalf("state changed:\n%s", d)
	}
}

// checkIndexes verifies the index invariant over the raw keys and through the
// queries: a WAITING task has exactly one due key (at its DueMs) and no run
// key; a RUNNING task has a run key and no due key; any other task has
// neither; no index key names a missing task.
func (e *env) checkIndexes() {
	e.t.Helper()
	tasks := map[string]*Task{}
	dueKeys := map[string][]int64{}
	runKeys := map[string]bool{}
	err := e.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.DefaultIteratorOptions)
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			k := it.Item().KeyCopy(nil)
			switch {
			case bytes.HasPrefix(k, prefixTask):
				var tk Task
				if err := it.Item().Value(func(b []byte) error { return decodeRecord(b, &tk) }); err != nil {
					return err
				}
				id := string(k[len(prefixTask):])
				if tk.ID != id {
					return fmt.Errorf("task key %q holds id %q", k, tk.ID)
				}
				tasks[id] = &tk
			case bytes.HasPrefix(k, prefixDue):
				due, id := parseDueKey(k)
				dueKeys[id] = append(dueKeys[id], due)
			case bytes.HasPrefix(k, prefixRun):
				runKeys[string(k[len(prefixRun):])] = true
			}
		}
		return nil
	})
	if err != nil {
		e.t.Fatalf("scan: %v", err)
	}
	var wantDue []dueEntry
	var wantRun []string
	for id, tk := range tasks {
		switch tk.State {
		case StateWaiting:
			if got := dueKeys[id]; len(got) != 1 || got[0] != tk.DueMs {
				e.t.Errorf("WAITING task %q due %d: due keys %v", id, tk.DueMs, got)
			}
			if runKeys[id] {
				e.t.Errorf("WAITING task %q has a run key", id)
			}
			wantDue = append(wantDue, dueEntry{id, tk.DueMs})
		case StateRunning:
			if !runKeys[id] {
				e.t.Errorf("RUNNING task %q has no run key", id)
			}
			if len(dueKeys[id]) != 0 {
				e.t.Errorf("RUNNING task %q has due keys %v", id, dueKeys[id])
			}
			wantRun = append(wantRun, id)
		default:
			if runKeys[id] || len(dueKeys[id]) != 0 {
				e.t.Errorf("%v task %q is indexed: due %v run %v", tk.State, id, dueKeys[id], runKeys[id])
			}
			if tk.DueMs != 0 || tk.LeaseMs != 0 {
				e.t.Errorf("%v task %q keeps DueMs %d LeaseMs %d", tk.State, id, tk.DueMs, tk.LeaseMs)
			}
		}
	}
	for id := range dueKeys {
		if tasks[id] == nil {
			e.t.Errorf("due key for missing task %q", id)
		}
	}
	for id := range runKeys {
		if tasks[id] == nil {
			e.t.Errorf("run key for missing task %q", id)
		}
	}
	slices.SortFunc(wantDue, func(a, b dueEntry) int {
		if a.DueMs != b.DueMs {
			if a.DueMs < b.DueMs {
				return -1
			}
			return 1
		}
		return strings.Compare(a.ID, b.ID)
	})
	if got := e.due(); !slices.Equal(got, wantDue) {
		e.t.Errorf("Due() = %v, want %v", got, wantDue)
	}
	sort.Strings(wantRun)
	if got := e.running(); !slices.Equal(got, wantRun) {
		e.t.Errorf("Running() = %v, want %v", got, wantRun)
	}
}

// Command builders.

func spec(handler, payload string) Spec {
	return Spec{Handler: handler, Payload: []byte(payload), Priority: 2, TimeoutNs: 30e9, MaxAttempts: 3}
}

func submitCmd(id string, s Spec, dueMs, atMs int64) Command {
	return Command{Type: CmdSubmit, Submit: &Submit{ID: id, Spec: s, DueMs: dueMs, AtMs: atMs}}
}

func overwriteCmd(id string, s Spec, dueMs, atMs int64) Command {
	return Command{Type: CmdSubmit, Submit: &Submit{ID: id, Spec: s, DueMs: dueMs, AtMs: atMs, Overwrite: true}}
}

func fireCmd(id string, epoch uint64, attempt int, node string, atMs, leaseMs int64) Command {
	return Command{Type: CmdFire, Fire: &Fire{ID: id, Epoch: epoch, Attempt: attempt, Node: node, AtMs: atMs, LeaseMs: leaseMs}}
}

func completeCmd(id string, epoch uint64, attempt int, o Outcome, errMsg string, retryDueMs, atMs int64) Command {
	return Command{Type: CmdComplete, Complete: &Complete{
		ID: id, Epoch: epoch, Attempt: attempt, Outcome: o, Error: errMsg, RetryDueMs: retryDueMs, AtMs: atMs,
	}}
}

func cancelCmd(id string, atMs int64) Command {
	return Command{Type: CmdCancel, Cancel: &Cancel{ID: id, AtMs: atMs}}
}

func nodeCmd(n Node) Command { return Command{Type: CmdNode, Node: &n} }

// recorder is an Observer that keeps what it is told.
type recorder struct {
	calls []observed
}

type observed struct {
	index  uint64
	events []Event
}

func (r *recorder) Applied(index uint64, events []Event) {
	r.calls = append(r.calls, observed{index, events})
}

// mustPanic runs fn and returns the panic value, failing when fn returns.
func mustPanic(t testing.TB, fn func()) (v any) {
	t.Helper()
	defer func() { v = recover() }()
	fn()
	t.Fatalf("no panic")
	return nil
}
