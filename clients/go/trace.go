package ax

import (
	"context"
	"encoding/hex"

	"go.opentelemetry.io/otel/trace"

	"github.com/axsched/ax/clients/go/axapi"
)

// Trace context (W3C Trace Context): a task submitted from a trace keeps
// it, and every callback of the task carries a traceparent with the
// task's trace id and a parent id of the attempt's own. Submit and
// SubmitBatch take it from SubmitRequest.TraceParent, else from their
// context: WithTraceContext, else the OpenTelemetry span context in it
// (go.opentelemetry.io/otel/trace; only the API, no SDK, is needed). An
// Executor gives handlers Delivery.TraceParent and TraceState, and a
// context carrying the callback's span context as the remote parent, so
// that a span a handler starts with OpenTelemetry continues the task's
// trace.

// traceKey is the context key of WithTraceContext.
type traceKey struct{}

type traceValue struct{ parent, state string }

// WithTraceContext returns a copy of ctx carrying a W3C traceparent and
// tracestate, which Submit and SubmitBatch send for requests without a
// TraceParent of their own; it wins over an OpenTelemetry span context in
// ctx. An empty traceparent removes what ctx carried (the OpenTelemetry
// span context, if any, applies again).
func WithTraceContext(ctx context.Context, traceparent, tracestate string) context.Context {
	if traceparent == "" {
		return context.WithValue(ctx, traceKey{}, (*traceValue)(nil))
	}
	return context.WithValue(ctx, traceKey{}, &traceValue{traceparent, tracestate})
}

// TraceContextFromContext returns the trace context Submit would send from
// ctx: WithTraceContext's, else that of the OpenTelemetry span context in
// ctx (a valid one: version 00, its trace id, span id and flags, and its
// trace state); empty when there is none.
func TraceContextFromContext(ctx context.Context) (traceparent, tracestate string) {
	if v, ok := ctx.Value(traceKey{}).(*traceValue); ok && v != nil {
		return v.parent, v.state
	}
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return "", ""
	}
	return string(axapi.AppendTraceParent(nil, sc.TraceID(), sc.SpanID(), byte(sc.TraceFlags()))), sc.TraceState().String()
}

// withTrace returns req with the trace context of ctx when it has none.
func withTrace(ctx context.Context, req SubmitRequest) SubmitRequest {
	if req.TraceParent == "" {
		req.TraceParent, req.TraceState = TraceContextFromContext(ctx)
	}
	return req
}

// SpanContext returns the OpenTelemetry span context of the callback's
// traceparent and tracestate, marked remote; an invalid one (no
// traceparent: a sidecar older than trace context) when there is none.
func (d *Delivery) SpanContext() trace.SpanContext {
	p, err := axapi.ParseTraceParent(d.TraceParent)
	if err != nil {
		return trace.SpanContext{}
	}
	cfg := trace.SpanContextConfig{TraceID: p.TraceID, SpanID: p.ParentID, TraceFlags: trace.TraceFlags(p.Flags), Remote: true}
	if ts, err := trace.ParseTraceState(d.TraceState); err == nil {
		cfg.TraceState = ts
	}
	return trace.NewSpanContext(cfg)
}

// withRemoteSpan returns ctx carrying d's span context as the remote
// parent, unless ctx has a valid span context already (a tracing
// middleware around the Executor started a span from the same headers).
func withRemoteSpan(ctx context.Context, d *Delivery) context.Context {
	if trace.SpanContextFromContext(ctx).IsValid() {
		return ctx
	}
	if sc := d.SpanContext(); sc.IsValid() {
		return trace.ContextWithRemoteSpanContext(ctx, sc)
	}
	return ctx
}

// TraceID returns the trace id of the callback's traceparent in hex, ""
// when it has none: for log lines.
func (d *Delivery) TraceID() string {
	p, err := axapi.ParseTraceParent(d.TraceParent)
	if err != nil {
		return ""
	}
	return hex.EncodeToString(p.TraceID[:])
}
