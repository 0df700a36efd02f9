package otelexport

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// otlpHTTP is the span exporter for Config.Endpoint: OTLP/HTTP with
// binary protobuf (the OTLP specification's default encoding for HTTP),
// one POST of an ExportTraceServiceRequest per batch, no retry (the run
// record stays the source of truth; a failed batch is counted and
// dropped by countingExporter).
//
// Why not the SDK's otlptracehttp: it imports the OTLP collector
// package, whose generated gRPC service code links google.golang.org/grpc
// and grpc-gateway into the binary (3.7 MB of a stripped ax, which took
// the image past its 26 MB bound). The span data is built with the
// OpenTelemetry SDK and encoded with the official OTLP protobuf types
// (go.opentelemetry.io/proto/otlp); only the request's one-field wrapper
// (ExportTraceServiceRequest: repeated ResourceSpans resource_spans = 1)
// is written here, with protowire.
type otlpHTTP struct {
	url    string
	client *http.Client
}

func newOTLPHTTP(url string) *otlpHTTP {
	return &otlpHTTP{url: url, client: &http.Client{Timeout: ExportTimeout}}
}

// ExportSpans POSTs spans to the collector; an answer other than 2xx is
// an error naming the status.
func (x *otlpHTTP) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	if len(spans) == 0 {
		return nil
	}
	body, err := encodeExportRequest(spans)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, x.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-protobuf")
	resp, err := x.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("otlp collector answered %s: %s", resp.Status, bytes.TrimSpace(msg))
	}
	return nil
}

// Shutdown has nothing to release.
func (x *otlpHTTP) Shutdown(context.Context) error { return nil }

// encodeExportRequest returns the protobuf encoding of an OTLP
// ExportTraceServiceRequest holding spans, grouped by resource and
// instrumentation scope.
func encodeExportRequest(spans []sdktrace.ReadOnlySpan) ([]byte, error) {
	type scopeKey struct{ name, version string }
	var order []*tracepb.ResourceSpans
	byRes := map[attribute.Distinct]*tracepb.ResourceSpans{}
	byScope := map[*tracepb.ResourceSpans]map[scopeKey]*tracepb.ScopeSpans{}
	for _, s := range spans {
		rk := s.Resource().Equivalent()
		rs := byRes[rk]
		if rs == nil {
			rs = &tracepb.ResourceSpans{Resource: &resourcepb.Resource{Attributes: keyValues(s.Resource().Attributes())}, SchemaUrl: s.Resource().SchemaURL()}
			byRes[rk] = rs
			byScope[rs] = map[scopeKey]*tracepb.ScopeSpans{}
			order = append(order, rs)
		}
		sc := s.InstrumentationScope()
		k := scopeKey{sc.Name, sc.Version}
		ss := byScope[rs][k]
		if ss == nil {
			ss = &tracepb.ScopeSpans{Scope: &commonpb.InstrumentationScope{Name: sc.Name, Version: sc.Version}, SchemaUrl: sc.SchemaURL}
			byScope[rs][k] = ss
			rs.ScopeSpans = append(rs.ScopeSpans, ss)
		}
		ss.Spans = append(ss.Spans, spanProto(s))
	}
	var out []byte
	for _, rs := range order {
		b, err := proto.Marshal(rs)
		if err != nil {
			return nil, err
		}
		out = protowire.AppendTag(out, 1, protowire.BytesType)
		out = protowire.AppendBytes(out, b)
	}
	return out, nil
}

// spanProto converts one span to its OTLP form.
func spanProto(s sdktrace.ReadOnlySpan) *tracepb.Span {
	sc := s.SpanContext()
	tid, sid := sc.TraceID(), sc.SpanID()
	p := &tracepb.Span{
		TraceId:                tid[:],
		SpanId:                 sid[:],
		TraceState:             sc.TraceState().String(),
		Flags:                  uint32(sc.TraceFlags()),
		Name:                   s.Name(),
		Kind:                   tracepb.Span_SpanKind(s.SpanKind()), // the SDK's kinds are OTLP's numbers
		StartTimeUnixNano:      uint64(s.StartTime().UnixNano()),
		EndTimeUnixNano:        uint64(s.EndTime().UnixNano()),
		Attributes:             keyValues(s.Attributes()),
		DroppedAttributesCount: uint32(s.DroppedAttributes()),
		DroppedEventsCount:     uint32(s.DroppedEvents()),
		DroppedLinksCount:      uint32(s.DroppedLinks()),
	}
	if parent := s.Parent(); parent.SpanID().IsValid() {
		psid := parent.SpanID()
		p.ParentSpanId = psid[:]
	}
	for _, ev := range s.Events() {
		p.Events = append(p.Events, &tracepb.Span_Event{
			TimeUnixNano: uint64(ev.Time.UnixNano()), Name: ev.Name,
			Attributes: keyValues(ev.Attributes), DroppedAttributesCount: uint32(ev.DroppedAttributeCount),
		})
	}
	switch st := s.Status(); st.Code {
	case codes.Error:
		p.Status = &tracepb.Status{Code: tracepb.Status_STATUS_CODE_ERROR, Message: st.Description}
	case codes.Ok:
		p.Status = &tracepb.Status{Code: tracepb.Status_STATUS_CODE_OK}
	}
	return p
}

func keyValues(kvs []attribute.KeyValue) []*commonpb.KeyValue {
	if len(kvs) == 0 {
		return nil
	}
	out := make([]*commonpb.KeyValue, 0, len(kvs))
	for _, kv := range kvs {
		out = append(out, &commonpb.KeyValue{Key: string(kv.Key), Value: anyValue(kv.Value)})
	}
	return out
}

func anyValue(v attribute.Value) *commonpb.AnyValue {
	switch v.Type() {
	case attribute.BOOL:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_BoolValue{BoolValue: v.AsBool()}}
	case attribute.INT64:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: v.AsInt64()}}
	case attribute.FLOAT64:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_DoubleValue{DoubleValue: v.AsFloat64()}}
	case attribute.STRING:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v.AsString()}}
	case attribute.BOOLSLICE:
		return arrayValue(v.AsBoolSlice(), func(b bool) *commonpb.AnyValue { return anyValue(attribute.BoolValue(b)) })
	case attribute.INT64SLICE:
		return arrayValue(v.AsInt64Slice(), func(i int64) *commonpb.AnyValue { return anyValue(attribute.Int64Value(i)) })
	case attribute.FLOAT64SLICE:
		return arrayValue(v.AsFloat64Slice(), func(f float64) *commonpb.AnyValue { return anyValue(attribute.Float64Value(f)) })
	case attribute.STRINGSLICE:
		return arrayValue(v.AsStringSlice(), func(s string) *commonpb.AnyValue { return anyValue(attribute.StringValue(s)) })
	}
	return &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v.Emit()}}
}

func arrayValue[T any](xs []T, one func(T) *commonpb.AnyValue) *commonpb.AnyValue {
	vals := make([]*commonpb.AnyValue, len(xs))
	for i, x := range xs {
		vals[i] = one(x)
	}
	return &commonpb.AnyValue{Value: &commonpb.AnyValue_ArrayValue{ArrayValue: &commonpb.ArrayValue{Values: vals}}}
}
