package e2e

import (
	"fmt"
	"testing"

	"github.com/axsched/ax/e2e/harness"
)

// TestStaleRegistration_FallsBack: an app registered an exact-handler
// executor and died without unregistering (its socket is gone). A task for
// that handler is delivered, in the same attempt, to the node's next
// executor for it (here the "*" one), instead of burning attempts on the
// dead socket.
func TestStaleRegistration_FallsBack(t *testing.T) {
	harness.SkipShort(t)
	t.Parallel()
	c := harness.NewCluster(t, harness.WithSize(1), harness.WithBootstrapExpect(1))
	c.WaitReady()
	n := c.Nodes[0]
	resp, err := n.Client.Do(harness.ReqCtx(t), "POST", "/v1/executors",
		[]byte(fmt.Sprintf(`{"name":"ghost","handlers":[%q],"url":"unix:///nonexistent/ghost.sock"}`, harness.HandlerOK)))
	if err != nil || resp.Status != 201 {
		t.Fatalf("register ghost: %v %v", resp, err)
	}
	for i := range 3 {
		id := fmt.Sprintf("ghost-%d", i)
		harness.MustSubmit(t, n, harness.SubmitRequest{ID: id, Handler: harness.HandlerOK}, 201)
		task := harness.WaitState(t, n, id, "SUCCESS")
		if task.Attempts != 1 {
			t.Fatalf("%s took %d attempts, want 1 (the dead executor must not cost attempts)", id, task.Attempts)
		}
	}
}
