package otelexport_test

import (
	"context"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/axsched/ax/clients/go/axapi"
	"github.com/axsched/ax/raftfsm"
	"github.com/axsched/ax/sidecar/otelexport"
	"github.com/axsched/ax/sidecar/otelexport/oteltest"
)

// store is an in-memory otelexport.Store.
type store map[string]*raftfsm.RunRecord

func (s store) Run(id string, run int) (*raftfsm.RunRecord, error) {
	r, ok := s[fmt.Sprint(id, "/", run)]
	if !ok {
		return nil, raftfsm.ErrNotFound
	}
	return r, nil
}

const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

var due = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func at(d time.Duration) int64 { return due.Add(d).UnixMilli() }

// twoAttempts is run 3 of a task: held back 100ms (handler_limit), its
// first attempt failed (500 boom) after a 5ms commit and 10ms queue, the
// second, on n2, succeeded.
func twoAttempts() *raftfsm.RunRecord {
	return &raftfsm.RunRecord{
		Run: 3, State: raftfsm.StateSuccess, DueMs: at(0), FiredMs: at(100 * time.Millisecond),
		StartedMs: at(115 * time.Millisecond), FinishedMs: at(2 * time.Second), ParkedReason: "handler_limit",
		Late: true, ParkedNs: int64(100 * time.Millisecond), CommitNs: int64(5 * time.Millisecond), QueueNs: int64(10 * time.Millisecond), ConnectNs: int64(time.Millisecond),
		Attempts: []raftfsm.AttemptRecord{
			{Attempt: 1, Node: "n1", Executor: "app", FiredMs: at(100 * time.Millisecond), StartedMs: at(115 * time.Millisecond), EndedMs: at(200 * time.Millisecond), Outcome: raftfsm.OutcomeRetryable, HTTPStatus: 500, Error: "http 500: boom"},
			{Attempt: 2, Node: "n2", Executor: "app", FiredMs: at(time.Second), StartedMs: at(1001 * time.Millisecond), EndedMs: at(1900 * time.Millisecond), Outcome: raftfsm.OutcomeSuccess, HTTPStatus: 200},
		},
	}
}

func task(id, traceParent string) *raftfsm.Task {
	return &raftfsm.Task{ID: id, Spec: raftfsm.Spec{Handler: "mail", TraceParent: traceParent, TraceState: "rojo=1"}}
}

// export runs an Exporter of node n2 (leading or not) over events and
// returns what the collector received once it has shut down.
func export(t *testing.T, s store, leader bool, evs ...raftfsm.Event) ([]oteltest.Span, *otelexport.Exporter) {
	t.Helper()
	col := oteltest.New()
	t.Cleanup(col.Close)
	e, err := otelexport.New(otelexport.Config{Endpoint: col.URL(), ServiceName: "ax-test", Node: "n2", Leader: func() bool { return leader },
		Store: s, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { e.Run(ctx); close(done) }()
	for i := range evs {
		e.OnEvent(&evs[i])
	}
	cancel()
	<-done
	if err := e.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	return col.Spans(), e
}

func byName(spans []oteltest.Span) map[string][]oteltest.Span {
	m := map[string][]oteltest.Span{}
	for _, s := range spans {
		m[s.Name] = append(m[s.Name], s)
	}
	return m
}

func hexID(b []byte) string { return hex.EncodeToString(b) }

// A run ended by this node's Complete, of a task submitted with a trace
// context, arrives at an OTLP/HTTP collector as one run span (due →
// finished, the submitter's span as parent, the task's attributes and
// lateness parts) with children parked, commit, queue and one per
// attempt, whose span ids are the parent ids the callbacks carried; the
// failed attempt is an error span.
func TestRunSpans(t *testing.T) {
	s := store{"t1/3": twoAttempts()}
	spans, e := export(t, s, false, raftfsm.Event{Type: raftfsm.CmdComplete, Task: task("t1", tp), RunEnded: 3, EndedBy: "n2"})
	if got := counter(t, e, "ax_otel_runs_exported_total"); got != 1 {
		t.Errorf("runs exported %v, want 1", got)
	}
	if len(spans) != 6 {
		t.Fatalf("%d spans, want 6: %+v", len(spans), spans)
	}
	m := byName(spans)
	run := m["ax.run mail"]
	if len(run) != 1 {
		t.Fatalf("run spans %+v", m)
	}
	r := run[0]
	runID := otelexport.SpanID("run", "t1", 3, 0)
	if r.TraceID != tp[3:35] || r.ParentID != tp[36:52] || r.SpanID != hexID(runID[:]) || r.TraceState != "rojo=1" ||
		r.Service != "ax-test" || r.Instance != "n2" || r.Error {
		t.Errorf("run span %+v", r)
	}
	if !r.Start.Equal(due) || !r.End.Equal(due.Add(2*time.Second)) {
		t.Errorf("run span %v → %v, want due → finished", r.Start, r.End)
	}
	want := map[string]any{"ax.task.id": "t1", "ax.handler": "mail", "ax.run": int64(3), "ax.state": "SUCCESS", "ax.attempts": int64(2),
		"ax.node": "n2", "ax.parked_reason": "handler_limit", "ax.lateness.total_ms": 116.0, "ax.lateness.parked_ms": 100.0,
		"ax.lateness.retries_ms": 0.0, "ax.lateness.commit_ms": 5.0, "ax.lateness.queue_ms": 10.0, "ax.lateness.connect_ms": 1.0}
	for k, v := range want {
		if r.Attrs[k] != v {
			t.Errorf("run span %s = %v (%T), want %v", k, r.Attrs[k], r.Attrs[k], v)
		}
	}
	for _, s := range spans {
		if s.Name != r.Name && (s.ParentID != r.SpanID || s.TraceID != r.TraceID) {
			t.Errorf("%s: trace %s parent %s, want a child of the run span", s.Name, s.TraceID, s.ParentID)
		}
	}
	phases := []struct {
		name        string
		start, stop time.Duration
	}{{"parked", 0, 100 * time.Millisecond}, {"commit", 100 * time.Millisecond, 105 * time.Millisecond}, {"queue", 105 * time.Millisecond, 115 * time.Millisecond}}
	for _, p := range phases {
		got := m[p.name]
		if len(got) != 1 || !got[0].Start.Equal(due.Add(p.start)) || !got[0].End.Equal(due.Add(p.stop)) {
			t.Errorf("%s span %+v, want %v → %v after due", p.name, got, p.start, p.stop)
		}
	}
	if q := m["queue"]; len(q) == 1 && q[0].Attrs["ax.node"] != "n1" {
		t.Errorf("queue span on %v, want n1", q[0].Attrs["ax.node"])
	}
	att := m["attempt"]
	if len(att) != 2 {
		t.Fatalf("attempt spans %+v", att)
	}
	for _, a := range att {
		n := int(a.Attrs["ax.attempt"].(int64))
		pid := axapi.AttemptParentID("t1", 3, n)
		if a.SpanID != hexID(pid[:]) || a.Kind != tracepb.Span_SPAN_KIND_CLIENT {
			t.Errorf("attempt %d: span id %s kind %v, want the callback's parent id %x", n, a.SpanID, a.Kind, pid)
		}
		switch n {
		case 1:
			if !a.Error || a.Message != "retryable: http 500: boom" || a.Attrs["http.response.status_code"] != int64(500) || a.Attrs["ax.node"] != "n1" ||
				a.Attrs["ax.executor"] != "app" || !a.Start.Equal(due.Add(115*time.Millisecond)) || !a.End.Equal(due.Add(200*time.Millisecond)) {
				t.Errorf("failed attempt span %+v", a)
			}
		case 2:
			if a.Error || a.Attrs["ax.outcome"] != "success" || a.Attrs["http.response.status_code"] != int64(200) || a.Attrs["ax.node"] != "n2" {
				t.Errorf("successful attempt span %+v", a)
			}
		}
	}
}

// Who exports: the node whose own Complete ended the run; the leader for
// a run the leader ended; nobody for a run ended by another node, a
// change that ended no run, or a trace that is not sampled. A task
// without a trace context gets a root span in the trace of its id, and a
// run ended DEAD is an error.
func TestWhoExports(t *testing.T) {
	dead := twoAttempts()
	dead.State = raftfsm.StateDead
	dead.Attempts = dead.Attempts[:1]
	s := store{"mine/3": twoAttempts(), "other/3": twoAttempts(), "led/3": dead, "unsampled/3": twoAttempts(), "nothing/3": twoAttempts()}
	unsampled := tp[:53] + "00"
	evs := []raftfsm.Event{
		{Type: raftfsm.CmdComplete, Task: task("mine", tp), RunEnded: 3, EndedBy: "n2"},
		{Type: raftfsm.CmdComplete, Task: task("other", tp), RunEnded: 3, EndedBy: "n1"},
		{Type: raftfsm.CmdComplete, Task: task("led", ""), RunEnded: 3},
		{Type: raftfsm.CmdComplete, Task: task("unsampled", unsampled), RunEnded: 3, EndedBy: "n2"},
		{Type: raftfsm.CmdComplete, Task: task("nothing", tp), EndedBy: "n2"},
		{Type: raftfsm.CmdComplete, Task: task("purged", tp), RunEnded: 3, EndedBy: "n2"},
	}
	for _, leader := range []bool{false, true} {
		spans, _ := export(t, s, leader, evs...)
		runs := map[string]oteltest.Span{}
		for _, sp := range spans {
			if sp.ParentID == "" || sp.ParentID == tp[36:52] {
				runs[sp.Attrs["ax.task.id"].(string)] = sp
			}
		}
		if _, ok := runs["mine"]; !ok || len(runs) != map[bool]int{false: 1, true: 2}[leader] {
			t.Errorf("leader %v: runs exported %v", leader, runs)
		}
		if r, ok := runs["led"]; ok {
			want := axapi.TaskTraceID("led")
			if r.TraceID != hexID(want[:]) || r.ParentID != "" || !r.Error || r.Message != "DEAD: http 500: boom" {
				t.Errorf("run the leader ended: %+v", r)
			}
		}
	}
}

// A shard's run span is in its parent task's trace, under the span of
// the parent's run, with or without a submitted traceparent (without one
// it was a trace of its own: the shard id's).
func TestShardRunSpanUnderItsParentsRun(t *testing.T) {
	shard := axapi.ShardID("big", 3, 5)
	parentRun := otelexport.SpanID("run", "big", 3, 0)
	for _, submitted := range []string{"", tp} {
		s := store{shard + "/1": twoAttempts()}
		ev := raftfsm.Event{Type: raftfsm.CmdComplete, Task: task(shard, submitted), RunEnded: 1, EndedBy: "n2"}
		spans, _ := export(t, s, false, ev)
		run := byName(spans)["ax.run mail"]
		if len(run) != 1 {
			t.Fatalf("traceparent %q: run spans %+v", submitted, spans)
		}
		wantTrace := axapi.TaskTraceID("big")
		if submitted != "" {
			wantTrace = [16]byte(mustHex(t, tp[3:35]))
		}
		if r := run[0]; r.TraceID != hexID(wantTrace[:]) || r.ParentID != hexID(parentRun[:]) {
			t.Errorf("traceparent %q: shard run span trace %s parent %s, want %x under %x", submitted, r.TraceID, r.ParentID, wantTrace, parentRun)
		}
	}
}

func mustHex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A full export queue drops runs and counts them instead of blocking
// the node's event loop.
func TestQueueFullDrops(t *testing.T) {
	e, err := otelexport.New(otelexport.Config{Endpoint: "http://127.0.0.1:1", Node: "n2", Leader: func() bool { return true },
		Store: store{}, Log: zerolog.Nop(), QueueSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	ev := raftfsm.Event{Type: raftfsm.CmdCancel, Task: task("x", ""), RunEnded: 1}
	for range 5 {
		e.OnEvent(&ev) // no Run: nothing takes them
	}
	if got := counter(t, e, "ax_otel_runs_dropped_total"); got != 3 {
		t.Errorf("dropped %v, want 3", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	e.Run(ctx) // drains the two queued (no record: nothing to send)
	if err := e.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestCheckEndpoint(t *testing.T) {
	for in, want := range map[string]string{
		"http://127.0.0.1:4318":          "http://127.0.0.1:4318/v1/traces",
		"https://otel.example:4318/":     "https://otel.example:4318/v1/traces",
		"http://127.0.0.1:4318/x/traces": "http://127.0.0.1:4318/x/traces",
		"127.0.0.1:4318":                 "",
		"ftp://h/":                       "",
		"http:///v1/traces":              "",
		"http://h:4318/?a=b":             "",
	} {
		got, err := otelexport.CheckEndpoint(in)
		if got != want || (err == nil) != (want != "") {
			t.Errorf("CheckEndpoint(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

// A collector that refuses is counted (ax_otel_spans_failed_total), and
// the node's event loop sees no allocation per event, run or not.
func TestFailuresCountedAndOnEventAllocatesNothing(t *testing.T) {
	e, err := otelexport.New(otelexport.Config{Endpoint: "http://127.0.0.1:1/v1/traces", Node: "n2", Leader: func() bool { return true },
		Store: store{"t1/3": twoAttempts()}, Log: zerolog.Nop(), QueueSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	none := raftfsm.Event{Type: raftfsm.CmdFire, Task: task("t1", tp)}
	ended := raftfsm.Event{Type: raftfsm.CmdComplete, Task: task("t1", tp), RunEnded: 3, EndedBy: "n2"}
	if n := testing.AllocsPerRun(100, func() { e.OnEvent(&none); e.OnEvent(&ended) }); n != 0 {
		t.Errorf("OnEvent: %v allocations per call", n)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	e.Run(ctx)
	sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer scancel()
	_ = e.Shutdown(sctx)
	if got := counter(t, e, "ax_otel_runs_exported_total"); got != 101 {
		t.Errorf("exported %v runs, want 101", got)
	}
	if got := counter(t, e, "ax_otel_spans_failed_total"); got == 0 {
		t.Errorf("no failed spans counted with a refusing collector")
	}
}

// A collector that answers other than 2xx (here 503, as one under load
// does) fails the batch: its spans are counted as failed, not as sent.
func TestCollectorErrorStatusCounted(t *testing.T) {
	var posts atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		posts.Add(1)
		if r.Header.Get("Content-Type") != "application/x-protobuf" {
			t.Errorf("Content-Type %q", r.Header.Get("Content-Type"))
		}
		http.Error(w, "busy", http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	e, err := otelexport.New(otelexport.Config{Endpoint: srv.URL, Node: "n2", Leader: func() bool { return true },
		Store: store{"t1/3": twoAttempts()}, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { e.Run(ctx); close(done) }()
	e.OnEvent(&raftfsm.Event{Type: raftfsm.CmdComplete, Task: task("t1", tp), RunEnded: 3, EndedBy: "n2"})
	cancel()
	<-done
	if err := e.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if posts.Load() == 0 {
		t.Fatal("nothing posted")
	}
	if got := counter(t, e, "ax_otel_spans_failed_total"); got != 6 {
		t.Errorf("failed spans %v, want the run's 6", got)
	}
}

// BenchmarkSpans: the cost of turning one two-attempt run into its six
// spans (the batch span processor drops what it cannot hold).
func BenchmarkSpans(b *testing.B) {
	e, err := otelexport.New(otelexport.Config{Endpoint: "http://127.0.0.1:1", Node: "n2", Leader: func() bool { return true },
		Store: store{}, Log: zerolog.Nop()})
	if err != nil {
		b.Fatal(err)
	}
	r := twoAttempts()
	b.ReportAllocs()
	for b.Loop() {
		e.Spans("t1", "mail", tp, "", r)
	}
	b.StopTimer()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = e.Shutdown(ctx)
}

// A run whose first attempt found the executor unavailable: the time
// until the attempt that reached it is retries, not commit, in the run
// span's attributes and in its commit child (which starts at that
// attempt's Fire).
func TestRunSpansRetriesApartFromCommit(t *testing.T) {
	r := &raftfsm.RunRecord{
		Run: 1, State: raftfsm.StateSuccess, DueMs: at(0), FiredMs: at(100 * time.Millisecond),
		StartedMs: at(1115 * time.Millisecond), FinishedMs: at(1200 * time.Millisecond),
		Late: true, ParkedNs: int64(100 * time.Millisecond), CommitNs: int64(1005 * time.Millisecond), QueueNs: int64(10 * time.Millisecond),
		Attempts: []raftfsm.AttemptRecord{
			{Attempt: 1, Node: "n1", FiredMs: at(100 * time.Millisecond), EndedMs: at(101 * time.Millisecond), Outcome: raftfsm.OutcomeUnavailable},
			{Attempt: 1, Node: "n1", Executor: "app", FiredMs: at(1100 * time.Millisecond), StartedMs: at(1115 * time.Millisecond), EndedMs: at(1190 * time.Millisecond), Outcome: raftfsm.OutcomeSuccess, HTTPStatus: 200},
		},
	}
	spans, _ := export(t, store{"t1/1": r}, false, raftfsm.Event{Type: raftfsm.CmdComplete, Task: task("t1", tp), RunEnded: 1, EndedBy: "n2"})
	m := byName(spans)
	run := m["ax.run mail"]
	if len(run) != 1 {
		t.Fatalf("run spans %+v", m)
	}
	for k, v := range map[string]float64{"ax.lateness.total_ms": 1115, "ax.lateness.retries_ms": 1000, "ax.lateness.commit_ms": 5} {
		if run[0].Attrs[k] != v {
			t.Errorf("run span %s = %v, want %v", k, run[0].Attrs[k], v)
		}
	}
	if c := m["commit"]; len(c) != 1 || !c[0].Start.Equal(due.Add(1100*time.Millisecond)) || !c[0].End.Equal(due.Add(1105*time.Millisecond)) {
		t.Errorf("commit span %+v, want 1.1 s → 1.105 s after due", c)
	}
}
