package sidecar

import (
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/axsched/ax/raftfsm"
)

// A node removed from the Raft configuration (a leave, or DELETE
// /v1/cluster/members/{id}) gets no more attempts, even while the leader's
// cache of node records still holds it: a removal is no event of the state
// machine. (The cache once kept a node that had just left: the next task
// was assigned to it and stayed RUNNING until its lease ended.)
func TestNodesDropsARemovedMember(t *testing.T) {
	e := newPauseEnv(t)
	e.propose(raftfsm.Command{Type: raftfsm.CmdNode, Node: &raftfsm.Node{ID: "b",
		Executors: []raftfsm.Executor{{Name: "x", Handlers: []string{"h"}, URL: "unix:///b.sock"}}}})
	// A non-voter does not count for the quorum of this one-node group.
	if err := e.n.raft.AddNonvoter("b", raft.ServerAddress("b"), 0, time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	has := func(ns []raftfsm.Node, id string) bool {
		for _, nd := range ns {
			if nd.ID == id {
				return true
			}
		}
		return false
	}
	if ns := e.l.Nodes(); !has(ns, "a") || !has(ns, "b") {
		t.Fatalf("members a and b: nodes() = %+v", ns)
	}
	if err := e.n.raft.RemoveServer("b", 0, time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	if ns := e.l.Nodes(); !has(ns, "a") || has(ns, "b") {
		t.Fatalf("b was removed: nodes() = %+v", ns)
	}
	// The cache itself is untouched by the filter.
	if ns := e.l.Nodes(); !has(ns, "a") {
		t.Fatalf("a vanished on a second call: %+v", ns)
	}
}
