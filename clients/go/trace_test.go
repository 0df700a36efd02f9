package ax_test

import (
	"context"
	"encoding/json"
	"testing"

	"go.opentelemetry.io/otel/trace"

	ax "github.com/axsched/ax/clients/go"
)

const (
	tpA = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	tpB = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"
)

// lastSubmitTrace returns the traceparent and tracestate fields of the
// last request's body (of its items, for a batch).
func lastSubmitTrace(t *testing.T, f *fakeSidecar) [][2]string {
	t.Helper()
	reqs := f.Requests()
	body := reqs[len(reqs)-1].Body
	type item struct {
		TraceParent string `json:"traceparent"`
		TraceState  string `json:"tracestate"`
	}
	var batch struct{ Tasks []item }
	var one item
	var out [][2]string
	if json.Unmarshal(body, &batch); len(batch.Tasks) > 0 {
		for _, it := range batch.Tasks {
			out = append(out, [2]string{it.TraceParent, it.TraceState})
		}
		return out
	}
	if err := json.Unmarshal(body, &one); err != nil {
		t.Fatal(err)
	}
	return [][2]string{{one.TraceParent, one.TraceState}}
}

// Submit sends the request's trace context, else that of its context:
// WithTraceContext, else the OpenTelemetry span context.
func Test_Submit_TraceContext(t *testing.T) {
	f := startFakeSidecar(t)
	c := newClient(t, f)
	ctx := testContext(t)
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: [16]byte{0x0a, 0xf7, 0x65, 0x19, 0x16, 0xcd, 0x43, 0xdd, 0x84, 0x48, 0xeb, 0x21, 0x1c, 0x80, 0x31, 0x9c},
		SpanID:  [8]byte{0xb7, 0xad, 0x6b, 0x71, 0x69, 0x20, 0x33, 0x31},
	})
	ts, _ := trace.ParseTraceState("congo=t61rcWkgMzE")
	otelCtx := trace.ContextWithSpanContext(ctx, sc.WithTraceState(ts))
	for _, tc := range []struct {
		name  string
		ctx   context.Context
		req   ax.SubmitRequest
		tp, s string
	}{
		{"none", ctx, ax.SubmitRequest{}, "", ""},
		{"request", ctx, ax.SubmitRequest{TraceParent: tpA, TraceState: "rojo=1"}, tpA, "rojo=1"},
		{"WithTraceContext", ax.WithTraceContext(ctx, tpA, "rojo=1"), ax.SubmitRequest{}, tpA, "rojo=1"},
		{"OpenTelemetry", otelCtx, ax.SubmitRequest{}, tpB, "congo=t61rcWkgMzE"},
		{"WithTraceContext wins over OpenTelemetry", ax.WithTraceContext(otelCtx, tpA, ""), ax.SubmitRequest{}, tpA, ""},
		{"the request wins over the context", otelCtx, ax.SubmitRequest{TraceParent: tpA}, tpA, ""},
		{"an empty WithTraceContext uncovers OpenTelemetry", ax.WithTraceContext(ax.WithTraceContext(otelCtx, tpA, ""), "", ""), ax.SubmitRequest{}, tpB, "congo=t61rcWkgMzE"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := tc.req
			req.Handler = "h"
			if _, err := c.Submit(tc.ctx, req); err != nil {
				t.Fatal(err)
			}
			if got := lastSubmitTrace(t, f); got[0] != [2]string{tc.tp, tc.s} {
				t.Errorf("sent %q, want %q %q", got[0], tc.tp, tc.s)
			}
			if _, err := c.SubmitBatch(tc.ctx, []ax.SubmitRequest{req, {Handler: "h", TraceParent: tpA}}); err != nil {
				t.Fatal(err)
			}
			if got := lastSubmitTrace(t, f); len(got) != 2 || got[0] != [2]string{tc.tp, tc.s} || got[1][0] != tpA {
				t.Errorf("batch sent %q, want %q %q first", got, tc.tp, tc.s)
			}
		})
	}
}

// An executor's handler gets the callback's trace context: the Delivery's
// fields, and its context carries it as the remote span context (unless a
// middleware put a span context there first).
func Test_Executor_TraceContext(t *testing.T) {
	ex := ax.NewExecutor()
	var got *ax.Delivery
	var inCtx trace.SpanContext
	ex.HandleFunc("h", func(ctx context.Context, d *ax.Delivery) error {
		got, inCtx = d, trace.SpanContextFromContext(ctx)
		return nil
	})
	r := callback("h", nil)
	r.Header.Set(ax.HeaderTraceParent, tpA)
	r.Header.Add(ax.HeaderTraceState, "rojo=1")
	r.Header.Add(ax.HeaderTraceState, "congo=2")
	if rec := serve(ex, r); rec.Code != 200 {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	if got.TraceParent != tpA || got.TraceState != "rojo=1,congo=2" || got.TraceID() != tpA[3:35] {
		t.Fatalf("delivery traceparent %q tracestate %q trace id %q", got.TraceParent, got.TraceState, got.TraceID())
	}
	if !inCtx.IsValid() || !inCtx.IsRemote() || inCtx.TraceID().String() != tpA[3:35] || inCtx.SpanID().String() != tpA[36:52] ||
		!inCtx.IsSampled() || inCtx.TraceState().Get("congo") != "2" {
		t.Fatalf("handler context span context %+v", inCtx)
	}
	if !got.SpanContext().Equal(inCtx) {
		t.Errorf("Delivery.SpanContext %+v differs from the context's %+v", got.SpanContext(), inCtx)
	}

	// Without a traceparent (an older sidecar): nothing.
	if rec := serve(ex, callback("h", nil)); rec.Code != 200 {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	if inCtx.IsValid() || got.SpanContext().IsValid() || got.TraceID() != "" {
		t.Errorf("no traceparent: span context %+v", inCtx)
	}

	// A middleware's span context is kept.
	mine := trace.NewSpanContext(trace.SpanContextConfig{TraceID: [16]byte{1}, SpanID: [8]byte{2}})
	ex2 := ax.NewExecutor()
	ex2.Use(func(next ax.Handler) ax.Handler {
		return ax.HandlerFunc(func(ctx context.Context, d *ax.Delivery) error {
			return next.Handle(trace.ContextWithSpanContext(ctx, mine), d)
		})
	})
	ex2.HandleFunc("h", func(ctx context.Context, d *ax.Delivery) error {
		inCtx = trace.SpanContextFromContext(ctx)
		return nil
	})
	r = callback("h", nil)
	r.Header.Set(ax.HeaderTraceParent, tpA)
	if rec := serve(ex2, r); rec.Code != 200 {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	if !inCtx.Equal(mine) {
		t.Errorf("the middleware's span context was replaced: %+v", inCtx)
	}
}
