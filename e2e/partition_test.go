package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/axsched/ax/e2e/harness"
)

// Knobs of the leader fault tests (partition, SIGSTOP).
const (
	// faultRate is the submits started per second across the fault, each
	// due within 0–5 s (TrafficMaxDelay).
	faultRate = 150
	// faultWorkers submit concurrently: more than the chaos test's, since
	// a third of the tries go to the faulty node and wait for their
	// no_leader answer (or their try timeout) before moving on.
	faultWorkers = 128
	// faultLoadBefore is how long the load runs before the fault,
	// faultLoadAfter after the recovery.
	faultLoadBefore = 4 * time.Second
	faultLoadAfter  = 4 * time.Second
	// faultStaleMargin: a run due later than this after the fault cannot
	// have had its Fire committed before it (the leader commits a Fire
	// FireLead = 50 ms before the due time; its leader lease is 250 ms).
	faultStaleMargin = 500 * time.Millisecond
	// faultSettleTimeout bounds the wait for every acknowledged task to
	// be SUCCESS, and for the nodes to converge, after the load.
	faultSettleTimeout = 45 * time.Second
)

// faultHooks say what a leader fault test does to the old leader.
type faultHooks struct {
	what    string        // "partition", "SIGSTOP"
	holdFor time.Duration // from the fault to the recovery
	fault   func(old *harness.Node)
	recover func(old *harness.Node)
	// during runs after the new leader is elected, before the recovery.
	during func(old, newLeader *harness.Node)
	// follower: the fault hits a follower instead of the leader (the
	// leader stays; "old" is then the follower).
	follower bool
}

// faultResult is what runLeaderFault measured.
type faultResult struct {
	faultAt, recoverAt time.Time
	old, newLeader     *harness.Node
	electedIn          time.Duration
	stepDownIn         time.Duration // old leader no longer says Leader (partition: while cut; SIGSTOP: after SIGCONT)
	acked, lost, early int
	dupTasks, bound    int
	stale              []string // old-leader callbacks during the fault for runs due after fault + margin
	uncommitted        []string // callbacks with no committed Fire (task, attempt, node) in the new leader's log
	firedByNew         int      // callbacks on the other nodes, during the fault, of runs due after fault + margin
	superseded         []string // callbacks of an attempt after a callback of a later attempt of the same task
}

// fireKey names one attempt delivered to one node.
func fireKey(task, attempt, node string) string { return task + "#" + attempt + "@" + node }

// committedFires reads a node's debug log and returns every Fire it
// applied (committed), as fireKey(task, attempt, node).
func committedFires(logs string) map[string]bool {
	out := map[string]bool{}
	for _, line := range strings.Split(logs, "\n") {
		if !strings.Contains(line, `"command":"fire"`) {
			continue
		}
		var m struct {
			Command string `json:"command"`
			TaskID  string `json:"task_id"`
			Attempt int    `json:"attempt"`
			Node    string `json:"attempt_node"`
			State   string `json:"state"`
		}
		if json.Unmarshal([]byte(line), &m) != nil || m.Command != "fire" || m.State != "RUNNING" {
			continue
		}
		out[fireKey(m.TaskID, strconv.Itoa(m.Attempt), m.Node)] = true
	}
	return out
}

// runningOn lists, through cl, the tasks RUNNING with their attempt on
// one of nodes (all nodes when nodes is empty).
func runningOn(ctx context.Context, cl *harness.Client, nodes ...string) (map[string]bool, error) {
	tasks, err := harness.ListTasks(ctx, cl, "RUNNING")
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, task := range tasks {
		if len(nodes) == 0 {
			out[task.ID] = true
		}
		for _, n := range nodes {
			if task.Node == n {
				out[task.ID] = true
			}
		}
	}
	return out, nil
}

// waitConverged waits until every node has applied the same index and
// holds the same tasks (state digest over every task's view); it returns
// the index.
func waitConverged(t *testing.T, c *harness.Cluster, clients map[string]*harness.Client, timeout time.Duration) uint64 {
	t.Helper()
	var applied uint64
	var last string
	deadline := time.Now().Add(timeout)
	for {
		err := func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			idx := map[string]uint64{}
			for _, n := range c.Nodes {
				info, err := clients[n.ID].Cluster(ctx)
				if err != nil {
					return fmt.Errorf("%s: %v", n.ID, err)
				}
				idx[n.ID] = info.AppliedIndex
			}
			digests := map[string]string{}
			for _, n := range c.Nodes {
				d, _, err := stateDigest(ctx, clients[n.ID])
				if err != nil {
					return fmt.Errorf("%s: digest: %v", n.ID, err)
				}
				digests[n.ID] = d[:12]
			}
			// The indexes again: no entry applied while the digests were read.
			for _, n := range c.Nodes {
				info, err := clients[n.ID].Cluster(ctx)
				if err != nil {
					return fmt.Errorf("%s: %v", n.ID, err)
				}
				if info.AppliedIndex != idx[n.ID] {
					return fmt.Errorf("%s applied %d -> %d while reading", n.ID, idx[n.ID], info.AppliedIndex)
				}
			}
			first := c.Nodes[0].ID
			for _, n := range c.Nodes {
				if idx[n.ID] != idx[first] || digests[n.ID] != digests[first] {
					return fmt.Errorf("applied index %v, digests %v", idx, digests)
				}
			}
			applied = idx[first]
			return nil
		}()
		if err == nil {
			return applied
		}
		last = err.Error()
		if time.Now().After(deadline) {
			t.Errorf("the nodes did not converge within %s: %s", timeout, last)
			logViewDiffs(t, c, clients)
			t.FailNow()
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// logViewDiffs logs, for the tasks whose views differ between the nodes
// (at most 10), each node's view: what a failed waitConverged could not
// say with its digests alone.
func logViewDiffs(t *testing.T, c *harness.Cluster, clients map[string]*harness.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	views := map[string]map[string]string{}
	ids := map[string]bool{}
	for _, n := range c.Nodes {
		_, v, err := stateDigest(ctx, clients[n.ID])
		if err != nil {
			t.Logf("%s: views: %v", n.ID, err)
			return
		}
		views[n.ID] = v
		for id := range v {
			ids[id] = true
		}
	}
	shown := 0
	for id := range ids {
		first := views[c.Nodes[0].ID][id]
		same := true
		for _, n := range c.Nodes {
			same = same && views[n.ID][id] == first
		}
		if same {
			continue
		}
		for _, n := range c.Nodes {
			t.Logf("%s on %s: %s", id, n.ID, views[n.ID][id])
		}
		if shown++; shown == 10 {
			return
		}
	}
	t.Logf("%d tasks differ at most", shown)
}

// runLeaderFault runs a three-node cluster (every node has an executor;
// debug logs, so every applied Fire is logged) under a steady load,
// applies hooks.fault to the leader, waits for the two others to elect a
// new leader, holds the fault for hooks.holdFor, recovers, and after the
// load checks: every acknowledged task SUCCESS (lost), no callback before
// its due time (early), duplicates within the attempts in flight at the
// fault (bound), no callback on the old leader during the fault for a run
// due after it (stale), every callback backed by a committed Fire
// (uncommitted), and the nodes converge.
func runLeaderFault(t *testing.T, c *harness.Cluster, hooks faultHooks) faultResult {
	t.Helper()
	c.WaitReady()
	clients := map[string]*harness.Client{}
	for _, n := range c.Nodes {
		cl := harness.NewClient(n.Socket)
		cl.SetMaxIdleConns(faultWorkers)
		clients[n.ID] = cl
	}
	t.Cleanup(func() {
		for _, cl := range clients {
			cl.Close()
		}
	})
	seed := uint64(time.Now().UnixNano())
	t.Logf("%s under %d submits/s (due within %s), held %s; seed %d", hooks.what, faultRate, harness.TrafficMaxDelay, hooks.holdFor, seed)

	load, workersDone := harness.StartTraffic(t, c, clients, faultRate, faultWorkers, seed)
	loadStart := time.Now()
	t.Logf("load started at %s (the +offsets below are from it)", loadStart.UTC().Format(time.RFC3339Nano))
	time.Sleep(faultLoadBefore)

	var r faultResult
	r.old = c.Leader()
	if hooks.follower {
		r.old = c.Followers()[0]
	}
	var others []*harness.Node
	for _, n := range c.Nodes {
		if n != r.old {
			others = append(others, n)
		}
	}
	r.faultAt = time.Now()
	hooks.fault(r.old)
	r.newLeader = harness.AgreedLeader(c, others, harness.LeaderTimeout)
	if r.newLeader == nil {
		t.Fatalf("%s of %s: the two others agreed on no leader within %s", hooks.what, r.old.ID, harness.LeaderTimeout)
	}
	r.electedIn = time.Since(r.faultAt)
	t.Logf("%s of %s at +%s: %s leads the two others after %s", hooks.what, r.old.ID, r.faultAt.Sub(loadStart).Round(time.Millisecond), r.newLeader.ID, r.electedIn.Round(time.Millisecond))

	// The attempts in flight at the fault: RUNNING in the new leader's
	// store right after its election (fired before the fault, no outcome
	// committed yet), and again just before the recovery those on the old
	// leader's node (the new leader never routes to it: it cannot report).
	inFlight := map[string]bool{}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	running, err := runningOn(ctx, clients[r.newLeader.ID])
	cancel()
	if err != nil {
		t.Logf("reading RUNNING tasks after the election: %v", err)
	}
	for id := range running {
		inFlight[id] = true
	}
	atElection := len(inFlight)
	if hooks.during != nil {
		hooks.during(r.old, r.newLeader)
	}
	time.Sleep(time.Until(r.faultAt.Add(hooks.holdFor - 500*time.Millisecond)))
	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
	running, err = runningOn(ctx, clients[r.newLeader.ID], r.old.ID)
	cancel()
	if err != nil {
		t.Logf("reading RUNNING tasks before the recovery: %v", err)
	}
	for id := range running {
		inFlight[id] = true
	}
	r.bound = len(inFlight)
	time.Sleep(time.Until(r.faultAt.Add(hooks.holdFor)))
	r.recoverAt = time.Now()
	hooks.recover(r.old)
	t.Logf("recovered at +%s; attempts in flight at the fault: %d RUNNING after the election, %d with those on %s before the recovery",
		r.recoverAt.Sub(loadStart).Round(time.Millisecond), atElection, r.bound, r.old.ID)

	// The old leader steps down (or has already) and follows the new one
	// (the isolated follower follows the leader again).
	harness.WaitFor(t, 20*time.Second, 20*time.Millisecond, "the faulty node follows", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		info, err := clients[r.old.ID].Cluster(ctx)
		if err != nil {
			return err
		}
		if info.State == "Leader" {
			return fmt.Errorf("%s still says it leads (term %d)", r.old.ID, info.Term)
		}
		if r.stepDownIn == 0 {
			r.stepDownIn = time.Since(r.recoverAt)
		}
		if info.Leader == "" || info.Leader == r.old.ID {
			return fmt.Errorf("%s knows no other leader (%q)", r.old.ID, info.Leader)
		}
		return nil
	})

	time.Sleep(faultLoadAfter)
	stopAt := time.Now()
	harness.StopTraffic(load, workersDone)
	var acked []*harness.TrafficTask
	for _, ts := range load.Tasks {
		if ts.Acked {
			acked = append(acked, ts)
		}
	}
	loadTime := stopAt.Sub(loadStart)
	var kinds []string
	for k, v := range load.ErrKinds {
		kinds = append(kinds, fmt.Sprintf("%s=%d", k, v))
	}
	sort.Strings(kinds)
	t.Logf("load: %d tasks started in %s (%.0f/s), %d acknowledged; retried answers: %s",
		len(load.Tasks), loadTime.Round(time.Millisecond), float64(len(load.Tasks))/loadTime.Seconds(), len(acked), strings.Join(kinds, ", "))

	// Every acknowledged task SUCCESS, read through the leader.
	c.WaitReadyNodes(c.Nodes, faultSettleTimeout)
	settleDeadline := time.Now().Add(faultSettleTimeout)
	final := map[string]harness.Task{}
	for {
		cl, _ := harness.ReaderClient(c, clients)
		lctx, lcancel := context.WithTimeout(context.Background(), 20*time.Second)
		all, err := harness.ListTasks(lctx, cl, "")
		lcancel()
		done := err == nil
		if err == nil {
			final = map[string]harness.Task{}
			for _, task := range all {
				final[task.ID] = task
			}
			for _, ts := range acked {
				if final[ts.ID].State != "SUCCESS" {
					done = false
					break
				}
			}
		}
		if done || time.Now().After(settleDeadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	applied := waitConverged(t, c, clients, faultSettleTimeout)
	t.Logf("converged: every node applied index %d and holds the same %d tasks", applied, len(final))

	// The checks.
	fires := committedFires(r.newLeader.Logs())
	byID := map[string]*harness.TrafficTask{}
	for _, ts := range load.Tasks {
		byID[ts.ID] = ts
	}
	var lost, early []string
	dupExplained := 0
	for _, ts := range load.Tasks {
		calls := c.Recorder.Calls(ts.ID)
		due := ts.Due
		if due.IsZero() && !ts.FirstSent.IsZero() {
			due = ts.FirstSent.Add(ts.Delay).Truncate(time.Millisecond)
		}
		for _, call := range calls {
			if call.At.Before(due) {
				early = append(early, fmt.Sprintf("%s on %s attempt %s at %s, due %s", ts.ID, call.Node, call.Attempt, call.At.Format(time.RFC3339Nano), due.Format(time.RFC3339Nano)))
			}
		}
		for i, call := range calls {
			for _, prev := range calls[:i] {
				if a, b := atoi(call.Attempt), atoi(prev.Attempt); a < b {
					r.superseded = append(r.superseded, fmt.Sprintf("%s attempt %s on %s at +%s after attempt %s on %s at +%s", ts.ID,
						call.Attempt, call.Node, call.At.Sub(loadStart).Round(time.Millisecond), prev.Attempt, prev.Node, prev.At.Sub(loadStart).Round(time.Millisecond)))
					break
				}
			}
		}
		if len(calls) > 1 {
			r.dupTasks++
			if inFlight[ts.ID] {
				dupExplained++
			}
			var desc []string
			for _, call := range calls {
				desc = append(desc, fmt.Sprintf("%s attempt %s at +%s", call.Node, call.Attempt, call.At.Sub(loadStart).Round(time.Millisecond)))
			}
			t.Logf("duplicate: %s (in flight at the fault: %v): %s", ts.ID, inFlight[ts.ID], strings.Join(desc, "; "))
		}
		if ts.Acked && (len(calls) == 0 || final[ts.ID].State != "SUCCESS") {
			lost = append(lost, fmt.Sprintf("%s: %d callbacks, state %q", ts.ID, len(calls), final[ts.ID].State))
		}
	}
	for _, call := range c.Recorder.All() {
		ts := byID[call.TaskID]
		if ts == nil {
			continue
		}
		if !fires[fireKey(call.TaskID, call.Attempt, call.Node)] {
			r.uncommitted = append(r.uncommitted, fmt.Sprintf("%s attempt %s on %s at +%s", call.TaskID, call.Attempt, call.Node, call.At.Sub(loadStart).Round(time.Millisecond)))
		}
		lateRun := ts.Due.After(r.faultAt.Add(faultStaleMargin))
		during := call.At.After(r.faultAt) && call.At.Before(r.recoverAt)
		if lateRun && during {
			if call.Node == r.old.ID {
				r.stale = append(r.stale, fmt.Sprintf("%s attempt %s due +%s called at +%s", call.TaskID, call.Attempt,
					ts.Due.Sub(loadStart).Round(time.Millisecond), call.At.Sub(loadStart).Round(time.Millisecond)))
			} else {
				r.firedByNew++
			}
		}
	}
	r.acked, r.lost, r.early = len(acked), len(lost), len(early)
	t.Logf("callbacks per node: %v; attempts not delivered because their lease had ended before their fire was applied (ax_stale_fires_skipped_total): %s=%.0f",
		harness.CallsPerNode(c.Recorder), r.old.ID, harness.Scrape(t, r.old)["ax_stale_fires_skipped_total"])
	t.Logf("RESULT %s: the others agreed on a leader after %s, the faulty node follows it %s after the recovery; acknowledged=%d lost=%d early=%d duplicates=%d (%d in flight at the fault) bound=%d stale-from-faulty-node=%d uncommitted=%d superseded=%d fired-by-leader-during-fault=%d",
		hooks.what, r.electedIn.Round(time.Millisecond), r.stepDownIn.Round(time.Millisecond), r.acked, r.lost, r.early, r.dupTasks, dupExplained, r.bound,
		len(r.stale), len(r.uncommitted), len(r.superseded), r.firedByNew)
	harness.LogNodeProblems(t, c, loadStart)

	for _, l := range lost[:min(len(lost), 20)] {
		t.Errorf("LOST: %s", l)
	}
	for _, e := range early[:min(len(early), 20)] {
		t.Errorf("EARLY: %s", e)
	}
	for _, s := range r.stale[:min(len(r.stale), 20)] {
		t.Errorf("STALE: callback on the old leader %s during the fault: %s", r.old.ID, s)
	}
	for _, s := range r.superseded[:min(len(r.superseded), 20)] {
		t.Errorf("SUPERSEDED: a callback of an attempt the leader had already replaced: %s", s)
	}
	for _, s := range r.uncommitted[:min(len(r.uncommitted), 20)] {
		t.Errorf("UNCOMMITTED: no committed Fire for the callback %s", s)
	}
	if r.dupTasks > r.bound {
		t.Errorf("%d tasks called back more than once, more than the %d attempts in flight at the fault", r.dupTasks, r.bound)
	}
	if r.firedByNew == 0 {
		t.Errorf("the new leader fired nothing during the fault (no callback on %v of a run due after it)", others)
	}
	if len(acked) < faultRate { // a sanity floor: the load ran
		t.Errorf("only %d submits acknowledged", len(acked))
	}
	return r
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

// TestPartition_LeaderIsolated cuts the leader of a three-node cluster
// off from the two others (every link, Raft and peer API, both ways,
// through the harness's fault proxies, which black-hole the traffic)
// under a steady load, for 8 s. The two others elect a leader and keep
// firing; the old leader steps down and delivers nothing due after the
// cut; after healing, the nodes converge (same applied index, same task
// digest) and no acknowledged task is lost or early.
func TestPartition_LeaderIsolated(t *testing.T) {
	harness.SkipShort(t)
	t.Parallel()
	c := harness.NewCluster(t, harness.WithSize(3), harness.WithPeerProxies(), harness.WithLogLevel("debug"))
	var cutAt time.Time
	steppedDown := make(chan time.Duration, 1)
	r := runLeaderFault(t, c, faultHooks{
		what: "partition",
		// Longer than an attempt's lease (timeout 5s + grace 5s): the
		// attempts the old leader's node was running are retried elsewhere.
		holdFor: 12 * time.Second,
		fault: func(old *harness.Node) {
			c.Net.Isolate(old.ID)
			cutAt = time.Now()
			// Cut off, the old leader must step down on its own (no quorum
			// contact within its leader lease), long before the heal.
			go func() {
				for time.Since(cutAt) < 10*time.Second {
					ctx, cancel := context.WithTimeout(context.Background(), time.Second)
					info, err := old.Client.Cluster(ctx)
					cancel()
					if err == nil && info.State != "Leader" {
						steppedDown <- time.Since(cutAt)
						return
					}
					time.Sleep(10 * time.Millisecond)
				}
				steppedDown <- 0
			}()
		},
		recover: func(*harness.Node) { c.Net.HealAll() },
		during: func(old, _ *harness.Node) {
			if d := <-steppedDown; d == 0 {
				t.Errorf("the isolated leader %s still led 10s after the cut", old.ID)
			} else {
				t.Logf("RESULT partition: the isolated leader %s stepped down %s after the cut", old.ID, d.Round(time.Millisecond))
			}
		},
	})
	t.Logf("proxies of %s's links: %s", r.old.ID, c.Net.Stats())
}

// TestPartition_FollowerIsolated cuts a follower off for longer than an
// attempt's lease under load: the leader routes a few attempts to it
// before it misses its load reports, never hears back, and retries them
// elsewhere when their leases expire. After healing, the follower catches
// up by replaying the log it missed, Fires naming it included: it must not
// deliver those (they were superseded), nor anything during the cut for a
// run due after it; nothing lost, nothing early, the nodes converge.
func TestPartition_FollowerIsolated(t *testing.T) {
	harness.SkipShort(t)
	t.Parallel()
	c := harness.NewCluster(t, harness.WithSize(3), harness.WithPeerProxies(), harness.WithLogLevel("debug"))
	r := runLeaderFault(t, c, faultHooks{
		what:     "follower partition",
		follower: true,
		holdFor:  12 * time.Second,
		fault:    func(f *harness.Node) { c.Net.Isolate(f.ID) },
		recover:  func(*harness.Node) { c.Net.HealAll() },
	})
	t.Logf("proxies of %s's links: %s", r.old.ID, c.Net.Stats())
}
