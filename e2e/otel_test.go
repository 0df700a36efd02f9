package e2e

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	ax "github.com/axsched/ax/clients/go"
	"github.com/axsched/ax/e2e/harness"
	"github.com/axsched/ax/sidecar/otelexport"
	"github.com/axsched/ax/sidecar/otelexport/oteltest"
)

// TestOtelExport: three real nodes started with --otel-endpoint of a
// fake OTLP/HTTP collector, a Go executor (ax.Executor) registered on a
// follower that fails a task's first attempt: the run, submitted with a
// traceparent, arrives at the collector once, in that trace, under the
// submitter's span, with an error span for the failed attempt and a
// plain one for the second; each attempt span's id is the parent id of
// the span context the executor's handler got, so the executor's own
// spans nest under ax's.
func TestOtelExport(t *testing.T) {
	harness.SkipShort(t)
	t.Parallel()
	col := oteltest.New()
	t.Cleanup(col.Close)
	c := harness.NewCluster(t, harness.WithExecutorsOn(), harness.WithArgs("--otel-endpoint", col.URL(), "--otel-service-name", "ax-e2e"))
	c.WaitReady()
	fol := c.Followers()
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()

	var mu sync.Mutex
	handlerSpans := map[int]string{} // attempt → the remote span id in the handler's context
	sock := filepath.Join(filepath.Dir(fol[0].Socket), "otel-go.sock")
	ex := ax.NewExecutor()
	ex.HandleFunc("otel.go", func(ctx context.Context, d *ax.Delivery) error {
		mu.Lock()
		handlerSpans[d.Attempt] = trace.SpanContextFromContext(ctx).SpanID().String()
		mu.Unlock()
		if d.Attempt == 1 {
			return fmt.Errorf("failing attempt %d on purpose", d.Attempt)
		}
		return nil
	})
	go func() { _ = ex.ListenAndServeUnix(sock) }()
	t.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer scancel()
		ex.Shutdown(sctx)
	})
	client := ax.New(ax.Config{SocketPath: fol[0].Socket})
	t.Cleanup(client.CloseIdleConnections)
	harness.WaitFor(t, 10*time.Second, 50*time.Millisecond, "the executor's socket", func() error {
		conn, err := net.Dial("unix", sock)
		if err == nil {
			conn.Close()
		}
		return err
	})
	if err := client.RegisterExecutor(ctx, ax.ExecutorRegistration{Name: "otel-go", Handlers: []string{"otel.go"}, URL: "unix://" + sock}); err != nil {
		t.Fatal(err)
	}

	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	fast := &ax.Backoff{Initial: 200 * time.Millisecond, Max: time.Second, Multiplier: 2, Jitter: ax.NoJitter}
	if _, err := client.Submit(ax.WithTraceContext(ctx, tp, ""), ax.SubmitRequest{ID: "otel|e2e", Handler: "otel.go", MaxAttempts: 3, Backoff: fast}); err != nil {
		t.Fatal(err)
	}
	var spans []oteltest.Span
	harness.WaitFor(t, 60*time.Second, 100*time.Millisecond, "the run's spans at the collector", func() error {
		spans = col.Spans()
		for _, s := range spans {
			if s.Name == otelexport.RunSpanPrefix+"otel.go" {
				return nil
			}
		}
		return fmt.Errorf("%d spans, no run span yet", len(spans))
	})

	var run *oteltest.Span
	for i := range spans {
		if spans[i].Name == otelexport.RunSpanPrefix+"otel.go" {
			if run != nil {
				t.Fatalf("two run spans: %+v and %+v", *run, spans[i])
			}
			run = &spans[i]
		}
	}
	if run.TraceID != tp[3:35] || run.ParentID != tp[36:52] || run.Service != "ax-e2e" || run.Attrs["ax.state"] != "SUCCESS" ||
		run.Attrs["ax.task.id"] != "otel|e2e" || run.Attrs["ax.attempts"] != int64(2) || run.Error || !run.End.After(run.Start) {
		t.Errorf("run span %+v", *run)
	}
	mu.Lock()
	defer mu.Unlock()
	var failed, ok int
	for _, s := range spans {
		if s.Name != otelexport.AttemptSpanName || s.TraceID != run.TraceID {
			continue
		}
		n := int(s.Attrs["ax.attempt"].(int64))
		if s.ParentID != run.SpanID || s.SpanID != handlerSpans[n] {
			t.Errorf("attempt %d span %s parent %s: want the run span's child with the handler's parent span id %s", n, s.SpanID, s.ParentID, handlerSpans[n])
		}
		if s.Error {
			failed++
			if n != 1 || s.Attrs["http.response.status_code"] != int64(500) || s.Attrs["ax.outcome"] != "retryable" {
				t.Errorf("error span %+v", s)
			}
		} else {
			ok++
		}
		t.Logf("attempt %d on %v: %v → %v, error %v %q", n, s.Attrs["ax.node"], s.Start.Format(time.StampMilli), s.End.Format(time.StampMilli), s.Error, s.Message)
	}
	if failed != 1 || ok != 1 {
		t.Errorf("%d failed and %d successful attempt spans, want 1 and 1", failed, ok)
	}
}
