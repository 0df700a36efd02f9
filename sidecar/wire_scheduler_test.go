package sidecar

import (
	"testing"
	"time"

	"github.com/axsched/ax/raftfsm"
	"github.com/axsched/ax/sidecar/peerapi"
	"github.com/axsched/ax/sidecar/scheduler"
)

// testLeader is a node "a" with no stores and its scheduler, built by the
// wire, which has heard a load report from a, b and c.
func testLeader(routing string) (*Node, *scheduler.Scheduler) {
	n := &Node{cfg: Config{NodeID: "a", Routing: routing}}
	n.leader = newScheduler(n)
	for _, id := range []string{"a", "b", "c"} {
		n.reportToLeader(peerapi.LoadReport{ID: id})
	}
	return n, n.leader
}

func nodesRunning(handler string, ids ...string) []raftfsm.Node {
	var out []raftfsm.Node
	for _, id := range ids {
		out = append(out, raftfsm.Node{ID: id, Executors: []raftfsm.Executor{{Name: "x", Handlers: []string{handler}}}})
	}
	return out
}

// The wire hands a load report's fields to the scheduler, and the
// scheduler's drain view is the node's (drain.go).
func TestWireReportsLoadAndDrain(t *testing.T) {
	n, l := testLeader(scheduler.RoutingLeastLoaded)
	n.reportToLeader(peerapi.LoadReport{ID: "b", Applied: 7, Draining: true, Executors: []peerapi.ExecutorLoad{{Name: "x", Handlers: []string{"h"}}}})
	seen, applied, ok := l.LastReport("b")
	if !ok || applied != 7 || time.Since(seen) > time.Minute {
		t.Fatalf("last report of b: %v %d %v", seen, applied, ok)
	}
	if !n.isDraining("b") || n.isDraining("c") {
		t.Fatalf("draining b %v, c %v: want b only", n.isDraining("b"), n.isDraining("c"))
	}
	if _, _, ok := l.LastReport("z"); ok {
		t.Fatal("a report from z that never came")
	}
}
