package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/axsched/ax/e2e/harness"
)

// The executor path, end to end: busy answers (429 + Retry-After) are
// snoozes, not failed attempts; a hanging callback is cut at the task's
// timeout and retried; cancelling a running task aborts its callback;
// heartbeats and results of stale attempts get 409; a 202 completes through
// POST /v1/tasks/{id}/result; and a saturated executor keeps its queued
// attempts alive (lease renewal) and serves them by priority.
//
// The tests run their own executor (scriptExecutor), registered for the
// handlers "xe.*", which answers by handler:
//
//	xe.busy...      429 with Retry-After: 1 during the first 2 s after its
//	                first call, then 200
//	xe.hang...      waits until the request is cancelled
//	xe.accept...    202; the test reports the result
//	xe.failaccept   attempt 1: 500, later attempts: 202
//	xe.hbsync       heartbeats its own attempt through its node, then
//	                answers 200 after hbSyncHold
//	xe.slow         answers 200 after slowWork (in-flight is tracked)
//	anything else   200
const (
	xeBusyFor   = 2 * time.Second
	xeSlowWork  = 300 * time.Millisecond
	xeHBSyncFor = time.Second
)

// scriptExecutor is one node's executor for the handlers "xe.*". The
// executors of a cluster share a Recorder and a scriptState.
type scriptExecutor struct {
	node   *harness.Node
	socket string
	rec    *harness.Recorder
	st     *scriptState
	srv    *http.Server
}

// scriptState is what the executors of one test share.
type scriptState struct {
	busyStart atomic.Int64 // unix ns of the first xe.busy call

	mu       sync.Mutex
	statuses map[string][]int // task id → the status of each answer, in order
	hbStatus map[string][]int // task id → status of each heartbeat sent by xe.hbsync

	inflight atomic.Int64 // xe.slow callbacks in flight
	peak     atomic.Int64
}

func newScriptState() *scriptState {
	return &scriptState{statuses: map[string][]int{}, hbStatus: map[string][]int{}}
}

func (s *scriptState) answered(id string, status int) {
	s.mu.Lock()
	s.statuses[id] = append(s.statuses[id], status)
	s.mu.Unlock()
}

// answers returns the statuses answered to task id's callbacks.
func (s *scriptState) answers(id string) []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int(nil), s.statuses[id]...)
}

func (s *scriptState) heartbeats(id string) []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int(nil), s.hbStatus[id]...)
}

// startScriptExecutor serves an executor for n on a socket under dir until
// the test ends.
func startScriptExecutor(t *testing.T, n *harness.Node, dir string, rec *harness.Recorder, st *scriptState) *scriptExecutor {
	t.Helper()
	sock := filepath.Join(dir, n.ID+"-xe.sock")
	_ = os.Remove(sock)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatalf("script executor of %s: %v", n.ID, err)
	}
	e := &scriptExecutor{node: n, socket: sock, rec: rec, st: st}
	e.srv = &http.Server{Handler: e, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := e.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("script executor of %s: %v", n.ID, err)
		}
	}()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if e.srv.Shutdown(ctx) != nil {
			e.srv.Close()
		}
	})
	return e
}

// register registers the executor on its node through POST /v1/executors.
func (e *scriptExecutor) register(t *testing.T) {
	t.Helper()
	body := fmt.Sprintf(`{"name":"xe","handlers":["xe.*"],"url":"unix://%s"}`, e.socket)
	resp, err := e.node.Client.Do(harness.ReqCtx(t), "POST", "/v1/executors", []byte(body))
	if err != nil {
		t.Fatalf("register the executor on %s: %v", e.node.ID, err)
	}
	if resp.Status != http.StatusCreated && resp.Status != http.StatusOK {
		t.Fatalf("register the executor on %s: %s", e.node.ID, resp)
	}
}

func (e *scriptExecutor) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	at := time.Now()
	body, err := io.ReadAll(r.Body)
	c := &harness.Call{
		Node: e.node.ID, Method: r.Method, Path: r.URL.Path, At: at, Body: body, Header: r.Header.Clone(),
		TaskID: r.Header.Get("Ax-Task-Id"), Handler: r.Header.Get("Ax-Handler"),
		Attempt: r.Header.Get("Ax-Attempt"), Run: r.Header.Get("Ax-Run"), Deadline: r.Header.Get("Ax-Deadline"),
	}
	e.rec.Add(c)
	if err != nil {
		e.rec.Finish(c, true)
		return
	}
	answer := func(status int) {
		if status == http.StatusTooManyRequests {
			w.Header().Set("Retry-After", "1")
		}
		e.st.answered(c.TaskID, status)
		w.WriteHeader(status)
		e.rec.Finish(c, false)
	}
	// wait waits d or until the request is cancelled; false when cancelled.
	wait := func(d time.Duration) bool {
		tm := time.NewTimer(d)
		defer tm.Stop()
		select {
		case <-tm.C:
			return true
		case <-r.Context().Done():
			e.rec.Finish(c, true)
			return false
		}
	}
	h := c.Handler
	switch {
	case strings.HasPrefix(h, "xe.busy"):
		e.st.busyStart.CompareAndSwap(0, at.UnixNano())
		if at.Sub(time.Unix(0, e.st.busyStart.Load())) < xeBusyFor {
			answer(http.StatusTooManyRequests)
			return
		}
		answer(http.StatusOK)
	case strings.HasPrefix(h, "xe.hang"):
		<-r.Context().Done()
		e.rec.Finish(c, true)
	case strings.HasPrefix(h, "xe.accept"):
		answer(http.StatusAccepted)
	case h == "xe.failaccept":
		if c.Attempt == "1" {
			answer(http.StatusInternalServerError)
			return
		}
		answer(http.StatusAccepted)
	case h == "xe.hbsync":
		attempt, _ := strconv.Atoi(c.Attempt)
		// Not the request's context: if the heartbeat aborts the callback,
		// its answer is still read.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := e.node.Client.Do(ctx, "POST", harness.TaskPath(c.TaskID)+"/heartbeat", []byte(fmt.Sprintf(`{"attempt":%d}`, attempt)))
		cancel()
		status := -1
		if err == nil {
			status = resp.Status
		}
		e.st.mu.Lock()
		e.st.hbStatus[c.TaskID] = append(e.st.hbStatus[c.TaskID], status)
		e.st.mu.Unlock()
		if wait(xeHBSyncFor) {
			answer(http.StatusOK)
		}
	case h == "xe.slow":
		in := e.st.inflight.Add(1)
		for p := e.st.peak.Load(); in > p && !e.st.peak.CompareAndSwap(p, in); p = e.st.peak.Load() {
		}
		ok := wait(xeSlowWork)
		e.st.inflight.Add(-1)
		if ok {
			answer(http.StatusOK)
		}
	default:
		answer(http.StatusOK)
	}
}

// postAttempt sends POST /v1/tasks/{id}/{what} (heartbeat or result) with
// body through n.
func postAttempt(t *testing.T, n *harness.Node, id, what, body string) *harness.Response {
	t.Helper()
	resp, err := n.Client.Do(harness.ReqCtx(t), "POST", harness.TaskPath(id)+"/"+what, []byte(body))
	if err != nil {
		t.Fatalf("POST %s of %q via %s: %v", what, id, n.ID, err)
	}
	return resp
}

func getTask(t *testing.T, n *harness.Node, id string) harness.Task {
	t.Helper()
	task, err := n.Client.GetTask(harness.ReqCtx(t), id)
	if err != nil {
		t.Fatal(err)
	}
	return task
}

// sameAfterRefusal checks that a refused heartbeat or result changed
// nothing: state, attempts, snoozes, last error and updated_at.
func sameAfterRefusal(t *testing.T, what string, before, after harness.Task) {
	t.Helper()
	if before.State != after.State || before.Attempts != after.Attempts || before.Snoozes != after.Snoozes ||
		before.LastError != after.LastError || !before.UpdatedAt.Equal(after.UpdatedAt) {
		t.Errorf("%s changed the task: before %+v, after %+v", what, before, after)
	}
}

// TestExecutors runs the callback semantics against a three-node cluster
// whose executors are registered through the API.
func TestExecutors(t *testing.T) {
	harness.SkipShort(t)
	t.Parallel()
	c := harness.NewCluster(t, harness.WithSize(3), harness.WithExecutorsOn())
	c.WaitReady()
	st := newScriptState()
	dir := harness.ShortDir(t, t.TempDir())
	for _, n := range c.Nodes {
		startScriptExecutor(t, n, dir, c.Recorder, st).register(t)
	}
	leader := c.Leader()
	follower := c.Followers()[0]
	t.Logf("leader %s, follower %s", leader.ID, follower.ID)

	t.Run("group", func(t *testing.T) {
		t.Run("BusyIsSnoozedNotFailed", func(t *testing.T) {
			t.Parallel()
			testBusyForTwoSeconds(t, c, st, follower)
		})
		t.Run("HangCutAtTimeoutThenDead", func(t *testing.T) {
			t.Parallel()
			testHangCutAtTimeout(t, c, leader)
		})
		t.Run("CancelRunningAbortsCallback", func(t *testing.T) {
			t.Parallel()
			testCancelAbortsCallback(t, c)
		})
		t.Run("Heartbeat", func(t *testing.T) {
			t.Parallel()
			testHeartbeat(t, c, follower)
		})
		t.Run("HeartbeatDuringCallback", func(t *testing.T) {
			t.Parallel()
			testHeartbeatDuringCallback(t, c, st, leader)
		})
		t.Run("AcceptedThenResult", func(t *testing.T) {
			t.Parallel()
			testAcceptedThenResult(t, c, follower)
		})
	})
}

// (a) An executor that answers 429 + Retry-After: 1 for its first 2 s:
// every answer is a snooze (same attempt, no failed attempt even with
// max_attempts 1), delivered again after Retry-After, and every task
// succeeds once the executor takes work.
func testBusyForTwoSeconds(t *testing.T, c *harness.Cluster, st *scriptState, via *harness.Node) {
	const handler = "xe.busy"
	var ids []string
	for i := range 5 {
		id := fmt.Sprintf("xe/busy/%d", i)
		harness.MustSubmit(t, via, harness.SubmitRequest{ID: id, Handler: handler, MaxAttempts: 1}, http.StatusCreated)
		ids = append(ids, id)
	}
	busy := 0
	for _, id := range ids {
		task := harness.WaitState(t, via, id, "SUCCESS")
		answers := st.answers(id)
		n429 := 0
		for _, s := range answers {
			if s == http.StatusTooManyRequests {
				n429++
			}
		}
		busy += n429
		if task.Attempts != 1 || task.LastError != "" {
			t.Errorf("%s: SUCCESS with attempts %d, last_error %q; want 1 attempt and no error (answers %v)", id, task.Attempts, task.LastError, answers)
		}
		if task.Snoozes == 0 || task.Snoozes != n429 {
			t.Errorf("%s: snoozes %d, want the %d busy answers it got (answers %v)", id, task.Snoozes, n429, answers)
		}
		if len(answers) == 0 || answers[len(answers)-1] != http.StatusOK {
			t.Errorf("%s: answers %v, want 429s then 200", id, answers)
		}
		calls := c.Recorder.Calls(id)
		for i, call := range calls {
			if call.Attempt != "1" {
				t.Errorf("%s: callback %d carries Ax-Attempt %s; a busy answer is not an attempt", id, i+1, call.Attempt)
			}
			if i > 0 {
				if gap := call.At.Sub(calls[i-1].Ended); gap < 900*time.Millisecond {
					t.Errorf("%s: callback %d came %s after a 429 with Retry-After: 1", id, i+1, gap.Round(time.Millisecond))
				}
			}
		}
	}
	if busy == 0 {
		t.Fatalf("no busy answers at all: the test did not test anything")
	}
	nodes := c.Running()
	for _, m := range []struct {
		name string
		want float64
	}{
		{harness.AttemptsMetric(handler, "failed"), 0},
		{harness.AttemptsMetric(handler, "timeout"), 0},
		{harness.AttemptsMetric(handler, "snoozed"), float64(busy)},
		{harness.AttemptsMetric(handler, "success"), float64(len(ids))},
		{fmt.Sprintf(`ax_retries_total{handler=%q}`, handler), 0},
	} {
		if got := harness.SumMetric(t, nodes, m.name); got != m.want {
			t.Errorf("%s = %v over the nodes, want %v", m.name, got, m.want)
		}
	}
	t.Logf("%d tasks, %d busy answers, all SUCCESS with 1 attempt", len(ids), busy)
}

// (b) A callback that never answers is aborted by the sidecar at the task's
// timeout (1 s; the executor sees its request context end), counted as a
// failed attempt and retried; after max_attempts the task is DEAD with a
// last_error about the timeout.
func testHangCutAtTimeout(t *testing.T, c *harness.Cluster, via *harness.Node) {
	const handler = "xe.hang.timeout"
	id := "xe/hang"
	harness.MustSubmit(t, via, harness.SubmitRequest{ID: id, Handler: handler, Timeout: "1s", MaxAttempts: 2}, http.StatusCreated)
	dead := harness.WaitState(t, via, id, "DEAD")
	if dead.Attempts != 2 || !strings.Contains(strings.ToLower(dead.LastError), "timeout") {
		t.Errorf("DEAD with attempts %d, last_error %q; want 2 and a mention of the timeout", dead.Attempts, dead.LastError)
	}
	calls := c.Recorder.Calls(id)
	if len(calls) != 2 {
		t.Fatalf("%d callbacks, want 2: %+v", len(calls), calls)
	}
	for i, call := range calls {
		if call.Attempt != strconv.Itoa(i+1) {
			t.Errorf("callback %d: Ax-Attempt %s", i+1, call.Attempt)
		}
		if !call.Cancelled || call.Ended.IsZero() {
			t.Errorf("callback %d was not aborted: %+v", i+1, call)
			continue
		}
		took := call.Ended.Sub(call.At)
		t.Logf("callback %d (on %s) aborted %s after it arrived; timeout 1s", i+1, call.Node, took.Round(time.Millisecond))
		if took < 800*time.Millisecond || took > 2500*time.Millisecond {
			t.Errorf("callback %d aborted %s after it arrived; the timeout is 1s", i+1, took)
		}
		if dl, err := time.Parse(time.RFC3339Nano, call.Deadline); err != nil {
			t.Errorf("callback %d: Ax-Deadline %q: %v", i+1, call.Deadline, err)
		} else if d := dl.Sub(call.At); d < 500*time.Millisecond || d > 1100*time.Millisecond {
			t.Errorf("callback %d: Ax-Deadline %s after it arrived, want about 1s", i+1, d)
		}
	}
	if got := harness.SumMetric(t, c.Running(), harness.AttemptsMetric(handler, "timeout")); got != 2 {
		t.Errorf("%s = %v, want 2", harness.AttemptsMetric(handler, "timeout"), got)
	}
}

// (c) Cancelling a RUNNING task through a node other than the one running
// it aborts the callback (the executor sees the request context end); the
// task ends CANCELLED everywhere and is not called again.
func testCancelAbortsCallback(t *testing.T, c *harness.Cluster) {
	const handler = "xe.hang.cancel"
	id := "xe/cancel-running"
	harness.MustSubmit(t, c.Nodes[0], harness.SubmitRequest{ID: id, Handler: handler, Timeout: "30s"}, http.StatusCreated)
	if short := c.Recorder.WaitCalls(harness.ReqCtx(t), []string{id}, 1); len(short) > 0 {
		t.Fatalf("no callback")
	}
	running := harness.WaitState(t, c.Nodes[0], id, "RUNNING")
	var via *harness.Node
	for _, n := range c.Nodes {
		if n.ID != running.Node {
			via = n
			break
		}
	}
	cancelled := time.Now()
	resp, err := via.Client.Cancel(harness.ReqCtx(t), id)
	if err != nil || resp.Status != http.StatusOK {
		t.Fatalf("DELETE via %s: %v %v", via.ID, resp, err)
	}
	if task, _ := resp.Task(); task.State != "CANCELLED" {
		t.Errorf("DELETE of a running task: state %s, want CANCELLED", task.State)
	}
	harness.WaitFor(t, 5*time.Second, 10*time.Millisecond, "the callback to be aborted", func() error {
		if !c.Recorder.Calls(id)[0].Cancelled {
			return fmt.Errorf("the executor's request is still open")
		}
		return nil
	})
	t.Logf("running on %s, cancelled via %s: callback aborted %s after the DELETE was sent", running.Node, via.ID,
		c.Recorder.Calls(id)[0].Ended.Sub(cancelled).Round(time.Millisecond))
	time.Sleep(3 * time.Second) // past a retry's backoff (2 s + 20 %)
	if n := len(c.Recorder.Calls(id)); n != 1 {
		t.Errorf("%d callbacks after cancelling the running task, want 1", n)
	}
	for _, n := range c.Nodes {
		if task := getTask(t, n, id); task.State != "CANCELLED" {
			t.Errorf("on %s: %s, want CANCELLED", n.ID, task.State)
		}
	}
	for _, o := range []string{"failed", "timeout", "success"} {
		if got := harness.SumMetric(t, c.Running(), harness.AttemptsMetric(handler, o)); got != 0 {
			t.Errorf("%s = %v, want 0", harness.AttemptsMetric(handler, o), got)
		}
	}
}

// (d) Heartbeats: one for a task that is not running, or for an attempt
// that is not the current one, gets 409 and changes nothing; the current
// attempt's heartbeats extend its lease (timeout 1 s + grace 5 s) well
// past its expiry, while a twin without heartbeats is timed out and
// retried.
func testHeartbeat(t *testing.T, c *harness.Cluster, via *harness.Node) {
	// Not running: waiting, and finished.
	harness.MustSubmit(t, via, harness.SubmitRequest{ID: "xe/hb/waiting", Handler: "xe.ok", Delay: "1h"}, http.StatusCreated)
	harness.MustSubmit(t, via, harness.SubmitRequest{ID: "xe/hb/done", Handler: "xe.ok"}, http.StatusCreated)
	harness.WaitState(t, via, "xe/hb/done", "SUCCESS")
	for _, id := range []string{"xe/hb/waiting", "xe/hb/done"} {
		before := getTask(t, via, id)
		resp := postAttempt(t, via, id, "heartbeat", `{"attempt":1}`)
		harness.WantError(t, resp, http.StatusConflict, "conflict")
		sameAfterRefusal(t, "a heartbeat of "+id, before, getTask(t, via, id))
	}
	if resp := postAttempt(t, via, "xe/hb/no such task", "heartbeat", `{"attempt":1}`); resp.Status != http.StatusNotFound {
		t.Errorf("heartbeat of an unknown task: %s, want 404", resp)
	}

	// Running attempt 2 (attempt 1 failed with a 500), answered 202.
	id, twin := "xe/hb/running", "xe/hb/no-heartbeat"
	for _, x := range []string{id, twin} {
		harness.MustSubmit(t, via, harness.SubmitRequest{ID: x, Handler: "xe.failaccept", Timeout: "1s", MaxAttempts: 3}, http.StatusCreated)
	}
	if short := c.Recorder.WaitCalls(harness.ReqCtx(t), []string{id, twin}, 2); len(short) > 0 {
		t.Fatalf("no second attempt of %v", short)
	}
	accepted := c.Recorder.Calls(id)[1].At
	cur := harness.WaitState(t, via, id, "RUNNING")
	if cur.Attempts != 2 {
		t.Fatalf("running attempt %d, want 2", cur.Attempts)
	}
	for _, stale := range []int{1, 3} {
		before := getTask(t, via, id)
		resp := postAttempt(t, via, id, "heartbeat", fmt.Sprintf(`{"attempt":%d}`, stale))
		harness.WantError(t, resp, http.StatusConflict, "conflict")
		sameAfterRefusal(t, fmt.Sprintf("a heartbeat of attempt %d", stale), before, getTask(t, via, id))
	}
	// Heartbeat every 1.5 s, through every node in turn, for 9 s (past the
	// lease of 6 s the attempt would have without them) and until the twin
	// was retried (lease 6 s, then a backoff of 4 s ± 20 %).
	prev := getTask(t, via, id).UpdatedAt
	for i := 0; time.Since(accepted) < 9*time.Second || (len(c.Recorder.Calls(twin)) < 3 && time.Since(accepted) < 20*time.Second); i++ {
		n := c.Nodes[i%len(c.Nodes)]
		resp := postAttempt(t, n, id, "heartbeat", `{"attempt":2}`)
		if resp.Status != http.StatusOK {
			t.Fatalf("heartbeat of the current attempt via %s: %s", n.ID, resp)
		}
		task, _ := resp.Task()
		if task.State != "RUNNING" || task.Attempts != 2 || !task.UpdatedAt.After(prev) {
			t.Errorf("heartbeat answer: %+v (updated_at before %s)", task, prev)
		}
		prev = task.UpdatedAt
		time.Sleep(1500 * time.Millisecond)
	}
	t.Logf("heartbeats kept attempt 2 running for %s", time.Since(accepted).Round(time.Millisecond))
	if task := getTask(t, via, id); task.State != "RUNNING" || task.Attempts != 2 {
		t.Errorf("after 9 s of heartbeats: %s attempt %d (%q), want RUNNING attempt 2", task.State, task.Attempts, task.LastError)
	}
	if n := len(c.Recorder.Calls(id)); n != 2 {
		t.Errorf("%d callbacks of the heartbeating task, want 2 (its lease expired?)", n)
	}
	// The twin's lease expired (1 s + 5 s) and it was retried.
	if calls := c.Recorder.Calls(twin); len(calls) < 3 {
		t.Errorf("the twin without heartbeats has %d callbacks, want a third after its lease expired", len(calls))
	} else {
		t.Logf("the twin's attempt 3 came %s after its 202", calls[2].At.Sub(calls[1].At).Round(time.Millisecond))
		if tw := getTask(t, via, twin); !strings.Contains(tw.LastError, "lease") {
			t.Errorf("twin last_error %q, want the lease expiry", tw.LastError)
		}
	}
	resp := postAttempt(t, via, id, "result", `{"attempt":2,"status":"success"}`)
	if resp.Status != http.StatusOK {
		t.Fatalf("result of the current attempt: %s", resp)
	}
	if done, _ := resp.Task(); done.State != "SUCCESS" {
		t.Errorf("after the result: %s", done.State)
	}
	resp = postAttempt(t, via, twin, "result", `{"attempt":3,"status":"success"}`)
	if resp.Status != http.StatusOK {
		t.Errorf("result of the twin's attempt 3: %s", resp)
	}
}

// A heartbeat sent by the executor while its (synchronous) callback runs
// is accepted and does not disturb that callback: it completes with 200,
// once.
func testHeartbeatDuringCallback(t *testing.T, c *harness.Cluster, st *scriptState, via *harness.Node) {
	id := "xe/hb/sync"
	harness.MustSubmit(t, via, harness.SubmitRequest{ID: id, Handler: "xe.hbsync", Timeout: "3s", MaxAttempts: 2}, http.StatusCreated)
	if short := c.Recorder.WaitCalls(harness.ReqCtx(t), []string{id}, 1); len(short) > 0 {
		t.Fatalf("no callback")
	}
	// It ends within a second or so; give it the time a lease expiry and a
	// retry would take, to report what happened instead.
	var task harness.Task
	for deadline := time.Now().Add(12 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		task = getTask(t, via, id)
		if (task.State != "RUNNING" && task.State != "WAITING") || time.Now().After(deadline) {
			break
		}
	}
	calls := c.Recorder.Calls(id)
	for i, call := range calls {
		t.Logf("callback %d: attempt %s on %s, ended %s after it arrived, cancelled %v", i+1, call.Attempt, call.Node,
			call.Ended.Sub(call.At).Round(time.Millisecond), call.Cancelled)
	}
	if hb := st.heartbeats(id); len(hb) == 0 || hb[0] != http.StatusOK {
		t.Errorf("the executor's heartbeat of its running attempt was answered %v, want 200", hb)
	}
	if calls[0].Cancelled {
		t.Errorf("the callback was aborted %s after it arrived, right after its own heartbeat (answered %v); "+
			"a heartbeat must extend the attempt, not abort it", calls[0].Ended.Sub(calls[0].At).Round(time.Millisecond), st.heartbeats(id))
	}
	if task.State != "SUCCESS" || task.Attempts != 1 || len(calls) != 1 {
		t.Errorf("task %s with attempts %d (last_error %q) and %d callbacks; want SUCCESS after 1", task.State, task.Attempts, task.LastError, len(calls))
	}
}

// (e) A 202 answer leaves the attempt RUNNING until POST
// /v1/tasks/{id}/result; a result for another attempt, or for a task no
// longer running, gets 409 and changes nothing.
func testAcceptedThenResult(t *testing.T, c *harness.Cluster, via *harness.Node) {
	ok, perm := "xe/accept/ok", "xe/accept/permanent"
	for _, id := range []string{ok, perm} {
		harness.MustSubmit(t, via, harness.SubmitRequest{ID: id, Handler: "xe.accept"}, http.StatusCreated)
	}
	if short := c.Recorder.WaitCalls(harness.ReqCtx(t), []string{ok, perm}, 1); len(short) > 0 {
		t.Fatalf("no callback for %v", short)
	}
	for _, id := range []string{ok, perm} {
		harness.WaitState(t, via, id, "RUNNING")
	}
	time.Sleep(500 * time.Millisecond) // the 202 changes nothing meanwhile
	before := harness.WaitState(t, via, ok, "RUNNING")
	resp := postAttempt(t, via, ok, "result", `{"attempt":2,"status":"success"}`)
	harness.WantError(t, resp, http.StatusConflict, "conflict")
	sameAfterRefusal(t, "a result of attempt 2", before, getTask(t, via, ok))

	resp = postAttempt(t, via, ok, "result", `{"attempt":1,"status":"success"}`)
	if resp.Status != http.StatusOK {
		t.Fatalf("result of the current attempt: %s", resp)
	}
	done := harness.WaitState(t, via, ok, "SUCCESS")
	if done.Attempts != 1 {
		t.Errorf("SUCCESS with attempts %d", done.Attempts)
	}
	for _, n := range c.Nodes {
		harness.WaitState(t, n, ok, "SUCCESS")
	}
	resp = postAttempt(t, via, ok, "result", `{"attempt":1,"status":"failed","error":"late"}`)
	harness.WantError(t, resp, http.StatusConflict, "conflict")
	sameAfterRefusal(t, "a result for a finished task", done, getTask(t, via, ok))

	resp = postAttempt(t, c.Leader(), perm, "result", `{"attempt":1,"status":"permanent","error":"refused by the app"}`)
	if resp.Status != http.StatusOK {
		t.Fatalf("permanent result: %s", resp)
	}
	if failed := harness.WaitState(t, via, perm, "FAILED"); failed.LastError != "refused by the app" || failed.Attempts != 1 {
		t.Errorf("FAILED with last_error %q, attempts %d", failed.LastError, failed.Attempts)
	}
	for _, id := range []string{ok, perm} {
		if n := len(c.Recorder.Calls(id)); n != 1 {
			t.Errorf("%s: %d callbacks, want 1", id, n)
		}
	}
}

// (f) TestExecutors_QueuedAttemptsKeepTheirLease: one node whose executor
// runs 2 callbacks at once (--delivery-concurrency 2
// --delivery-min-concurrency 2), each taking 300 ms. 30 tasks of priority 4
// and then 10 of priority 0, all with timeout 1s, queue for about 6 s,
// longer than the lease a Fire gives (timeout + grace 5 s): none is timed
// out or delivered twice, the executor never sees more than 2 at once, and
// the priority-0 tasks overtake most of the backlog.
func TestExecutors_QueuedAttemptsKeepTheirLease(t *testing.T) {
	harness.SkipShort(t)
	t.Parallel()
	const (
		handler = "xe.slow"
		nLow    = 30
		nHigh   = 10
	)
	dir := harness.ShortDir(t, t.TempDir())
	rec, st := harness.NewRecorder(), newScriptState()
	sock := filepath.Join(dir, "n1-xe.sock")
	c := harness.NewCluster(t, harness.WithSize(1), harness.WithExecutorsOn(),
		harness.WithArgs("--delivery-concurrency", "2", "--delivery-min-concurrency", "2", "--executor", "xe.*=unix://"+sock))
	n := c.Nodes[0]
	e := startScriptExecutor(t, n, dir, rec, st)
	if e.socket != sock {
		t.Fatalf("executor socket %s, want %s", e.socket, sock)
	}
	c.WaitReady()

	batch := func(prio, from, count int) []string {
		var items, ids []string
		for i := from; i < from+count; i++ {
			id := fmt.Sprintf("xe/queue/p%d/%02d", prio, i)
			ids = append(ids, id)
			items = append(items, fmt.Sprintf(`{"id":%q,"handler":%q,"priority":%d,"timeout":"1s","max_attempts":3}`, id, handler, prio))
		}
		resp, err := n.Client.Do(harness.ReqCtx(t), "POST", "/v1/tasks/batch", []byte(`{"tasks":[`+strings.Join(items, ",")+`]}`))
		if err != nil || resp.Status != http.StatusOK {
			t.Fatalf("batch of priority %d: %v %v", prio, resp, err)
		}
		var out struct {
			Results []struct{ Status int } `json:"results"`
		}
		if err := json.Unmarshal(resp.Body, &out); err != nil || len(out.Results) != count {
			t.Fatalf("batch answer %s: %v", resp, err)
		}
		for i, r := range out.Results {
			if r.Status != http.StatusCreated {
				t.Fatalf("batch item %d: status %d", i, r.Status)
			}
		}
		return ids
	}
	start := time.Now()
	low := batch(4, 0, nLow)
	// Let the backlog of priority 4 reach the executor's queue first.
	if short := rec.WaitCalls(harness.ReqCtx(t), low[:1], 1); len(short) > 0 {
		t.Fatalf("no callback of the priority-4 backlog")
	}
	high := batch(0, 0, nHigh)
	all := append(append([]string(nil), low...), high...)
	// 40 × 300 ms ÷ 2 = 6 s; wait for every task to end (or 30 s), then
	// check how.
	var makespan time.Duration
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		done := 0
		for _, id := range all {
			if s := getTask(t, n, id).State; s != "RUNNING" && s != "WAITING" {
				done++
			}
		}
		if done == len(all) {
			makespan = time.Since(start)
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("after 30 s, %d of %d tasks have not ended", len(all)-done, len(all))
			makespan = time.Since(start)
			break
		}
	}
	var bad []string
	for _, id := range all {
		task := getTask(t, n, id)
		if task.State != "SUCCESS" || task.Attempts != 1 || task.LastError != "" {
			bad = append(bad, fmt.Sprintf("%s: %s, attempts %d, last_error %q", id, task.State, task.Attempts, task.LastError))
		}
	}
	if len(bad) > 0 {
		t.Errorf("%d of %d tasks are not SUCCESS after 1 attempt (queued attempts timed out?), e.g.\n  %s",
			len(bad), len(all), strings.Join(bad[:min(len(bad), 3)], "\n  "))
	}
	t.Logf("%d tasks done in %s (peak in flight at the executor %d)", len(all), makespan.Round(time.Millisecond), st.peak.Load())
	if makespan < 5*time.Second {
		t.Errorf("done in %s: the queue did not outlast the lease (6 s), the test does not test renewal", makespan)
	}
	if p := st.peak.Load(); p > 2 {
		t.Errorf("peak in flight at the executor %d, want at most 2", p)
	}
	bad = nil
	for _, id := range all {
		calls := rec.Calls(id)
		if len(calls) != 1 {
			var atts []string
			for _, c := range calls {
				atts = append(atts, fmt.Sprintf("attempt %s at +%s cancelled=%v", c.Attempt, c.At.Sub(start).Round(time.Millisecond), c.Cancelled))
			}
			bad = append(bad, fmt.Sprintf("%s delivered %d times: [%s]", id, len(calls), strings.Join(atts, "; ")))
		}
	}
	if len(bad) > 0 {
		t.Errorf("%d of %d tasks were not delivered exactly once, e.g.\n  %s", len(bad), len(all), strings.Join(bad[:min(len(bad), 3)], "\n  "))
	}
	m := harness.Scrape(t, n)
	for name, want := range map[string]float64{
		harness.AttemptsMetric(handler, "timeout"):           0,
		harness.AttemptsMetric(handler, "failed"):            0,
		harness.AttemptsMetric(handler, "cancelled"):         0,
		harness.AttemptsMetric(handler, "success"):           nLow + nHigh,
		fmt.Sprintf(`ax_retries_total{handler=%q}`, handler): 0,
	} {
		if got := m[name]; got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	// Priority: order the first callbacks; every priority-0 task should come
	// before most of the priority-4 backlog.
	type arrival struct {
		id string
		at time.Time
	}
	var order []arrival
	for _, id := range all {
		if calls := rec.Calls(id); len(calls) > 0 {
			order = append(order, arrival{id, calls[0].At})
		}
	}
	sort.Slice(order, func(i, j int) bool { return order[i].at.Before(order[j].at) })
	lastHigh, lowBefore := -1, 0
	for i, a := range order {
		if strings.Contains(a.id, "/p0/") {
			lastHigh = i
		}
	}
	for _, a := range order[:lastHigh+1] {
		if strings.Contains(a.id, "/p4/") {
			lowBefore++
		}
	}
	t.Logf("the last priority-0 callback was number %d of %d; %d of the %d priority-4 tasks came before it", lastHigh+1, len(order), lowBefore, nLow)
	if lowBefore > nLow/2 {
		t.Errorf("%d of %d priority-4 tasks were delivered before the last priority-0 one; want fewer than half", lowBefore, nLow)
	}
}
