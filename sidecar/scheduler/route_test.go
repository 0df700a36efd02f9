package scheduler

import (
	"testing"
	"time"

	"github.com/axsched/ax/raftfsm"
)

func testLeader(routing string) *Scheduler {
	l := New(testConfig(Config{NodeID: "a", Routing: routing}), Deps{})
	now := time.Now()
	for _, id := range []string{"a", "b", "c"} {
		l.lastSeen[id] = now
	}
	return l
}

func nodesRunning(handler string, ids ...string) []raftfsm.Node {
	var out []raftfsm.Node
	for _, id := range ids {
		out = append(out, raftfsm.Node{ID: id, Executors: []raftfsm.Executor{{Name: "x", Handlers: []string{handler}}}})
	}
	return out
}

func TestPickHashIsStableAndSpreads(t *testing.T) {
	l := testLeader(RoutingLeastLoaded)
	nodes := nodesRunning("h", "a", "b", "c")
	now := time.Now()
	seen := map[string]bool{}
	for k := range 64 {
		key := string(rune('A' + k))
		first := l.Pick(nodes, "h", "", key, now)
		for range 5 {
			if got := l.Pick(nodes, "h", "", key, now); got != first {
				t.Fatalf("key %q went to %s then %s", key, first, got)
			}
		}
		seen[first] = true
		// Removing another node does not move the key (rendezvous hashing).
		var others []raftfsm.Node
		for _, nd := range nodes {
			if nd.ID == first || len(others) == 1 {
				others = append(others, nd)
			}
		}
		if got := l.Pick(others, "h", "", key, now); got != first {
			t.Fatalf("key %q moved from %s to %s when another node left", key, first, got)
		}
	}
	if len(seen) != 3 {
		t.Fatalf("64 keys used nodes %v, want all three", seen)
	}
}

func TestPickLeastLoadedAndSaturation(t *testing.T) {
	l := testLeader(RoutingLeastLoaded)
	nodes := nodesRunning("h", "a", "b", "c")
	now := time.Now()
	l.Report(Report{ID: "a", InFlight: 10})
	l.Report(Report{ID: "b", InFlight: 2})
	l.Report(Report{ID: "c", InFlight: 5})
	counts := map[string]int{}
	for range 6 {
		counts[l.Pick(nodes, "h", "", "", now)]++
	}
	// b takes attempts until it reaches c's load (2+3 = 5), then they share.
	if counts["a"] != 0 || counts["b"] < 3 {
		t.Fatalf("least loaded spread %v", counts)
	}
	// A node with attempts queued for the handler (saturated) is skipped.
	l.Report(Report{ID: "b", InFlight: 0, Queued: map[string]int{"h": 3}})
	l.Report(Report{ID: "c", InFlight: 50})
	for range 5 {
		if got := l.Pick(nodes, "h", "", "", now); got == "b" {
			t.Fatal("a saturated node got an attempt while others were free")
		}
	}
	// A retry avoids the failed node; a stale node is not live.
	l.lastSeen["c"] = now.Add(-time.Minute)
	if got := l.Pick(nodes, "h", "a", "", now); got != "b" {
		t.Fatalf("retry avoiding a: got %s (c is stale, b saturated but the only other)", got)
	}
}

func TestPickRoundRobinAndNoExecutor(t *testing.T) {
	l := testLeader(RoutingRoundRobin)
	nodes := nodesRunning("h", "a", "b", "c")
	now := time.Now()
	counts := map[string]int{}
	for range 9 {
		counts[l.Pick(nodes, "h", "", "", now)]++
	}
	if counts["a"] != 3 || counts["b"] != 3 || counts["c"] != 3 {
		t.Fatalf("round robin spread %v", counts)
	}
	if got := l.Pick(nodes, "other", "", "", now); got != "" {
		t.Fatalf("no node runs 'other', got %s", got)
	}
}

func TestRunningCountsPerHandler(t *testing.T) {
	l := testLeader(RoutingLeastLoaded)
	task := func(id string, st raftfsm.State) *raftfsm.Task {
		return &raftfsm.Task{ID: id, State: st, Spec: raftfsm.Spec{Handler: "h"}}
	}
	l.trackRunning(task("1", raftfsm.StateRunning))
	l.trackRunning(task("2", raftfsm.StateRunning))
	l.trackRunning(task("2", raftfsm.StateRunning)) // the same attempt again
	if got := l.runningOf("h"); got != 2 {
		t.Fatalf("running %d, want 2", got)
	}
	l.trackRunning(task("1", raftfsm.StateSuccess))
	l.trackRunning(task("3", raftfsm.StateWaiting))
	if got := l.runningOf("h"); got != 1 {
		t.Fatalf("running %d, want 1", got)
	}
}

// A node that cannot write its storage cannot apply the Fire of an attempt
// routed to it: the attempt would sit until its lease ended (CI saw six
// tasks of e2e's disk-full test still RUNNING on the full node 20 s on).
// It gets no attempts while it says so, and gets them again after.
func TestPickSkipsANodeWhoseStorageIsUnavailable(t *testing.T) {
	l := testLeader(RoutingRoundRobin)
	nodes := nodesRunning("h", "a", "b", "c")
	now := time.Now()
	l.Report(Report{ID: "b", StorageUnavailable: true})
	for range 12 {
		if got := l.Pick(nodes, "h", "", "", now); got == "b" {
			t.Fatal("a node whose storage is unavailable got an attempt")
		}
	}
	l.Report(Report{ID: "b"})
	got := map[string]int{}
	for range 12 {
		got[l.Pick(nodes, "h", "", "", now)]++
	}
	if got["b"] == 0 {
		t.Fatalf("b writable again got no attempt: %v", got)
	}
}
