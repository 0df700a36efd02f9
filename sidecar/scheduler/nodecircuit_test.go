package scheduler

import (
	"testing"
	"time"

	"github.com/axsched/ax/engine"
	"github.com/axsched/ax/raftfsm"
)

// newCircuitEnv is a park env whose handler h runs on nodes "b" and "c"
// (the leader's own node "a" has no executor for it); report sends
// their load reports.
func newCircuitEnv(t *testing.T) *parkEnv {
	t.Helper()
	e := newParkEnv(t)
	e.apply(raftfsm.Command{Type: raftfsm.CmdNode, Node: &raftfsm.Node{ID: "c"}})
	e.executor("b", 100)
	e.executor("c", 100)
	return e
}

// reportCircuits sends node's load report (its executor x-<node>, idle),
// with handler h's circuit open there until until (none when zero).
func (e *parkEnv) reportCircuits(node string, until time.Time) {
	e.t.Helper()
	r := Report{ID: node, Executors: []ExecutorLoad{{Name: "x-" + node, Handlers: []string{"h"}, Limit: 10}}}
	if !until.IsZero() {
		r.Circuits = []Circuit{{Handler: "h", UntilMs: until.UnixMilli()}}
	}
	e.l.Report(r)
}

// nodesOf returns the node each of ids' attempts went to.
func (e *parkEnv) nodesOf(ids []string) map[string]int {
	e.t.Helper()
	out := map[string]int{}
	for _, id := range ids {
		t := e.task(id)
		if t.State != raftfsm.StateRunning {
			e.t.Fatalf("%s is %s, want RUNNING", id, t.State)
		}
		out[t.Node]++
	}
	return out
}

// A node whose load report has the handler's circuit open (its own
// breaker: it would hand each attempt back uncalled, due at the end of
// its cool-down) gets none of the handler's runs while another node can
// take them; once the cool-down's end has passed it gets them again,
// before any new report, so its half-open probe can go. The leader's own
// breaker is not touched. Before, the leader went on routing a share of
// the runs to the node, each handed back and due 30 s later.
func TestPlacementAvoidsANodeWhoseCircuitIsOpen(t *testing.T) {
	e := newCircuitEnv(t)
	end := e.clock.Now().Add(30 * time.Second)
	e.reportCircuits("b", end)
	e.reportCircuits("c", time.Time{})
	if u, open := e.l.NodeCircuit("b", "h"); !open || !u.Equal(time.UnixMilli(end.UnixMilli())) {
		t.Fatalf("NodeCircuit(b, h) = %v, %v; want open until %v", u, open, end)
	}
	if _, open := e.l.NodeCircuit("c", "h"); open {
		t.Fatal("NodeCircuit(c, h) open, want closed")
	}
	first := ids("o", 6)
	e.due(2, first...)
	if got := e.nodesOf(first); got["c"] != 6 {
		t.Fatalf("runs went to %v while b's circuit was open, want all to c", got)
	}
	e.wantParked(nil)
	// One millisecond before the end: still open.
	e.clock.Advance(30*time.Second - time.Millisecond)
	e.reportCircuits("c", time.Time{}) // live (by Wall), idle again
	early := ids("e", 2)
	e.due(2, early...)
	if got := e.nodesOf(early); got["c"] != 2 {
		t.Fatalf("runs went to %v just before b's cool-down ended, want all to c", got)
	}
	// The end passes; b's last report still lists the circuit (its next
	// one would not): b is a candidate again, and least-loaded routing
	// sends it the next runs.
	e.clock.Advance(time.Millisecond)
	if _, open := e.l.NodeCircuit("b", "h"); open {
		t.Fatal("NodeCircuit(b, h) open after its end, want closed")
	}
	after := ids("a", 4)
	e.due(2, after...)
	if got := e.nodesOf(after); got["b"] == 0 {
		t.Fatalf("runs went to %v once b's cool-down had ended, want some to b", got)
	}
	if st := e.l.breakers.State("h"); st != engine.BreakerClosed {
		t.Fatalf("the leader's circuit is %s, want closed (untouched)", st)
	}
}

// When every node that runs the handler has its circuit open, the runs
// wait as circuit_open until the earliest end (the handler's circuit
// timer is armed then), and start on that node when it comes. A report
// that no longer lists a node's circuit wakes them at once. The leader's
// breaker stays closed all along.
func TestPlacementWaitsWhenEveryNodeCircuitIsOpen(t *testing.T) {
	e := newCircuitEnv(t)
	now := e.clock.Now()
	endB, endC := now.Add(20*time.Second), now.Add(10*time.Second)
	e.reportCircuits("b", endB)
	e.reportCircuits("c", endC)
	runs := ids("w", 3)
	e.due(2, runs...)
	if len(e.fired) != 0 {
		t.Fatalf("fired %v with every node's circuit open, want none", e.fired)
	}
	e.wantParked(map[string]int{ReasonCircuitOpen: 3})
	if w := e.wantReason(runs[0], ReasonCircuitOpen); w.UntilMs != endC.UnixMilli() {
		t.Fatalf("waiting until %v, want c's end %v", time.UnixMilli(w.UntilMs), endC)
	}
	if at, ok := e.timers.Due(circuitKeyPrefix + "h"); !ok || !at.Equal(endC) {
		t.Fatalf("circuit timer %v (%v), want at c's end %v", at, ok, endC)
	}
	if st := e.l.breakers.State("h"); st != engine.BreakerClosed {
		t.Fatalf("the leader's circuit is %s, want closed (untouched)", st)
	}
	// c's end: its timer wakes the runs, and they go to c.
	e.clock.Advance(10 * time.Second)
	e.reportCircuits("b", endB) // live (by Wall)
	e.reportCircuits("c", endC) // its last report, still listing it
	e.l.fired(e.ctx, []engine.Expired{{Key: circuitKeyPrefix + "h"}})
	e.dispatch()
	if got := e.nodesOf(runs); got["c"] != 3 {
		t.Fatalf("runs went to %v at c's end, want all to c", got)
	}
	e.wantParked(nil)

	// Both open again; c's next report, without the circuit (its probe
	// succeeded early, say), wakes the waiting runs at once.
	now = e.clock.Now()
	e.reportCircuits("b", now.Add(30*time.Second))
	e.reportCircuits("c", now.Add(30*time.Second))
	more := ids("m", 2)
	e.due(2, more...)
	e.wantParked(map[string]int{ReasonCircuitOpen: 2})
	e.reportCircuits("c", time.Time{})
	e.dispatch()
	if got := e.nodesOf(more); got["c"] != 2 {
		t.Fatalf("runs went to %v after c's report without its circuit, want all to c", got)
	}
	// One node open, the other's executor down: executor_unavailable,
	// until the earliest of the two.
	downUntil := e.clock.Now().Add(5 * time.Second)
	e.l.Report(Report{ID: "c", Executors: []ExecutorLoad{{Name: "x-c", Handlers: []string{"h"}, Limit: 10, DownUntilMs: downUntil.UnixMilli()}}})
	last := ids("l", 1)
	e.due(2, last...)
	e.wantParked(map[string]int{ReasonExecutorUnavailable: 1})
	if w := e.wantReason(last[0], ReasonExecutorUnavailable); w.UntilMs != downUntil.UnixMilli() {
		t.Fatalf("waiting until %v, want c's executor's %v", time.UnixMilli(w.UntilMs), downUntil)
	}
}

// With one node to run the handler (a single-node cluster, or the only
// node with an executor for it), its circuit does not hold the runs on
// the leader: they go to it as before, and its breaker hands them back.
func TestPlacementIgnoresTheCircuitOfTheOnlyNode(t *testing.T) {
	e := newParkEnv(t)
	e.executor("a", 100) // the leader's own node, the only one with an executor
	e.l.Report(Report{ID: "a", Executors: []ExecutorLoad{{Name: "x-a", Handlers: []string{"h"}, Limit: 10}},
		Circuits: []Circuit{{Handler: "h", UntilMs: e.clock.Now().Add(30 * time.Second).UnixMilli()}}})
	runs := ids("s", 3)
	e.due(2, runs...)
	if got := e.nodesOf(runs); got["a"] != 3 {
		t.Fatalf("runs went to %v, want all to a, as before", got)
	}
	e.wantParked(nil)
}
