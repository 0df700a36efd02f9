package e2e

import (
	"context"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/axsched/ax/e2e/harness"
)

// Small Raft log bounds for the catch-up tests: a node that misses a few
// hundred entries is behind the leader's trailing logs and must be sent a
// snapshot.
var catchUpArgs = []string{"--snapshot-threshold", "50", "--trailing-logs", "20", "--snapshot-interval", "200ms"}

const (
	// catchUpEntries is how many entries the cluster commits while one
	// node is away: far more than threshold + trailing logs.
	catchUpEntries = 300
	// catchUpPad is the payload of each waiting task (bytes): 300 entries
	// of five take 15 MiB.
	catchUpPad = 10 << 10
	// installedMsg is what raft logs (at info: ax debug) on a follower
	// that installed a snapshot sent by the leader; installingMsg what the
	// leader logs when it sends one.
	installedMsg  = "Installed remote snapshot"
	installingMsg = "installing snapshot on"
)

// catchUpWrites commits catchUpEntries entries through via: batch submits
// of five tasks due in an hour (one entry each, sent one after another),
// with every tenth batch also a task due now (run by an executor) and a
// cancel of an earlier task, so the state has WAITING, SUCCESS and
// CANCELLED tasks and the snapshot carries all of them. Each waiting task
// carries catchUpPad bytes of payload, so that the entries fill more than
// one segment of the leader's WAL (8 MiB): the WAL frees a compacted
// log's entries only a whole segment at a time, and the leader could
// send entries of its current segment instead of a snapshot.
func catchUpWrites(t *testing.T, via *harness.Node, prefix string) {
	t.Helper()
	pad := strings.Repeat("p", catchUpPad)
	for b := range catchUpEntries {
		var items []string
		for i := range 5 {
			items = append(items, fmt.Sprintf(`{"id":"%s-%d-%d","handler":"nobody","delay":"1h","payload":{"pad":%q}}`, prefix, b, i, pad))
		}
		if b%10 == 0 {
			// A short timeout: an attempt the leader routed to a node just
			// cut off is retried when its lease (timeout + 5s) ends.
			items = append(items, fmt.Sprintf(`{"id":"%s-run-%d","handler":%q,"timeout":"2s"}`, prefix, b, harness.HandlerOK))
		}
		resp, err := retry503(t, func() (*harness.Response, error) {
			return via.Client.Do(harness.ReqCtx(t), "POST", "/v1/tasks/batch", []byte(`{"tasks":[`+strings.Join(items, ",")+`]}`))
		})
		if err != nil || resp.Status != http.StatusOK {
			t.Fatalf("batch %d through %s: %v %v", b, via.ID, resp, err)
		}
		if b%10 == 5 {
			resp, err := retry503(t, func() (*harness.Response, error) {
				return via.Client.Cancel(harness.ReqCtx(t), fmt.Sprintf("%s-%d-0", prefix, b-5))
			})
			if err != nil || resp.Status != http.StatusOK {
				t.Fatalf("cancel through %s: %v %v", via.ID, resp, err)
			}
		}
	}
}

// retry503 sends a write again while it is answered 503 (a leader change
// under a loaded machine: the write may or may not have been applied, and
// batch submits and cancels are idempotent), up to 30 s. The tests here
// check the catch-up, not the leader's stability.
func retry503(t *testing.T, send func() (*harness.Response, error)) (*harness.Response, error) {
	t.Helper()
	end := time.Now().Add(30 * time.Second)
	for {
		resp, err := send()
		if err == nil && resp.Status != http.StatusServiceUnavailable || time.Now().After(end) {
			return resp, err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// checkCatchUp waits for the cluster to converge, then checks that node
// n installed one snapshot, or two (not a loop), and that the count does
// not grow once it has caught up.
func checkCatchUp(t *testing.T, c *harness.Cluster, n *harness.Node, prefix string) {
	t.Helper()
	clients := map[string]*harness.Client{}
	for _, o := range c.Nodes {
		clients[o.ID] = o.Client
	}
	start := time.Now()
	applied := waitConverged(t, c, clients, 30*time.Second)
	installs := strings.Count(n.Logs(), installedMsg)
	sent := 0
	for _, o := range c.Nodes {
		for _, line := range strings.Split(o.Logs(), "\n") {
			if strings.Contains(line, installingMsg) && strings.Contains(line, `"peer":"`+n.ID+`"`) {
				sent++
			}
		}
	}
	t.Logf("converged %s after %s at applied index %d; %s installed %d snapshot(s), the leaders sent it %d",
		prefix, time.Since(start).Round(time.Millisecond), applied, n.ID, installs, sent)
	// Still converged, and no further install, a while later (no loop).
	time.Sleep(2 * time.Second)
	waitConverged(t, c, clients, 30*time.Second)
	again := strings.Count(n.Logs(), installedMsg)
	t.Logf("RESULT %s: %s installed %d snapshot(s) (%d two seconds after converging)", prefix, n.ID, installs, again)
	if installs < 1 {
		t.Errorf("%s caught up without a snapshot install: it did not fall behind the trailing logs (test setup)", n.ID)
	}
	if installs > 2 || again != installs {
		t.Errorf("%s installed %d snapshots, then %d: an install loop", n.ID, installs, again)
	}
	// The node has every task, with the same views (waitConverged compared
	// the digests); spot-check a few through its own socket.
	for _, id := range []string{prefix + "-0-1", prefix + "-0-0", fmt.Sprintf("%s-%d-4", prefix, catchUpEntries-1)} {
		task, err := n.Client.GetTask(harness.ReqCtx(t), id)
		if err != nil {
			t.Errorf("%s on %s after catching up: %v", id, n.ID, err)
			continue
		}
		want := "WAITING"
		if id == prefix+"-0-0" {
			want = "CANCELLED"
		}
		if task.State != want {
			t.Errorf("%s on %s: state %s, want %s", id, n.ID, task.State, want)
		}
	}
	// Every task due now ran (one routed to the lagging node just after
	// the cut is retried elsewhere once its lease ends).
	for b := 0; b < catchUpEntries; b += 10 {
		harness.WaitState(t, n, fmt.Sprintf("%s-run-%d", prefix, b), "SUCCESS")
	}
	// Their run histories came in the snapshot: the node serves the
	// leader's, record for record.
	leader := c.Leader()
	for b := 0; b < catchUpEntries; b += 50 {
		id := fmt.Sprintf("%s-run-%d", prefix, b)
		harness.WaitFor(t, 20*time.Second, 50*time.Millisecond, id+"'s runs on "+n.ID+" equal the leader's", func() error {
			want, err := runsOn(t, leader, id)
			if err != nil {
				return err
			}
			got, err := runsOn(t, n, id)
			if err != nil {
				return err
			}
			if len(want) != 1 || !reflect.DeepEqual(got, want) {
				return fmt.Errorf("%d runs on the leader, %d here", len(want), len(got))
			}
			return nil
		})
	}
	// It works as a member: a task due now submitted through it runs.
	harness.MustSubmit(t, n, harness.SubmitRequest{ID: prefix + "-after", Handler: harness.HandlerOK}, 201)
	harness.WaitState(t, n, prefix+"-after", "SUCCESS")
}

// TestSnapshot_LaggingFollowerCatchesUp cuts a follower off (every link,
// through the fault proxies) while the cluster commits far more entries
// than its trailing logs (threshold 50, trailing 20), then heals: the
// follower catches up by installing a snapshot from the leader, once (or
// twice, if a new snapshot was taken meanwhile), not in a loop, and every
// node ends with the same applied index and state.
func TestSnapshot_LaggingFollowerCatchesUp(t *testing.T) {
	harness.SkipShort(t)
	t.Parallel()
	c := harness.NewCluster(t, harness.WithSize(3), harness.WithPeerProxies(), harness.WithLogLevel("debug"), harness.WithArgs(catchUpArgs...))
	c.WaitReady()
	leader := c.Leader()
	lagging := c.Followers()[0]
	c.Net.Isolate(lagging.ID)
	t.Logf("cut %s off; writing %d entries through %s", lagging.ID, catchUpEntries, leader.ID)
	catchUpWrites(t, leader, "lag")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	info, err := lagging.Client.Cluster(ctx)
	cancel()
	if err == nil {
		t.Logf("%s before healing: applied index %d", lagging.ID, info.AppliedIndex)
	}
	if strings.Contains(lagging.Logs(), installedMsg) {
		t.Fatalf("%s installed a snapshot before the heal", lagging.ID)
	}
	c.Net.HealAll()
	checkCatchUp(t, c, lagging, "lag")
}

// TestSnapshot_LateJoinerCatchesUp: two nodes form the cluster
// (--bootstrap-expect 2) and commit far more entries than their trailing
// logs; a third node started only then joins, gets a snapshot instead of
// the (compacted) log, and ends with the same applied index and state.
func TestSnapshot_LateJoinerCatchesUp(t *testing.T) {
	harness.SkipShort(t)
	t.Parallel()
	c := harness.NewCluster(t, harness.WithSize(3), harness.WithBootstrapExpect(2), harness.WithDeferredStart(2), harness.WithLogLevel("debug"), harness.WithArgs(catchUpArgs...))
	c.WaitReady()
	late := c.Nodes[2]
	leader := c.Leader()
	t.Logf("writing %d entries through %s before %s starts", catchUpEntries, leader.ID, late.ID)
	catchUpWrites(t, leader, "late")
	if err := late.Start(); err != nil {
		t.Fatal(err)
	}
	c.WaitReadyNodes([]*harness.Node{late}, harness.ReadyTimeout)
	harness.WaitFor(t, 20*time.Second, 100*time.Millisecond, late.ID+" is a member", func() error {
		info, err := leader.Client.Cluster(harness.ReqCtx(t))
		if err != nil {
			return err
		}
		for _, m := range info.Members {
			if m.ID == late.ID {
				return nil
			}
		}
		return fmt.Errorf("members %+v", info.Members)
	})
	checkCatchUp(t, c, late, "late")
}
