package e2e

import (
	"fmt"
	"sort"
	"testing"
	"time"
)

// TestHandlerCap_ClusterWide: with --handler-limit e2e.slow=2 on a 3-node
// cluster, never more than 2 attempts of that handler run at once across
// all nodes' executors, and every task still runs.
func TestHandlerCap_ClusterWide(t *testing.T) {
	skipShort(t)
	c := NewCluster(t, WithSize(3), WithArgs("--handler-limit", handlerSlow+"=2"))
	c.WaitReady()
	n := c.Followers()[0]
	const tasks = 6
	for i := range tasks {
		// e2e.slow holds the request until the sidecar cuts it at the timeout.
		mustSubmit(t, n, SubmitRequest{ID: fmt.Sprintf("cap-%d", i), Handler: handlerSlow, Timeout: "700ms", MaxAttempts: 1}, 201)
	}
	for i := range tasks {
		waitState(t, n, fmt.Sprintf("cap-%d", i), "DEAD")
	}
	type edge struct {
		at    time.Time
		delta int
	}
	var edges []edge
	calls := 0
	for i := range tasks {
		for _, call := range c.Recorder.Calls(fmt.Sprintf("cap-%d", i)) {
			calls++
			edges = append(edges, edge{call.At, +1}, edge{call.Ended, -1})
		}
	}
	if calls != tasks {
		t.Fatalf("%d callbacks, want %d", calls, tasks)
	}
	sort.Slice(edges, func(i, j int) bool {
		if edges[i].at.Equal(edges[j].at) {
			return edges[i].delta < edges[j].delta // ends before starts
		}
		return edges[i].at.Before(edges[j].at)
	})
	cur, peak := 0, 0
	for _, e := range edges {
		cur += e.delta
		peak = max(peak, cur)
	}
	if peak > 2 {
		t.Fatalf("%d attempts of %s ran at once, the cluster-wide cap is 2", peak, handlerSlow)
	}
	if peak < 2 {
		t.Errorf("peak %d: the cap should still allow 2 at once", peak)
	}
}
