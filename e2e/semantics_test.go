package e2e

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/axsched/ax/e2e/harness"
)

// TestSemantics checks the API's semantics on a three-node cluster with an
// executor on every node: retries and DEAD, FAILED, timeouts, cancel,
// idempotent submits, conflicts and overwrite, bad input, forwarding and
// reading one's writes on a follower.
func TestSemantics(t *testing.T) {
	harness.SkipShort(t)
	c := harness.NewCluster(t, harness.WithSize(3))
	c.WaitReady()
	leader := c.Leader()
	follower := c.Followers()[0]
	targets := []*harness.Node{leader, follower}
	t.Logf("leader %s, follower %s", leader.ID, follower.ID)

	t.Run("group", func(t *testing.T) {
		t.Run("RetryThenDead", func(t *testing.T) {
			t.Parallel()
			testRetryThenDead(t, c, follower)
		})
		t.Run("PermanentFailure", func(t *testing.T) {
			t.Parallel()
			testPermanentFailure(t, c, leader)
		})
		t.Run("TimeoutAbortsCallback", func(t *testing.T) {
			t.Parallel()
			testTimeout(t, c, follower)
		})
		t.Run("CancelWaiting", func(t *testing.T) {
			t.Parallel()
			testCancelWaiting(t, c, leader, follower)
		})
		for _, n := range targets {
			role := roleOf(n, leader)
			t.Run("Idempotency/"+role, func(t *testing.T) {
				t.Parallel()
				testIdempotency(t, c, n, role)
			})
		}
		t.Run("BadInput", func(t *testing.T) {
			t.Parallel()
			testBadInput(t, leader, follower)
		})
		t.Run("FollowerReadsItsWrites", func(t *testing.T) {
			t.Parallel()
			testFollowerReadsItsWrites(t, c, leader, follower)
		})
		t.Run("CancelRunning", func(t *testing.T) {
			t.Parallel()
			testCancelRunning(t, c, follower)
		})
		t.Run("BusyIsNotAnAttempt", func(t *testing.T) {
			t.Parallel()
			testBusy(t, c, leader)
		})
		t.Run("RunAt", func(t *testing.T) {
			t.Parallel()
			testRunAt(t, c, follower)
		})
		t.Run("ConcurrentSameID", func(t *testing.T) {
			t.Parallel()
			testConcurrentSameID(t, c)
		})
		t.Run("ClusterView", func(t *testing.T) {
			t.Parallel()
			testClusterView(t, c, leader)
		})
	})
}

func roleOf(n, leader *harness.Node) string {
	if n == leader {
		return "leader"
	}
	return "follower"
}

// A callback answering 500 is retried with backoff (2 s ± 20 %) until
// max_attempts, then the task is DEAD with the error kept.
func testRetryThenDead(t *testing.T, c *harness.Cluster, via *harness.Node) {
	id := "sem/dead|500@ü"
	task := harness.MustSubmit(t, via, harness.SubmitRequest{ID: id, Handler: harness.HandlerFail, MaxAttempts: 2, Payload: []byte(`{"x": 1}`)}, http.StatusCreated)
	if task.MaxAttempts != 2 {
		t.Errorf("max_attempts %d, want 2", task.MaxAttempts)
	}
	dead := harness.WaitState(t, via, id, "DEAD")
	if dead.Attempts != 2 {
		t.Errorf("DEAD with attempts %d, want 2", dead.Attempts)
	}
	if !strings.Contains(dead.LastError, "500") {
		t.Errorf("last_error %q does not mention 500", dead.LastError)
	}
	if dead.FinishedAt == nil || dead.NextRunAt != nil {
		t.Errorf("DEAD task: finished_at %v, next_run_at %v; want a finish time and no next run", dead.FinishedAt, dead.NextRunAt)
	}
	calls := c.Recorder.Calls(id)
	if len(calls) != 2 {
		t.Fatalf("%d callbacks, want 2: %+v", len(calls), calls)
	}
	for i, call := range calls {
		for _, msg := range harness.CheckHeaders(call, id, harness.HandlerFail, i+1, 30*time.Second) {
			t.Errorf("callback %d: %s", i+1, msg)
		}
		if string(call.Body) != `{"x": 1}` {
			t.Errorf("callback %d body %q", i+1, call.Body)
		}
	}
	gap := calls[1].At.Sub(calls[0].Ended)
	t.Logf("retry came %s after the first attempt's answer (backoff 2s ± 20%%)", gap.Round(time.Millisecond))
	if gap < 1600*time.Millisecond {
		t.Errorf("second attempt %s after the first answer; the backoff is 2s ± 20%%", gap)
	}
	if gap > 6*time.Second {
		t.Errorf("second attempt %s after the first answer; the backoff is 2s ± 20%%", gap)
	}
	// Cancelling a terminal task changes nothing.
	resp, err := via.Client.Cancel(harness.ReqCtx(t), id)
	if err != nil || resp.Status != http.StatusOK {
		t.Fatalf("DELETE of a DEAD task: %v %v", resp, err)
	}
	if got, _ := resp.Task(); got.State != "DEAD" {
		t.Errorf("DELETE of a DEAD task turned it %s", got.State)
	}
}

// Another 4xx is a permanent failure: FAILED after one attempt.
func testPermanentFailure(t *testing.T, c *harness.Cluster, via *harness.Node) {
	id := "sem/permanent"
	harness.MustSubmit(t, via, harness.SubmitRequest{ID: id, Handler: harness.HandlerPermanent}, http.StatusCreated)
	failed := harness.WaitState(t, via, id, "FAILED")
	if failed.Attempts != 1 || !strings.Contains(failed.LastError, "400") {
		t.Errorf("FAILED with attempts %d, last_error %q; want 1 and a mention of 400", failed.Attempts, failed.LastError)
	}
	if n := len(c.Recorder.Calls(id)); n != 1 {
		t.Errorf("%d callbacks, want 1", n)
	}
}

// A callback running past the task's timeout is aborted (the executor sees
// its request cancelled) and counts as a failed attempt.
func testTimeout(t *testing.T, c *harness.Cluster, via *harness.Node) {
	id := "sem/timeout"
	harness.MustSubmit(t, via, harness.SubmitRequest{ID: id, Handler: harness.HandlerSlow, Timeout: "500ms", MaxAttempts: 1}, http.StatusCreated)
	dead := harness.WaitState(t, via, id, "DEAD")
	if dead.Attempts != 1 || !strings.Contains(strings.ToLower(dead.LastError), "timeout") {
		t.Errorf("DEAD with attempts %d, last_error %q; want 1 and a mention of timeout", dead.Attempts, dead.LastError)
	}
	calls := c.Recorder.Calls(id)
	if len(calls) != 1 {
		t.Fatalf("%d callbacks, want 1", len(calls))
	}
	call := calls[0]
	for _, msg := range harness.CheckHeaders(call, id, harness.HandlerSlow, 1, 500*time.Millisecond) {
		t.Error(msg)
	}
	if !call.Cancelled || call.Ended.IsZero() {
		t.Errorf("the executor's request was not cancelled: %+v", call)
	} else if d := call.Ended.Sub(call.At); d > 2*time.Second {
		t.Errorf("the callback was aborted %s after it started; timeout 500ms", d)
	}
}

// A waiting task cancelled with DELETE is CANCELLED on every node and never
// called back.
func testCancelWaiting(t *testing.T, c *harness.Cluster, leader, follower *harness.Node) {
	var cancelled []string
	var lastDue time.Time
	for _, tc := range []struct{ submitVia, cancelVia *harness.Node }{{leader, follower}, {follower, leader}, {follower, follower}} {
		id := fmt.Sprintf("sem/cancel/%s→%s", tc.submitVia.ID, tc.cancelVia.ID)
		task := harness.MustSubmit(t, tc.submitVia, harness.SubmitRequest{ID: id, Handler: harness.HandlerOK, Delay: "2s"}, http.StatusCreated)
		due := *task.NextRunAt
		resp, err := tc.cancelVia.Client.Cancel(harness.ReqCtx(t), id)
		if err != nil || resp.Status != http.StatusOK {
			t.Fatalf("DELETE %q via %s: %v %v", id, tc.cancelVia.ID, resp, err)
		}
		got, err := resp.Task()
		if err != nil || got.State != "CANCELLED" {
			t.Fatalf("DELETE %q: state %s (err %v), want CANCELLED", id, got.State, err)
		}
		if got.NextRunAt != nil {
			t.Errorf("CANCELLED task still has next_run_at %s", got.NextRunAt)
		}
		again, err := tc.submitVia.Client.Cancel(harness.ReqCtx(t), id)
		if err != nil || again.Status != http.StatusOK {
			t.Errorf("second DELETE %q: %v %v", id, again, err)
		} else if a, _ := again.Task(); a.State != "CANCELLED" {
			t.Errorf("second DELETE %q: state %s", id, a.State)
		}
		cancelled = append(cancelled, id)
		if due.After(lastDue) {
			lastDue = due
		}
	}
	// Wait past the latest due time + 2 s: nothing may be called back, and
	// every node reads CANCELLED.
	time.Sleep(time.Until(lastDue.Add(2 * time.Second)))
	for _, id := range cancelled {
		if calls := c.Recorder.Calls(id); len(calls) != 0 {
			t.Errorf("cancelled task %q was called back: %+v", id, calls)
		}
		for _, n := range c.Nodes {
			task, err := n.Client.GetTask(harness.ReqCtx(t), id)
			if err != nil || task.State != "CANCELLED" {
				t.Errorf("%q on %s: state %s (err %v), want CANCELLED", id, n.ID, task.State, err)
			}
		}
	}
}

// Same id + same spec → 200 and the same task; same id + different spec →
// 409 conflict, the stored task unchanged; overwrite replaces it.
func testIdempotency(t *testing.T, c *harness.Cluster, via *harness.Node, role string) {
	id := "sem/idem|" + role + "@x/ü"
	prio := 3
	a := harness.SubmitRequest{ID: id, Handler: harness.HandlerOK, Delay: "1h", Priority: &prio, Payload: []byte(`{"v": 1}`)}
	created := harness.MustSubmit(t, via, a, http.StatusCreated)

	same := harness.MustSubmit(t, via, a, http.StatusOK)
	if !sameTask(created, same) {
		t.Errorf("resubmit with the same spec: got %+v, want %+v", same, created)
	}

	b := a
	b.Payload = []byte(`{"v": 2}`)
	d := a
	d.Delay = "2h"
	p := a
	p0 := 0
	p.Priority = &p0
	for name, r := range map[string]harness.SubmitRequest{"payload": b, "delay": d, "priority": p} {
		resp, err := via.Client.Submit(harness.ReqCtx(t), r.Body())
		if err != nil {
			t.Fatal(err)
		}
		t.Run("conflict/"+name, func(t *testing.T) { harness.WantError(t, resp, http.StatusConflict, "conflict") })
	}
	stored, err := via.Client.GetTask(harness.ReqCtx(t), id)
	if err != nil {
		t.Fatal(err)
	}
	if !sameTask(created, stored) || string(stored.Payload) != `{"v": 1}` {
		t.Errorf("after conflicts the stored task changed: %+v, want %+v", stored, created)
	}

	b.Overwrite = true
	resp, err := via.Client.Submit(harness.ReqCtx(t), b.Body())
	if err != nil {
		t.Fatal(err)
	}
	if resp.Status != http.StatusOK && resp.Status != http.StatusCreated {
		t.Fatalf("overwrite: want 200 or 201, got %s", resp)
	}
	over, _ := resp.Task()
	if string(over.Payload) != `{"v": 2}` || over.State != "WAITING" {
		t.Errorf("overwrite reply: %s", resp)
	}
	for _, n := range c.Nodes {
		harness.WaitFor(t, 5*time.Second, 50*time.Millisecond, "overwritten task on "+n.ID, func() error {
			got, err := n.Client.GetTask(harness.ReqCtx(t), id)
			if err != nil {
				return err
			}
			if string(got.Payload) != `{"v": 2}` {
				return fmt.Errorf("payload %s", got.Payload)
			}
			return nil
		})
	}
	// The old spec is now the different one.
	resp, err = via.Client.Submit(harness.ReqCtx(t), a.Body())
	if err != nil {
		t.Fatal(err)
	}
	harness.WantError(t, resp, http.StatusConflict, "conflict")
	if calls := c.Recorder.Calls(id); len(calls) != 0 {
		t.Errorf("a task due in an hour was called back: %+v", calls)
	}
}

// sameTask compares the fields that identify one stored version of a task.
func sameTask(a, b harness.Task) bool {
	eqT := func(x, y *time.Time) bool { return (x == nil) == (y == nil) && (x == nil || x.Equal(*y)) }
	return a.ID == b.ID && a.Handler == b.Handler && a.State == b.State && a.Priority == b.Priority &&
		a.Attempts == b.Attempts && a.MaxAttempts == b.MaxAttempts && a.Timeout == b.Timeout && a.Delay == b.Delay &&
		eqT(a.NextRunAt, b.NextRunAt) && a.CreatedAt.Equal(b.CreatedAt) && bytes.Equal(a.Payload, b.Payload)
}

// Bad input gets the right 4xx with a JSON error, the same on a follower as
// on the leader, and the node keeps serving.
func testBadInput(t *testing.T, leader, follower *harness.Node) {
	big := make([]byte, 0, 1<<20+16)
	big = append(big, '"')
	big = append(big, bytes.Repeat([]byte("a"), 1<<20)...)
	big = append(big, '"')
	cases := []struct {
		name, method, path string
		body               []byte
		status             int
		code               string
	}{
		{"malformed json", "POST", "/v1/tasks", []byte(`{"handler": "e2e.ok",`), 400, "invalid_json"},
		{"not an object", "POST", "/v1/tasks", []byte(`[1, 2]`), 400, "invalid_json"},
		{"empty body", "POST", "/v1/tasks", []byte{}, 400, "invalid_json"},
		{"trailing data", "POST", "/v1/tasks", []byte(`{"handler": "e2e.ok"} {}`), 400, "invalid_json"},
		{"missing handler", "POST", "/v1/tasks", []byte(`{"id": "sem/bad/1"}`), 400, "bad_request"},
		{"negative delay", "POST", "/v1/tasks", []byte(`{"handler": "e2e.ok", "delay": "-1s"}`), 400, "bad_request"},
		{"bad delay", "POST", "/v1/tasks", []byte(`{"handler": "e2e.ok", "delay": "soon"}`), 400, "bad_request"},
		{"delay and run_at", "POST", "/v1/tasks", []byte(`{"handler": "e2e.ok", "delay": "1s", "run_at": "2030-01-01T00:00:00Z"}`), 400, "bad_request"},
		{"bad run_at", "POST", "/v1/tasks", []byte(`{"handler": "e2e.ok", "run_at": "tomorrow"}`), 400, "bad_request"},
		{"priority 9", "POST", "/v1/tasks", []byte(`{"handler": "e2e.ok", "priority": 9}`), 400, "bad_request"},
		{"priority -1", "POST", "/v1/tasks", []byte(`{"handler": "e2e.ok", "priority": -1}`), 400, "bad_request"},
		{"priority as string", "POST", "/v1/tasks", []byte(`{"handler": "e2e.ok", "priority": "high"}`), 400, "bad_request"},
		{"max_attempts 0", "POST", "/v1/tasks", []byte(`{"handler": "e2e.ok", "max_attempts": 0}`), 400, "bad_request"},
		{"timeout 0", "POST", "/v1/tasks", []byte(`{"handler": "e2e.ok", "timeout": "0s"}`), 400, "bad_request"},
		{"unknown field", "POST", "/v1/tasks", []byte(`{"handler": "e2e.ok", "colour": "red"}`), 400, "bad_request"},
		{"payload and payload_base64", "POST", "/v1/tasks", []byte(`{"handler": "e2e.ok", "payload": 1, "payload_base64": "AQ=="}`), 400, "bad_request"},
		{"bad base64", "POST", "/v1/tasks", []byte(`{"handler": "e2e.ok", "payload_base64": "!!!"}`), 400, "bad_request"},
		{"control character in id", "POST", "/v1/tasks", []byte(`{"id": "a\u0001b", "handler": "e2e.ok"}`), 400, "bad_request"},
		{"payload over 1 MiB", "POST", "/v1/tasks", append(append([]byte(`{"handler": "e2e.ok", "payload": `), big...), '}'), 413, "payload_too_large"},
		{"GET unknown id", "GET", harness.TaskPath("sem/no such task|ü"), nil, 404, "not_found"},
		{"DELETE unknown id", "DELETE", harness.TaskPath("sem/no such task|ü"), nil, 404, "not_found"},
		{"PUT on tasks", "PUT", "/v1/tasks", []byte(`{}`), 405, "method_not_allowed"},
		{"POST on a task", "POST", harness.TaskPath("x"), []byte(`{}`), 405, "method_not_allowed"},
		{"unknown route", "GET", "/v1/nope", nil, 404, "not_found"},
	}
	type answer struct {
		status int
		code   string
	}
	got := map[string]map[string]answer{}
	for _, n := range []*harness.Node{leader, follower} {
		role := roleOf(n, leader)
		got[role] = map[string]answer{}
		for _, tc := range cases {
			t.Run(role+"/"+tc.name, func(t *testing.T) {
				resp, err := n.Client.Do(harness.ReqCtx(t), tc.method, tc.path, tc.body)
				if err != nil {
					t.Fatal(err)
				}
				e := harness.WantError(t, resp, tc.status, tc.code)
				got[role][tc.name] = answer{resp.Status, e.Error.Code}
				if tc.status == 405 && resp.Header.Get("Allow") == "" {
					t.Errorf("405 without an Allow header")
				}
			})
		}
		// Still serving.
		resp, err := n.Client.Do(harness.ReqCtx(t), "GET", "/healthz", nil)
		if err != nil || resp.Status != http.StatusOK {
			t.Errorf("%s /healthz after bad input: %v %v", role, resp, err)
		}
		harness.MustSubmit(t, n, harness.SubmitRequest{ID: "sem/bad/after|" + role, Handler: harness.HandlerOK, Delay: "1h"}, http.StatusCreated)
	}
	for _, tc := range cases {
		if l, f := got["leader"][tc.name], got["follower"][tc.name]; l != f {
			t.Errorf("%s: leader answers %v, follower %v", tc.name, l, f)
		}
	}
}

// A task submitted through a follower can be read back from that follower
// at once, and reads the same on the leader.
func testFollowerReadsItsWrites(t *testing.T, c *harness.Cluster, leader, follower *harness.Node) {
	for i := 0; i < 30; i++ {
		id := fmt.Sprintf("sem/ryw/%02d|ü", i)
		created := harness.MustSubmit(t, follower, harness.SubmitRequest{ID: id, Handler: harness.HandlerOK, Delay: "1h", Payload: []byte(`{"i": ` + fmt.Sprint(i) + `}`)}, http.StatusCreated)
		resp, err := follower.Client.Get(harness.ReqCtx(t), id)
		if err != nil {
			t.Fatal(err)
		}
		if resp.Status != http.StatusOK {
			t.Fatalf("GET %q on follower %s right after submitting there: %s", id, follower.ID, resp)
		}
		got, _ := resp.Task()
		if !sameTask(created, got) {
			t.Errorf("GET %q on the follower: %+v, want %+v", id, got, created)
		}
		onLeader, err := leader.Client.GetTask(harness.ReqCtx(t), id)
		if err != nil {
			t.Fatalf("GET %q on the leader: %v", id, err)
		}
		if !sameTask(created, onLeader) {
			t.Errorf("GET %q on the leader: %+v, want %+v", id, onLeader, created)
		}
	}
}

// Every node describes the same cluster.
func testClusterView(t *testing.T, c *harness.Cluster, leader *harness.Node) {
	for _, n := range c.Nodes {
		info, err := n.Client.Cluster(harness.ReqCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		if info.NodeID != n.ID || info.Leader != leader.ID {
			t.Errorf("%s: node_id %q, leader %q; want %q, %q", n.ID, info.NodeID, info.Leader, n.ID, leader.ID)
		}
		wantState := "Follower"
		if n == leader {
			wantState = "Leader"
		}
		if info.State != wantState {
			t.Errorf("%s: state %q, want %q", n.ID, info.State, wantState)
		}
		if info.Term == 0 || info.AppliedIndex == 0 || info.CommitIndex == 0 {
			t.Errorf("%s: term %d, applied %d, commit %d; want all > 0", n.ID, info.Term, info.AppliedIndex, info.CommitIndex)
		}
		if len(info.Members) != len(c.Nodes) {
			t.Errorf("%s: %d members, want %d: %+v", n.ID, len(info.Members), len(c.Nodes), info.Members)
		}
		leaders := 0
		for _, m := range info.Members {
			want := c.Node(m.ID)
			if m.RaftAddr != want.RaftAddr || m.PeerAddr != want.PeerAddr || m.Suffrage != "Voter" {
				t.Errorf("%s: member %+v, want raft %s peer %s Voter", n.ID, m, want.RaftAddr, want.PeerAddr)
			}
			if m.Leader {
				leaders++
				if m.ID != leader.ID {
					t.Errorf("%s: member %s marked leader", n.ID, m.ID)
				}
			}
		}
		if leaders != 1 {
			t.Errorf("%s: %d members marked leader", n.ID, leaders)
		}
	}
}

// TestSingleNode_RestartKeepsTasks runs one node (--bootstrap-expect 1, no
// --join), restarts it with SIGTERM, and checks that a finished task and a
// waiting one survive: the waiting one fires once, not early, after the
// restart.
func TestSingleNode_RestartKeepsTasks(t *testing.T) {
	harness.SkipShort(t)
	t.Parallel()
	c := harness.NewCluster(t, harness.WithSize(1))
	c.WaitReady()
	n := c.Nodes[0]
	if l := c.Leader(); l != n {
		t.Fatalf("leader %v", l)
	}

	harness.MustSubmit(t, n, harness.SubmitRequest{ID: "single/done", Handler: harness.HandlerOK, Payload: []byte(`"now"`)}, http.StatusCreated)
	harness.WaitState(t, n, "single/done", "SUCCESS")
	later := harness.MustSubmit(t, n, harness.SubmitRequest{ID: "single/later|ü", Handler: harness.HandlerOK, Delay: "3s", PayloadBase64: "AAEC"}, http.StatusCreated)
	due := *later.NextRunAt

	if err := n.Restart(); err != nil {
		t.Fatalf("restart: %v", err)
	}
	if !strings.Contains(n.Logs(), "exited: <nil>") {
		t.Errorf("the node did not exit cleanly on SIGTERM")
	}
	c.WaitReady()
	if task, err := n.Client.GetTask(harness.ReqCtx(t), "single/done"); err != nil || task.State != "SUCCESS" {
		t.Errorf("after restart: single/done %+v (err %v), want SUCCESS", task, err)
	}
	harness.WaitState(t, n, "single/later|ü", "SUCCESS")
	calls := c.Recorder.Calls("single/later|ü")
	if len(calls) != 1 {
		t.Fatalf("%d callbacks, want 1", len(calls))
	}
	if calls[0].At.Before(due) {
		t.Errorf("callback %s early", due.Sub(calls[0].At))
	}
	if !bytes.Equal(calls[0].Body, []byte{0, 1, 2}) {
		t.Errorf("body %q", calls[0].Body)
	}
	if n := len(c.Recorder.Calls("single/done")); n != 1 {
		t.Errorf("single/done called back %d times across the restart, want 1", n)
	}
	t.Logf("lateness after restart: %s", calls[0].At.Sub(due).Round(time.Microsecond))
}

// Cancelling a running task aborts its callback request and no retry
// follows.
func testCancelRunning(t *testing.T, c *harness.Cluster, via *harness.Node) {
	id := "sem/cancel-running"
	harness.MustSubmit(t, via, harness.SubmitRequest{ID: id, Handler: harness.HandlerSlow, Timeout: "30s"}, http.StatusCreated)
	if short := c.Recorder.WaitCalls(harness.ReqCtx(t), []string{id}, 1); len(short) > 0 {
		t.Fatalf("no callback")
	}
	harness.WaitState(t, via, id, "RUNNING")
	resp, err := via.Client.Cancel(harness.ReqCtx(t), id)
	if err != nil || resp.Status != http.StatusOK {
		t.Fatalf("DELETE: %v %v", resp, err)
	}
	if task, _ := resp.Task(); task.State != "CANCELLED" {
		t.Errorf("DELETE of a running task: state %s, want CANCELLED", task.State)
	}
	cancelledAt := time.Now()
	harness.WaitFor(t, 5*time.Second, 20*time.Millisecond, "the callback request to be aborted", func() error {
		if call := c.Recorder.Calls(id)[0]; !call.Cancelled {
			return fmt.Errorf("still open")
		}
		return nil
	})
	t.Logf("callback aborted %s after the DELETE", time.Since(cancelledAt).Round(time.Millisecond))
	time.Sleep(3 * time.Second) // past a retry's backoff (2 s + 20 %)
	if calls := c.Recorder.Calls(id); len(calls) != 1 {
		t.Errorf("%d callbacks after cancelling the running task, want 1", len(calls))
	}
	if task, err := via.Client.GetTask(harness.ReqCtx(t), id); err != nil || task.State != "CANCELLED" {
		t.Errorf("after cancel: %+v (err %v)", task, err)
	}
}

// A busy answer (503 + Retry-After) snoozes the task: it is delivered again
// after Retry-After with the same attempt number, and never counts toward
// max_attempts.
func testBusy(t *testing.T, c *harness.Cluster, via *harness.Node) {
	id := "sem/busy"
	harness.MustSubmit(t, via, harness.SubmitRequest{ID: id, Handler: harness.HandlerBusy, MaxAttempts: 1}, http.StatusCreated)
	if short := c.Recorder.WaitCalls(harness.ReqCtx(t), []string{id}, 3); len(short) > 0 {
		task, _ := via.Client.GetTask(harness.ReqCtx(t), id)
		t.Fatalf("fewer than 3 callbacks in 10 s; task %+v", task)
	}
	task, err := via.Client.GetTask(harness.ReqCtx(t), id)
	if err != nil || (task.State != "WAITING" && task.State != "RUNNING") {
		t.Errorf("after 3 busy answers with max_attempts 1: %+v (err %v), want WAITING or RUNNING", task, err)
	}
	calls := c.Recorder.Calls(id)
	for i, call := range calls {
		if call.Attempt != "1" {
			t.Errorf("busy callback %d: Ax-Attempt %s, want 1", i+1, call.Attempt)
		}
		if i > 0 {
			if gap := call.At.Sub(calls[i-1].Ended); gap < time.Second {
				t.Errorf("busy callback %d came %s after the previous answer; Retry-After is 1 s", i+1, gap)
			}
		}
	}
	resp, err := via.Client.Cancel(harness.ReqCtx(t), id)
	if err != nil || resp.Status != http.StatusOK {
		t.Errorf("DELETE: %v %v", resp, err)
	}
	harness.WaitState(t, via, id, "CANCELLED")
}

// run_at is an absolute due time; the task never fires before it, even
// with sub-millisecond digits (rounded up, never down).
func testRunAt(t *testing.T, c *harness.Cluster, via *harness.Node) {
	runAt := time.Now().Add(1500 * time.Millisecond).UTC()
	runAt = runAt.Truncate(time.Millisecond).Add(999 * time.Microsecond) // x.yyy999
	id := "sem/run_at"
	task := harness.MustSubmit(t, via, harness.SubmitRequest{ID: id, Handler: harness.HandlerOK, RunAt: runAt.Format(time.RFC3339Nano)}, http.StatusCreated)
	if task.NextRunAt == nil {
		t.Fatalf("no next_run_at: %+v", task)
	}
	if task.NextRunAt.Before(runAt) {
		t.Errorf("run_at %s gives next_run_at %s, %s before the asked time (due times are rounded up, never down)",
			runAt.Format(time.RFC3339Nano), task.NextRunAt.Format(time.RFC3339Nano), runAt.Sub(*task.NextRunAt))
	}
	harness.WaitState(t, via, id, "SUCCESS")
	calls := c.Recorder.Calls(id)
	if len(calls) != 1 {
		t.Fatalf("%d callbacks", len(calls))
	}
	if calls[0].At.Before(runAt) {
		t.Errorf("callback at %s, %s before run_at", calls[0].At.Format(time.RFC3339Nano), runAt.Sub(calls[0].At))
	}
	// A run_at in the past fires at once.
	past := harness.MustSubmit(t, via, harness.SubmitRequest{ID: "sem/run_at/past", Handler: harness.HandlerOK, RunAt: "2001-02-03T04:05:06Z"}, http.StatusCreated)
	if past.RunAt == nil || !past.RunAt.Equal(time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)) {
		t.Errorf("run_at in the reply: %v", past.RunAt)
	}
	harness.WaitState(t, via, "sem/run_at/past", "SUCCESS")
}

// The same submit sent at once to every node creates one task: one 201,
// the rest 200 with the same task.
func testConcurrentSameID(t *testing.T, c *harness.Cluster) {
	id := "sem/concurrent|same@id/ü"
	r := harness.SubmitRequest{ID: id, Handler: harness.HandlerOK, Delay: "1h", Payload: []byte(`{"same": true}`)}
	type result struct {
		node string
		resp *harness.Response
		err  error
	}
	results := make(chan result, 4*len(c.Nodes))
	start := make(chan struct{})
	for _, n := range c.Nodes {
		for k := 0; k < 4; k++ {
			go func() {
				<-start
				resp, err := n.Client.Submit(harness.ReqCtx(t), r.Body())
				results <- result{n.ID, resp, err}
			}()
		}
	}
	close(start)
	created := 0
	var first *harness.Task
	for i := 0; i < 4*len(c.Nodes); i++ {
		res := <-results
		if res.err != nil {
			t.Errorf("%s: %v", res.node, res.err)
			continue
		}
		switch res.resp.Status {
		case http.StatusCreated:
			created++
		case http.StatusOK:
		default:
			t.Errorf("%s: %s", res.node, res.resp)
			continue
		}
		task, err := res.resp.Task()
		if err != nil {
			t.Error(err)
			continue
		}
		if first == nil {
			first = &task
		} else if !sameTask(*first, task) {
			t.Errorf("%s answered another task: %+v, first %+v", res.node, task, *first)
		}
	}
	if created != 1 {
		t.Errorf("%d submits answered 201, want exactly 1", created)
	}
}
