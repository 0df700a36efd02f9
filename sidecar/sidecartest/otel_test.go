package sidecartest_test

import (
	"encoding/hex"
	"testing"
	"time"

	"github.com/axsched/ax/clients/go/axapi"
	"github.com/axsched/ax/ipc"
	"github.com/axsched/ax/sidecar"
	"github.com/axsched/ax/sidecar/otelexport"
	"github.com/axsched/ax/sidecar/otelexport/oteltest"
	"github.com/axsched/ax/sidecar/sidecartest"
)

// With --otel-endpoint on every node of three: a traced task whose first
// attempt fails and second succeeds arrives at the collector as one run
// span under the submitter's span, with an error span for the failed
// attempt and span ids equal to the callbacks' parent ids, exported by
// one node only; a task without a trace context cancelled while its
// retry waits is exported by the leader, as a root span in the trace of
// its id.
func TestOtelExportRuns(t *testing.T) {
	col := oteltest.New()
	t.Cleanup(col.Close)
	c := sidecartest.New(t, sidecartest.Options{Nodes: 3, Config: func(_ int, cfg *sidecar.Config) {
		cfg.OtelEndpoint, cfg.OtelBatchTimeout = col.URL(), 10*time.Millisecond
	}})
	l := c.WaitLeader()
	c.Respond(func(call sidecartest.Call) sidecartest.Reply {
		if call.Attempt == 1 {
			return sidecartest.Reply{Status: 500, Body: []byte("boom")}
		}
		return sidecartest.Reply{}
	})
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	s := sidecartest.Spec("traced", "h")
	s.MaxAttempts, s.Backoff, s.TraceParent = 3, noJitter, tp
	c.Submit(c.Follower(), s)
	s = sidecartest.Spec("plain", "h")
	s.MaxAttempts, s.Backoff = 3, noJitter
	c.Submit(l, s)
	var latest time.Time
	for _, id := range []string{"traced", "plain"} {
		tk := c.WaitTask(l, id, "waiting for a retry", func(tk ipc.Task) bool { return tk.State == "WAITING" && tk.Attempts == 1 })
		if d := due(t, tk); d.After(latest) {
			latest = d
		}
	}
	if r := c.HTTP(l, "DELETE", "/v1/tasks/plain", nil); r.Status != 200 {
		t.Fatalf("cancel plain: %d %s", r.Status, r.Body)
	}
	c.AdvanceTo(latest)
	c.WaitState(l, "traced", "SUCCESS")

	runSpans := func() map[string][]oteltest.Span {
		m := map[string][]oteltest.Span{}
		for _, sp := range col.Spans() {
			if sp.Name == otelexport.RunSpanPrefix+"h" {
				id, _ := sp.Attrs["ax.task.id"].(string)
				m[id] = append(m[id], sp)
			}
		}
		return m
	}
	c.Eventually("both runs at the collector", func() bool { m := runSpans(); return len(m["traced"]) > 0 && len(m["plain"]) > 0 })
	exported := 0.0
	for i := range c.Nodes() {
		exported += c.Metrics(i)["ax_otel_runs_exported_total"]
	}
	m := runSpans()
	if len(m["traced"]) != 1 || len(m["plain"]) != 1 || exported != 2 {
		t.Fatalf("run spans %v, %v exported: want each run once", m, exported)
	}
	run := m["traced"][0]
	if run.TraceID != tp[3:35] || run.ParentID != tp[36:52] || run.Attrs["ax.state"] != "SUCCESS" || run.Attrs["ax.attempts"] != int64(2) || run.Error {
		t.Errorf("traced run span %+v", run)
	}
	sent := map[string]int{}
	for _, call := range c.CallsFor("traced") {
		sent[call.TraceParent[36:52]] = call.Attempt
	}
	var attempts, failed int
	for _, sp := range col.Spans() {
		if sp.TraceID != run.TraceID || sp.SpanID == run.SpanID {
			continue
		}
		if sp.ParentID != run.SpanID {
			t.Errorf("%s: parent %s, want the run span %s", sp.Name, sp.ParentID, run.SpanID)
		}
		if sp.Name != otelexport.AttemptSpanName {
			continue
		}
		attempts++
		if n, ok := sent[sp.SpanID]; !ok || int64(n) != sp.Attrs["ax.attempt"] {
			t.Errorf("attempt span %s (attempt %v): not the parent id of that attempt's callback %v", sp.SpanID, sp.Attrs["ax.attempt"], sent)
		}
		if sp.Error {
			failed++
			if sp.Attrs["http.response.status_code"] != int64(500) || sp.Message != "retryable: http 500: boom" {
				t.Errorf("failed attempt span %+v", sp)
			}
		}
	}
	if attempts != 2 || failed != 1 {
		t.Errorf("%d attempt spans, %d failed: want 2 and 1", attempts, failed)
	}
	plain := m["plain"][0]
	want := axapi.TaskTraceID("plain")
	if plain.TraceID != hex.EncodeToString(want[:]) || plain.ParentID != "" || plain.Attrs["ax.state"] != "CANCELLED" ||
		plain.Instance != c.Node(l).ID() {
		t.Errorf("cancelled run span %+v, want a root span of the leader %s", plain, c.Node(l).ID())
	}
}
