package otelexport

import (
	"context"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// countingExporter counts and logs the spans its exporter failed to send.
type countingExporter struct {
	sdktrace.SpanExporter
	e *Exporter
}

func (c countingExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	err := c.SpanExporter.ExportSpans(ctx, spans)
	if err != nil {
		c.e.failed.Add(float64(len(spans)))
		c.e.cfg.Log.Warn().Err(err).Int("spans", len(spans)).Msg("otel export failed: spans dropped")
	}
	return err
}
