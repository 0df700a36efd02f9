// Package oteltest is a fake OpenTelemetry collector for tests: an
// OTLP/HTTP server on 127.0.0.1 that decodes the protobuf
// ExportTraceServiceRequest of each POST to /v1/traces and keeps its
// spans. It imports only the OTLP protobuf types and the standard library.
package oteltest

import (
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// Span is one received span, ids in lowercase hex ("" for no parent).
type Span struct {
	Service  string // the resource's service.name
	Instance string // the resource's service.instance.id
	TraceID  string
	SpanID   string
	ParentID string
	// TraceState is the span's W3C tracestate.
	TraceState string
	Name       string
	Kind       tracepb.Span_SpanKind
	Start, End time.Time
	// Attrs holds string, int64, float64 and bool attribute values.
	Attrs map[string]any
	// Error is set when the span's status is Error, with its message.
	Error   bool
	Message string
}

// Collector is a fake OTLP/HTTP collector.
type Collector struct {
	srv *httptest.Server
	mu  sync.Mutex
	// spans received, in order
	spans []Span
	// Requests counts the POSTs received.
	requests int
}

// New starts a collector; Close stops it.
func New() *Collector {
	c := &Collector{}
	c.srv = httptest.NewServer(http.HandlerFunc(c.serve))
	return c
}

// URL is the collector's base URL (http://127.0.0.1:PORT), what
// --otel-endpoint takes.
func (c *Collector) URL() string { return c.srv.URL }

// Close stops the server.
func (c *Collector) Close() { c.srv.Close() }

// Spans returns a copy of the spans received so far.
func (c *Collector) Spans() []Span {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Span(nil), c.spans...)
}

// Requests returns the number of export requests received.
func (c *Collector) Requests() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.requests
}

func (c *Collector) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
		http.Error(w, "want POST /v1/traces application/x-protobuf", http.StatusBadRequest)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var req coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(body, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var got []Span
	for _, rs := range req.GetResourceSpans() {
		res := attrs(rs.GetResource().GetAttributes())
		service, _ := res["service.name"].(string)
		instance, _ := res["service.instance.id"].(string)
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				got = append(got, Span{
					Service: service, Instance: instance,
					TraceID: hex.EncodeToString(s.GetTraceId()), SpanID: hex.EncodeToString(s.GetSpanId()),
					ParentID: hex.EncodeToString(s.GetParentSpanId()), TraceState: s.GetTraceState(),
					Name: s.GetName(), Kind: s.GetKind(),
					Start: time.Unix(0, int64(s.GetStartTimeUnixNano())), End: time.Unix(0, int64(s.GetEndTimeUnixNano())),
					Attrs: attrs(s.GetAttributes()),
					Error: s.GetStatus().GetCode() == tracepb.Status_STATUS_CODE_ERROR, Message: s.GetStatus().GetMessage(),
				})
			}
		}
	}
	c.mu.Lock()
	c.spans = append(c.spans, got...)
	c.requests++
	c.mu.Unlock()
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(out)
}

func attrs(kvs []*commonpb.KeyValue) map[string]any {
	m := make(map[string]any, len(kvs))
	for _, kv := range kvs {
		switch v := kv.GetValue().GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			m[kv.GetKey()] = v.StringValue
		case *commonpb.AnyValue_IntValue:
			m[kv.GetKey()] = v.IntValue
		case *commonpb.AnyValue_DoubleValue:
			m[kv.GetKey()] = v.DoubleValue
		case *commonpb.AnyValue_BoolValue:
			m[kv.GetKey()] = v.BoolValue
		}
	}
	return m
}
