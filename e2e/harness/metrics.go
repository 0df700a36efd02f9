package harness

import (
	"fmt"
	"testing"

	"github.com/axsched/ax/internal/metricstext"
)

// Scrape reads GET /metrics from n and returns each sample line's value by
// its full name with labels, e.g. `ax_tasks{state="SUCCESS"}`.
func Scrape(t testing.TB, n *Node) map[string]float64 {
	t.Helper()
	resp, err := n.Client.Do(ReqCtx(t), "GET", "/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Status != 200 {
		t.Fatalf("GET /metrics on %s: %s", n.ID, resp)
	}
	out, err := metricstext.Parse(resp.Body)
	if err != nil {
		t.Fatalf("GET /metrics on %s: %v", n.ID, err)
	}
	return out
}

// SumMetric adds up one sample over the nodes (counters of attempts are
// kept by the node that ran them).
func SumMetric(t testing.TB, nodes []*Node, name string) float64 {
	t.Helper()
	var s float64
	for _, n := range nodes {
		s += Scrape(t, n)[name]
	}
	return s
}

// AttemptsMetric is the sample name of ax_attempts_total for a handler and
// an outcome label.
func AttemptsMetric(handler, outcome string) string {
	return fmt.Sprintf(`ax_attempts_total{handler=%q,outcome=%q}`, handler, outcome)
}
