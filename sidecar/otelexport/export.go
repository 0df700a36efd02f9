package otelexport

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/axsched/ax/raftfsm"
)

// Defaults and bounds.
const (
	// ServiceNameDefault is the service.name of the exported spans when
	// Config.ServiceName is empty.
	ServiceNameDefault = "ax"
	// QueueSizeDefault bounds the runs waiting to be read and turned into
	// spans; a run ended while it is full is dropped and counted
	// (ax_otel_runs_dropped_total).
	QueueSizeDefault = 4096
	// SpanQueueSize bounds the spans the batch span processor holds
	// while it sends (about 5 per run); beyond it the SDK drops spans.
	SpanQueueSize = 8192
	// BatchTimeoutDefault is the longest a span waits in the batch span
	// processor before it is sent.
	BatchTimeoutDefault = 2 * time.Second
	// ExportTimeout bounds one OTLP/HTTP request.
	ExportTimeout = 10 * time.Second
	// TracesPath is the path appended to an endpoint URL that has none,
	// as OTEL_EXPORTER_OTLP_ENDPOINT is read.
	TracesPath = "/v1/traces"
	// ScopeName is the instrumentation scope of the spans.
	ScopeName = "github.com/axsched/ax/sidecar/otelexport"
)

// Store reads the run records of the node's state machine
// (raftfsm.FSM.Run); it returns an error wrapping raftfsm.ErrNotFound
// when the run has no record (purged).
type Store interface {
	Run(id string, run int) (*raftfsm.RunRecord, error)
}

// Config configures an Exporter.
type Config struct {
	// Endpoint is the collector's OTLP/HTTP URL, such as
	// http://127.0.0.1:4318; a URL without a path gets TracesPath. It
	// must be set (an empty one means no Exporter: see sidecar).
	Endpoint string
	// ServiceName is the resource's service.name. Defaults to
	// ServiceNameDefault.
	ServiceName string
	// Node is this node's id: the resource's service.instance.id, and
	// the node that exports the runs its own Complete ended.
	Node string
	// Leader reports whether this node leads: it exports the runs the
	// leader ended (a cancel, a timeout, a lost node). Required.
	Leader func() bool
	// Store reads run records. Required.
	Store Store
	// Log receives export failures.
	Log zerolog.Logger
	// QueueSize bounds the runs waiting to be exported. Defaults to
	// QueueSizeDefault.
	QueueSize int
	// BatchTimeout is the batch span processor's delay. Defaults to
	// BatchTimeoutDefault.
	BatchTimeout time.Duration
	// SpanExporter, for tests, replaces the OTLP/HTTP exporter.
	SpanExporter sdktrace.SpanExporter
}

// CheckEndpoint validates an OTLP/HTTP endpoint URL (http or https, a
// host, no query or fragment) and returns the URL spans are posted to:
// with TracesPath when it has no path.
func CheckEndpoint(s string) (string, error) {
	u, err := url.Parse(s)
	if err != nil {
		return "", fmt.Errorf("%q: %w", s, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return "", fmt.Errorf("%q: want an http:// or https:// URL with a host and no query, such as http://127.0.0.1:4318", s)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = TracesPath
	}
	return u.String(), nil
}

// job is one ended run waiting to be exported. Its strings share the
// event's task record: queuing it allocates nothing.
type job struct {
	id, handler, traceParent, traceState string
	run                                  int
}

// Exporter turns ended runs into spans and sends them. OnEvent is called
// from the node's event loop; Run reads and exports; Shutdown flushes.
type Exporter struct {
	cfg    Config
	tp     *sdktrace.TracerProvider
	tracer trace.Tracer
	jobs   chan job

	exported, dropped, failed prometheus.Counter
}

// New returns an Exporter sending to cfg.Endpoint (or cfg.SpanExporter).
// It fails on a bad endpoint. Nothing is sent until Run.
func New(cfg Config) (*Exporter, error) {
	if cfg.Store == nil || cfg.Leader == nil {
		return nil, errors.New("otelexport: Store and Leader are required")
	}
	if cfg.ServiceName == "" {
		cfg.ServiceName = ServiceNameDefault
	}
	if cfg.QueueSize <= 0 {
		cfg.QueueSize = QueueSizeDefault
	}
	if cfg.BatchTimeout <= 0 {
		cfg.BatchTimeout = BatchTimeoutDefault
	}
	e := &Exporter{
		cfg:  cfg,
		jobs: make(chan job, cfg.QueueSize),
		exported: prometheus.NewCounter(prometheus.CounterOpts{Name: "ax_otel_runs_exported_total",
			Help: "Ended runs this node turned into spans for the OpenTelemetry collector (--otel-endpoint)."}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "ax_otel_runs_dropped_total",
			Help: "Ended runs not exported because the export queue was full."}),
		failed: prometheus.NewCounter(prometheus.CounterOpts{Name: "ax_otel_spans_failed_total",
			Help: "Spans the OTLP/HTTP exporter failed to send (after its retries)."}),
	}
	exp := cfg.SpanExporter
	if exp == nil {
		endpoint, err := CheckEndpoint(cfg.Endpoint)
		if err != nil {
			return nil, fmt.Errorf("otel endpoint %w", err)
		}
		exp, err = otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(endpoint), otlptracehttp.WithTimeout(ExportTimeout))
		if err != nil {
			return nil, fmt.Errorf("otel exporter: %w", err)
		}
	}
	res := resource.NewSchemaless(attribute.String("service.name", cfg.ServiceName), attribute.String("service.instance.id", cfg.Node))
	e.tp = sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(countingExporter{exp, e}, sdktrace.WithMaxQueueSize(SpanQueueSize), sdktrace.WithBatchTimeout(cfg.BatchTimeout)),
		sdktrace.WithResource(res),
		sdktrace.WithIDGenerator(fixedIDs{}),
		sdktrace.WithSampler(sdktrace.AlwaysSample()),
	)
	e.tracer = e.tp.Tracer(ScopeName)
	return e, nil
}

// Collectors returns the exporter's counters, for the node's registry.
func (e *Exporter) Collectors() []prometheus.Collector {
	return []prometheus.Collector{e.exported, e.dropped, e.failed}
}

// OnEvent queues the run ev ended when this node is the one to export
// it: the node whose own Complete ended it (Event.EndedBy), else the
// leader (a cancel, a timeout, a lost node, an app's reported result).
// It never blocks: a run that finds the queue full is dropped and
// counted. Events that end no run cost one comparison.
func (e *Exporter) OnEvent(ev *raftfsm.Event) {
	if ev.RunEnded == 0 || ev.Task == nil {
		return
	}
	if ev.EndedBy != e.cfg.Node && (ev.EndedBy != "" || !e.cfg.Leader()) {
		return
	}
	t := ev.Task
	select {
	case e.jobs <- job{id: t.ID, handler: t.Spec.Handler, traceParent: t.Spec.TraceParent, traceState: t.Spec.TraceState, run: ev.RunEnded}:
	default:
		e.dropped.Inc()
	}
}

// Run exports the queued runs until ctx ends, then those still queued.
func (e *Exporter) Run(ctx context.Context) {
	for {
		select {
		case j := <-e.jobs:
			e.export(j)
		case <-ctx.Done():
			for {
				select {
				case j := <-e.jobs:
					e.export(j)
				default:
					return
				}
			}
		}
	}
}

// Shutdown sends the spans still held and stops the exporter; ctx
// bounds it. Call it after Run returned.
func (e *Exporter) Shutdown(ctx context.Context) error { return e.tp.Shutdown(ctx) }

// ForceFlush sends the spans held now (for tests).
func (e *Exporter) ForceFlush(ctx context.Context) error { return e.tp.ForceFlush(ctx) }

func (e *Exporter) export(j job) {
	r, err := e.cfg.Store.Run(j.id, j.run)
	if err != nil {
		if !errors.Is(err, raftfsm.ErrNotFound) {
			e.cfg.Log.Warn().Err(err).Str("task_id", j.id).Int("run", j.run).Msg("otel export: read the run record")
		}
		return
	}
	if !r.State.Terminal() {
		return // a later run under the same number (an overwrite); not this one
	}
	if e.Spans(j.id, j.handler, j.traceParent, j.traceState, r) {
		e.exported.Inc()
	}
}
