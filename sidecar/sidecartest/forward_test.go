package sidecartest_test

import (
	"context"
	"testing"
	"time"

	"github.com/axsched/ax/ipc"
	"github.com/axsched/ax/sidecar/sidecartest"
)

// Read your writes on a follower, with the wait on the read: a submit
// forwarded by a follower that cannot apply it (its Raft is cut off) is
// answered as soon as the leader commits it, and a read on that follower
// then waits until it has applied the write, and sees it. (Before, the
// forwarded write itself waited for the local apply, up to a second, and
// a follower's List right after could miss it.)
func TestForwardedWriteAnsweredBeforeItsNodeApplies(t *testing.T) {
	c := sidecartest.New(t, sidecartest.Options{Nodes: 3, NoExecutor: true})
	f := c.Follower()
	ctx := context.Background()
	spec := sidecartest.Spec("ryw", "h")
	spec.Delay = time.Hour

	c.PartitionRaft(f)
	healed := false
	defer func() {
		if !healed {
			c.Heal(f)
		}
	}()
	answered := make(chan error, 1)
	go func() {
		_, _, err := c.API(f).Submit(ctx, spec)
		answered <- err
	}()
	var err error
	c.Eventually("the forwarded submit answered while its node cannot apply it", func() bool {
		select {
		case err = <-answered:
			return true
		default:
			return false
		}
	})
	if err != nil {
		t.Fatalf("forwarded submit: %v", err)
	}
	// The follower still has not applied it (its Raft is cut off); a read
	// started now waits for it.
	read := make(chan ipc.ListPage, 1)
	go func() {
		page, err := c.API(f).List(ctx, ipc.ListQuery{Handler: "h"})
		if err != nil {
			t.Errorf("list: %v", err)
		}
		read <- page
	}()
	c.Heal(f)
	healed = true
	page := <-read
	if len(page.Tasks) != 1 || page.Tasks[0].ID != "ryw" {
		t.Fatalf("list on the follower after its own write: %+v, want task ryw", page.Tasks)
	}
}
