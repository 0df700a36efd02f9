package e2e

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/axsched/ax/e2e/harness"
)

type e2eFlow struct {
	State  string `json:"state"`
	Stages []struct {
		Name   string `json:"name"`
		State  string `json:"state"`
		TaskID string `json:"task_id"`
	} `json:"stages"`
}

// TestFlow_DiamondLeaderKill: the diamond A -> (B, C) -> D on 3 nodes. B
// and C hold their callbacks until the test releases them; once both are
// in flight (they overlap), the leader is SIGKILLed. The flow still ends
// SUCCESS: each stage has exactly one callback that completed (a callback
// cut by the kill of its node is re-delivered, not counted), B and C start
// after A ended, D after B and C ended.
func TestFlow_DiamondLeaderKill(t *testing.T) {
	harness.SkipShort(t)
	t.Parallel()
	c := harness.NewCluster(t, harness.WithSize(3))
	c.WaitReady()
	leader := c.Leader()
	body := fmt.Sprintf(`{"id":"dia","stages":[{"name":"A","handler":%[1]q},
		{"name":"B","handler":%[2]q,"depends_on":["A"],"timeout":"3s"},{"name":"C","handler":%[2]q,"depends_on":["A"],"timeout":"3s"},
		{"name":"D","handler":%[1]q,"depends_on":["B","C"]}]}`, harness.HandlerOK, harness.HandlerHold)
	if resp, err := leader.Client.Do(harness.ReqCtx(t), "POST", "/v1/flows", []byte(body)); err != nil || resp.Status != 201 {
		t.Fatalf("submit flow: %v %v", resp, err)
	}
	id := func(s string) string { return "flow/dia/1/" + s }
	rec := c.Recorder
	harness.WaitFor(t, 30*time.Second, 20*time.Millisecond, "B and C in flight", func() error {
		if len(rec.Calls(id("B"))) == 0 || len(rec.Calls(id("C"))) == 0 {
			return fmt.Errorf("B %d calls, C %d", len(rec.Calls(id("B"))), len(rec.Calls(id("C"))))
		}
		return nil
	})
	if len(rec.Calls(id("D"))) != 0 {
		t.Fatal("D called while B and C run")
	}
	if err := leader.Kill(); err != nil {
		t.Fatal(err)
	}
	newLeader := c.WaitForNewLeader(leader)
	rec.ReleaseHold()
	var fl e2eFlow
	harness.WaitFor(t, 60*time.Second, 50*time.Millisecond, "flow SUCCESS", func() error {
		resp, err := newLeader.Client.Do(harness.ReqCtx(t), "GET", "/v1/flows/dia", nil)
		if err != nil {
			return err
		}
		if err := json.Unmarshal(resp.Body, &fl); err != nil {
			return err
		}
		if fl.State != "SUCCESS" {
			return fmt.Errorf("flow %s: %s", fl.State, resp.Body)
		}
		return nil
	})
	done := map[string]harness.Call{}
	for _, s := range []string{"A", "B", "C", "D"} {
		n := 0
		for _, call := range rec.Calls(id(s)) {
			if !call.Cancelled {
				n++
				done[s] = call
			}
		}
		if n != 1 {
			t.Errorf("stage %s: %d completed callbacks, want exactly 1 (%d in all)", s, n, len(rec.Calls(id(s))))
		}
	}
	first := func(s string) time.Time { return rec.Calls(id(s))[0].At }
	if first("B").Before(done["A"].Ended) || first("C").Before(done["A"].Ended) {
		t.Errorf("B or C started before A ended")
	}
	if first("D").Before(done["B"].Ended) || first("D").Before(done["C"].Ended) {
		t.Errorf("D started before B and C ended")
	}
	if b, cc := rec.Calls(id("B"))[0], rec.Calls(id("C"))[0]; !b.At.Before(cc.Ended) || !cc.At.Before(b.Ended) {
		t.Errorf("B and C did not overlap")
	}
}

// getFlowOn reads GET /v1/flows/{id} on n.
func getFlowOn(t *testing.T, n *harness.Node, id string) (e2eFlow, error) {
	var fl e2eFlow
	resp, err := n.Client.Do(harness.ReqCtx(t), "GET", "/v1/flows/"+id, nil)
	if err != nil {
		return fl, err
	}
	if resp.Status != 200 {
		return fl, fmt.Errorf("get flow %s: %s", id, resp)
	}
	return fl, json.Unmarshal(resp.Body, &fl)
}

func flowStage(fl e2eFlow, name string) string {
	for _, s := range fl.Stages {
		if s.Name == name {
			return s.State
		}
	}
	return ""
}

// TestFlow_FailureAndContinue: C fails permanently: D is CANCELLED and
// never called, the flow FAILED; with on_failure continue on D, D runs
// (after B and C ended) and the flow is still FAILED.
func TestFlow_FailureAndContinue(t *testing.T) {
	harness.SkipShort(t)
	t.Parallel()
	c := harness.NewCluster(t, harness.WithSize(3))
	c.WaitReady()
	leader := c.Leader()
	for _, tc := range []struct {
		id, extra string
		dState    string
	}{{"fail-cancel", "", "CANCELLED"}, {"fail-continue", `,"on_failure":"continue"`, "SUCCESS"}} {
		body := fmt.Sprintf(`{"id":%[1]q,"stages":[{"name":"A","handler":%[2]q},
			{"name":"B","handler":%[2]q,"depends_on":["A"]},{"name":"C","handler":%[3]q,"depends_on":["A"]},
			{"name":"D","handler":%[2]q,"depends_on":["B","C"]%[4]s}]}`, tc.id, harness.HandlerOK, harness.HandlerPermanent, tc.extra)
		if resp, err := leader.Client.Do(harness.ReqCtx(t), "POST", "/v1/flows", []byte(body)); err != nil || resp.Status != 201 {
			t.Fatalf("submit flow: %v %v", resp, err)
		}
		var fl e2eFlow
		harness.WaitFor(t, 30*time.Second, 50*time.Millisecond, tc.id+" FAILED", func() error {
			var err error
			if fl, err = getFlowOn(t, leader, tc.id); err != nil {
				return err
			}
			if fl.State != "FAILED" {
				return fmt.Errorf("flow %s", fl.State)
			}
			return nil
		})
		if flowStage(fl, "C") != "FAILED" || flowStage(fl, "B") != "SUCCESS" || flowStage(fl, "D") != tc.dState {
			t.Errorf("%s: stages %+v", tc.id, fl.Stages)
		}
		d := c.Recorder.Calls("flow/" + tc.id + "/1/D")
		if tc.dState == "CANCELLED" && len(d) != 0 || tc.dState == "SUCCESS" && len(d) != 1 {
			t.Errorf("%s: D called %d times", tc.id, len(d))
		}
		if len(d) == 1 {
			for _, s := range []string{"B", "C"} {
				if up := c.Recorder.Calls("flow/" + tc.id + "/1/" + s); len(up) != 1 || d[0].At.Before(up[0].Ended) {
					t.Errorf("%s: D started before %s ended", tc.id, s)
				}
			}
		}
	}
}

// TestFlow_RecurringEvery2s: a flow every 2s runs three flow runs, one
// after the other: each run's first stage starts after the previous run's
// last stage ended (the slots themselves are the kit's
// TestFlowRecurring, on a fake clock).
func TestFlow_RecurringEvery2s(t *testing.T) {
	harness.SkipShort(t)
	t.Parallel()
	c := harness.NewCluster(t, harness.WithSize(3))
	c.WaitReady()
	leader := c.Leader()
	body := fmt.Sprintf(`{"id":"rec","every":"2s","stages":[{"name":"A","handler":%[1]q},{"name":"B","handler":%[2]q,"depends_on":["A"]}]}`,
		harness.HandlerOK, harness.HandlerSleep)
	if resp, err := leader.Client.Do(harness.ReqCtx(t), "POST", "/v1/flows", []byte(body)); err != nil || resp.Status != 201 {
		t.Fatalf("submit flow: %v %v", resp, err)
	}
	harness.WaitFor(t, 30*time.Second, 50*time.Millisecond, "three flow runs", func() error {
		if n := len(c.Recorder.Calls("flow/rec/3/B")); n == 0 || c.Recorder.Calls("flow/rec/3/B")[0].Ended.IsZero() {
			return fmt.Errorf("run 3's B not ended")
		}
		return nil
	})
	if resp, err := leader.Client.Do(harness.ReqCtx(t), "DELETE", "/v1/flows/rec", nil); err != nil || resp.Status != 200 {
		t.Fatalf("cancel flow: %v %v", resp, err)
	}
	for run := 2; run <= 3; run++ {
		a := c.Recorder.Calls(fmt.Sprintf("flow/rec/%d/A", run))
		prevB := c.Recorder.Calls(fmt.Sprintf("flow/rec/%d/B", run-1))
		if len(a) != 1 || len(prevB) != 1 {
			t.Fatalf("run %d: A called %d times, run %d's B %d", run, len(a), run-1, len(prevB))
		}
		if a[0].At.Before(prevB[0].Ended) {
			t.Errorf("run %d started at %v, before run %d ended at %v", run, a[0].At, run-1, prevB[0].Ended)
		}
	}
}
