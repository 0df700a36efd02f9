package e2e

import (
	"fmt"
	"testing"
	"time"
)

// submitRaw submits a JSON body through n and fails unless the status is
// want.
func submitRaw(t *testing.T, n *Node, body string, want int) Task {
	t.Helper()
	resp, err := n.Client.Submit(reqCtx(t), []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Status != want {
		t.Fatalf("submit %s: want %d, got %s", body, want, resp)
	}
	task, err := resp.Task()
	if err != nil {
		t.Fatal(err)
	}
	return task
}

// TestRecurring_EveryAndCron: an "every" task and a cron task with a
// seconds field run on their slots, never early, with Ax-Run counting
// 1, 2, 3; they stop after their repeats and end SUCCESS. The "every"
// slots are exactly start + k × interval (no drift), whatever the time
// the previous run took.
func TestRecurring_EveryAndCron(t *testing.T) {
	skipShort(t)
	c := NewCluster(t, WithSize(1), WithBootstrapExpect(1))
	c.WaitReady()
	n := c.Nodes[0]
	start := time.Now().Add(1500 * time.Millisecond).UTC().Truncate(time.Millisecond)
	every := submitRaw(t, n, fmt.Sprintf(`{"id":"rec-every","handler":%q,"every":"1s","repeats":3,"run_at":%q}`,
		handlerOK, start.Format(time.RFC3339Nano)), 201)
	if every.Every != "1s" || every.Repeats != 3 || every.Run != 1 {
		t.Fatalf("every task view: %+v", every)
	}
	cron := submitRaw(t, n, fmt.Sprintf(`{"id":"rec-cron","handler":%q,"cron":"* * * * * *","timezone":"Europe/Berlin","repeats":2}`, handlerOK), 201)
	if cron.NextRunAt == nil || cron.NextRunAt.Before(time.Now().Add(-time.Second)) || cron.NextRunAt.Nanosecond()%int(time.Second) != 0 {
		t.Fatalf("cron task's first slot: %+v", cron.NextRunAt)
	}
	waitState(t, n, "rec-every", "SUCCESS")
	waitState(t, n, "rec-cron", "SUCCESS")

	calls := c.Recorder.Calls("rec-every")
	if len(calls) != 3 {
		t.Fatalf("every: %d callbacks, want 3", len(calls))
	}
	for i, call := range calls {
		slot := start.Add(time.Duration(i) * time.Second)
		if call.At.Before(slot) {
			t.Errorf("every run %d called back at %v, before its slot %v", i+1, call.At, slot)
		}
		if late := call.At.Sub(slot); late > 500*time.Millisecond {
			t.Errorf("every run %d is %v late (slots must not drift)", i+1, late)
		}
		if call.Run != fmt.Sprint(i+1) || call.Attempt != "1" {
			t.Errorf("every run %d: Ax-Run %s Ax-Attempt %s", i+1, call.Run, call.Attempt)
		}
	}
	calls = c.Recorder.Calls("rec-cron")
	if len(calls) != 2 {
		t.Fatalf("cron: %d callbacks, want 2", len(calls))
	}
	for i, call := range calls {
		slot := cron.NextRunAt.Add(time.Duration(i) * time.Second)
		if call.At.Before(slot) {
			t.Errorf("cron run %d called back at %v, before its slot %v", i+1, call.At, slot)
		}
	}
	final, err := n.Client.GetTask(reqCtx(t), "rec-every")
	if err != nil {
		t.Fatal(err)
	}
	if final.Run != 3 || final.NextRunAt != nil {
		t.Fatalf("every task after its last run: %+v", final)
	}
}

// TestRecurring_FailedRunGoesOn: a recurring run whose attempts are
// exhausted does not end the schedule; the next run comes on its slot, and
// the task's own backoff is used between attempts.
func TestRecurring_FailedRunGoesOn(t *testing.T) {
	skipShort(t)
	c := NewCluster(t, WithSize(1), WithBootstrapExpect(1))
	c.WaitReady()
	n := c.Nodes[0]
	submitRaw(t, n, fmt.Sprintf(`{"id":"rec-fail","handler":%q,"every":"2s","repeats":2,"max_attempts":2,"backoff":{"initial":"300ms","jitter":0}}`, handlerFail), 201)
	waitState(t, n, "rec-fail", "DEAD")
	calls := c.Recorder.Calls("rec-fail")
	if len(calls) != 4 {
		t.Fatalf("%d callbacks, want 2 runs × 2 attempts", len(calls))
	}
	if gap := calls[1].At.Sub(calls[0].At); gap < 300*time.Millisecond || gap > 1500*time.Millisecond {
		t.Errorf("retry after %v, want the task's 300ms backoff", gap)
	}
	if calls[2].Run != "2" || calls[2].Attempt != "1" {
		t.Errorf("the second run starts at attempt 1: run %s attempt %s", calls[2].Run, calls[2].Attempt)
	}
}
