package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/axsched/ax/e2e/harness"
)

// Sizes and bounds of the firing test.
const (
	firstBatchSize  = 200
	secondBatchSize = 100
	submitWorkers   = 8
	minDelay        = 1 * time.Second
	maxDelay        = 3 * time.Second
	taskTimeout     = 10 * time.Second
	// batchTimeout bounds the wait for one batch to be called back and
	// reach SUCCESS, counted from the end of its submission.
	batchTimeout = 60 * time.Second
)

// submitted is one task of a batch: what was sent, what the callback must
// carry, and its due time from the submit response.
type submitted struct {
	id       string
	handler  string
	req      harness.SubmitRequest
	body     []byte // expected callback body
	delay    time.Duration
	sent     time.Time // just before the request
	answered time.Time // just after the reply
	due      time.Time // next_run_at of the submit response
	tries    int
}

// taskID returns the i-th id of a batch, mixing characters that need
// escaping in a URL path: '|', '@', '/', non-ASCII, space, '?', '#', '%',
// '+', ';', ','.
func taskID(batch string, i int) string {
	switch i % 6 {
	case 0:
		return fmt.Sprintf("%s-%03d", batch, i)
	case 1:
		return fmt.Sprintf("order|%s|%03d", batch, i)
	case 2:
		return fmt.Sprintf("user@example.com/%s/%03d", batch, i)
	case 3:
		return fmt.Sprintf("ключ-日本語-%s-%03d-ü", batch, i)
	case 4:
		return fmt.Sprintf("%s/a b/%03d?x=1#frag%%41+;,", batch, i)
	default:
		return fmt.Sprintf("%s/%03d/../.", batch, i)
	}
}

// makeBatch builds n submits with delays uniform in [minDelay, maxDelay]
// (sub-millisecond precision, so the due time is rounded), random
// priorities and a mix of payloads: JSON with inner white space, none,
// binary through payload_base64, non-object JSON, empty base64.
func makeBatch(rng *rand.Rand, batch string, n int) []*submitted {
	subs := make([]*submitted, n)
	for i := range subs {
		delay := minDelay + time.Duration(rng.Int64N(int64(maxDelay-minDelay)))
		prio := rng.IntN(5)
		s := &submitted{id: taskID(batch, i), handler: harness.HandlerOK, delay: delay}
		s.req = harness.SubmitRequest{ID: s.id, Handler: s.handler, Delay: delay.String(), Priority: &prio, Timeout: taskTimeout.String()}
		switch i % 5 {
		case 0:
			s.req.Payload = fmt.Appendf(nil, `{"order": %d,  "note": "ünïcode \"quoted\" <&>",`+"\n\t"+`"items": [1, 2.50, {"k": null}] }`, i)
			s.body = s.req.Payload
		case 1: // no payload
		case 2:
			b := make([]byte, 1+rng.IntN(64))
			for j := range b {
				b[j] = byte(rng.IntN(256))
			}
			b[0], b[len(b)-1] = 0x00, 0xff
			s.req.PayloadBase64 = base64.StdEncoding.EncodeToString(b)
			s.body = b
		case 3:
			s.req.Payload = fmt.Appendf(nil, `[ "s-%d" , 42, true ]`, i)
			s.body = s.req.Payload
		case 4:
			s.req.SendEmptyBase64 = true // an empty binary payload: no body
		}
		subs[i] = s
	}
	return subs
}

// submitBatch submits every task through client with submitWorkers
// goroutines, retrying 503s until ctx ends, and checks each reply (201, the
// task as sent, WAITING, next_run_at = accept time + delay).
func submitBatch(t *testing.T, ctx context.Context, client *harness.Client, subs []*submitted) {
	t.Helper()
	work := make(chan *submitted)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []string
	fail := func(format string, args ...any) {
		mu.Lock()
		errs = append(errs, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	for w := 0; w < submitWorkers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for s := range work {
				s.sent = time.Now()
				resp, tries, err := client.SubmitRetry(ctx, s.req.Body())
				s.answered, s.tries = time.Now(), tries
				if err != nil {
					fail("submit %q: %v", s.id, err)
					continue
				}
				// A retry after an answer that was lost may find the task
				// created by the first try: 200 with the same task.
				if resp.Status != http.StatusCreated && !(tries > 1 && resp.Status == http.StatusOK) {
					fail("submit %q: want 201, got %s", s.id, resp)
					continue
				}
				task, err := resp.Task()
				if err != nil {
					fail("%v", err)
					continue
				}
				// A resent submit answered 200 shows the task as it is now:
				// it may have fired since the first try created it (CI: a
				// try whose answer was lost in a leader kill, resent 2 s
				// later, found its task RUNNING or SUCCESS).
				resent := tries > 1 && resp.Status == http.StatusOK
				if msg := checkSubmitted(s, task, resent); msg != "" {
					fail("submit %q: %s; reply %s", s.id, msg, resp)
					continue
				}
				if task.NextRunAt != nil {
					s.due = *task.NextRunAt
				} else {
					// Fired already: due at its creation plus the delay,
					// rounded up to the millisecond (as the leader does).
					s.due = task.CreatedAt.Add(s.delay + time.Millisecond - 1).Truncate(time.Millisecond)
				}
			}
		}()
	}
	for _, s := range subs {
		work <- s
	}
	close(work)
	wg.Wait()
	for _, e := range errs {
		t.Error(e)
	}
	if len(errs) > 0 {
		t.FailNow()
	}
}

// checkSubmitted checks a submit reply against the request. A resent
// submit's 200 reply may show the task past WAITING (fired, or done).
func checkSubmitted(s *submitted, task harness.Task, resent bool) string {
	var problems []string
	if task.ID != s.id {
		problems = append(problems, fmt.Sprintf("id %q", task.ID))
	}
	if task.Handler != s.handler {
		problems = append(problems, fmt.Sprintf("handler %q", task.Handler))
	}
	if p, err := task.PayloadBytes(); err != nil || !bytes.Equal(p, s.body) {
		problems = append(problems, fmt.Sprintf("payload %q (err %v), want %q", p, err, s.body))
	}
	if resent && task.State != "WAITING" {
		if task.MaxAttempts != 4 || task.Attempts > 4 {
			problems = append(problems, fmt.Sprintf("attempts %d/%d, want at most 4/4", task.Attempts, task.MaxAttempts))
		}
		if d, err := time.ParseDuration(task.Delay); err != nil || d.Round(time.Millisecond) != s.delay.Round(time.Millisecond) {
			problems = append(problems, fmt.Sprintf("delay %q, want %s", task.Delay, s.delay))
		}
		return strings.Join(problems, "; ")
	}
	if task.State != "WAITING" {
		problems = append(problems, fmt.Sprintf("state %s, want WAITING", task.State))
	}
	if task.Attempts != 0 || task.MaxAttempts != 4 {
		problems = append(problems, fmt.Sprintf("attempts %d/%d, want 0/4", task.Attempts, task.MaxAttempts))
	}
	if task.NextRunAt == nil {
		problems = append(problems, "no next_run_at")
	} else {
		due := *task.NextRunAt
		// The leader accepts the submit between sent and answered; the due
		// time is that plus the delay, rounded up to the millisecond.
		lo := s.sent.Add(s.delay).Truncate(time.Millisecond)
		hi := s.answered.Add(s.delay).Add(time.Millisecond)
		if due.Before(lo) || due.After(hi) {
			problems = append(problems, fmt.Sprintf("next_run_at %s outside [sent+delay, answered+delay] = [%s, %s]",
				due.Format(time.RFC3339Nano), lo.Format(time.RFC3339Nano), hi.Format(time.RFC3339Nano)))
		}
		if !due.Equal(due.Truncate(time.Millisecond)) {
			problems = append(problems, "next_run_at has sub-millisecond digits")
		}
	}
	return strings.Join(problems, "; ")
}

// waitBatch waits until every task of the batch has been called back and
// reads SUCCESS through client.
func waitBatch(t *testing.T, c *harness.Cluster, client *harness.Client, subs []*submitted) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), batchTimeout)
	defer cancel()
	ids := make([]string, len(subs))
	for i, s := range subs {
		ids[i] = s.id
	}
	if short := c.Recorder.WaitCalls(ctx, ids, 1); len(short) > 0 {
		for _, id := range short[:min(len(short), 10)] {
			task, err := client.GetTask(context.Background(), id)
			t.Errorf("task %q: no callback after %s; task %+v (err %v)", id, batchTimeout, task, err)
		}
		t.Fatalf("%d of %d tasks were never called back", len(short), len(subs))
	}
	pending := ids
	for len(pending) > 0 {
		var still []string
		for _, id := range pending {
			rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
			task, err := client.GetTask(rctx, id)
			rcancel()
			if err != nil || task.State != "SUCCESS" {
				still = append(still, id)
				if task.State == "DEAD" || task.State == "FAILED" || task.State == "CANCELLED" {
					t.Fatalf("task %q ended %s: %+v", id, task.State, task)
				}
			}
		}
		pending = still
		if len(pending) == 0 {
			break
		}
		if ctx.Err() != nil {
			task, err := client.GetTask(context.Background(), pending[0])
			t.Fatalf("%d tasks not SUCCESS after %s, e.g. %q: %+v (err %v)", len(pending), batchTimeout, pending[0], task, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// checkCallbacks checks the callbacks of a batch: at least one each (exactly
// one when exactlyOnce), never before the due time, the payload byte for
// byte, the headers. It returns the lateness of each task's first callback.
func checkCallbacks(t *testing.T, rec *harness.Recorder, subs []*submitted, exactlyOnce bool) []time.Duration {
	t.Helper()
	var lateness []time.Duration
	dups := 0
	for _, s := range subs {
		calls := rec.Calls(s.id)
		if len(calls) == 0 {
			t.Errorf("task %q: no callback", s.id)
			continue
		}
		if len(calls) > 1 {
			dups++
			var desc []string
			for _, c := range calls {
				desc = append(desc, fmt.Sprintf("node %s attempt %s at %s", c.Node, c.Attempt, c.At.Format(time.RFC3339Nano)))
			}
			if exactlyOnce {
				t.Errorf("task %q: called back %d times, want once: %s", s.id, len(calls), strings.Join(desc, "; "))
			} else {
				t.Logf("task %q: called back %d times (at-least-once allows it): %s", s.id, len(calls), strings.Join(desc, "; "))
			}
		}
		for i, c := range calls {
			if c.At.Before(s.due) {
				t.Errorf("task %q: callback %d at %s is %s EARLY (due %s)", s.id, i+1,
					c.At.Format(time.RFC3339Nano), s.due.Sub(c.At), s.due.Format(time.RFC3339Nano))
			}
			if !bytes.Equal(c.Body, s.body) {
				t.Errorf("task %q: callback body %q, want %q", s.id, c.Body, s.body)
			}
			for _, msg := range harness.CheckHeaders(c, s.id, s.handler, i+1, taskTimeout) {
				t.Errorf("task %q: callback %d: %s", s.id, i+1, msg)
			}
		}
		lateness = append(lateness, calls[0].At.Sub(s.due))
	}
	if dups > 0 && !exactlyOnce {
		t.Logf("%d of %d tasks were called back more than once", dups, len(subs))
	}
	return lateness
}

// latencyReport is what AX_E2E_LATENCY_OUT receives (JSON).
type latencyReport struct {
	Test               string           `json:"test"`
	FirstBatch         harness.Latency  `json:"first_batch"`
	AfterFailover      *harness.Latency `json:"after_failover,omitempty"`
	ElectionMs         float64          `json:"kill_to_new_leader_ms,omitempty"`
	FirstSubmitMs      float64          `json:"kill_to_first_accepted_submit_ms,omitempty"`
	FailoverGapMs      float64          `json:"kill_to_first_callback_ms,omitempty"`
	CallbacksPerNode   []string         `json:"callbacks_per_node,omitempty"`
	SecondBatchSubmits string           `json:"second_batch_submitted_via,omitempty"`
}

func writeLatency(t *testing.T, r latencyReport) {
	path := os.Getenv("AX_E2E_LATENCY_OUT")
	if path == "" {
		return
	}
	b, _ := json.MarshalIndent(r, "", "  ")
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		t.Errorf("AX_E2E_LATENCY_OUT: %v", err)
	}
}

// TestCluster_ThreeNodes_FireOnceAndSurviveLeaderKill submits 200 delayed
// tasks through a follower of a three-node cluster, checks that each is
// called back exactly once, never early, with its payload and headers, and
// measures lateness; then it kills the leader with SIGKILL and checks that
// 100 more tasks submitted through a survivor are all delivered.
func TestCluster_ThreeNodes_FireOnceAndSurviveLeaderKill(t *testing.T) {
	harness.SkipShort(t)
	c := harness.NewCluster(t, harness.WithSize(3))
	c.WaitReady()
	follower := c.Followers()[0]
	t.Logf("leader %s; submitting through follower %s", c.Leader().ID, follower.ID)

	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	report := latencyReport{Test: t.Name()}

	// First batch.
	first := makeBatch(rng, "b1", firstBatchSize)
	ctx, cancel := context.WithTimeout(context.Background(), batchTimeout)
	defer cancel()
	start := time.Now()
	submitBatch(t, ctx, follower.Client, first)
	t.Logf("submitted %d tasks through %s in %s", len(first), follower.ID, time.Since(start).Round(time.Millisecond))
	waitBatch(t, c, follower.Client, first)
	late1 := checkCallbacks(t, c.Recorder, first, true)
	report.FirstBatch = harness.Summarize(late1)
	report.CallbacksPerNode = harness.CallsPerNode(c.Recorder)
	t.Logf("lateness, first batch (%d tasks): %s", len(first), report.FirstBatch)
	t.Logf("callbacks per node: %v", report.CallbacksPerNode)
	writeLatency(t, report)
	if t.Failed() {
		t.FailNow()
	}

	// Kill the leader.
	old := c.Leader()
	killAt := time.Now()
	if err := old.Kill(); err != nil {
		t.Fatalf("kill %s: %v", old.ID, err)
	}
	newLeader := c.WaitForNewLeader(old)
	elected := time.Since(killAt)
	report.ElectionMs = harness.Millis(elected)
	t.Logf("killed leader %s; new leader %s after %s", old.ID, newLeader.ID, elected.Round(time.Millisecond))

	// Second batch, through a survivor (a follower of the new leader, so
	// forwarding is exercised again).
	via := newLeader
	for _, n := range c.Running() {
		if n != newLeader {
			via = n
		}
	}
	report.SecondBatchSubmits = via.ID
	second := makeBatch(rng, "b2", secondBatchSize)
	ctx2, cancel2 := context.WithTimeout(context.Background(), batchTimeout)
	defer cancel2()
	start = time.Now()
	submitBatch(t, ctx2, via.Client, second)
	firstAccepted := second[0].answered
	retried := 0
	for _, s := range second {
		if s.answered.Before(firstAccepted) {
			firstAccepted = s.answered
		}
		if s.tries > 1 {
			retried++
		}
	}
	report.FirstSubmitMs = harness.Millis(firstAccepted.Sub(killAt))
	t.Logf("submitted %d tasks through %s in %s (%d needed retries); first accepted %s after the kill",
		len(second), via.ID, time.Since(start).Round(time.Millisecond), retried, firstAccepted.Sub(killAt).Round(time.Millisecond))
	waitBatch(t, c, via.Client, second)
	late2 := checkCallbacks(t, c.Recorder, second, true)
	after := harness.Summarize(late2)
	report.AfterFailover = &after

	var firstCallback time.Time
	for _, call := range c.Recorder.All() {
		if call.At.After(killAt) && (firstCallback.IsZero() || call.At.Before(firstCallback)) {
			firstCallback = call.At
		}
	}
	report.FailoverGapMs = harness.Millis(firstCallback.Sub(killAt))
	report.CallbacksPerNode = harness.CallsPerNode(c.Recorder)
	t.Logf("lateness, after failover (%d tasks): %s", len(second), after)
	t.Logf("failover: kill → new leader %s, kill → first accepted submit %s, kill → first callback %s (includes the 1–3 s delays)",
		elected.Round(time.Millisecond), firstAccepted.Sub(killAt).Round(time.Millisecond), firstCallback.Sub(killAt).Round(time.Millisecond))
	t.Logf("callbacks per node: %v", report.CallbacksPerNode)
	for _, call := range c.Recorder.All() {
		if call.Node == old.ID && call.At.After(killAt) {
			t.Errorf("the killed node's executor got a callback after the kill: %+v", call)
		}
	}

	// The first batch was done before the kill: the new leader must not
	// deliver any of it again.
	for _, s := range first {
		if n := len(c.Recorder.Calls(s.id)); n != 1 {
			t.Errorf("task %q of the first batch: %d callbacks after the failover, want 1", s.id, n)
		}
	}
	writeLatency(t, report)
}

// TestCluster_LeaderKill_PendingAndRunningTasks kills the leader while
// tasks are waiting (due during and after the election) and while attempts
// are running on every node. The new leader must fire every waiting task
// once and never early; attempts that were running on the dead node must be
// retried once their lease (timeout + grace) expires; attempts running on
// the survivors must complete without a second delivery. Then the killed
// node is restarted with its data and must rejoin and catch up by itself.
func TestCluster_LeaderKill_PendingAndRunningTasks(t *testing.T) {
	harness.SkipShort(t)
	c := harness.NewCluster(t, harness.WithSize(3))
	c.WaitReady()
	old := c.Leader()
	follower := c.Followers()[0]
	ctx, cancel := context.WithTimeout(context.Background(), batchTimeout)
	defer cancel()

	// Attempts in flight on every node: the executor holds them.
	const holdTimeout = 3 * time.Second
	var held []*submitted
	for i := 0; i < 6; i++ {
		s := &submitted{id: fmt.Sprintf("hold/%d|ü", i), handler: harness.HandlerHold}
		s.req = harness.SubmitRequest{ID: s.id, Handler: harness.HandlerHold, Timeout: holdTimeout.String(), MaxAttempts: 3}
		held = append(held, s)
	}
	for _, s := range held {
		resp, _, err := follower.Client.SubmitRetry(ctx, s.req.Body())
		if err != nil || resp.Status != http.StatusCreated {
			t.Fatalf("submit %q: %v %v", s.id, resp, err)
		}
	}
	heldIDs := make([]string, len(held))
	for i, s := range held {
		heldIDs[i] = s.id
	}
	if short := c.Recorder.WaitCalls(ctx, heldIDs, 1); len(short) > 0 {
		t.Fatalf("held tasks never called back: %q", short)
	}
	onOld := map[string]bool{}
	for _, s := range held {
		if c.Recorder.Calls(s.id)[0].Node == old.ID {
			onOld[s.id] = true
		}
	}
	t.Logf("%d of %d held attempts run on the leader %s", len(onOld), len(held), old.ID)

	// Waiting tasks, due 1.5–3.5 s from now: some during the election.
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 2))
	pending := makeBatch(rng, "pending", 60)
	for _, s := range pending {
		s.delay = 1500*time.Millisecond + time.Duration(rng.Int64N(int64(2*time.Second)))
		s.req.Delay = s.delay.String()
	}
	submitBatch(t, ctx, follower.Client, pending)

	killAt := time.Now()
	if err := old.Kill(); err != nil {
		t.Fatal(err)
	}
	// The dead node's callbacks are cut when its connections close; only
	// then let the survivors' held callbacks answer.
	harness.WaitFor(t, 5*time.Second, 10*time.Millisecond, "the killed node's callbacks to be cut", func() error {
		for id := range onOld {
			if call := c.Recorder.Calls(id)[0]; !call.Cancelled {
				return fmt.Errorf("callback of %q still open", id)
			}
		}
		return nil
	})
	t.Logf("the killed node's callbacks were cut %s after the kill", time.Since(killAt).Round(time.Millisecond))
	c.Recorder.ReleaseHold()
	newLeader := c.WaitForNewLeader(old)
	t.Logf("killed leader %s; new leader %s after %s", old.ID, newLeader.ID, time.Since(killAt).Round(time.Millisecond))
	for _, s := range pending {
		if s.due.Before(killAt) {
			t.Fatalf("task %q was due before the kill; the test is too slow", s.id)
		}
	}

	waitBatch(t, c, follower.Client, pending)
	late := harness.Summarize(checkCallbacks(t, c.Recorder, pending, true))
	t.Logf("lateness of tasks waiting across the kill (%d tasks): %s", len(pending), late)
	if os.Getenv("AX_E2E_VERBOSE") != "" {
		sort.Slice(pending, func(i, j int) bool { return pending[i].due.Before(pending[j].due) })
		for _, s := range pending {
			call := c.Recorder.Calls(s.id)[0]
			t.Logf("  due kill+%s  late %s  on %s", s.due.Sub(killAt).Round(time.Millisecond), call.At.Sub(s.due).Round(time.Millisecond), call.Node)
		}
	}

	// Held attempts.
	for _, s := range held {
		task := harness.WaitState(t, follower, s.id, "SUCCESS")
		calls := c.Recorder.Calls(s.id)
		if !onOld[s.id] {
			if len(calls) != 1 || task.Attempts != 1 {
				t.Errorf("task %q ran on survivor %s: %d callbacks, attempts %d; want 1 and 1", s.id, calls[0].Node, len(calls), task.Attempts)
			}
			continue
		}
		if len(calls) != 2 || task.Attempts != 2 {
			t.Errorf("task %q ran on the killed node: %d callbacks, attempts %d; want 2 and 2", s.id, len(calls), task.Attempts)
			continue
		}
		if calls[1].Attempt != "2" || calls[1].Node == old.ID {
			t.Errorf("task %q: second callback attempt %s on %s", s.id, calls[1].Attempt, calls[1].Node)
		}
		// The lease is timeout + 5 s grace from the fire; then the retry backoff.
		if gap := calls[1].At.Sub(calls[0].At); gap < holdTimeout {
			t.Errorf("task %q: retried %s after the first attempt, before its timeout %s", s.id, gap, holdTimeout)
		} else {
			t.Logf("task %q: retried on %s %s after the attempt on the killed node", s.id, calls[1].Node, gap.Round(time.Millisecond))
		}
	}

	// The killed node comes back with its data and catches up. Everything
	// committed before it restarts must be applied on it once it says ready.
	before, err := newLeader.Client.Cluster(harness.ReqCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := old.Start(); err != nil {
		t.Fatal(err)
	}
	harness.WaitFor(t, harness.ReadyTimeout, 5*time.Millisecond, "restarted "+old.ID+" ready", func() error {
		resp, err := old.Client.Do(harness.ReqCtx(t), "GET", "/readyz", nil)
		if err == nil && resp.Status != http.StatusOK {
			err = fmt.Errorf("%s", resp)
		}
		return err
	})
	if info, err := old.Client.Cluster(harness.ReqCtx(t)); err != nil {
		t.Error(err)
	} else if info.AppliedIndex < before.CommitIndex {
		t.Errorf("restarted %s says ready with applied_index %d (commit_index %d), but the leader had committed %d before it restarted",
			old.ID, info.AppliedIndex, info.CommitIndex, before.CommitIndex)
	}
	c.WaitReady()
	if l := c.Leader(); l == old {
		t.Logf("note: the restarted node %s leads again", old.ID)
	}
	readyAt := time.Now()
	callsBefore := len(c.Recorder.All())
	// Ready means caught up: every task reads SUCCESS on the restarted node.
	all := append(append([]*submitted(nil), pending...), held...)
	var stale []string
	for _, s := range all {
		// (checked right away: ready means caught up)
		task, err := old.Client.GetTask(harness.ReqCtx(t), s.id)
		if err != nil || task.State != "SUCCESS" {
			stale = append(stale, fmt.Sprintf("%q %s (err %v)", s.id, task.State, err))
		}
	}
	if len(stale) > 0 {
		t.Errorf("restarted %s answers /readyz 200 but reads %d of %d tasks stale, e.g. %s", old.ID, len(stale), len(all), stale[0])
		info, _ := old.Client.Cluster(harness.ReqCtx(t))
		t.Logf("restarted %s right after ready: %+v", old.ID, info)
		harness.WaitFor(t, 20*time.Second, 50*time.Millisecond, "restarted node to catch up", func() error {
			for _, s := range all {
				task, err := old.Client.GetTask(harness.ReqCtx(t), s.id)
				if err != nil || task.State != "SUCCESS" {
					return fmt.Errorf("%q %s (err %v)", s.id, task.State, err)
				}
			}
			return nil
		})
		t.Logf("restarted %s caught up %s after it said ready", old.ID, time.Since(readyAt).Round(time.Millisecond))
	}
	info, err := old.Client.Cluster(harness.ReqCtx(t))
	if err != nil || len(info.Members) != 3 {
		t.Errorf("restarted %s: cluster %+v (err %v)", old.ID, info, err)
	}
	if after := len(c.Recorder.All()); after != callsBefore {
		t.Errorf("%d callbacks after the old leader came back; its tasks were all done", after-callsBefore)
	}
}

// TestCluster_BusyAnswerAcrossLeaderChange: the leader runs an attempt on
// its own executor, which answers busy (503, Retry-After: 1) just as the
// leader loses its quorum. The outcome report cannot commit; the node
// retries it with the next leader. The task must be snoozed by about
// Retry-After and delivered again, as with any busy answer.
//
// The followers are killed (SIGKILL: a paused process would still receive
// the entry from its socket buffer when it resumes) so that the old
// leader's entry cannot commit; they are restarted while the old leader is
// paused (SIGSTOP), so that the new leader is one of them and the old
// leader's uncommitted entry is dropped.
func TestCluster_BusyAnswerAcrossLeaderChange(t *testing.T) {
	harness.SkipShort(t)
	c := harness.NewCluster(t, harness.WithSize(3))
	c.WaitReady()
	leader := c.Leader()
	followers := c.Followers()
	ctx, cancel := context.WithTimeout(context.Background(), batchTimeout)
	defer cancel()

	id := "busy/leader-change"
	harness.MustSubmit(t, leader, harness.SubmitRequest{ID: id, Handler: harness.HandlerGate, MaxAttempts: 2}, http.StatusCreated)

	// Answer busy until an attempt runs on the leader's own executor.
	var onLeader harness.GatedCall
	for onLeader.Reply == nil {
		select {
		case g := <-c.Recorder.Gated():
			if g.Call.Node == leader.ID {
				onLeader = g
			} else {
				g.Reply <- http.StatusServiceUnavailable
			}
		case <-ctx.Done():
			t.Fatal("no attempt on the leader's executor")
		}
	}

	for _, f := range followers {
		if err := f.Kill(); err != nil {
			t.Fatal(err)
		}
	}
	onLeader.Reply <- http.StatusServiceUnavailable
	harness.WaitFor(t, 10*time.Second, 20*time.Millisecond, "the isolated leader to step down", func() error {
		info, err := leader.Client.Cluster(harness.ReqCtx(t))
		if err == nil && info.State == "Leader" {
			err = fmt.Errorf("still Leader")
		}
		return err
	})
	if err := leader.Pause(); err != nil {
		t.Fatal(err)
	}
	for _, f := range followers {
		if err := f.Start(); err != nil {
			t.Fatal(err)
		}
	}
	var newLeader *harness.Node
	harness.WaitFor(t, harness.LeaderTimeout, harness.PollInterval, "a new leader among the followers", func() error {
		if newLeader = c.LeaderOf(followers); newLeader == nil {
			return fmt.Errorf("none yet")
		}
		return nil
	})
	if err := leader.Resume(); err != nil {
		t.Fatal(err)
	}
	t.Logf("old leader %s, new leader %s", leader.ID, newLeader.ID)

	// The busy answer snoozes the task by about Retry-After (1 s): the next
	// attempt comes within seconds.
	deadline := time.After(10 * time.Second)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case g := <-c.Recorder.Gated():
			g.Reply <- http.StatusOK
			t.Logf("delivered again on %s %s after the busy answer", g.Call.Node, g.Call.At.Sub(onLeader.Call.At).Round(time.Millisecond))
			harness.WaitState(t, newLeader, id, "SUCCESS")
			return
		case <-tick.C:
			task, err := newLeader.Client.GetTask(harness.ReqCtx(t), id)
			if err == nil && task.NextRunAt != nil && time.Until(*task.NextRunAt) > time.Minute {
				t.Fatalf("after a busy answer with Retry-After: 1 the task is snoozed until %s (in %s); state %s, attempts %d",
					task.NextRunAt.Format(time.RFC3339Nano), time.Until(*task.NextRunAt).Round(time.Hour), task.State, task.Attempts)
			}
		case <-deadline:
			task, err := newLeader.Client.GetTask(harness.ReqCtx(t), id)
			t.Fatalf("not delivered again within 10 s of a busy answer with Retry-After: 1; task %+v (err %v)", task, err)
		}
	}
}
