package ipc

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/axsched/ax/clients/go/axapi"
)

const (
	tpA = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	tpB = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"
)

// doTrace sends a request with extra headers (each value a header line of
// its own).
func (ts *testServer) doTrace(method, path, body string, hdr http.Header) reply {
	ts.t.Helper()
	req, err := http.NewRequest(method, "http://ax"+path, strings.NewReader(body))
	if err != nil {
		ts.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, vs := range hdr {
		req.Header[k] = vs
	}
	resp, err := ts.client.Do(req)
	if err != nil {
		ts.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{status: resp.StatusCode, header: resp.Header, body: b}
}

func TestSubmitTraceContext(t *testing.T) {
	ts := startServer(t, ServerOptions{})
	hdr := func(kv ...string) http.Header {
		h := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			h[kv[i]] = append(h[kv[i]], kv[i+1])
		}
		return h
	}
	for _, tc := range []struct {
		name              string
		body              string
		hdr               http.Header
		wantTP, wantState string
	}{
		{"none", `{"handler":"h"}`, nil, "", ""},
		{"field", `{"handler":"h","traceparent":"` + tpA + `","tracestate":"rojo=1"}`, nil, tpA, "rojo=1"},
		{"header", `{"handler":"h"}`, hdr("traceparent", tpA, "tracestate", "rojo=1"), tpA, "rojo=1"},
		{"two tracestate headers are one list", `{"handler":"h"}`, hdr("traceparent", tpA, "tracestate", "rojo=1", "tracestate", "congo=2"), tpA, "rojo=1,congo=2"},
		{"fields win over headers, as a pair", `{"handler":"h","traceparent":"` + tpB + `"}`, hdr("traceparent", tpA, "tracestate", "rojo=1"), tpB, ""},
		{"a tracestate header alone is ignored", `{"handler":"h"}`, hdr("tracestate", "rojo=1"), "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := ts.on(t).doTrace("POST", "/v1/tasks", tc.body, tc.hdr)
			if r.status != http.StatusCreated {
				t.Fatalf("status %d: %s", r.status, r.body)
			}
			got := ts.backend.lastSpec
			if got.TraceParent != tc.wantTP || got.TraceState != tc.wantState {
				t.Errorf("stored traceparent %q tracestate %q, want %q %q", got.TraceParent, got.TraceState, tc.wantTP, tc.wantState)
			}
		})
	}
	for _, tc := range []struct {
		name, body string
		hdr        http.Header
		code, msg  string
	}{
		{"uppercase field", `{"handler":"h","traceparent":"` + strings.ToUpper(tpA) + `"}`, nil, axapi.CodeInvalidTraceparent, "lowercase hex"},
		{"zero trace id", `{"handler":"h","traceparent":"00-00000000000000000000000000000000-00f067aa0ba902b7-01"}`, nil, axapi.CodeInvalidTraceparent, "all zeros"},
		{"tracestate field alone", `{"handler":"h","tracestate":"rojo=1"}`, nil, axapi.CodeInvalidTracestate, "without a traceparent"},
		{"bad tracestate field", `{"handler":"h","traceparent":"` + tpA + `","tracestate":"Rojo=1"}`, nil, axapi.CodeInvalidTracestate, "key"},
		{"bad header", `{"handler":"h"}`, hdr("traceparent", tpA+"-"), axapi.CodeInvalidTraceparent, "traceparent header"},
		{"two traceparent headers", `{"handler":"h"}`, hdr("traceparent", tpA, "traceparent", tpB), axapi.CodeInvalidTraceparent, "2 traceparent headers"},
		{"bad tracestate header", `{"handler":"h"}`, hdr("traceparent", tpA, "tracestate", "a=1,a=2"), axapi.CodeInvalidTracestate, "twice"},
		{"bad header even where a field wins", `{"handler":"h","traceparent":"` + tpB + `"}`, hdr("traceparent", "garbage"), axapi.CodeInvalidTraceparent, "traceparent header"},
		{"wrong type", `{"handler":"h","traceparent":1}`, nil, axapi.CodeBadRequest, "W3C traceparent"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts.backend.lastSpec = TaskSpec{}
			r := ts.on(t).doTrace("POST", "/v1/tasks", tc.body, tc.hdr)
			r.wantError(t, http.StatusBadRequest, tc.code, tc.msg)
			if ts.backend.lastSpec.Handler != "" {
				t.Errorf("the backend got a submit: %+v", ts.backend.lastSpec)
			}
		})
	}
}

func TestSubmitBatchTraceContext(t *testing.T) {
	ts := startServer(t, ServerOptions{})
	body := `{"tasks":[{"id":"a","handler":"h"},{"id":"b","handler":"h","traceparent":"` + tpB + `","tracestate":"x=1"}]}`
	r := ts.doTrace("POST", "/v1/tasks/batch", body, http.Header{"Traceparent": {tpA}, "Tracestate": {"rojo=1"}})
	if r.status != http.StatusOK {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	got := ts.backend.lastBatch
	if len(got) != 2 || got[0].TraceParent != tpA || got[0].TraceState != "rojo=1" || got[1].TraceParent != tpB || got[1].TraceState != "x=1" {
		t.Fatalf("batch specs: %+v", got)
	}
	ts.backend.lastBatch = nil
	body = `{"tasks":[{"id":"c","handler":"h"},{"id":"d","handler":"h","traceparent":"00-xyz"}]}`
	ts.doTrace("POST", "/v1/tasks/batch", body, nil).wantError(t, http.StatusBadRequest, axapi.CodeInvalidTraceparent, "tasks[1]: ")
	if ts.backend.lastBatch != nil {
		t.Fatalf("a batch with an invalid item reached the backend")
	}
}

// TestSubmitTraceContext_SameSpec: a retried submit from another trace is
// the same task, not a conflict.
func TestSubmitTraceContext_SameSpec(t *testing.T) {
	ts := startServer(t, ServerOptions{})
	if r := ts.do("POST", "/v1/tasks", `{"id":"t","handler":"h","traceparent":"`+tpA+`"}`); r.status != http.StatusCreated {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	if r := ts.do("POST", "/v1/tasks", `{"id":"t","handler":"h","traceparent":"`+tpB+`"}`); r.status != http.StatusOK {
		t.Fatalf("resubmit from another trace: status %d: %s, want 200", r.status, r.body)
	}
}

// TestTraceParent_AgreesWithOpenTelemetry checks the parser against
// OpenTelemetry's propagator on the values both define: whatever
// OpenTelemetry accepts, ParseTraceParent accepts with the same ids, and
// what ParseTraceParent refuses OpenTelemetry refuses too, except in two
// places: version 00 flags above 02, which OpenTelemetry refuses and level
// 1 says to ignore, and a version 00 traceparent followed by "-", which
// OpenTelemetry v1.41 accepts and the specification does not (version 00
// is exactly 55 bytes).
func TestTraceParent_AgreesWithOpenTelemetry(t *testing.T) {
	cases := []string{
		tpA, tpB, strings.ToUpper(tpA), tpA + "-", tpA[:54], "ff" + tpA[2:], "01" + tpA[2:], "01" + tpA[2:] + "-extra",
		"01" + tpA[2:] + "x", "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-02",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-09", "0g" + tpA[2:], "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
		"", "00", " " + tpA[1:],
	}
	for _, s := range cases {
		ctx := propagation.TraceContext{}.Extract(t.Context(), propagation.MapCarrier{"traceparent": s})
		sc := trace.SpanContextFromContext(ctx)
		p, err := axapi.ParseTraceParent(s)
		switch {
		case sc.IsValid() && err != nil && s == tpA+"-":
		case sc.IsValid() && err != nil:
			t.Errorf("%q: OpenTelemetry accepts it, ParseTraceParent says %v", s, err)
		case sc.IsValid() && (p.TraceID != sc.TraceID() || p.ParentID != [8]byte(sc.SpanID())):
			t.Errorf("%q: ids differ from OpenTelemetry's", s)
		case !sc.IsValid() && err == nil && !(p.Version == 0 && p.Flags > 2):
			t.Errorf("%q: OpenTelemetry refuses it, ParseTraceParent accepts it", s)
		case err != nil && !errors.Is(err, axapi.ErrTraceContext):
			t.Errorf("%q: %v does not wrap ErrTraceContext", s, err)
		}
	}
}
