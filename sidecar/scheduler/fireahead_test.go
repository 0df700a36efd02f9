package scheduler

import (
	"testing"
	"time"

	"github.com/axsched/ax/raftfsm"
)

// A leader about to hand leadership over fires the runs due within the
// horizon at once, with their attempts starting (and their leases
// counting) from their due times; later runs, and runs already parked,
// are left alone; a node that does not lead (or has not loaded its store)
// fires nothing.
func TestFireAheadFiresTheRunsDueWithinTheHorizon(t *testing.T) {
	e := newParkEnv(t)
	e.executor("a", 5)
	now := e.clock.Now()
	submit := func(id string, in time.Duration) {
		ms := now.Add(in).UnixMilli()
		e.apply(raftfsm.Command{Type: raftfsm.CmdSubmit, Submit: &raftfsm.Submit{ID: id, DueMs: ms, AtMs: now.UnixMilli(),
			Spec: raftfsm.Spec{Handler: "h", TimeoutNs: int64(time.Second), MaxAttempts: 3}}})
	}
	submit("soon", 100*time.Millisecond)
	submit("edge", 2*time.Second)
	submit("later", 2*time.Second+time.Millisecond)

	if n := e.l.FireAhead(e.ctx, 2*time.Second); n != 0 || len(e.fired) != 0 {
		t.Fatalf("FireAhead before the store is loaded: %d parked, fired %v; want nothing", n, e.fired)
	}
	e.l.mu.Lock()
	e.l.loaded = true
	e.l.mu.Unlock()
	if n := e.l.FireAhead(e.ctx, 2*time.Second); n != 2 {
		t.Fatalf("FireAhead parked %d runs, want 2 (soon, edge)", n)
	}
	for _, c := range []struct {
		id  string
		due time.Duration
	}{{"soon", 100 * time.Millisecond}, {"edge", 2 * time.Second}} {
		tk := e.task(c.id)
		dueMs := now.Add(c.due).UnixMilli()
		if tk.State != raftfsm.StateRunning || tk.FiredMs != dueMs || tk.LeaseMs != dueMs+2000 {
			t.Errorf("%s after FireAhead: %s, fired at %d, lease %d; want RUNNING from its due time %d, lease due + timeout + grace",
				c.id, tk.State, tk.FiredMs, tk.LeaseMs, dueMs)
		}
	}
	if st := e.task("later").State; st != raftfsm.StateWaiting {
		t.Errorf("later (due past the horizon) after FireAhead: %s, want WAITING", st)
	}
	// Nothing more to fire: the runs are RUNNING.
	fired := len(e.fired)
	if n := e.l.FireAhead(e.ctx, 2*time.Second); n != 0 || len(e.fired) != fired {
		t.Errorf("a second FireAhead parked %d and fired %v, want nothing", n, e.fired[fired:])
	}
}

// A run already parked (waiting for capacity) keeps its place in its
// queue: FireAhead does not read it again.
func TestFireAheadLeavesParkedRunsInPlace(t *testing.T) {
	e := newParkEnv(t)
	e.l.mu.Lock()
	e.l.loaded = true
	e.l.mu.Unlock()
	// No executor anywhere: due runs park with no_executor.
	e.due(0, "first")
	e.wantReason("first", ReasonNoExecutor)
	e.l.mu.Lock()
	seq := e.l.queues["h"].runs["first"].seq
	e.l.mu.Unlock()
	e.clock.Advance(10 * time.Millisecond)
	if n := e.l.FireAhead(e.ctx, 2*time.Second); n != 0 {
		t.Fatalf("FireAhead parked %d runs, want 0 (first is parked already)", n)
	}
	e.l.mu.Lock()
	again := e.l.queues["h"].runs["first"].seq
	e.l.mu.Unlock()
	if again != seq {
		t.Errorf("first's park order changed from %d to %d", seq, again)
	}
}
