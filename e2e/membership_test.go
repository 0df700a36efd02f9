package e2e

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/axsched/ax/e2e/harness"
)

// TestMembership_TokenRemoveLeaveStrongRead covers the operator side of a
// cluster: the peer API refuses requests without the cluster token; a
// strong read through a follower sees a write acknowledged just before; a
// dead node is removed with DELETE /v1/cluster/members/{id} and the two
// others keep working; a node started with --leave-on-shutdown leaves the
// configuration when it gets SIGTERM.
func TestMembership_TokenRemoveLeaveStrongRead(t *testing.T) {
	harness.SkipShort(t)
	t.Parallel()
	c := harness.NewCluster(t, harness.WithSize(3), harness.WithArgs("--cluster-token", "s3cret", "--leave-on-shutdown"))
	c.WaitReady()
	leader := c.Leader()
	follower := c.Followers()[0]

	// Peer API without the token: 401; with it: 200.
	for _, tok := range []string{"", "wrong"} {
		req, _ := http.NewRequest("GET", "http://"+follower.PeerAddr+"/peer/v1/info", nil)
		if tok != "" {
			req.Header.Set("Ax-Cluster-Token", tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 401 {
			t.Fatalf("peer API with token %q: %d, want 401", tok, resp.StatusCode)
		}
	}

	// Strong read through a follower right after a write through the leader.
	harness.MustSubmit(t, leader, harness.SubmitRequest{ID: "strong-1", Handler: harness.HandlerOK, Delay: "1h"}, 201)
	resp, err := follower.Client.Do(harness.ReqCtx(t), "GET", harness.TaskPath("strong-1")+"?consistency=strong", nil)
	if err != nil || resp.Status != 200 {
		t.Fatalf("strong read via follower: %v %v", resp, err)
	}
	resp, _ = follower.Client.Do(harness.ReqCtx(t), "GET", harness.TaskPath("strong-1")+"?consistency=eventual", nil)
	harness.WantError(t, resp, 400, "bad_request")

	// Remove a dead follower.
	dead := c.Followers()[1]
	if err := dead.Kill(); err != nil {
		t.Fatal(err)
	}
	resp, err = follower.Client.Do(harness.ReqCtx(t), "DELETE", "/v1/cluster/members/"+dead.ID, nil)
	if err != nil || resp.Status != 204 {
		t.Fatalf("remove %s via %s: %v %v", dead.ID, follower.ID, resp, err)
	}
	resp, _ = follower.Client.Do(harness.ReqCtx(t), "DELETE", "/v1/cluster/members/"+dead.ID, nil)
	harness.WantError(t, resp, 404, "not_found")
	harness.WaitFor(t, 10*time.Second, 50*time.Millisecond, "two members", func() error {
		info, err := leader.Client.Cluster(harness.ReqCtx(t))
		if err != nil {
			return err
		}
		if len(info.Members) != 2 {
			return fmt.Errorf("members %+v", info.Members)
		}
		return nil
	})
	// Two of two voters: writes and callbacks go on.
	harness.MustSubmit(t, follower, harness.SubmitRequest{ID: "after-remove", Handler: harness.HandlerOK}, 201)
	harness.WaitState(t, leader, "after-remove", "SUCCESS")

	// --leave-on-shutdown: SIGTERM on the follower removes it.
	if err := follower.Stop(); err != nil {
		t.Fatalf("stop %s: %v", follower.ID, err)
	}
	harness.WaitFor(t, 10*time.Second, 50*time.Millisecond, "one member after a leave", func() error {
		info, err := leader.Client.Cluster(harness.ReqCtx(t))
		if err != nil {
			return err
		}
		if len(info.Members) != 1 || info.Members[0].ID != leader.ID {
			return fmt.Errorf("members %+v", info.Members)
		}
		return nil
	})
	harness.MustSubmit(t, leader, harness.SubmitRequest{ID: "after-leave", Handler: harness.HandlerOK}, 201)
	harness.WaitState(t, leader, "after-leave", "SUCCESS")
}

// TestMembership_ReusedAddressIsNotTakenOver: a cluster that still lists a
// dead member sends Raft RPCs to its address; when a node of another ax
// cluster (no token on either) now holds that address, as a recreated
// pod may hold a gone pod's IP, it refuses them
// (ax_raft_rpcs_refused_total) and keeps its own leadership, term and
// tasks; the first cluster goes on with its two live members.
func TestMembership_ReusedAddressIsNotTakenOver(t *testing.T) {
	harness.SkipShort(t)
	t.Parallel()
	a := harness.NewCluster(t, harness.WithSize(3))
	a.WaitReady()
	aLeader := a.Leader()
	harness.MustSubmit(t, aLeader, harness.SubmitRequest{ID: "a-task", Handler: harness.HandlerOK, Delay: "1h"}, 201)
	gone := a.Followers()[1]
	if err := gone.Kill(); err != nil {
		t.Fatal(err)
	}

	// Cluster B: one node, b1, on the dead member's Raft and peer
	// addresses. (The check is by server id: ids shared by the two
	// clusters would pass it.)
	b := harness.NewCluster(t, harness.WithSize(1), harness.WithIDPrefix("b"), harness.WithArgs("--raft-addr", gone.RaftAddr, "--peer-addr", gone.PeerAddr))
	b.WaitReady()
	b1 := b.Leader()
	harness.MustSubmit(t, b1, harness.SubmitRequest{ID: "b-task", Handler: harness.HandlerOK, Delay: "1h"}, 201)
	before, err := b1.Client.Cluster(harness.ReqCtx(t))
	if err != nil {
		t.Fatal(err)
	}

	// A's leader keeps sending; b1 refuses: wait until it has refused
	// many, checking all along that it still leads its own cluster.
	harness.WaitFor(t, 30*time.Second, 100*time.Millisecond, "b1 refusing cluster A's RPCs", func() error {
		info, err := b1.Client.Cluster(harness.ReqCtx(t))
		if err != nil {
			return err
		}
		if info.Leader != b1.ID || info.Term != before.Term || len(info.Members) != 1 {
			t.Fatalf("b1 was taken over: leader %q term %d (was %d), members %+v", info.Leader, info.Term, before.Term, info.Members)
		}
		if n := harness.Scrape(t, b1)["ax_raft_rpcs_refused_total"]; n < 20 {
			return fmt.Errorf("refused %v", n)
		}
		return nil
	})
	if tk, err := b1.Client.GetTask(harness.ReqCtx(t), "b-task"); err != nil || tk.State != "WAITING" {
		t.Fatalf("b1's own task: %+v %v", tk, err)
	}
	if resp, err := b1.Client.Get(harness.ReqCtx(t), "a-task"); err != nil || resp.Status != 404 {
		t.Fatalf("cluster A's task on b1: %v %v", resp, err)
	}
	// Cluster A works on with two of its three voters.
	harness.MustSubmit(t, aLeader, harness.SubmitRequest{ID: "a-after", Handler: harness.HandlerOK}, 201)
	harness.WaitState(t, aLeader, "a-after", "SUCCESS")
}
