package otelexport

import (
	"context"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// countingExporter counts and logs (in the node's log) the spans its
// exporter failed to send, and then reports success to the batch span
// processor: the batch is dropped either way, and an error would also go
// to OpenTelemetry's global error handler, which prints plain text on
// stderr beside the node's JSON log.
type countingExporter struct {
	sdktrace.SpanExporter
	e *Exporter
}

func (c countingExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	if err := c.SpanExporter.ExportSpans(ctx, spans); err != nil {
		c.e.failed.Add(float64(len(spans)))
		c.e.cfg.Log.Warn().Err(err).Int("spans", len(spans)).Msg("otel export failed: spans dropped")
	}
	return nil
}
