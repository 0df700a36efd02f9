package sidecartest_test

import (
	"context"
	"testing"
	"time"

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
