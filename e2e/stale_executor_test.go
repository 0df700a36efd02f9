package e2e

import (
	"fmt"
	"testing"
)

// TestStaleRegistration_FallsBack: an app registered an exact-handler
// executor and died without unregistering (its socket is gone). A task for
// that handler is delivered, in the same attempt, to the node's next
// executor for it (here the "*" one), instead of burning attempts on the
// dead socket.
func TestStaleRegistration_FallsBack(t *testing.T) {
	skipShort(t)
	c := NewCluster(t, WithSize(1), WithBootstrapExpect(1))
	c.WaitReady()
	n := c.Nodes[0]
	resp, err := n.Client.Do(reqCtx(t), "POST", "/v1/executors",
		[]byte(fmt.Sprintf(`{"name":"ghost","handlers":[%q],"url":"unix:///nonexistent/ghost.sock"}`, handlerOK)))
	if err != nil || resp.Status != 201 {
		t.Fatalf("register ghost: %v %v", resp, err)
	}
	for i := range 3 {
		id := fmt.Sprintf("ghost-%d", i)
		mustSubmit(t, n, SubmitRequest{ID: id, Handler: handlerOK}, 201)
		task := waitState(t, n, id, "SUCCESS")
		if task.Attempts != 1 {
			t.Fatalf("%s took %d attempts, want 1 (the dead executor must not cost attempts)", id, task.Attempts)
		}
	}
}
