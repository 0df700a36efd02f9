package sidecartest_test

import (
	"context"
	"testing"
	"time"

	"github.com/axsched/ax/ipc"
	"github.com/axsched/ax/sidecar"
	"github.com/axsched/ax/sidecar/sidecartest"
)

// A member that vanished without leaving (here: cut off for good) is
// replaced by nobody (no spare), stays a voter past the replace-after
// time, and is removed by autopilot once it has been unheard for
// DeadMemberCleanup; the two left keep a leader and run tasks.
func TestAutopilotRemovesADeadMember(t *testing.T) {
	c := sidecartest.New(t, sidecartest.Options{Nodes: 3, Config: func(_ int, cfg *sidecar.Config) {
		cfg.DeadMemberCleanup = time.Minute
	}})
	l := c.WaitLeader()
	f := c.Follower()
	gone := c.Node(f).ID()
	members := func() map[string]string {
		info, err := c.API(c.WaitLeader()).Cluster(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, m := range info.Members {
			out[m.ID] = m.Suffrage
		}
		return out
	}
	c.Partition(f)
	c.Advance(30 * time.Second) // past replace-after: failed, no spare
	if m := members(); m[gone] != "Voter" || len(m) != 3 {
		t.Fatalf("30 s after %s went silent: members %v, want it still a voter", gone, m)
	}
	c.AdvanceUntil(gone+" removed", 100*time.Millisecond, func() bool {
		_, in := members()[gone]
		return !in
	})
	if m := members(); len(m) != 2 {
		t.Fatalf("members %v, want the two alive", m)
	}
	c.Submit(l, sidecartest.Spec("after", "h"))
	c.Advance(time.Second)
	c.WaitState(c.WaitLeader(), "after", "SUCCESS")
}

// After an election on an idle cluster the commit index ends on the new
// leader's no-op (and barrier), which the state machine never applies:
// GET /v1/cluster says so with state_index, and no node shows a lag.
func TestClusterInfo_NoLagAfterAnElectionOnAnIdleCluster(t *testing.T) {
	c := sidecartest.New(t, sidecartest.Options{Nodes: 3})
	old := c.WaitLeader()
	s := sidecartest.Spec("before", "h")
	s.Delay = time.Hour
	c.Submit(old, s)
	for i := range c.Nodes() {
		c.WaitState(i, "before", "WAITING")
	}
	c.Partition(old)
	if l := c.WaitLeader(); l == old {
		t.Fatalf("the partitioned node still leads")
	}
	c.Heal(old)
	l := c.WaitLeader()
	var info ipc.ClusterInfo
	// The members' applied indexes come with their load reports, which
	// run on the fake clock.
	c.AdvanceUntil("every node at the leader's commit index, with no lag", 500*time.Millisecond, func() bool {
		li, err := c.API(l).Cluster(ctx)
		if err != nil || len(li.Members) != c.Nodes() {
			return false
		}
		for i := range c.Nodes() {
			ni, err := c.API(i).Cluster(ctx)
			if err != nil || ni.CommitIndex != li.CommitIndex || ni.Lag(ni.AppliedIndex) != 0 {
				return false
			}
		}
		for _, m := range li.Members {
			if m.AppliedIndex < li.AppliedIndex {
				return false // a report from before the heal
			}
		}
		info = li
		return true
	})
	// The case this test is for: committed entries past the applied index
	// that change nothing (else it would pass without state_index).
	if info.StateIndex == 0 || info.StateIndex >= info.CommitIndex || info.AppliedIndex != info.StateIndex {
		t.Fatalf("leader: commit %d, state %d, applied %d: want applied = state < commit", info.CommitIndex, info.StateIndex, info.AppliedIndex)
	}
	for _, m := range info.Members {
		if info.Lag(m.AppliedIndex) != 0 {
			t.Errorf("member %s: applied %d, lag %d (commit %d, state %d)", m.ID, m.AppliedIndex, info.Lag(m.AppliedIndex), info.CommitIndex, info.StateIndex)
		}
	}
}
