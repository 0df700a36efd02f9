package sidecartest_test

import (
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/axsched/ax/clients/go/axapi"
	"github.com/axsched/ax/ipc"
	"github.com/axsched/ax/sidecar/sidecartest"
)

// A task submitted with a trace context whose executor fails twice and
// then succeeds: its three callbacks carry its trace id and flags, three
// parent ids of their own (none the submitted one), and its tracestate;
// the task view shows the trace id and the trace context as submitted. A
// task without one gets the trace id of its id on every callback.
func TestTraceContextOnEveryAttempt(t *testing.T) {
	c := sidecartest.New(t, sidecartest.Options{Nodes: 3})
	l := c.WaitLeader()
	c.Respond(func(call sidecartest.Call) sidecartest.Reply {
		if call.Attempt < 3 {
			return sidecartest.Reply{Status: 500}
		}
		return sidecartest.Reply{}
	})
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	s := sidecartest.Spec("traced", "h")
	s.MaxAttempts, s.Backoff, s.TraceParent, s.TraceState = 3, noJitter, tp, "rojo=1"
	tk := c.Submit(c.Follower(), s)
	if tk.TraceID != tp[3:35] || tk.TraceParent != tp || tk.TraceState != "rojo=1" {
		t.Fatalf("task view: trace_id %q traceparent %q tracestate %q", tk.TraceID, tk.TraceParent, tk.TraceState)
	}
	s = sidecartest.Spec("plain", "h")
	s.MaxAttempts, s.Backoff = 3, noJitter
	plain := c.Submit(l, s)
	derived := axapi.TaskTraceID("plain")
	if plain.TraceID != hex.EncodeToString(derived[:]) || plain.TraceParent != "" {
		t.Fatalf("task without a trace context: trace_id %q traceparent %q", plain.TraceID, plain.TraceParent)
	}
	for i := 1; i < 3; i++ {
		// Both wait for their retry (the clock stands still) before it
		// moves past both due times.
		var latest time.Time
		for _, id := range []string{"traced", "plain"} {
			tk := c.WaitTask(l, id, "waiting for a retry", func(tk ipc.Task) bool { return tk.State == "WAITING" && tk.Attempts == i })
			if d := due(t, tk); d.After(latest) {
				latest = d
			}
		}
		c.AdvanceTo(latest)
	}
	c.WaitState(l, "traced", "SUCCESS")
	c.WaitState(l, "plain", "SUCCESS")
	parents := map[string]bool{}
	for _, call := range c.CallsFor("traced") {
		if _, err := axapi.ParseTraceParent(call.TraceParent); err != nil {
			t.Errorf("attempt %d: %v", call.Attempt, err)
			continue
		}
		if call.TraceParent[:36] != tp[:36] || call.TraceParent[52:] != tp[52:] || call.TraceState != "rojo=1" {
			t.Errorf("attempt %d: traceparent %q tracestate %q, want the trace id and flags of %q and rojo=1", call.Attempt, call.TraceParent, call.TraceState, tp)
		}
		parents[call.TraceParent[36:52]] = true
	}
	if n := len(c.CallsFor("traced")); n != 3 || len(parents) != 3 || parents[tp[36:52]] {
		t.Errorf("%d callbacks with parent ids %v: want 3 distinct new ones", n, parents)
	}
	for _, call := range c.CallsFor("plain") {
		if !strings.HasPrefix(call.TraceParent, "00-"+plain.TraceID+"-") || call.TraceState != "" {
			t.Errorf("plain attempt %d: traceparent %q tracestate %q, want trace id %s", call.Attempt, call.TraceParent, call.TraceState, plain.TraceID)
		}
	}
	// The run view names the trace, and each attempt the parent id its
	// callback carried (its span id when spans are exported).
	sent := map[int]string{}
	for _, call := range c.CallsFor("traced") {
		sent[call.Attempt] = call.TraceParent[36:52]
	}
	runs := runsOf(t, c, l, "traced")
	if len(runs) != 1 || runs[0].TraceID != tp[3:35] || len(runs[0].Attempts) != 3 {
		t.Fatalf("runs of traced: %+v", runs)
	}
	for _, a := range runs[0].Attempts {
		if a.SpanID == "" || a.SpanID != sent[a.Attempt] {
			t.Errorf("attempt %d: span_id %q, its callback's parent id %q", a.Attempt, a.SpanID, sent[a.Attempt])
		}
	}
	if runs := runsOf(t, c, l, "plain"); len(runs) != 1 || runs[0].TraceID != plain.TraceID {
		t.Errorf("runs of plain: %+v", runs)
	}
}
