package e2e

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/axsched/ax/clients/go/axapi"
	"github.com/axsched/ax/e2e/harness"
)

// runsOn reads GET /v1/tasks/{id}/runs on n.
func runsOn(t *testing.T, n *harness.Node, id string) ([]axapi.Run, error) {
	t.Helper()
	resp, err := n.Client.Do(harness.ReqCtx(t), "GET", axapi.RunsPath(id)+"?limit=100", nil)
	if err != nil {
		return nil, err
	}
	if resp.Status != 200 {
		return nil, fmt.Errorf("runs on %s: %s", n.ID, resp)
	}
	var page axapi.RunsPage
	if err := json.Unmarshal(resp.Body, &page); err != nil {
		return nil, err
	}
	return page.Runs, nil
}

// TestRunHistory_RecurringRunsAndFailover: a task every 1 s, 5 runs, whose
// executor fails run 2's first attempt. GET /v1/tasks/{id}/runs lists the
// 5 runs newest first, all SUCCESS, run 2 with two attempts (the failed
// one's status and error kept after the later runs succeeded), nodes named,
// times monotone; run 1's JSON result readable, run 3's 100 KiB result cut
// to 64 KiB and flagged. After the leader is killed, each remaining node's
// history equals what the leader served.
func TestRunHistory_RecurringRunsAndFailover(t *testing.T) {
	harness.SkipShort(t)
	t.Parallel()
	c := harness.NewCluster(t, harness.WithSize(3))
	c.WaitReady()
	leader := c.Leader()
	id := "hist|e2e"
	body := fmt.Sprintf(`{"id":%q,"handler":%q,"every":"1s","repeats":5,"backoff":{"initial":"200ms","jitter":0}}`, id, harness.HandlerHistory)
	if resp, err := leader.Client.Submit(harness.ReqCtx(t), []byte(body)); err != nil || resp.Status != 201 {
		t.Fatalf("submit: %v %v", resp, err)
	}
	harness.WaitFor(t, 30*time.Second, 50*time.Millisecond, "the task's 5 runs", func() error {
		tk, err := leader.Client.GetTask(harness.ReqCtx(t), id)
		if err != nil {
			return err
		}
		if tk.State != "SUCCESS" || tk.Run != 5 {
			return fmt.Errorf("state %s run %d", tk.State, tk.Run)
		}
		return nil
	})
	runs, err := runsOn(t, leader, id)
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 5 {
		t.Fatalf("%d runs, want 5", len(runs))
	}
	var prevFinished time.Time
	for i := len(runs) - 1; i >= 0; i-- {
		r := runs[i]
		wantAttempts := 1
		if r.Run == 2 {
			wantAttempts = 2
		}
		if r.Run != 5-i || r.State != "SUCCESS" || len(r.Attempts) != wantAttempts {
			t.Fatalf("runs[%d]: run %d state %s, %d attempts (want run %d SUCCESS %d attempts)", i, r.Run, r.State, len(r.Attempts), 5-i, wantAttempts)
		}
		if r.StartedAt == nil || r.FinishedAt == nil || r.FiredAt.Before(r.DueAt) || r.FinishedAt.Before(*r.StartedAt) || !r.DueAt.After(prevFinished.Add(-time.Second)) {
			t.Errorf("run %d: times not monotone: due %v fired %v started %v finished %v", r.Run, r.DueAt, r.FiredAt, r.StartedAt, r.FinishedAt)
		}
		if !prevFinished.IsZero() && !r.StartedAt.After(prevFinished) {
			t.Errorf("run %d started %v, before run %d finished at %v", r.Run, r.StartedAt, r.Run-1, prevFinished)
		}
		prevFinished = *r.FinishedAt
		for _, a := range r.Attempts {
			if c.Node(a.Node) == nil || a.Executor == "" || a.StartedAt == nil || a.EndedAt == nil || a.EndedAt.Before(*a.StartedAt) {
				t.Errorf("run %d attempt %d: %+v", r.Run, a.Attempt, a)
			}
		}
		if r.Lateness == nil {
			t.Errorf("run %d has no lateness split", r.Run)
		}
	}
	if a := runs[3].Attempts[0]; a.Outcome != "retryable" || a.HTTPStatus != 500 || a.Error != "http 500: boom from e2e executor" {
		t.Errorf("run 2's failed attempt: %+v", a)
	}
	if a := runs[3].Attempts[1]; a.Attempt != 2 || a.Outcome != "success" || a.HTTPStatus != 200 {
		t.Errorf("run 2's second attempt: %+v", a)
	}
	if string(runs[4].Result) != `{"run":1}` {
		t.Errorf("run 1's result %q", runs[4].Result)
	}
	cut, err := base64.StdEncoding.DecodeString(runs[2].ResultBase64)
	if err != nil || len(cut) != axapi.ResultMaxBytes || !runs[2].ResultTruncated {
		t.Errorf("run 3's result: %d bytes (err %v), truncated %v; want %d and true", len(cut), err, runs[2].ResultTruncated, axapi.ResultMaxBytes)
	}
	if tk, err := leader.Client.Get(harness.ReqCtx(t), id); err != nil || tk.Status != 200 {
		t.Fatalf("get: %v %v", tk, err)
	} else {
		var v axapi.Task
		if err := json.Unmarshal(tk.Body, &v); err != nil || v.LastRun != 5 || string(v.Result) != `{"run":5}` {
			t.Errorf("task view: last_run %d result %q (%v)", v.LastRun, v.Result, err)
		}
	}

	if err := leader.Kill(); err != nil {
		t.Fatal(err)
	}
	c.WaitForNewLeader(leader)
	for _, n := range c.Running() {
		harness.WaitFor(t, 20*time.Second, 50*time.Millisecond, n.ID+"'s history equals the old leader's", func() error {
			got, err := runsOn(t, n, id)
			if err != nil {
				return err
			}
			if !reflect.DeepEqual(got, runs) {
				return fmt.Errorf("differs: %d runs", len(got))
			}
			return nil
		})
	}
}
