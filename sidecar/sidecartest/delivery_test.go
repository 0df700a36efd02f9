package sidecartest_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/axsched/ax/engine"
	"github.com/axsched/ax/ipc"
	"github.com/axsched/ax/sidecar/sidecartest"
)

var ctx = context.Background()

// noJitter is a backoff whose due times the test can compute: 2 s, 4 s,
// 8 s, ...
var noJitter = &engine.Backoff{Initial: 2 * time.Second, Max: time.Minute, Multiplier: 2, Jitter: 0}

// due returns a task's next run time; it fails the test without one.
func due(t *testing.T, tk ipc.Task) time.Time {
	t.Helper()
	if tk.NextRunAt == nil {
		t.Fatalf("task %s has no next_run_at: %+v", tk.ID, tk)
	}
	return *tk.NextRunAt
}

// A delayed task fires only once the clock has passed its due time: a
// task due earlier has been called back while it has not, and its own
// callback arrives at (fake) time >= its due time.
func TestDelayedTaskFiresOnlyAfterItsDueTime(t *testing.T) {
	c := sidecartest.New(t, sidecartest.Options{})
	s := sidecartest.Spec("late", "h")
	s.Delay = time.Minute
	late := c.Submit(0, s)
	s = sidecartest.Spec("early", "h")
	s.Delay = 5 * time.Second
	c.Submit(0, s)

	c.Advance(30 * time.Second)
	c.WaitState(0, "early", "SUCCESS")
	if calls := c.CallsFor("late"); len(calls) != 0 {
		t.Fatalf("task due at +1m called back at +30s: %+v", calls)
	}
	if tk, _ := c.Task(0, "late"); tk.State != "WAITING" || tk.Attempts != 0 {
		t.Fatalf("task due at +1m at +30s: %+v, want WAITING with no attempt", tk)
	}
	c.AdvanceTo(due(t, late))
	calls := c.WaitCalls("late", 1)
	if at, d := calls[0].At, due(t, late); at.Before(d) {
		t.Errorf("callback at %v, before the due time %v", at, d)
	}
	c.WaitState(0, "late", "SUCCESS")
}

// run_at is an absolute due time, rounded up to the millisecond, never
// down; the callback never comes before it.
func TestRunAtNeverEarly(t *testing.T) {
	c := sidecartest.New(t, sidecartest.Options{})
	runAt := c.Now().Add(3 * time.Second).Add(999 * time.Microsecond)
	s := sidecartest.Spec("at", "h")
	s.RunAt = runAt
	tk := c.Submit(0, s)
	if due(t, tk).Before(runAt) {
		t.Errorf("run_at %v gives next_run_at %v: rounded down", runAt, due(t, tk))
	}
	c.Advance(3 * time.Second) // 999µs short
	c.Advance(time.Millisecond)
	calls := c.WaitCalls("at", 1)
	if calls[0].At.Before(runAt) {
		t.Errorf("callback at %v, before run_at %v", calls[0].At, runAt)
	}
}

// A waiting task cancelled before its due time is CANCELLED (on every
// node) and never called back, and cancelling again changes nothing.
func TestCancelBeforeDueNoCallback(t *testing.T) {
	c := sidecartest.New(t, sidecartest.Options{Nodes: 3})
	l := c.WaitLeader()
	f := c.Follower()
	for via, id := range map[int]string{l: "via-leader", f: "via-follower"} {
		s := sidecartest.Spec(id, "h")
		s.Delay = 10 * time.Second
		c.Submit(via, s)
		var tk, again ipc.Task
		var err, err2 error
		c.Do(func() {
			tk, err = c.API(via).Cancel(ctx, id)
			again, err2 = c.API(via).Cancel(ctx, id)
		})
		if err != nil || tk.State != "CANCELLED" || tk.NextRunAt != nil {
			t.Fatalf("cancel %s: %+v %v", id, tk, err)
		}
		if err2 != nil || again.State != "CANCELLED" {
			t.Fatalf("second cancel %s: %+v %v", id, again, err2)
		}
	}
	s := sidecartest.Spec("sentinel", "h")
	s.Delay = 20 * time.Second
	c.Submit(l, s)
	c.Advance(30 * time.Second)
	c.WaitState(l, "sentinel", "SUCCESS")
	for _, id := range []string{"via-leader", "via-follower"} {
		if calls := c.CallsFor(id); len(calls) != 0 {
			t.Errorf("cancelled %s was called back: %+v", id, calls)
		}
		for i := range c.Nodes() {
			c.WaitState(i, id, "CANCELLED")
		}
	}
}

// A 500 is a failed attempt: the task waits for its backoff (2 s after
// the first answer, then 4 s), each retry comes no earlier than its due
// time and carries the next Ax-Attempt; after max_attempts it is DEAD
// with the error kept, no next run, and a cancel leaves it DEAD.
func TestRetryWithBackoffThenDead(t *testing.T) {
	c := sidecartest.New(t, sidecartest.Options{})
	c.Respond(func(sidecartest.Call) sidecartest.Reply { return sidecartest.Reply{Status: 500} })
	s := sidecartest.Spec("r", "h")
	s.MaxAttempts, s.Backoff, s.Payload = 3, noJitter, []byte(`{"x": 1}`)
	c.Submit(0, s)
	c.WaitCalls("r", 1)
	for _, step := range []struct {
		attempt int
		backoff time.Duration
	}{{2, 2 * time.Second}, {3, 4 * time.Second}} {
		tk := c.WaitTask(0, "r", "waiting for a retry", func(tk ipc.Task) bool {
			return tk.State == "WAITING" && tk.Attempts == step.attempt-1 && tk.NextRunAt != nil
		})
		if !strings.Contains(tk.LastError, "500") {
			t.Errorf("after attempt %d: last_error %q", step.attempt-1, tk.LastError)
		}
		prev := c.CallsFor("r")[step.attempt-2].At
		if d := due(t, tk).Sub(prev); d < step.backoff || d > step.backoff+time.Second {
			t.Errorf("retry %d due %v after the previous call, want the backoff %v", step.attempt, d, step.backoff)
		}
		c.AdvanceTo(due(t, tk))
		calls := c.WaitCalls("r", step.attempt)
		if got := calls[step.attempt-1]; got.Attempt != step.attempt || got.At.Before(due(t, tk)) || string(got.Payload) != `{"x": 1}` {
			t.Errorf("retry call %+v, want attempt %d at or after %v with the payload", got, step.attempt, due(t, tk))
		}
	}
	dead := c.WaitState(0, "r", "DEAD")
	if dead.Attempts != 3 || !strings.Contains(dead.LastError, "500") || dead.FinishedAt == nil || dead.NextRunAt != nil {
		t.Errorf("DEAD task %+v: want 3 attempts, the 500 kept, finished, no next run", dead)
	}
	if tk, err := c.API(0).Cancel(ctx, "r"); err != nil || tk.State != "DEAD" {
		t.Errorf("cancel of a DEAD task: %+v %v", tk, err)
	}
	if n := len(c.CallsFor("r")); n != 3 {
		t.Errorf("%d callbacks, want 3", n)
	}
}

// Another 4xx is a permanent failure: FAILED after one attempt, with the
// status in last_error, and no retry however far the clock moves.
func TestClientErrorIsFailedAfterOneAttempt(t *testing.T) {
	c := sidecartest.New(t, sidecartest.Options{})
	c.Respond(func(sidecartest.Call) sidecartest.Reply { return sidecartest.Reply{Status: 400} })
	c.Submit(0, sidecartest.Spec("p", "h"))
	failed := c.WaitState(0, "p", "FAILED")
	if failed.Attempts != 1 || !strings.Contains(failed.LastError, "400") {
		t.Errorf("FAILED %+v: want 1 attempt and the 400 in last_error", failed)
	}
	c.Respond(nil)
	c.Advance(time.Hour)
	c.Submit(0, sidecartest.Spec("sentinel", "h"))
	c.WaitState(0, "sentinel", "SUCCESS")
	if n := len(c.CallsFor("p")); n != 1 {
		t.Errorf("%d callbacks, want 1", n)
	}
}

// A busy answer (429 with Retry-After) is a snooze, not a failed attempt:
// with max_attempts 1 the task is retried after Retry-After with the
// same Ax-Attempt, its snoozes counted, and then succeeds.
func TestBusyIsASnoozeNotAnAttempt(t *testing.T) {
	c := sidecartest.New(t, sidecartest.Options{})
	c.Respond(func(call sidecartest.Call) sidecartest.Reply {
		if len(c.CallsFor(call.TaskID)) <= 2 {
			return sidecartest.Reply{Status: 429, RetryAfter: "5"}
		}
		return sidecartest.Reply{}
	})
	s := sidecartest.Spec("busy", "h")
	s.MaxAttempts = 1
	c.Submit(0, s)
	for n := 1; n <= 2; n++ {
		c.WaitCalls("busy", n)
		tk := c.WaitTask(0, "busy", "snoozed", func(tk ipc.Task) bool { return tk.State == "WAITING" && tk.Snoozes == n })
		prev := c.CallsFor("busy")[n-1].At
		if d := due(t, tk).Sub(prev); d < 5*time.Second {
			t.Errorf("snooze %d: next run %v after the busy answer, want >= Retry-After 5s", n, d)
		}
		c.AdvanceTo(due(t, tk))
	}
	tk := c.WaitState(0, "busy", "SUCCESS")
	if tk.Snoozes != 2 {
		t.Errorf("snoozes %d, want 2", tk.Snoozes)
	}
	for i, call := range c.CallsFor("busy") {
		if call.Attempt != 1 {
			t.Errorf("callback %d: Ax-Attempt %d, want 1 (busy answers are not attempts)", i+1, call.Attempt)
		}
	}
}

// A task whose handler has no executor anywhere waits with the waiting
// reason no_executor, and is delivered once an executor for it exists.
func TestNoExecutorWaitingReason(t *testing.T) {
	c := sidecartest.New(t, sidecartest.Options{Handlers: []string{"served"}})
	c.Submit(0, sidecartest.Spec("orphan", "unserved"))
	c.Advance(time.Second)
	tk := c.WaitTask(0, "orphan", "waiting reason no_executor", func(tk ipc.Task) bool { return tk.WaitingReason == "no_executor" })
	if tk.State != "WAITING" || tk.Attempts != 0 {
		t.Errorf("task without an executor: %+v, want WAITING with no attempt", tk)
	}
	if _, _, err := c.API(0).RegisterExecutor(ctx, ipc.ExecutorSpec{Name: "late", Handlers: []string{"unserved"}, URL: c.Executor(0).URL()}); err != nil {
		t.Fatal(err)
	}
	c.Advance(time.Second)
	c.WaitState(0, "orphan", "SUCCESS")
}
