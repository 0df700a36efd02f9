package scheduler

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/axsched/ax/raftfsm"
)

// fakeRaft counts barriers; its commit index is 0 (no catch-up check),
// its term term.
type fakeRaft struct {
	barriers atomic.Int32
	term     atomic.Uint64
}

func (f *fakeRaft) Barrier(time.Duration) error { f.barriers.Add(1); return nil }
func (f *fakeRaft) CommitIndex() uint64         { return 0 }
func (f *fakeRaft) CurrentTerm() uint64         { return f.term.Load() }

// blockingRaft's barrier waits until release is closed, then answers err.
type blockingRaft struct {
	release chan struct{}
	err     error
	term    atomic.Uint64
}

func (f *blockingRaft) Barrier(time.Duration) error { <-f.release; return f.err }
func (f *blockingRaft) CommitIndex() uint64         { return 0 }
func (f *blockingRaft) CurrentTerm() uint64         { return f.term.Load() }

// Leading is what the API's readiness and strong reads trust to mean
// "every entry of earlier terms is applied": it is false from Start until
// the barrier has passed and the store is loaded. (It was true from
// Start, so a new leader served a strong read from a store that had not
// yet applied the entries it was elected with: "task not found".)
func TestLeadingOnlyAfterTheBarrier(t *testing.T) {
	e := newParkEnv(t)
	e.l.Stop()
	br := &blockingRaft{release: make(chan struct{})}
	e.l.raft = br
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e.l.Start(ctx)
	if e.l.Leading() {
		t.Fatal("leading before the barrier has passed")
	}
	close(br.release)
	for end := time.Now().Add(10 * time.Second); !e.l.Leading() && time.Now().Before(end); {
		time.Sleep(time.Millisecond) // the term's goroutine loads the store
	}
	if !e.l.Leading() {
		t.Fatal("not leading after the barrier and the load")
	}
	e.l.Stop()
	if e.l.Leading() {
		t.Fatal("leading after Stop")
	}
}

// CaughtUp is what the leader's proposer holds a Complete (whose Prepare
// reads the task and its flow from the store) on, so that a new leader
// still applying the entries it was elected with does not decide a
// recurring task's next run from a stale read. It must be closed only
// while this node's barrier of its current term has returned: open
// before the first term, from Start until the barrier returns, after
// Stop, in a term whose barrier failed, and once Raft is in another term
// than the barrier's (before the node's Stop and Start for it); a
// channel taken while open is the one the next passing barrier closes.
func TestCaughtUpOnlyAfterTheTermsBarrier(t *testing.T) {
	e := newParkEnv(t)
	e.l.Stop() // the park env leads by hand; real terms start below
	isClosed := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	waitClosed := func(ch <-chan struct{}, what string) {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: CaughtUp not closed within 10 s", what)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// A term whose barrier passes.
	br := &blockingRaft{release: make(chan struct{})}
	br.term.Store(3)
	e.l.raft = br
	held := e.l.CaughtUp()
	if isClosed(held) {
		t.Fatal("caught up before any term")
	}
	e.l.Start(ctx)
	if isClosed(e.l.CaughtUp()) {
		t.Fatal("caught up before the barrier returned")
	}
	close(br.release)
	waitClosed(held, "a channel taken before Start, after the barrier")
	if !isClosed(e.l.CaughtUp()) {
		t.Fatal("CaughtUp open after the barrier, in the barrier's term")
	}
	e.l.Stop()
	after := e.l.CaughtUp()
	if isClosed(after) {
		t.Fatal("caught up after Stop")
	}

	// A term whose barrier fails (leadership lost, or the barrier timed
	// out): never caught up in it.
	failing := &blockingRaft{release: make(chan struct{}), err: errNotLeader}
	close(failing.release)
	failing.term.Store(4)
	e.l.raft = failing
	fctx, fcancel := context.WithCancel(ctx)
	e.l.Start(fctx)
	e.l.mu.Lock()
	done := e.l.done
	e.l.mu.Unlock()
	fcancel() // the term's goroutine ends after its barrier; the term is not stopped
	<-done
	if isClosed(after) {
		t.Fatal("caught up after a failed barrier")
	}
	e.l.Stop()
	if e.l.CaughtUp() != after {
		t.Fatal("Stop replaced an open channel: a waiter on it would not hear the next barrier")
	}

	// Raft moves on to another term before the node's Stop: CaughtUp is
	// open at once, and the next term's barrier closes what was taken.
	fr := &fakeRaft{}
	fr.term.Store(5)
	e.l.raft = fr
	e.l.Start(ctx)
	waitClosed(after, "a channel taken in an earlier term, after the barrier of the next one")
	fr.term.Store(7) // lost in 6, won again in 7; the term of 5 is not stopped yet
	moved := e.l.CaughtUp()
	if isClosed(moved) {
		t.Fatal("caught up in term 7 on the strength of term 5's barrier")
	}
	e.l.Stop()
	e.l.Start(ctx)
	waitClosed(moved, "term 7's channel after term 7's barrier")
	if fr.barriers.Load() != 2 {
		t.Fatalf("%d barriers, want 2", fr.barriers.Load())
	}
	e.l.Stop()
}

// A term: Start passes the barrier, arms the due timers inside the load
// window and the leases of RUNNING attempts from the store, and runs the
// timers on the clock: a due run is fired, an expired lease ends its
// attempt as LOST. Stop drops every timer.
func TestStartArmsFromTheStoreAndRunsTheTimers(t *testing.T) {
	e := newParkEnv(t)
	e.l.Stop() // the park env leads by hand; a real term starts below
	fr := &fakeRaft{}
	e.l.raft = fr
	var mu sync.Mutex
	applied := make(chan raftfsm.Command, 64)
	inner := e.l.proposer
	e.l.proposer = ProposerFunc(func(ctx context.Context, cmds []raftfsm.Command) ([]raftfsm.Result, error) {
		mu.Lock()
		defer mu.Unlock()
		res, err := inner.Propose(ctx, cmds)
		for _, c := range cmds {
			applied <- c
		}
		return res, err
	})
	want := func(typ raftfsm.CommandType, id string) raftfsm.Command {
		t.Helper()
		for {
			select {
			case c := <-applied:
				if c.Type == typ && (typ == raftfsm.CmdFire && c.Fire.ID == id || typ == raftfsm.CmdComplete && c.Complete.ID == id) {
					return c
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("no %v of %s proposed within 10 s", typ, id)
			}
		}
	}

	e.executor("a", 5)
	now := e.clock.Now()
	submit := func(id string, in time.Duration) {
		ms := now.Add(in).UnixMilli()
		e.apply(raftfsm.Command{Type: raftfsm.CmdSubmit, Submit: &raftfsm.Submit{ID: id, DueMs: ms, AtMs: now.UnixMilli(),
			Spec: raftfsm.Spec{Handler: "h", Priority: 2, TimeoutNs: int64(time.Second), MaxAttempts: 3}}})
	}
	submit("soon", 2*time.Second)
	submit("later", 2*time.Hour) // beyond the load window (1 h)
	submit("run", 0)
	run := e.task("run")
	e.apply(raftfsm.Command{Type: raftfsm.CmdFire, Fire: &raftfsm.Fire{ID: "run", Epoch: run.Epoch, Attempt: 1, Node: "b",
		AtMs: now.UnixMilli(), LeaseMs: now.Add(3 * time.Second).UnixMilli()}})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e.l.Start(ctx)
	e.l.Start(ctx)        // a second Start while leading changes nothing
	e.clock.BlockUntil(1) // the timers run: the store is loaded
	if !e.l.Leading() || fr.barriers.Load() != 1 {
		t.Fatalf("leading %v after %d barriers, want leading after 1", e.l.Leading(), fr.barriers.Load())
	}
	if got := e.l.Armed(); got != 2 {
		t.Fatalf("armed %d timers, want 2 (soon's due time, run's lease)", got)
	}
	if _, ok := e.l.DueTimer("later"); ok {
		t.Fatal("a task beyond the load window is armed")
	}
	if at, ok := e.l.LeaseTimer("run"); !ok || !at.Equal(now.Add(3*time.Second).Truncate(time.Millisecond)) {
		t.Fatalf("run's lease timer at %v (%v), want now + 3 s", at, ok)
	}

	e.clock.Advance(2 * time.Second)
	want(raftfsm.CmdFire, "soon")
	if st := e.task("soon").State; st != raftfsm.StateRunning {
		t.Fatalf("soon after its due time: %s, want RUNNING", st)
	}
	e.clock.Advance(1500 * time.Millisecond)
	// The lease's end is a LOST outcome of attempt 1. (The task is read
	// for its last error only: its retry, due at once here since this
	// proposer does not prepare commands, may already be RUNNING again.)
	c := want(raftfsm.CmdComplete, "run")
	if c.Complete.Attempt != 1 || c.Complete.Outcome != raftfsm.OutcomeLost || !strings.Contains(c.Complete.Error, "lease expired") {
		t.Fatalf("run after its lease: %+v, want attempt 1 LOST by the lease", *c.Complete)
	}
	if got := e.task("run"); !strings.Contains(got.LastError, "lease expired") {
		t.Fatalf("run after its lease: %s %q, want it ended by the lease", got.State, got.LastError)
	}

	e.l.Stop()
	if e.l.Leading() || e.l.Armed() != 0 || e.l.ClockJumps() != 0 {
		t.Fatalf("after Stop: leading %v, armed %d, clock jumps %d", e.l.Leading(), e.l.Armed(), e.l.ClockJumps())
	}
}

// The figures the node reads: the backlog by priority and per handler,
// the last report of a node, the circuits and the member nodes.
func TestFiguresForTheNode(t *testing.T) {
	e := newParkEnv(t)
	e.due(0, "p0")
	e.due(3, "p3a", "p3b")
	if got := e.l.Backlog(); len(got) != 5 || got[0] != 1 || got[3] != 2 || got[1]+got[2]+got[4] != 0 {
		t.Fatalf("backlog by priority %v, want [1 0 0 2 0]", got)
	}
	e.l.Report(Report{ID: "b", Applied: 9, Queued: map[string]int{"h": 4}})
	if d := e.l.Depth("h"); d != 7 {
		t.Fatalf("depth of h: %d, want 3 due + 4 queued on b", d)
	}
	if seen, applied, ok := e.l.LastReport("b"); !ok || applied != 9 || seen.IsZero() {
		t.Fatalf("last report of b: %v %d %v", seen, applied, ok)
	}
	if _, _, ok := e.l.LastReport("z"); ok {
		t.Fatal("a report from z, which never reported")
	}
	if ns := e.l.Nodes(); len(ns) != 2 {
		t.Fatalf("nodes %+v, want a and b", ns)
	}
	e.tripAndCool()
	if cs := e.l.Circuits(); len(cs) != 1 || cs[0].Handler != "h" {
		t.Fatalf("circuits %+v, want h's", cs)
	}
}
