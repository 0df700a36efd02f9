package raftfsm

import (
	"bytes"
	"fmt"
	"io"
	"testing"
	"time"
)

func TestRetryDeadOrFailedOnly(t *testing.T) {
	e := newEnv(t)
	s := spec("h", `{}`)
	s.MaxAttempts = 1
	e.apply1(1, submitCmd("a", s, 100, 10))
	ep := e.task("a").Epoch
	// WAITING cannot be retried.
	if r := e.apply1(2, Command{Type: CmdRetry, Retry: &Retry{ID: "a", AtMs: 20}}); r.Code != CodeState {
		t.Fatalf("retry of a waiting task: %+v", r)
	}
	e.apply1(3, fireCmd("a", ep, 1, "n1", 100, 40000))
	e.apply1(4, completeCmd("a", ep, 1, OutcomeRetryable, "http 500", 3000, 110))
	if st := e.task("a").State; st != StateDead {
		t.Fatalf("state %v, want DEAD", st)
	}
	r := e.apply1(5, Command{Type: CmdRetry, Retry: &Retry{ID: "a", AtMs: 200}})
	if r.Code != CodeOK || r.Task.State != StateWaiting || r.Task.Attempts != 0 || r.Task.DueMs != 200 || r.Task.FinishedMs != 0 {
		t.Fatalf("retry: %+v %+v", r, r.Task)
	}
	if r.Task.Run != 2 {
		t.Fatalf("a retry is a new run: run %d, want 2", r.Task.Run)
	}
	if r.Task.LastError != "http 500" {
		t.Fatalf("retry must keep the last error, got %q", r.Task.LastError)
	}
	e.checkIndexes()
	// The retried task runs again from attempt 1.
	if r := e.apply1(6, fireCmd("a", ep, 1, "n1", 200, 40000)); r.Code != CodeOK {
		t.Fatalf("fire after retry: %+v", r)
	}
	if r := e.apply1(7, Command{Type: CmdRetry, Retry: &Retry{ID: "nope", AtMs: 1}}); r.Code != CodeNotFound {
		t.Fatalf("retry unknown: %+v", r)
	}
}

func TestLeaseExtendsCurrentAttemptOnly(t *testing.T) {
	e := newEnv(t)
	s := spec("h", `{}`)
	s.TimeoutNs = int64(10 * time.Second)
	e.apply1(1, submitCmd("a", s, 100, 10))
	ep := e.task("a").Epoch
	e.apply1(2, fireCmd("a", ep, 1, "n1", 100, 15100))
	r := e.apply1(3, Command{Type: CmdLease, Lease: &Lease{ID: "a", Attempt: 1, GraceMs: 5000, AtMs: 8000}})
	if r.Code != CodeOK || r.Task.LeaseMs != 8000+10000+5000 {
		t.Fatalf("lease: %+v %+v", r, r.Task)
	}
	// Never shortens.
	r = e.apply1(4, Command{Type: CmdLease, Lease: &Lease{ID: "a", Attempt: 1, GraceMs: 0, AtMs: 100}})
	if r.Code != CodeOK || r.Task.LeaseMs != 23000 {
		t.Fatalf("lease shortened: %+v", r.Task)
	}
	before := e.dump()
	if r := e.apply1(5, Command{Type: CmdLease, Lease: &Lease{ID: "a", Attempt: 2, GraceMs: 5000, AtMs: 9000}}); r.Code != CodeStale {
		t.Fatalf("stale lease: %+v", r)
	}
	e.assertUnchanged(before)
}

func TestCompleteWithoutEpochFromApp(t *testing.T) {
	e := newEnv(t)
	e.apply1(1, submitCmd("a", spec("h", `{}`), 100, 10))
	ep := e.task("a").Epoch
	e.apply1(2, fireCmd("a", ep, 1, "n1", 100, 40000))
	if r := e.apply1(3, completeCmd("a", 0, 2, OutcomeSuccess, "", 0, 200)); r.Code != CodeStale {
		t.Fatalf("wrong attempt must be stale: %+v", r)
	}
	if r := e.apply1(4, completeCmd("a", 0, 1, OutcomeSuccess, "", 0, 200)); r.Code != CodeOK || r.Task.State != StateSuccess {
		t.Fatalf("result: %+v", r)
	}
}

func TestExecutorRegistration(t *testing.T) {
	e := newEnv(t)
	if r := e.apply1(1, Command{Type: CmdExecutor, Executor: &ExecutorChange{Node: "n1", Executor: Executor{Name: "x"}}}); r.Code != CodeNotFound {
		t.Fatalf("executor on unknown node: %+v", r)
	}
	e.apply1(2, nodeCmd(Node{ID: "n1", Executors: flagExec("*")}))
	r := e.apply1(3, Command{Type: CmdExecutor, Executor: &ExecutorChange{Node: "n1", Executor: Executor{Name: "py", Handlers: []string{"order.*"}, URL: "unix:///w.sock"}}})
	if r.Code != CodeOK || !r.Created {
		t.Fatalf("register: %+v", r)
	}
	n := e.nodes()[0]
	if x := n.ExecutorFor("order.timeout"); x == nil || x.Name != "py" {
		t.Fatalf("prefix pattern must beat *: %+v", x)
	}
	if x := n.ExecutorFor("mail"); x == nil || x.Name != "flag" {
		t.Fatalf("* must catch the rest: %+v", x)
	}
	// A restart re-states the flags; the API registration survives.
	e.apply1(4, nodeCmd(Node{ID: "n1", Executors: flagExec("mail")}))
	n = e.nodes()[0]
	if len(n.Executors) != 2 || n.ExecutorFor("order.x").Name != "py" || n.ExecutorFor("mail").Name != "flag" || n.Runs("other") {
		t.Fatalf("after restart: %+v", n.Executors)
	}
	// Replace by name, then remove.
	r = e.apply1(5, Command{Type: CmdExecutor, Executor: &ExecutorChange{Node: "n1", Executor: Executor{Name: "py", Handlers: []string{"other"}, URL: "unix:///w.sock"}}})
	if r.Created || !e.nodes()[0].Runs("other") || e.nodes()[0].Runs("order.x") {
		t.Fatalf("replace: %+v %+v", r, e.nodes()[0])
	}
	if r := e.apply1(6, Command{Type: CmdExecutor, Executor: &ExecutorChange{Node: "n1", Executor: Executor{Name: "py"}, Remove: true}}); r.Code != CodeOK {
		t.Fatalf("remove: %+v", r)
	}
	if r := e.apply1(7, Command{Type: CmdExecutor, Executor: &ExecutorChange{Node: "n1", Executor: Executor{Name: "py"}, Remove: true}}); r.Code != CodeNotFound {
		t.Fatalf("remove twice: %+v", r)
	}
}

func TestMatchHandler(t *testing.T) {
	for _, c := range []struct {
		p, h string
		want bool
	}{
		{"*", "x", true}, {"order.*", "order.timeout", true}, {"order.*", "order", false},
		{"order.timeout", "order.timeout", true}, {"order.timeout", "order.timeoutx", false}, {"a*", "a", true},
	} {
		if got := MatchHandler(c.p, c.h); got != c.want {
			t.Errorf("MatchHandler(%q, %q) = %v", c.p, c.h, got)
		}
	}
}

func TestListFiltersAndPages(t *testing.T) {
	e := newEnv(t)
	for i, id := range []string{"a", "b", "c", "d", "e"} {
		h := "x"
		if i%2 == 1 {
			h = "y"
		}
		e.apply1(uint64(i+1), submitCmd(id, spec(h, `{}`), 100, 10))
	}
	e.apply1(6, cancelCmd("c", 20))
	got, next, more, err := e.f.List("", 0, "", 2)
	if err != nil || len(got) != 2 || got[0].ID != "a" || got[1].ID != "b" || !more || next != "b" {
		t.Fatalf("page 1: %v %q %v %v", got, next, more, err)
	}
	got, next, more, err = e.f.List("", 0, next, 2)
	if err != nil || len(got) != 2 || got[0].ID != "c" || !more {
		t.Fatalf("page 2: %v %q %v %v", got, next, more, err)
	}
	got, _, more, _ = e.f.List("", 0, next, 2)
	if len(got) != 1 || got[0].ID != "e" || more {
		t.Fatalf("page 3: %v %v", got, more)
	}
	got, _, _, _ = e.f.List("y", 0, "", 10)
	if len(got) != 2 || got[0].ID != "b" || got[1].ID != "d" {
		t.Fatalf("handler filter: %v", got)
	}
	got, _, _, _ = e.f.List("", StateCancelled, "", 10)
	if len(got) != 1 || got[0].ID != "c" {
		t.Fatalf("state filter: %v", got)
	}
	if ParseState("WAITING") != StateWaiting || ParseState("nope") != 0 || ParseState("") != 0 {
		t.Fatal("ParseState")
	}
}

// Per-state counts follow every transition, survive a reopen and a
// snapshot restore, and match a full scan.
func TestCountsFollowStates(t *testing.T) {
	e := newEnv(t)
	e.apply(1, submitCmd("a", spec("h", `1`), 100, 10), submitCmd("b", spec("h", `2`), 100, 10), submitCmd("c", spec("h", `3`), 100, 10))
	ep := e.task("a").Epoch
	e.apply1(2, fireCmd("a", ep, 1, "n1", 100, 40000))
	e.apply1(3, completeCmd("a", ep, 1, OutcomeSuccess, "", 0, 110))
	e.apply1(4, cancelCmd("b", 120))
	e.apply1(5, submitCmd("b", spec("h", `2`), 100, 10)) // same spec: no change
	check := func(f *FSM) {
		t.Helper()
		c := f.Counts()
		if c[StateWaiting] != 1 || c[StateSuccess] != 1 || c[StateCancelled] != 1 || c[StateRunning] != 0 {
			t.Fatalf("counts %v", c)
		}
		var scan [numStates]int64
		tasks, _, _, err := f.List("", 0, "", 100)
		if err != nil {
			t.Fatal(err)
		}
		for _, tk := range tasks {
			scan[tk.State]++
		}
		if scan != c {
			t.Fatalf("counts %v, scan %v", c, scan)
		}
	}
	check(e.f)
	e.reopen()
	check(e.f)
	snap, err := e.f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	sink := &bufSink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	snap.Release()
	e2 := newEnv(t)
	e2.apply1(1, submitCmd("zzz", spec("h", `9`), 100, 10))
	if err := e2.f.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
		t.Fatal(err)
	}
	check(e2.f)
}

// An entry of thousands of state changes overflows one badger transaction:
// the writer splits it, and the task counts, written with the applied index
// in the last part, stay right. (The counts were once written into the
// full transaction, which panicked the node on every restart.)
func TestHugeEntryKeepsCounts(t *testing.T) {
	e := newEnv(t)
	const n = 12000
	var subs, fires []Command
	for i := range n {
		id := fmt.Sprintf("h%05d", i)
		subs = append(subs, submitCmd(id, spec("h", `{}`), 100, 10))
	}
	e.apply(1, subs...)
	for i := range n {
		id := fmt.Sprintf("h%05d", i)
		fires = append(fires, fireCmd(id, 1, 1, "n1", 100, 40000))
	}
	for _, r := range e.apply(2, fires...) {
		if r.Code != CodeOK {
			t.Fatalf("fire: %+v", r)
		}
	}
	c := e.f.Counts()
	if c[StateRunning] != n || c[StateWaiting] != 0 {
		t.Fatalf("counts %v, want %d running", c, n)
	}
	e.reopen()
	if c := e.f.Counts(); c[StateRunning] != n {
		t.Fatalf("counts after reopen %v", c)
	}
}
