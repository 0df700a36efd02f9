package ipc

import (
	"bytes"
	"slices"

	"github.com/valyala/fasthttp"

	"github.com/axsched/ax/clients/go/axapi"
)

// W3C Trace Context on submits (docs/DESIGN.md section 12). A submit
// carries it in the JSON fields traceparent and tracestate, or in the
// request's traceparent and tracestate headers; the fields win (the pair
// comes from one place), and in a batch the headers apply to the items
// without a traceparent field. Both are validated strictly
// (axapi.ParseTraceParent, axapi.CheckTraceState): an invalid one fails
// the whole request with invalid_traceparent or invalid_tracestate, and
// nothing is stored. OpenTelemetry's propagation.TraceContext is not used
// for this: it says nothing of why a value is refused, keeps only the
// sampled flag, and drops an invalid tracestate silently.

// TraceContext is a submit's W3C trace context, validated; the zero value
// is none.
type TraceContext struct {
	Parent string // traceparent
	State  string // tracestate; "" when Parent is
}

// trace decodes the traceparent and tracestate fields of a submit.
func (r *submitRequest) trace(s *TaskSpec) error {
	if r.TraceParent == "" {
		if r.TraceState != "" {
			return Errorf(ErrInvalidTracestate, "tracestate: given without a traceparent field")
		}
		return nil
	}
	if _, err := axapi.ParseTraceParent(r.TraceParent); err != nil {
		return Errorf(ErrInvalidTraceparent, "%v", err)
	}
	if err := axapi.CheckTraceState(r.TraceState); err != nil {
		return Errorf(ErrInvalidTracestate, "%v", err)
	}
	s.TraceParent, s.TraceState = r.TraceParent, r.TraceState
	return nil
}

// TraceHeaders validates the traceparent and tracestate headers of a
// request (all the values of each, as received). More than one
// traceparent is invalid; several tracestate headers are one list, joined
// with ","; a tracestate without a traceparent is ignored, as W3C Trace
// Context asks.
func TraceHeaders(parents, states [][]byte) (TraceContext, error) {
	switch len(parents) {
	case 0:
		return TraceContext{}, nil
	case 1:
	default:
		return TraceContext{}, Errorf(ErrInvalidTraceparent, "invalid trace context: %d traceparent headers, want one", len(parents))
	}
	tc := TraceContext{Parent: string(parents[0]), State: string(bytes.Join(states, []byte(",")))}
	if _, err := axapi.ParseTraceParent(tc.Parent); err != nil {
		return TraceContext{}, Errorf(ErrInvalidTraceparent, "%v (traceparent header)", err)
	}
	if err := axapi.CheckTraceState(tc.State); err != nil {
		return TraceContext{}, Errorf(ErrInvalidTracestate, "%v (tracestate header)", err)
	}
	return tc, nil
}

// requestTrace returns the trace context of a request's headers.
func requestTrace(ctx *fasthttp.RequestCtx) (TraceContext, error) {
	h := &ctx.Request.Header
	// PeekAll's result lives in a buffer the next PeekAll reuses.
	parents := slices.Clone(h.PeekAll(axapi.HeaderTraceParent))
	if len(parents) == 0 {
		return TraceContext{}, nil
	}
	return TraceHeaders(parents, h.PeekAll(axapi.HeaderTraceState))
}

// inheritTrace gives s the trace context tc of the request's headers when
// it has none of its own (fields win).
func (s *TaskSpec) inheritTrace(tc TraceContext) {
	if s.TraceParent == "" {
		s.TraceParent, s.TraceState = tc.Parent, tc.State
	}
}
