package e2e

import (
	"fmt"
	"testing"
	"time"
)

// TestCircuitBreaker_OpenWaitProbe: after 3 failed attempts in a row a
// handler's circuit opens; its next due task waits (stays WAITING, not
// failed) through the cool-down, then goes as the single probe; another
// handler is not held back meanwhile.
func TestCircuitBreaker_OpenWaitProbe(t *testing.T) {
	skipShort(t)
	c := NewCluster(t, WithSize(1), WithBootstrapExpect(1), WithArgs("--breaker-failures", "3", "--breaker-cooldown", "3s"))
	c.WaitReady()
	n := c.Nodes[0]
	for i := range 3 {
		id := fmt.Sprintf("cb-%d", i)
		mustSubmit(t, n, SubmitRequest{ID: id, Handler: handlerFail, MaxAttempts: 1}, 201)
		waitState(t, n, id, "DEAD")
	}
	opened := time.Now()
	mustSubmit(t, n, SubmitRequest{ID: "cb-held", Handler: handlerFail, MaxAttempts: 1}, 201)
	mustSubmit(t, n, SubmitRequest{ID: "cb-other", Handler: handlerOK}, 201)
	waitState(t, n, "cb-other", "SUCCESS")
	m := scrape(t, n)
	if m[`ax_circuit_open{handler="e2e.fail",state="open"}`] != 1 {
		t.Fatalf("circuit of e2e.fail not open: %v", m[`ax_circuit_open{handler="e2e.fail",state="open"}`])
	}
	held, err := n.Client.GetTask(reqCtx(t), "cb-held")
	if err != nil {
		t.Fatal(err)
	}
	if held.State != "WAITING" || held.Attempts != 0 || len(c.Recorder.Calls("cb-held")) != 0 {
		t.Fatalf("a task of an open circuit must wait: %+v", held)
	}
	waitState(t, n, "cb-held", "DEAD") // the probe went, and failed
	calls := c.Recorder.Calls("cb-held")
	if len(calls) != 1 {
		t.Fatalf("probe calls %d, want 1", len(calls))
	}
	if wait := calls[0].At.Sub(opened); wait < 2500*time.Millisecond {
		t.Fatalf("the probe went %v after the circuit opened, before the 3s cool-down", wait)
	}
}
