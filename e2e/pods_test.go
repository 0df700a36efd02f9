package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/axsched/ax/e2e/harness"
)

// The pod scenarios of issue 14: ax nodes in network namespaces of their
// own (harness.PodNet), found by a headless name in each pod's
// /etc/hosts, coming and going as a Deployment's pods do, under a steady
// load through every live pod's socket. Root only.

const (
	// podRate is the steady load of every scenario, submits/s.
	podRate = 100
	// podMaxDelay bounds the tasks' delays: each is due within [0, 3s).
	podMaxDelay = 3 * time.Second
	// podStabilization is every pod's --autopilot-stabilization: a
	// promotion after 1 s of health instead of 10 s keeps each scenario
	// short.
	podStabilization = "1s"
	// podDrainTimeout is every pod's --drain-timeout: the callbacks take
	// 100 ms, and the stop's bound (the drain timeout plus 10 s) stays
	// below the harness's 20 s before it kills.
	podDrainTimeout = "5s"
)

// podArgs are every pod's extra sidecar arguments, then extra: the
// stabilization and drain timeout above, and Raft timeouts of 1 s (ax's
// default is 500 ms): on two loaded cores a starved leader otherwise loses
// its leadership now and then, an unplanned election that is a fault of
// its own, not what these scenarios test (a hand-over is raft's
// TimeoutNow: it does not wait for the timeout). AX_E2E_PODS_RAFT_TIMEOUT
// sets another.
func podArgs(t *testing.T, extra ...string) []string {
	rt := harness.EnvDuration(t, "AX_E2E_PODS_RAFT_TIMEOUT", time.Second).String()
	return append([]string{"--autopilot-stabilization", podStabilization, "--drain-timeout", podDrainTimeout,
		"--raft-heartbeat-timeout", rt, "--raft-election-timeout", rt}, extra...)
}

// startPods starts n pods and waits until each is ready.
func startPods(t *testing.T, pn *harness.PodNet, n int) []*harness.Pod {
	t.Helper()
	var pods []*harness.Pod
	for range n {
		pods = append(pods, pn.StartPod())
	}
	for _, p := range pods {
		waitPodReady(t, p)
	}
	return pods
}

// waitPodReady waits until /readyz answers 200 on p (a leader is known,
// p has caught up).
func waitPodReady(t *testing.T, p *harness.Pod) {
	t.Helper()
	harness.WaitFor(t, 60*time.Second, 50*time.Millisecond, p.ID+" ready", func() error {
		if !p.Running() {
			t.Fatalf("%s exited: %v", p.ID, p.ExitErr())
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		resp, err := p.Client.Do(ctx, "GET", "/readyz", nil)
		if err != nil {
			return err
		}
		if resp.Status != 200 {
			return fmt.Errorf("%s", resp)
		}
		return nil
	})
}

// podMembers returns the members as a live pod sees them: "id=Voter"
// sorted, and the leader's id.
func podMembers(p *harness.Pod) ([]string, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	info, err := p.Client.Cluster(ctx)
	if err != nil {
		return nil, "", err
	}
	var ms []string
	for _, m := range info.Members {
		ms = append(ms, m.ID+"@"+m.RaftAddr+"="+m.Suffrage)
	}
	sort.Strings(ms)
	return ms, info.Leader, nil
}

// wantVoters is the members the live pods should be: each a voter at its
// pod's address.
func wantVoters(pods []*harness.Pod) []string {
	var want []string
	for _, p := range pods {
		want = append(want, p.ID+"@"+p.RaftAddr+"=Voter")
	}
	sort.Strings(want)
	return want
}

// waitMembersExactly waits until every live pod sees exactly the live
// pods as members, all voters, and agrees on a leader.
func waitMembersExactly(t *testing.T, pn *harness.PodNet, timeout time.Duration) {
	t.Helper()
	live := pn.Live()
	want := wantVoters(live)
	harness.WaitFor(t, timeout, 100*time.Millisecond, fmt.Sprintf("members exactly %v", want), func() error {
		leader := ""
		for _, p := range live {
			ms, l, err := podMembers(p)
			if err != nil {
				return fmt.Errorf("%s: %v", p.ID, err)
			}
			if !slices.Equal(ms, want) {
				return fmt.Errorf("%s sees %v", p.ID, ms)
			}
			if l == "" || (leader != "" && l != leader) {
				return fmt.Errorf("%s sees leader %q (others %q)", p.ID, l, leader)
			}
			leader = l
		}
		return nil
	})
}

// podLeader returns the live pod every live pod names as leader.
func podLeader(t *testing.T, pn *harness.PodNet) *harness.Pod {
	t.Helper()
	var leader *harness.Pod
	harness.WaitFor(t, 20*time.Second, 50*time.Millisecond, "an agreed leader", func() error {
		live := pn.Live()
		ids := map[string]bool{}
		for _, p := range live {
			_, l, err := podMembers(p)
			if err != nil {
				return err
			}
			ids[l] = true
		}
		if len(ids) != 1 {
			return fmt.Errorf("leaders %v", ids)
		}
		for _, p := range live {
			if ids[p.ID] {
				leader = p
				return nil
			}
		}
		return fmt.Errorf("the leader %v is not a live pod", ids)
	})
	return leader
}

// podStop is one graceful stop: which pod, when SIGTERM went out, when it
// had exited.
type podStop struct {
	pod              *harness.Pod
	stopAt, exitedAt time.Time
	// killed: the pod was SIGKILLed, and running is the number of its
	// attempts RUNNING in the store right after (answered or not, their
	// outcomes were not committed: their leases expire and the leader
	// retries them).
	killed  bool
	running int
}

// stopPods sends SIGTERM to pods at the same moment and waits for each to
// exit; an unclean or late exit fails the test.
func stopPods(t *testing.T, pn *harness.PodNet, pods ...*harness.Pod) []podStop {
	t.Helper()
	errs := make([]error, len(pods))
	var wg sync.WaitGroup
	for i, p := range pods {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = pn.Stop(p) }()
	}
	wg.Wait()
	var out []podStop
	for i, p := range pods {
		if errs[i] != nil {
			t.Errorf("graceful stop of %s: %v", p.ID, errs[i])
		}
		if !strings.Contains(p.Logs(), "left the cluster") {
			t.Errorf("%s did not leave the cluster", p.ID)
		}
		out = append(out, podStop{pod: p, stopAt: p.StoppedAt(), exitedAt: p.ExitedAt()})
		t.Logf("%s stopped in %v", p.ID, p.ExitedAt().Sub(p.StoppedAt()).Round(time.Millisecond))
	}
	return out
}

// podTally is what a scenario prints: over the acknowledged tasks, those
// lost (no callback, or not SUCCESS), early (a callback before the due
// time), duplicated (more than one callback), with a failed attempt
// counted (last_error set), and the attempts in flight at the stops (the
// callbacks a stopped pod's executor received from its callback duration
// before the SIGTERM to its exit; for a killed pod, its attempts RUNNING
// in the store right after the kill).
type podTally struct {
	acked, lost, early, dups, failed, inflight int
	lostIDs, dupIDs, failedIDs                 []string
}

func (tl podTally) String() string {
	return fmt.Sprintf("%d tasks acknowledged: lost %d, early %d, duplicates %d (attempts in flight at the stops %d), failed attempts %d",
		tl.acked, tl.lost, tl.early, tl.dups, tl.inflight, tl.failed)
}

// finishPods stops the load, waits until every acknowledged task has had a
// callback and is SUCCESS (or 60 s pass), and tallies; it fails the test
// on a lost or early task, on more duplicates than attempts in flight at
// the stops, on a failed attempt, and on submits never acknowledged or
// refused.
func finishPods(t *testing.T, pn *harness.PodNet, load *harness.PodLoad, stops []podStop) podTally {
	t.Helper()
	load.Stop()
	acked := load.Acked()
	tasks := map[string]harness.Task{}
	deadline := time.Now().Add(60 * time.Second)
	var calls map[string][]harness.PodCall
	for {
		calls = pn.Calls()
		done := 0
		if live := pn.Live(); len(live) > 0 {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			list, err := harness.ListTasks(ctx, live[0].Client, "")
			cancel()
			if err == nil {
				for _, task := range list {
					tasks[task.ID] = task
				}
			}
		}
		for id := range acked {
			if len(calls[id]) > 0 && tasks[id].State == "SUCCESS" {
				done++
			}
		}
		if done == len(acked) || time.Now().After(deadline) {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	tl := podTally{acked: len(acked)}
	for id, a := range acked {
		cs, task := calls[id], tasks[id]
		if len(cs) == 0 || task.State != "SUCCESS" {
			tl.lost++
			tl.lostIDs = append(tl.lostIDs, fmt.Sprintf("%s(%d calls, %q, due %s, via %s)", id, len(cs), task.State, a.Due.Format("15:04:05.000"), a.Via))
			continue
		}
		if len(cs) > 1 {
			tl.dups++
			var where []string
			for _, c := range cs {
				where = append(where, fmt.Sprintf("%s#%s@%s", c.Pod, c.Attempt, c.At.Format("15:04:05.000")))
			}
			tl.dupIDs = append(tl.dupIDs, id+":"+strings.Join(where, ","))
		}
		for _, c := range cs {
			if c.At.Before(a.Due) {
				tl.early++
			}
		}
		if task.LastError != "" {
			tl.failed++
			tl.failedIDs = append(tl.failedIDs, fmt.Sprintf("%s(%d attempts: %s)", id, task.Attempts, task.LastError))
		}
	}
	for _, s := range stops {
		if s.killed {
			tl.inflight += s.running
			continue
		}
		for _, cs := range calls {
			for _, c := range cs {
				if c.Pod == s.pod.ID && !c.At.Before(s.stopAt.Add(-harness.PodExecDelay)) && !c.At.After(s.exitedAt) {
					tl.inflight++
				}
			}
		}
	}
	slices.Sort(tl.lostIDs)
	unanswered, refused, errs := load.Problems()
	t.Logf("%s; %d submits never acknowledged, %d refused; transient submit errors: %s", tl, len(unanswered), len(refused), errs)
	if tl.lost != 0 || tl.early != 0 {
		t.Errorf("lost %d %v, early %d: want 0 and 0", tl.lost, head(tl.lostIDs, 10), tl.early)
	}
	if tl.dups > tl.inflight {
		t.Errorf("%d duplicates, more than the %d attempts in flight at the stops: %v", tl.dups, tl.inflight, head(tl.dupIDs, 10))
	} else if tl.dups > 0 {
		t.Logf("duplicates: %v", head(tl.dupIDs, 10))
	}
	if tl.failed != 0 {
		t.Errorf("%d tasks with a failed attempt: %v", tl.failed, head(tl.failedIDs, 10))
	}
	if len(unanswered) > 0 || len(refused) > 0 {
		t.Errorf("submits never acknowledged %v, refused %v", head(unanswered, 5), head(refused, 5))
	}
	return tl
}

// Three pods bootstrap by DNS alone: each one's hosts file lists the three
// addresses under one name, each node joins dns:NAME:7421 with
// --bootstrap-expect 3, binds 0.0.0.0 and advertises its pod address.
func TestPods_BootstrapByDNS(t *testing.T) {
	harness.SkipShort(t)
	harness.RequireRoot(t)
	t.Parallel()
	pn := harness.NewPodNet(t, podArgs(t)...)
	start := time.Now()
	var pods []*harness.Pod
	for range 3 { // all three listed before any starts: the cluster forms at once
		pods = append(pods, pn.StartPod())
	}
	load := pn.StartLoad("boot", podRate, podMaxDelay)
	for _, p := range pods {
		waitPodReady(t, p)
	}
	waitMembersExactly(t, pn, 30*time.Second)
	t.Logf("three pods formed a cluster by DNS in %v", time.Since(start).Round(time.Millisecond))
	time.Sleep(4 * time.Second)
	finishPods(t, pn, load, nil)
	bootstrapped := 0 // the others may find themselves in the cluster first
	for _, p := range pods {
		if strings.Contains(p.Logs(), "bootstrapped the cluster") {
			bootstrapped++
		}
	}
	if bootstrapped == 0 {
		t.Errorf("no pod logged that it bootstrapped the cluster")
	}
}

// Rolling update (maxSurge 1, maxUnavailable 0): three times a fresh pod
// (new id, empty data dir, new address) starts and catches up, the oldest
// pod gets SIGTERM, and the fresh pod is a voter before the next round.
// With --voters 3 the fresh pod is a non-voter until the old one leaves
// (autopilot promotes while there are fewer voters than the target). At
// the end the members are exactly the three live pods, all voters.
func TestPods_RollingUpdate(t *testing.T) {
	harness.SkipShort(t)
	harness.RequireRoot(t)
	t.Parallel()
	pn := harness.NewPodNet(t, podArgs(t)...)
	startPods(t, pn, 3)
	waitMembersExactly(t, pn, 30*time.Second)
	load := pn.StartLoad("roll", podRate, podMaxDelay)
	time.Sleep(time.Second)
	var stops []podStop
	for round := range 3 {
		roundStart := time.Now()
		fresh := pn.StartPod()
		waitPodReady(t, fresh)
		oldest := pn.Live()[0]
		stops = append(stops, stopPods(t, pn, oldest)...)
		waitMembersExactly(t, pn, 30*time.Second)
		t.Logf("round %d: %s in, %s out, in %v", round+1, fresh.ID, oldest.ID, time.Since(roundStart).Round(time.Millisecond))
	}
	time.Sleep(time.Second)
	finishPods(t, pn, load, stops)
	waitMembersExactly(t, pn, 10*time.Second)
}

// Scale 3 → 5 → 1 → 3: two fresh pods join (non-voters: --voters 3);
// then two pods, the leader among them, get SIGTERM at the same moment,
// and two more, again with the leader; the last pod keeps accepting and
// firing throughout, and is the only member; then two fresh pods join and
// become voters.
func TestPods_Scale3to5to1to3(t *testing.T) {
	harness.SkipShort(t)
	harness.RequireRoot(t)
	t.Parallel()
	pn := harness.NewPodNet(t, podArgs(t)...)
	startPods(t, pn, 3)
	waitMembersExactly(t, pn, 30*time.Second)
	load := pn.StartLoad("scale", podRate, podMaxDelay)
	for _, p := range []*harness.Pod{pn.StartPod(), pn.StartPod()} {
		waitPodReady(t, p)
	}
	t.Logf("scaled to %d pods", len(pn.Live()))
	time.Sleep(time.Second)

	// The survivor: a pod that is neither the leader nor stopped.
	leader := podLeader(t, pn)
	var others []*harness.Pod
	for _, p := range pn.Live() {
		if p != leader {
			others = append(others, p)
		}
	}
	survivor := others[len(others)-1]
	downAt := time.Now()
	stops := stopPods(t, pn, leader, others[0])
	leader = podLeader(t, pn)
	var pair []*harness.Pod
	if leader != survivor {
		pair = append(pair, leader)
	}
	for _, p := range pn.Live() {
		if p != survivor && !slices.Contains(pair, p) && len(pair) < 2 {
			pair = append(pair, p)
		}
	}
	stops = append(stops, stopPods(t, pn, pair...)...)
	downDone := time.Now()
	waitMembersExactly(t, pn, 30*time.Second)
	time.Sleep(2 * time.Second) // one pod alone, under the load
	aloneUntil := time.Now()

	acksAlone, callsAlone := 0, 0
	for _, a := range load.Acked() {
		if a.Via == survivor.ID && a.AckAt.After(downDone) {
			acksAlone++
		}
	}
	for _, cs := range pn.Calls() {
		for _, c := range cs {
			if c.Pod == survivor.ID && c.At.After(downDone) {
				callsAlone++
			}
		}
	}
	t.Logf("5 → 1 in %v; %s alone for %v: %d submits acknowledged, %d callbacks", downDone.Sub(downAt).Round(time.Millisecond),
		survivor.ID, aloneUntil.Sub(downDone).Round(time.Millisecond), acksAlone, callsAlone)
	if acksAlone == 0 || callsAlone == 0 {
		t.Errorf("the survivor %s alone: %d submits acknowledged, %d callbacks; want both above 0", survivor.ID, acksAlone, callsAlone)
	}
	// The longest the survivor went without acknowledging a submit, over
	// the whole scale-down (it gets a share of the submits all along).
	var acks []time.Time
	for _, a := range load.Acked() {
		if a.Via == survivor.ID && a.AckAt.After(downAt) {
			acks = append(acks, a.AckAt)
		}
	}
	slices.SortFunc(acks, func(a, b time.Time) int { return a.Compare(b) })
	var gap time.Duration
	for i := 1; i < len(acks); i++ {
		gap = max(gap, acks[i].Sub(acks[i-1]))
	}
	t.Logf("%s acknowledged %d submits from the first SIGTERM on; longest gap between two %v", survivor.ID, len(acks), gap.Round(time.Millisecond))

	for _, p := range []*harness.Pod{pn.StartPod(), pn.StartPod()} {
		waitPodReady(t, p)
	}
	waitMembersExactly(t, pn, 30*time.Second)
	t.Logf("back to 3 pods, all voters")
	time.Sleep(time.Second)
	finishPods(t, pn, load, stops)
}

// A new pod reuses an old pod's address with a different id: first after
// the old pod stopped gracefully (it left), then after it was killed
// (SIGKILL: still a member, unreachable) — the new pod joins, becomes a
// voter, and the dead member at its address is gone.
func TestPods_AddressReuse(t *testing.T) {
	harness.SkipShort(t)
	harness.RequireRoot(t)
	t.Parallel()
	pn := harness.NewPodNet(t, podArgs(t)...)
	pods := startPods(t, pn, 3)
	waitMembersExactly(t, pn, 30*time.Second)
	load := pn.StartLoad("reuse", podRate, podMaxDelay)
	time.Sleep(time.Second)

	old := pods[2]
	stops := stopPods(t, pn, old)
	pn.Release(old)
	fresh := pn.StartPodAt(old.IP)
	waitPodReady(t, fresh)
	waitMembersExactly(t, pn, 30*time.Second)
	t.Logf("%s took %s's address %s after a graceful stop", fresh.ID, old.ID, old.IP)
	time.Sleep(time.Second)

	// A hard end: the member stays, unreachable, at the address the next
	// pod gets.
	pn.Kill(fresh)
	killedAt := fresh.StoppedAt()
	running := 0
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	list, err := harness.ListTasks(ctx, pods[0].Client, "RUNNING")
	cancel()
	if err != nil {
		t.Fatalf("the attempts running on the killed %s: %v", fresh.ID, err)
	}
	for _, task := range list {
		if task.Node == fresh.ID {
			running++
		}
	}
	t.Logf("%s killed with %d attempts RUNNING on it", fresh.ID, running)
	pn.Release(fresh)
	next := pn.StartPodAt(fresh.IP)
	waitPodReady(t, next)
	waitMembersExactly(t, pn, 30*time.Second)
	t.Logf("%s took the killed %s's address %s; members exact after %v", next.ID, fresh.ID, fresh.IP, time.Since(killedAt).Round(time.Millisecond))
	time.Sleep(time.Second)
	// The killed pod's attempts in flight come back after their lease
	// (the task's timeout, 10 s, and the lease grace).
	stops = append(stops, podStop{pod: fresh, stopAt: killedAt, exitedAt: fresh.ExitedAt(), killed: true, running: running})
	finishPods(t, pn, load, stops)
}

// podLogTime returns the time of the first JSON log line of logs whose
// message (ax's "message" or raft's "@message") contains msg, at or after
// after; zero when there is none.
func podLogTime(logs, msg string, after time.Time) time.Time {
	for _, line := range strings.Split(logs, "\n") {
		if !strings.HasPrefix(line, "{") || !strings.Contains(line, msg) {
			continue
		}
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) != nil {
			continue
		}
		text, _ := m["message"].(string)
		ts, _ := m["time"].(string)
		if text == "" {
			text, _ = m["@message"].(string)
			ts, _ = m["@timestamp"].(string)
		}
		at, err := time.Parse(time.RFC3339Nano, ts)
		if err != nil {
			at, err = time.Parse("2006-01-02T15:04:05.000000Z07:00", ts)
		}
		if err == nil && strings.Contains(text, msg) && !at.Before(after) {
			return at
		}
	}
	return time.Time{}
}

// A leader pod SIGTERMed while a thousand tasks fall due (within 100 ms;
// each callback takes 100 ms), under the steady load: every one is
// delivered exactly once (a graceful stop is not a crash). It prints the
// hand-over (from the SIGTERM to the new leader's "won leadership")
// and the lateness of the thousand tasks: those due before the hand-over
// wait for it.
func TestPods_LeaderStopWhileTasksFallDue(t *testing.T) {
	harness.SkipShort(t)
	harness.RequireRoot(t)
	// A fixed limit of 200 callbacks in flight per executor (not the
	// adaptive one, which starts at 4): the burst is not held back by the
	// executors' capacity, so its lateness shows the hand-over.
	pn := harness.NewPodNet(t, podArgs(t, "--delivery-min-concurrency", "200")...)
	startPods(t, pn, 3)
	waitMembersExactly(t, pn, 30*time.Second)
	load := pn.StartLoad("steady", podRate, podMaxDelay)
	leader := podLeader(t, pn)
	var via *harness.Pod
	for _, p := range pn.Live() {
		if p != leader {
			via = p
		}
	}
	const total = 1000
	start := time.Now().Add(1500 * time.Millisecond).Truncate(time.Millisecond)
	due := map[string]time.Time{}
	var items []string
	for i := range total {
		id := fmt.Sprintf("fall-%04d", i)
		at := start.Add(time.Duration(i%100) * time.Millisecond)
		due[id] = at
		items = append(items, fmt.Sprintf(`{"id":%q,"handler":%q,"run_at":%q}`, id, harness.PodHandler, at.UTC().Format(time.RFC3339Nano)))
		if len(items) == 250 {
			resp, err := via.Client.Do(harness.ReqCtx(t), "POST", "/v1/tasks/batch", []byte(`{"tasks":[`+strings.Join(items, ",")+`]}`))
			if err != nil || resp.Status != 200 {
				t.Fatalf("batch: %v %v", resp, err)
			}
			items = nil
		}
	}
	time.Sleep(time.Until(start.Add(50 * time.Millisecond)))
	stops := stopPods(t, pn, leader)
	stopAt := stops[0].stopAt
	newLeader := podLeader(t, pn)
	tl := finishPods(t, pn, load, stops)

	calls := pn.Calls()
	var lost, dups, early int
	var late []time.Duration
	var lostIDs, dupIDs []string
	for id, d := range due {
		cs := calls[id]
		switch {
		case len(cs) == 0:
			lost++
			lostIDs = append(lostIDs, id)
			continue
		case len(cs) > 1:
			dups++
			var where []string
			for _, c := range cs {
				where = append(where, fmt.Sprintf("%s#%s@%s", c.Pod, c.Attempt, c.At.Format("15:04:05.000")))
			}
			dupIDs = append(dupIDs, fmt.Sprintf("%s(due %s):%s", id, d.Format("15:04:05.000"), strings.Join(where, ",")))
		}
		if cs[0].At.Before(d) {
			early++
		}
		late = append(late, cs[0].At.Sub(d))
	}
	handing := podLogTime(leader.Logs(), "handing leadership over", stopAt)
	for _, line := range strings.Split(leader.Logs(), "\n") {
		if strings.Contains(line, "fired the runs due before the hand-over") {
			t.Logf("%s: %s", leader.ID, line)
		}
	}
	elected := podLogTime(newLeader.Logs(), "won leadership", stopAt)
	var dueBefore, dueAfter []time.Duration // of the tasks due before and after the new leader took over
	byPod := map[string]int{}               // the first callbacks, by pod
	afterByPod := map[string]int{}          // those after the new leader took over
	for id, d := range due {
		if cs := calls[id]; len(cs) > 0 {
			byPod[cs[0].Pod]++
			if !elected.IsZero() && cs[0].At.After(elected) {
				afterByPod[cs[0].Pod]++
			}
		}
		if cs := calls[id]; len(cs) > 0 && !elected.IsZero() {
			if d.Before(elected) {
				dueBefore = append(dueBefore, cs[0].At.Sub(elected))
			} else {
				dueAfter = append(dueAfter, cs[0].At.Sub(d))
			}
		}
	}
	t.Logf("leader %s SIGTERMed %v after the first of %d tasks fell due: hands over at +%v, %s leads at +%v, %s exited at +%v",
		leader.ID, stopAt.Sub(start).Round(time.Millisecond), total, since(handing, stopAt), newLeader.ID, since(elected, stopAt),
		leader.ID, stops[0].exitedAt.Sub(stopAt).Round(time.Millisecond))
	t.Logf("the %d tasks: lost %d, early %d, duplicates %d; lateness from due time: %s", total, lost, early, dups, harness.Summarize(late))
	t.Logf("due before the new leader took over (%d), lateness from its taking over: %s; due after (%d), from due time: %s",
		len(dueBefore), harness.Summarize(dueBefore), len(dueAfter), harness.Summarize(dueAfter))
	elections := 0 // leaderships won before the SIGTERM: 1 unless a starved leader lost it
	for _, p := range pn.Pods() {
		for _, line := range strings.Split(p.Logs(), "\n") {
			if strings.Contains(line, `"won leadership"`) && podLogTime(line, "won leadership", time.Time{}).Before(stopAt) {
				elections++
			}
		}
	}
	t.Logf("leaderships won before the SIGTERM: %d; the 1000 called by pod %v, after the new leader took over %v", elections, byPod, afterByPod)
	// The steady load's tasks due around the stop (from 1 s before the
	// SIGTERM to 1 s after the new leader took over). Those acknowledged
	// before the hand-over began are fired ahead by the old leader
	// (Scheduler.FireAhead); those acknowledged after it were committed by
	// the new leader, so their wait shows its first commits, not the
	// hand-over.
	if !elected.IsZero() {
		if handing.IsZero() {
			handing = stopAt
		}
		var around, beyond, beyondLate []time.Duration // from due time; past the taking over
		for id, a := range load.Acked() {
			cs := calls[id]
			if len(cs) == 0 || a.Due.Before(stopAt.Add(-time.Second)) || a.Due.After(elected.Add(time.Second)) {
				continue
			}
			around = append(around, cs[0].At.Sub(a.Due))
			if a.Due.Before(elected) {
				if a.AckAt.Before(handing) {
					beyond = append(beyond, cs[0].At.Sub(elected))
				} else {
					beyondLate = append(beyondLate, cs[0].At.Sub(elected))
				}
			}
		}
		t.Logf("the steady load's tasks due from 1 s before the SIGTERM to 1 s after the taking over: lateness from due time %s", harness.Summarize(around))
		t.Logf("of those due before the taking over: acknowledged before the hand-over began, called after the taking over by %s; acknowledged after it, by %s",
			harness.Summarize(beyond), harness.Summarize(beyondLate))
	}
	if lost != 0 || early != 0 || dups != 0 {
		t.Errorf("the %d tasks: lost %d %v, early %d, duplicates %d %v: want each delivered exactly once", total, lost, head(lostIDs, 10), early, dups, head(dupIDs, 10))
	}
	_ = tl
}

// since is at - from, rounded, or "?" when at is zero.
func since(at, from time.Time) string {
	if at.IsZero() {
		return "?"
	}
	return at.Sub(from).Round(time.Millisecond).String()
}
