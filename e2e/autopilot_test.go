package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/axsched/ax/e2e/harness"
)

// apMember is a member of GET /v1/cluster with autopilot's fields.
type apMember struct {
	ID            string     `json:"id"`
	Suffrage      string     `json:"suffrage"`
	Leader        bool       `json:"leader"`
	Role          string     `json:"role"`
	Status        string     `json:"status"`
	Healthy       *bool      `json:"healthy"`
	Reachable     *bool      `json:"reachable"`
	LastContactMs *int64     `json:"last_contact_ms"`
	AppliedIndex  uint64     `json:"applied_index"`
	StableSince   *time.Time `json:"stable_since"`
}

// apCluster is GET /v1/cluster with autopilot's fields.
type apCluster struct {
	NodeID           string     `json:"node_id"`
	Leader           string     `json:"leader"`
	VotersTarget     int        `json:"voters_target"`
	FailureTolerance *int       `json:"failure_tolerance"`
	Members          []apMember `json:"members"`
}

func (c apCluster) member(id string) (apMember, bool) {
	for _, m := range c.Members {
		if m.ID == id {
			return m, true
		}
	}
	return apMember{}, false
}

func (c apCluster) voters() []string {
	var out []string
	for _, m := range c.Members {
		if m.Suffrage == "Voter" {
			out = append(out, m.ID)
		}
	}
	return out
}

func apClusterOf(ctx context.Context, n *harness.Node) (apCluster, error) {
	var info apCluster
	resp, err := n.Client.Do(ctx, "GET", "/v1/cluster", nil)
	if err != nil {
		return info, err
	}
	if resp.Status != http.StatusOK {
		return info, fmt.Errorf("GET /v1/cluster on %s: %s", n.ID, resp)
	}
	return info, json.Unmarshal(resp.Body, &info)
}

// addJoiningNode starts one more node, id, that joins the running cluster
// c through its members' peer addresses (with an executor for every
// handler, like the others), and adds it to c.Nodes so that c's cleanup
// kills it and dumps its log.
func addJoiningNode(t *testing.T, c *harness.Cluster, id string, extra ...string) *harness.Node {
	t.Helper()
	base := c.Nodes[0]
	dataRoot, sockRoot := filepath.Dir(base.DataDir), filepath.Dir(base.Socket)
	ports := harness.FreePorts(t, 2)
	n := &harness.Node{
		ID: id, Index: len(c.Nodes),
		Socket:   filepath.Join(sockRoot, id+".sock"),
		DataDir:  filepath.Join(dataRoot, id),
		RaftAddr: fmt.Sprintf("127.0.0.1:%d", ports[0]),
		PeerAddr: fmt.Sprintf("127.0.0.1:%d", ports[1]),
	}
	n.Client = harness.NewClient(n.Socket)
	n.Exec = harness.StartExecutor(t, id, filepath.Join(sockRoot, id+"-app.sock"), c.Recorder)
	var join []string
	for _, o := range c.Nodes {
		join = append(join, o.PeerAddr)
	}
	args := []string{"sidecar",
		"--node-id", n.ID, "--data-dir", n.DataDir, "--socket", n.Socket,
		"--raft-addr", n.RaftAddr, "--peer-addr", n.PeerAddr,
		"--join", strings.Join(join, ","), "--log-format", "json", "--log-level", "info",
		"--executor", "*=unix://" + n.Exec.Socket,
	}
	n.Process = harness.NewProcess(n.ID, harness.AxBin, filepath.Join(dataRoot, n.ID+".log"), append(args, extra...)...)
	c.Nodes = append(c.Nodes, n)
	if err := n.Start(); err != nil {
		t.Fatalf("start %s: %v", id, err)
	}
	return n
}

// TestAutopilot_NonvoterJoinsAndReplacesFailedVoter: three nodes bootstrap
// as voters (target 3); a fourth joins as a non-voter and stays one once it
// is stable (the target is met); a voter is killed, and after
// --autopilot-replace-after the fourth is promoted and the dead one demoted.
// The dead one restarts as a spare non-voter; the leader is killed, and the
// spare replaces it. Tasks are submitted and fired all along; every
// acknowledged one succeeds.
func TestAutopilot_NonvoterJoinsAndReplacesFailedVoter(t *testing.T) {
	harness.SkipShort(t)
	t.Parallel()
	apArgs := []string{"--autopilot-stabilization", "2s", "--autopilot-replace-after", "4s"}
	c := harness.NewCluster(t, harness.WithSize(3), harness.WithArgs(apArgs...))
	c.WaitReady()
	leader := c.Leader()

	// A steady trickle of short tasks through the running nodes.
	ctx, stop := context.WithCancel(context.Background())
	var (
		mu      sync.Mutex
		acked   []string
		targets = append([]*harness.Node(nil), c.Nodes...) // c.Nodes grows below
		wg      sync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ctx.Err() == nil; i++ {
			mu.Lock()
			var running []*harness.Node
			for _, n := range targets {
				if n.Running() {
					running = append(running, n)
				}
			}
			mu.Unlock()
			n := running[i%len(running)]
			id := fmt.Sprintf("ap-%04d", i)
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			resp, err := n.Client.Submit(rctx, harness.SubmitRequest{ID: id, Handler: harness.HandlerOK, Delay: fmt.Sprintf("%dms", i%5*100), Timeout: "2s"}.Body())
			cancel()
			if err == nil && (resp.Status == 201 || resp.Status == 200) {
				mu.Lock()
				acked = append(acked, id)
				mu.Unlock()
			}
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	defer func() {
		stop()
		wg.Wait()
	}()

	info, err := apClusterOf(harness.ReqCtx(t), leader)
	if err != nil {
		t.Fatal(err)
	}
	if v := info.voters(); len(v) != 3 || info.VotersTarget != 3 {
		t.Fatalf("bootstrap: voters %v, target %d; want 3 of 3", v, info.VotersTarget)
	}

	// The fourth node joins as a non-voter.
	n4 := addJoiningNode(t, c, "n4", apArgs...)
	c.WaitReadyNodes([]*harness.Node{n4}, harness.ReadyTimeout)
	mu.Lock()
	targets = append(targets, n4)
	mu.Unlock()
	// It becomes healthy, and stays a non-voter well past its
	// stabilization (2s): its healthy streak is 5s old, yet the voters
	// are still the first three.
	harness.WaitFor(t, 30*time.Second, 100*time.Millisecond, "n4 healthy for 5s", func() error {
		info, err := apClusterOf(harness.ReqCtx(t), c.Leader())
		if err != nil {
			return err
		}
		m, ok := info.member("n4")
		if !ok {
			return fmt.Errorf("n4 not a member: %+v", info.Members)
		}
		if m.Suffrage != "Nonvoter" {
			t.Fatalf("n4 is a %s (status %s), want a non-voter: the target of 3 voters is met", m.Suffrage, m.Status)
		}
		if m.Healthy == nil || !*m.Healthy || m.StableSince == nil || m.Role != "follower" || m.Status != "nonvoter" {
			return fmt.Errorf("n4: %+v", m)
		}
		if since := time.Since(*m.StableSince); since < 5*time.Second {
			return fmt.Errorf("n4 healthy for %s", since)
		}
		return nil
	})
	info, err = apClusterOf(harness.ReqCtx(t), n4)
	if err != nil {
		t.Fatal(err)
	}
	if v := info.voters(); strings.Join(v, ",") != "n1,n2,n3" {
		t.Fatalf("after n4's stabilization: voters %v, want n1,n2,n3", v)
	}
	if info.FailureTolerance == nil || *info.FailureTolerance != 1 {
		t.Fatalf("failure tolerance %v, want 1", info.FailureTolerance)
	}

	// Kill a voter that does not lead: n4 replaces it.
	leader = c.Leader()
	dead := c.Followers()[0]
	if dead == n4 {
		dead = c.Followers()[1]
	}
	if err := dead.Kill(); err != nil {
		t.Fatal(err)
	}
	t.Logf("killed voter %s (leader %s)", dead.ID, leader.ID)
	harness.WaitFor(t, 30*time.Second, 100*time.Millisecond, "n4 promoted and "+dead.ID+" demoted", func() error {
		info, err := apClusterOf(harness.ReqCtx(t), n4)
		if err != nil {
			return err
		}
		m4, _ := info.member("n4")
		md, _ := info.member(dead.ID)
		if m4.Suffrage != "Voter" || md.Suffrage != "Nonvoter" || len(info.voters()) != 3 {
			return fmt.Errorf("voters %v; n4 %s, %s %s", info.voters(), m4.Suffrage, dead.ID, md.Suffrage)
		}
		if md.Healthy == nil || *md.Healthy || md.Status != "nonvoter" {
			return fmt.Errorf("%s: %+v", dead.ID, md)
		}
		return nil
	})

	harness.MustSubmit(t, n4, harness.SubmitRequest{ID: "after-promotion", Handler: harness.HandlerOK}, 201)
	harness.WaitState(t, n4, "after-promotion", "SUCCESS")

	// The dead voter comes back with its data: a healthy non-voter, a
	// spare. Then the leader is killed: the new leader gives every member
	// --autopilot-replace-after from its election, then promotes the
	// spare and demotes the old leader.
	if err := dead.Start(); err != nil {
		t.Fatal(err)
	}
	c.WaitReadyNodes([]*harness.Node{dead}, harness.ReadyTimeout)
	harness.WaitFor(t, 30*time.Second, 100*time.Millisecond, dead.ID+" a healthy spare", func() error {
		info, err := apClusterOf(harness.ReqCtx(t), n4)
		if err != nil {
			return err
		}
		m, _ := info.member(dead.ID)
		if m.Suffrage != "Nonvoter" || m.Healthy == nil || !*m.Healthy || m.Status != "nonvoter" || len(info.voters()) != 3 {
			return fmt.Errorf("voters %v; %s: %+v", info.voters(), dead.ID, m)
		}
		return nil
	})
	oldLeader := c.Leader()
	if err := oldLeader.Kill(); err != nil {
		t.Fatal(err)
	}
	newLeader := c.WaitForNewLeader(oldLeader)
	t.Logf("killed leader %s; new leader %s", oldLeader.ID, newLeader.ID)
	harness.WaitFor(t, 30*time.Second, 100*time.Millisecond, dead.ID+" promoted and "+oldLeader.ID+" demoted", func() error {
		info, err := apClusterOf(harness.ReqCtx(t), newLeader)
		if err != nil {
			return err
		}
		mb, _ := info.member(dead.ID)
		mo, _ := info.member(oldLeader.ID)
		if mb.Suffrage != "Voter" || mo.Suffrage != "Nonvoter" || len(info.voters()) != 3 {
			return fmt.Errorf("voters %v; %s %s, %s %s", info.voters(), dead.ID, mb.Suffrage, oldLeader.ID, mo.Suffrage)
		}
		return nil
	})

	// Writes and callbacks went on; every acknowledged task succeeds.
	harness.MustSubmit(t, newLeader, harness.SubmitRequest{ID: "after-leader-replacement", Handler: harness.HandlerOK}, 201)
	harness.WaitState(t, newLeader, "after-leader-replacement", "SUCCESS")
	stop()
	wg.Wait()
	mu.Lock()
	ids := append([]string(nil), acked...)
	mu.Unlock()
	if len(ids) < 50 {
		t.Fatalf("only %d tasks acknowledged", len(ids))
	}
	harness.WaitFor(t, 30*time.Second, 200*time.Millisecond, "every acknowledged task SUCCESS", func() error {
		var notYet []string
		for _, id := range ids {
			task, err := newLeader.Client.GetTask(harness.ReqCtx(t), id)
			if err != nil || task.State != "SUCCESS" {
				notYet = append(notYet, id)
			}
		}
		if len(notYet) > 0 {
			return fmt.Errorf("%d of %d not SUCCESS yet, e.g. %s", len(notYet), len(ids), notYet[0])
		}
		return nil
	})
	t.Logf("%d tasks submitted and succeeded through the join, the kill and the replacement", len(ids))
	for _, n := range c.Nodes {
		for _, l := range strings.Split(n.Logs(), "\n") {
			if strings.Contains(l, "autopilot:") || strings.Contains(l, "adding non-voter") {
				t.Logf("%s: %s", n.ID, l)
			}
		}
	}
}
