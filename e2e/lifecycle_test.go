package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/axsched/ax/e2e/harness"
)

// lifecycleTally counts, over the acknowledged tasks (id → due time), the
// lost ones (no callback, or not SUCCESS), the early ones (a callback
// before the due time) and the duplicates (more than one callback), and
// the latest callback's lateness.
type lifecycleTally struct {
	lost, early, dups int
	maxLate           time.Duration
	latest            string // the task of maxLate
	lostIDs           []string
}

func tallyDeliveries(t *testing.T, via *harness.Node, rec *harness.Recorder, due map[string]time.Time) lifecycleTally {
	t.Helper()
	var tl lifecycleTally
	for id, d := range due {
		calls := rec.Calls(id)
		task, err := via.Client.GetTask(harness.ReqCtx(t), id)
		if len(calls) == 0 || err != nil || task.State != "SUCCESS" {
			tl.lost++
			tl.lostIDs = append(tl.lostIDs, fmt.Sprintf("%s(%d calls, %s %v)", id, len(calls), task.State, err))
			continue
		}
		if len(calls) > 1 {
			tl.dups++
		}
		for _, c := range calls {
			if c.At.Before(d) {
				tl.early++
			}
		}
		if late := calls[0].At.Sub(d); late > tl.maxLate {
			tl.maxLate, tl.latest = late, id
		}
	}
	slices.Sort(tl.lostIDs)
	return tl
}

// waitAllCalled waits until every task of due has had a callback and is
// SUCCESS on via, or timeout passes (the tally then counts the rest lost).
func waitAllCalled(t *testing.T, via *harness.Node, rec *harness.Recorder, due map[string]time.Time, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	pending := map[string]bool{}
	for id := range due {
		pending[id] = true
	}
	for len(pending) > 0 && time.Now().Before(deadline) {
		for id := range pending {
			if len(rec.Calls(id)) == 0 {
				continue
			}
			if task, err := via.Client.GetTask(harness.ReqCtx(t), id); err == nil && task.State == "SUCCESS" {
				delete(pending, id)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// A leader stopped gracefully (SIGTERM) while a thousand tasks fall due:
// every task is delivered exactly once (the outcomes of its answered
// attempts are reported, its unstarted ones handed back), none early, and
// the stopped leader is not needed to finish them (it is not restarted).
func TestLifecycle_LeaderStopWhileTasksFallDue(t *testing.T) {
	harness.SkipShort(t)
	c := harness.NewCluster(t, harness.WithSize(3))
	c.WaitReady()
	leader := c.Leader()
	via := c.Followers()[0]

	const total = 1000
	start := time.Now().Add(1500 * time.Millisecond).Truncate(time.Millisecond)
	due := map[string]time.Time{}
	var items []string
	for i := range total { // all due within 100 ms; each callback takes 200 ms
		id := fmt.Sprintf("lc-%d", i)
		at := start.Add(time.Duration(i%100) * time.Millisecond)
		due[id] = at
		items = append(items, fmt.Sprintf(`{"id":%q,"handler":%q,"run_at":%q}`, id, harness.HandlerSleep, at.UTC().Format(time.RFC3339Nano)))
		if len(items) == 250 {
			resp, err := via.Client.Do(harness.ReqCtx(t), "POST", "/v1/tasks/batch", []byte(`{"tasks":[`+strings.Join(items, ",")+`]}`))
			if err != nil || resp.Status != 200 {
				t.Fatalf("batch: %v %v", resp, err)
			}
			items = nil
		}
	}
	time.Sleep(time.Until(start.Add(50 * time.Millisecond))) // callbacks are flowing, more fall due
	stopAt := time.Now()
	if err := leader.Stop(); err != nil {
		t.Fatalf("graceful stop of the leader %s: %v", leader.ID, err)
	}
	exitAt := time.Now()
	newLeader := c.WaitForNewLeader(leader)
	waitAllCalled(t, via, c.Recorder, due, 60*time.Second)
	tl := tallyDeliveries(t, via, c.Recorder, due)
	var lateAfter time.Duration // among tasks due after the SIGTERM
	for id, d := range due {
		if calls := c.Recorder.Calls(id); len(calls) > 0 && d.After(stopAt) {
			lateAfter = max(lateAfter, calls[0].At.Sub(d))
		}
	}
	t.Logf("leader %s stopped in %v (new leader %s); %d tasks: lost %d, early %d, duplicates %d; max lateness %v (tasks due after the SIGTERM: %v)",
		leader.ID, exitAt.Sub(stopAt).Round(time.Millisecond), newLeader.ID, total, tl.lost, tl.early, tl.dups,
		tl.maxLate.Round(time.Millisecond), lateAfter.Round(time.Millisecond))
	if tl.lost != 0 || tl.early != 0 || tl.dups != 0 {
		t.Errorf("lost %d %v, early %d, duplicates %d: want every task delivered exactly once, none early", tl.lost, head(tl.lostIDs, 10), tl.early, tl.dups)
	}
	if !strings.Contains(leader.Logs(), "handing leadership over") {
		t.Errorf("the stopped leader did not hand leadership over")
	}
}

func head(s []string, n int) []string { return s[:min(n, len(s))] }

// A scale-down from 3 to 1 under light load (50 submits/s due within
// 0–3 s, through the survivor): the leader and a follower, both with
// --leave-on-shutdown, get SIGTERM at the same moment. They leave one after
// the other (no "leadership transfer in progress" left unretried), so the
// survivor is the only member, keeps accepting and firing, and no
// acknowledged task is lost or early.
func TestLifecycle_ScaleDownTwoAtOnce(t *testing.T) {
	harness.SkipShort(t)
	t.Parallel()
	c := harness.NewCluster(t, harness.WithSize(3), harness.WithArgs("--leave-on-shutdown"))
	c.WaitReady()
	leader := c.Leader()
	fs := c.Followers()
	survivor, other := fs[0], fs[1]

	var mu sync.Mutex
	due := map[string]time.Time{}
	acked := map[string]time.Time{} // tasks accepted after their due time: when
	var failed []string
	ctx, stopLoad := context.WithCancel(context.Background())
	defer stopLoad()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // 50 submits/s through the survivor
		defer wg.Done()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			id := fmt.Sprintf("sd-%d", i)
			at := time.Now().Add(time.Duration(i%31) * 100 * time.Millisecond).Truncate(time.Millisecond).Add(time.Millisecond)
			body := fmt.Sprintf(`{"id":%q,"handler":%q,"run_at":%q}`, id, harness.HandlerSleep, at.UTC().Format(time.RFC3339Nano))
			sctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			resp, _, err := survivor.Client.SubmitRetry(sctx, []byte(body))
			cancel()
			mu.Lock()
			if err == nil && (resp.Status == http.StatusCreated || resp.Status == http.StatusOK) {
				due[id] = at
				if now := time.Now(); now.After(at) {
					acked[id] = now // accepted after its due time (retried through the election)
				}
			} else {
				failed = append(failed, fmt.Sprintf("%s: %v %v", id, resp, err))
			}
			mu.Unlock()
		}
	}()
	time.Sleep(2 * time.Second)
	stopAt := time.Now()
	errs := make([]error, 2)
	var sw sync.WaitGroup
	for i, n := range []*harness.Node{leader, other} {
		sw.Add(1)
		go func() { defer sw.Done(); errs[i] = n.Stop() }()
	}
	sw.Wait()
	exitAt := time.Now()
	for i, n := range []*harness.Node{leader, other} {
		if errs[i] != nil {
			t.Errorf("graceful stop of %s: %v", n.ID, errs[i])
		}
	}
	mu.Lock()
	ackedAtExit := len(due)
	mu.Unlock()
	time.Sleep(3 * time.Second) // the survivor alone keeps accepting
	stopLoad()
	wg.Wait()

	info, err := survivor.Client.Cluster(harness.ReqCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	var members []string
	for _, m := range info.Members {
		members = append(members, m.ID)
	}
	if len(members) != 1 || members[0] != survivor.ID || info.Leader != survivor.ID {
		t.Errorf("members %v, leader %q: want exactly the survivor %s, leading", members, info.Leader, survivor.ID)
	}
	waitAllCalled(t, survivor, c.Recorder, due, 60*time.Second)
	tl := tallyDeliveries(t, survivor, c.Recorder, due)
	tl.maxLate, tl.latest = 0, ""
	var lateBefore time.Duration // of the tasks due before the SIGTERM (no stop yet)
	for id, d := range due {     // lateness from the later of due time and acknowledgement
		if calls := c.Recorder.Calls(id); len(calls) > 0 {
			if a, ok := acked[id]; ok {
				d = a
			}
			if late := calls[0].At.Sub(d); late > tl.maxLate {
				tl.maxLate, tl.latest = late, id
			}
			if due[id].Before(stopAt) {
				lateBefore = max(lateBefore, calls[0].At.Sub(d))
			}
			if os.Getenv("AX_E2E_LIFECYCLE_DEBUG") != "" && calls[0].At.Sub(d) > 100*time.Millisecond {
				t.Logf("late: %s due %v after the SIGTERM, called %v late on %s", id, due[id].Sub(stopAt).Round(time.Millisecond), calls[0].At.Sub(d).Round(time.Millisecond), calls[0].Node)
			}
		}
	}
	t.Logf("stopped %s (leader) and %s at once: both exited in %v; %d tasks acknowledged (%d after the exits), %d submits failed: lost %d, early %d, duplicates %d; max lateness %v from due or acknowledgement (%s, due %v after the SIGTERM; %d acknowledged after their due time; before the SIGTERM: %v)",
		leader.ID, other.ID, exitAt.Sub(stopAt).Round(time.Millisecond), len(due), len(due)-ackedAtExit, len(failed),
		tl.lost, tl.early, tl.dups, tl.maxLate.Round(time.Millisecond), tl.latest, due[tl.latest].Sub(stopAt).Round(time.Millisecond), len(acked), lateBefore.Round(time.Millisecond))
	if tl.lost != 0 || tl.early != 0 {
		t.Errorf("lost %d %v, early %d: want 0 and 0", tl.lost, head(tl.lostIDs, 10), tl.early)
	}
	if len(failed) > 0 {
		t.Errorf("the survivor refused %d submits: %v", len(failed), head(failed, 5))
	}
	if len(due) == ackedAtExit {
		t.Errorf("the survivor acknowledged no submit after the others exited")
	}
	for _, n := range []*harness.Node{leader, other} {
		if !strings.Contains(n.Logs(), "left the cluster") {
			t.Errorf("%s did not leave the cluster", n.ID)
		}
	}
}

// A callback that never answers holds a graceful stop only for
// --drain-timeout (plus the hand-over and the leave's bounds): the process
// exits on its own, cleanly.
func TestLifecycle_StopIsBounded(t *testing.T) {
	harness.SkipShort(t)
	t.Parallel()
	c := harness.NewCluster(t, harness.WithSize(1), harness.WithArgs("--drain-timeout", "1s"))
	c.WaitReady()
	n := c.Nodes[0]
	harness.MustSubmit(t, n, harness.SubmitRequest{ID: "stuck", Handler: harness.HandlerSlow, Timeout: "1h"}, 201)
	harness.WaitFor(t, 10*time.Second, 20*time.Millisecond, "the callback", func() error {
		if len(c.Recorder.Calls("stuck")) == 0 {
			return fmt.Errorf("no callback yet")
		}
		return nil
	})
	stopAt := time.Now()
	if err := n.Stop(); err != nil { // Stop kills it after stopTimeout (20 s)
		t.Fatalf("stop with a callback that never answers: %v", err)
	}
	t.Logf("stopped in %v with --drain-timeout 1s", time.Since(stopAt).Round(time.Millisecond))
	if !strings.Contains(n.Logs(), "drain timeout") {
		t.Errorf("no drain timeout logged")
	}
}
