package sidecartest_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/axsched/ax/ipc"
	"github.com/axsched/ax/sidecar/sidecartest"
)

// submitJSON submits a raw POST /v1/tasks body on node i, as an app
// would, wants 201 and returns the task view.
func submitJSON(t *testing.T, c *sidecartest.Cluster, i int, body string) ipc.Task {
	t.Helper()
	resp := c.HTTP(i, "POST", "/v1/tasks", []byte(body))
	if resp.Status != 201 {
		t.Fatalf("submit %s: %d %s", body, resp.Status, resp.Body)
	}
	var tk ipc.Task
	if err := json.Unmarshal(resp.Body, &tk); err != nil {
		t.Fatalf("task view %s: %v", resp.Body, err)
	}
	return tk
}

// waitArmed waits until recurring task id waits for a run due after
// prev, and returns it.
func waitArmed(c *sidecartest.Cluster, id string, prev time.Time) ipc.Task {
	return c.WaitTask(0, id, fmt.Sprintf("a run due after %v armed", prev), func(tk ipc.Task) bool {
		return tk.State == "WAITING" && tk.NextRunAt != nil && tk.NextRunAt.After(prev)
	})
}

// An "every" task and a cron task with a seconds field run on their
// slots, never early, with Ax-Run counting 1, 2, 3; they stop after their
// repeats and end SUCCESS. The "every" slots are exactly start + k ×
// interval (no drift), whatever the time the previous run took: its
// first run is held 300ms of the clock (moved from e2e's
// TestRecurring_EveryAndCron; the two tasks run one after the other here,
// so that each slot is reached exactly).
func TestRecurringEveryAndCron(t *testing.T) {
	c := sidecartest.New(t, sidecartest.Options{})
	release := make(chan struct{})
	c.Respond(func(call sidecartest.Call) sidecartest.Reply {
		if call.TaskID == "rec-every" && call.Run == 1 {
			return sidecartest.Reply{Hold: release}
		}
		return sidecartest.Reply{}
	})
	start := c.Now().Add(1500 * time.Millisecond).UTC().Truncate(time.Millisecond)
	every := submitJSON(t, c, 0, fmt.Sprintf(`{"id":"rec-every","handler":"h","every":"1s","repeats":3,"run_at":%q}`, start.Format(time.RFC3339Nano)))
	if every.Every != "1s" || every.Repeats != 3 || every.Run != 1 {
		t.Fatalf("every task view: %+v", every)
	}
	slot := func(k int) time.Time { return start.Add(time.Duration(k) * time.Second) }
	c.AdvanceTo(slot(0))
	c.WaitCalls("rec-every", 1)
	c.Advance(300 * time.Millisecond) // the first run takes 300ms
	close(release)
	for k := 1; k < 3; k++ {
		tk := waitArmed(c, "rec-every", slot(k-1))
		if !tk.NextRunAt.Equal(slot(k)) {
			t.Errorf("every run %d due %v, want its slot %v (slots must not drift)", k+1, tk.NextRunAt, slot(k))
		}
		c.AdvanceTo(slot(k))
		c.WaitCalls("rec-every", k+1)
	}
	c.WaitState(0, "rec-every", "SUCCESS")

	cron := submitJSON(t, c, 0, `{"id":"rec-cron","handler":"h","cron":"* * * * * *","timezone":"Europe/Berlin","repeats":2}`)
	if cron.NextRunAt == nil || cron.NextRunAt.Before(c.Now().Add(-time.Second)) || cron.NextRunAt.Nanosecond()%int(time.Second) != 0 {
		t.Fatalf("cron task's first slot: %+v", cron.NextRunAt)
	}
	c.AdvanceTo(*cron.NextRunAt)
	c.WaitCalls("rec-cron", 1)
	tk := waitArmed(c, "rec-cron", *cron.NextRunAt)
	c.AdvanceTo(*tk.NextRunAt)
	c.WaitState(0, "rec-cron", "SUCCESS")

	calls := c.CallsFor("rec-every")
	if len(calls) != 3 {
		t.Fatalf("every: %d callbacks, want 3", len(calls))
	}
	for i, call := range calls {
		if call.At.Before(slot(i)) {
			t.Errorf("every run %d called back at %v, before its slot %v", i+1, call.At, slot(i))
		}
		if late := call.At.Sub(slot(i)); late > 500*time.Millisecond {
			t.Errorf("every run %d is %v late (slots must not drift)", i+1, late)
		}
		if call.Run != i+1 || call.Attempt != 1 {
			t.Errorf("every run %d: Ax-Run %d Ax-Attempt %d", i+1, call.Run, call.Attempt)
		}
	}
	calls = c.CallsFor("rec-cron")
	if len(calls) != 2 {
		t.Fatalf("cron: %d callbacks, want 2", len(calls))
	}
	for i, call := range calls {
		slot := cron.NextRunAt.Add(time.Duration(i) * time.Second)
		if call.At.Before(slot) {
			t.Errorf("cron run %d called back at %v, before its slot %v", i+1, call.At, slot)
		}
	}
	final, err := c.Task(0, "rec-every")
	if err != nil {
		t.Fatal(err)
	}
	if final.Run != 3 || final.NextRunAt != nil {
		t.Fatalf("every task after its last run: %+v", final)
	}
}

// A recurring run whose attempts are exhausted does not end the
// schedule; the next run comes on its slot, and the task's own backoff
// is used between attempts (moved from e2e's
// TestRecurring_FailedRunGoesOn).
func TestRecurringFailedRunGoesOn(t *testing.T) {
	c := sidecartest.New(t, sidecartest.Options{})
	c.Respond(func(sidecartest.Call) sidecartest.Reply { return sidecartest.Reply{Status: 500} })
	first := submitJSON(t, c, 0, `{"id":"rec-fail","handler":"fail","every":"2s","repeats":2,"max_attempts":2,"backoff":{"initial":"300ms","jitter":0}}`)
	// The first run is one interval after the submit; each later call's
	// due time is read from the task once the previous call's outcome is
	// in.
	c.AdvanceTo(*first.NextRunAt)
	for n := 1; n < 4; n++ {
		calls := c.WaitCalls("rec-fail", n)
		tk := waitArmed(c, "rec-fail", calls[n-1].At)
		c.AdvanceTo(*tk.NextRunAt)
	}
	c.WaitState(0, "rec-fail", "DEAD")
	calls := c.CallsFor("rec-fail")
	if len(calls) != 4 {
		t.Fatalf("%d callbacks, want 2 runs × 2 attempts", len(calls))
	}
	if gap := calls[1].At.Sub(calls[0].At); gap < 300*time.Millisecond || gap > 1500*time.Millisecond {
		t.Errorf("retry after %v, want the task's 300ms backoff", gap)
	}
	if calls[2].Run != 2 || calls[2].Attempt != 1 {
		t.Errorf("the second run starts at attempt 1: run %d attempt %d", calls[2].Run, calls[2].Attempt)
	}
	if slot := first.NextRunAt.Add(2 * time.Second); calls[2].At.Before(slot) || calls[2].At.Sub(slot) > 500*time.Millisecond {
		t.Errorf("the second run came at %v, its slot is %v", calls[2].At, slot)
	}
}

// pausedFlag reads the "paused" field of a task view.
func pausedFlag(t *testing.T, resp sidecartest.Response) bool {
	t.Helper()
	var v struct {
		Paused bool `json:"paused"`
	}
	if err := json.Unmarshal(resp.Body, &v); err != nil {
		t.Fatalf("decode %s: %v", resp.Body, err)
	}
	return v.Paused
}

// sentinel runs a task of another handler to its end: what the scheduler
// had due on the clock as it stands has been handled by then.
func sentinel(t *testing.T, c *sidecartest.Cluster, i int, id string) {
	t.Helper()
	c.Submit(i, sidecartest.Spec(id, "sentinel"))
	c.WaitState(i, id, "SUCCESS")
}

// A task running every 1 s is paused for 5 s: nothing is delivered
// meanwhile; on resume the run that waited is delivered once (the
// catch-up for every missed slot), and the next run comes on its slot,
// not at once (no storm). Moved from e2e's TestPause_RecurringTask, which
// slept through those 5 s; here the clock moves a second at a time.
func TestPauseRecurringTask(t *testing.T) {
	c := sidecartest.New(t, sidecartest.Options{})
	start := c.Now().Add(time.Second).UTC().Truncate(time.Second)
	slot := func(k int) time.Time { return start.Add(time.Duration(k) * time.Second) }
	submitJSON(t, c, 0, fmt.Sprintf(`{"id":"rec-pause","handler":"h","every":"1s","run_at":%q}`, start.Format(time.RFC3339Nano)))
	for k := range 2 {
		c.AdvanceTo(slot(k))
		c.WaitCalls("rec-pause", k+1)
		waitArmed(c, "rec-pause", slot(k))
	}
	// Pause half-way between two slots.
	c.AdvanceTo(slot(1).Add(500 * time.Millisecond))
	r := c.HTTP(0, "POST", "/v1/tasks/rec-pause/pause", []byte("{}"))
	if r.Status != 200 || !pausedFlag(t, r) {
		t.Fatalf("pause: %d %s", r.Status, r.Body)
	}
	pausedAt := c.Now()
	before := len(c.CallsFor("rec-pause"))
	// Paused for 5 s: five slots go by. Resume half-way between slots.
	for k := 2; k <= 6; k++ {
		c.AdvanceTo(slot(k).Add(500 * time.Millisecond))
		sentinel(t, c, 0, fmt.Sprintf("sentinel-%d", k))
	}
	if c.Now().Sub(pausedAt) < 5*time.Second {
		t.Fatalf("paused %v only", c.Now().Sub(pausedAt))
	}
	if calls := c.CallsFor("rec-pause"); len(calls) != before {
		t.Fatalf("%d runs delivered while paused", len(calls)-before)
	}
	if r := c.HTTP(0, "GET", "/v1/tasks/rec-pause", nil); r.Status != 200 || !pausedFlag(t, r) {
		t.Fatalf("task while paused: %d %s", r.Status, r.Body)
	}
	r = c.HTTP(0, "POST", "/v1/tasks/rec-pause/resume", []byte("{}"))
	if r.Status != 200 || pausedFlag(t, r) {
		t.Fatalf("resume: %d %s", r.Status, r.Body)
	}
	resumed := c.Now()
	// Two more runs: the catch-up, then the next slot's.
	catchUp := c.WaitCalls("rec-pause", before+1)[before]
	tk := waitArmed(c, "rec-pause", catchUp.At)
	k := 0
	for !slot(k).After(catchUp.At) {
		k++
	}
	if !tk.NextRunAt.Equal(slot(k)) {
		t.Errorf("after the catch-up the next run is due %v, want the next slot %v", tk.NextRunAt, slot(k))
	}
	c.AdvanceTo(slot(k))
	c.WaitCalls("rec-pause", before+2)
	// 1.5 s after the next slot's run: a storm would show by now.
	waitArmed(c, "rec-pause", slot(k))
	c.AdvanceTo(slot(k + 1))
	c.WaitCalls("rec-pause", before+3)
	waitArmed(c, "rec-pause", slot(k+1))
	c.AdvanceTo(slot(k).Add(1500 * time.Millisecond))
	sentinel(t, c, 0, "sentinel-end")
	calls := c.CallsFor("rec-pause")[before:]
	catchUp, next := calls[0], calls[1]
	if catchUp.At.Before(resumed.Add(-100*time.Millisecond)) || catchUp.At.Sub(resumed) > time.Second {
		t.Errorf("catch-up run at %v, resume at %v", catchUp.At, resumed)
	}
	if next.At.Before(slot(k)) {
		t.Errorf("the run after the catch-up came at %v, before its slot %v", next.At, slot(k))
	}
	if late := next.At.Sub(slot(k)); late > 500*time.Millisecond {
		t.Errorf("the run after the catch-up came %v after its slot %v", late, slot(k))
	}
	// In the 1.5 s after the next slot's run, at most one more run (its
	// next slot); each run has the next run number.
	wantRuns := 2 + int(c.Now().Sub(next.At)/time.Second) + 1
	if len(calls) > wantRuns {
		t.Errorf("%d runs since the resume (%v ago), want at most %d: a storm of catch-up runs", len(calls), c.Now().Sub(resumed), wantRuns)
	}
	all := c.CallsFor("rec-pause")
	for i := 1; i < len(all); i++ {
		if all[i].Run != all[i-1].Run+1 {
			t.Errorf("run numbers %d then %d", all[i-1].Run, all[i].Run)
		}
	}
}
