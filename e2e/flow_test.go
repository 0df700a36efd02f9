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
