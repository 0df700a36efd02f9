package otelexport

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/axsched/ax/clients/go/axapi"
	"github.com/axsched/ax/raftfsm"
)

// Span names of a run's trace. The run span is RunSpanPrefix + handler.
const (
	RunSpanPrefix   = "ax.run "
	ParkedSpanName  = "parked"
	CommitSpanName  = "commit"
	QueueSpanName   = "queue"
	AttemptSpanName = "attempt"
)

// SpanID is the span id ax gives the span of kind ("run", "parked",
// "commit", "queue", "handed-back") of run run of task taskID (n: the
// position of a handed-back attempt in the record, else 0): the first 8
// bytes of the SHA-256 of "ax-", kind, a zero byte, the task id, a zero
// byte, and run and n as 8-byte big-endian integers — as
// axapi.AttemptParentID makes an attempt's, so that a run exported twice
// has the same ids. An attempt's span has AttemptParentID instead.
func SpanID(kind, taskID string, run, n int) trace.SpanID {
	var buf [160]byte
	b := append(buf[:0], "ax-"...)
	b = append(b, kind...)
	b = append(b, 0)
	b = append(b, taskID...)
	b = append(b, 0)
	b = binary.BigEndian.AppendUint64(b, uint64(run))
	b = binary.BigEndian.AppendUint64(b, uint64(n))
	sum := sha256.Sum256(b)
	id := trace.SpanID(sum[:8])
	if !id.IsValid() {
		id[7] = 1
	}
	return id
}

// fixedIDs is the tracer provider's IDGenerator: it hands out the ids
// the context carries (withIDs), so that every span has the id ax
// derived for it rather than a random one.
type fixedIDs struct{}

type idsKey struct{}

type spanIDs struct {
	trace trace.TraceID
	span  trace.SpanID
}

func withIDs(ctx context.Context, traceID trace.TraceID, spanID trace.SpanID) context.Context {
	return context.WithValue(ctx, idsKey{}, spanIDs{traceID, spanID})
}

func (fixedIDs) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	v, _ := ctx.Value(idsKey{}).(spanIDs)
	return v.trace, v.span
}

func (fixedIDs) NewSpanID(ctx context.Context, _ trace.TraceID) trace.SpanID {
	v, _ := ctx.Value(idsKey{}).(spanIDs)
	return v.span
}

func ms(v int64) time.Time { return time.UnixMilli(v) }

func nsMs(ns int64) float64 { return float64(ns) / 1e6 }

// Spans turns run record r of task id (its handler and stored trace
// context) into spans and hands them to the batch span processor. It
// returns false, and makes none, when the task's trace is not sampled
// (its traceparent's flags) or the run never fired.
//
// The run span starts at the run's due time and ends when it ended; its
// parent is, for a shard, its parent task's run span, else the
// submitter's span (the traceparent's parent id), else it is a root. Its children: parked (due → the first Fire's time, when the
// leader held the run back), commit (→ the Fire applied on the node) and
// queue (→ the call began) when a callback started, and one span per
// attempt with the id its callback's traceparent carried as parent id.
func (e *Exporter) Spans(id, handler, traceParent, traceState string, r *raftfsm.RunRecord) bool {
	traceID, flags := axapi.TraceOf(traceParent, id)
	if flags&1 == 0 || r.DueMs == 0 {
		return false
	}
	tid := trace.TraceID(traceID)
	ctx := context.Background()
	if parent, run, ok := axapi.ShardParent(id); ok {
		// A shard: in its parent's trace (the submitted one, which the
		// shard's spec copies, else the parent id's: TraceOf), under the
		// span of the parent's run.
		ts, _ := trace.ParseTraceState(traceState)
		ctx = trace.ContextWithRemoteSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: tid, SpanID: SpanID("run", parent, run, 0), TraceFlags: trace.TraceFlags(flags), TraceState: ts, Remote: true,
		}))
	} else if traceParent != "" {
		if p, err := axapi.ParseTraceParent(traceParent); err == nil && p.TraceID == traceID {
			ts, _ := trace.ParseTraceState(traceState)
			ctx = trace.ContextWithRemoteSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{
				TraceID: tid, SpanID: trace.SpanID(p.ParentID), TraceFlags: trace.TraceFlags(p.Flags), TraceState: ts, Remote: true,
			}))
		}
	}
	end := ms(r.FinishedMs)
	if r.FinishedMs == 0 {
		end = ms(r.DueMs)
	}
	var node string
	if n := len(r.Attempts); n > 0 {
		node = r.Attempts[n-1].Node
	}
	attrs := []attribute.KeyValue{
		attribute.String("ax.task.id", id),
		attribute.String("ax.handler", handler),
		attribute.Int("ax.run", r.Run),
		attribute.String("ax.state", r.State.String()),
		attribute.Int("ax.attempts", len(r.Attempts)+r.DroppedAttempts),
		attribute.String("ax.node", node),
		attribute.String("ax.fired_at", ms(r.FiredMs).UTC().Format(time.RFC3339Nano)),
	}
	if r.Late {
		retries, commit := r.CommitSplitNs()
		attrs = append(attrs,
			attribute.Float64("ax.lateness.total_ms", nsMs(r.LatenessNs())),
			attribute.Float64("ax.lateness.parked_ms", nsMs(r.ParkedNs)),
			attribute.Float64("ax.lateness.retries_ms", nsMs(retries)),
			attribute.Float64("ax.lateness.commit_ms", nsMs(commit)),
			attribute.Float64("ax.lateness.queue_ms", nsMs(r.QueueNs)),
			attribute.Float64("ax.lateness.connect_ms", nsMs(r.ConnectNs)))
	}
	if r.ParkedReason != "" {
		attrs = append(attrs, attribute.String("ax.parked_reason", r.ParkedReason))
	}
	runCtx, run := e.tracer.Start(withIDs(ctx, tid, SpanID("run", id, r.Run, 0)), RunSpanPrefix+handler,
		trace.WithTimestamp(ms(r.DueMs)), trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...))
	if r.State == raftfsm.StateFailed || r.State == raftfsm.StateDead {
		msg := r.State.String()
		if n := len(r.Attempts); n > 0 && r.Attempts[n-1].Error != "" {
			msg += ": " + r.Attempts[n-1].Error
		}
		run.SetStatus(codes.Error, msg)
	}

	child := func(name, kind string, start, stop time.Time, attrs ...attribute.KeyValue) {
		_, s := e.tracer.Start(withIDs(runCtx, tid, SpanID(kind, id, r.Run, 0)), name, trace.WithTimestamp(start), trace.WithAttributes(attrs...))
		s.End(trace.WithTimestamp(stop))
	}
	if r.FiredMs > r.DueMs {
		reason := []attribute.KeyValue{}
		if r.ParkedReason != "" {
			reason = append(reason, attribute.String("ax.parked_reason", r.ParkedReason))
		}
		child(ParkedSpanName, "parked", ms(r.DueMs), ms(r.FiredMs), reason...)
	}
	if r.Late {
		// The first attempt that started reported the commit and queue.
		var first string
		for _, a := range r.Attempts {
			if a.StartedMs != 0 {
				first = a.Node
				break
			}
		}
		// The commit is that attempt's Fire's: the attempts before it
		// (and their waits) have spans of their own.
		fired := ms(r.FiredMs)
		retries, _ := r.CommitSplitNs()
		applied := fired.Add(time.Duration(r.CommitNs))
		child(CommitSpanName, "commit", fired.Add(time.Duration(retries)), applied, attribute.String("ax.node", first))
		child(QueueSpanName, "queue", applied, applied.Add(time.Duration(r.QueueNs)), attribute.String("ax.node", first))
	}
	for i := range r.Attempts {
		e.attempt(runCtx, tid, id, r, i)
	}
	run.End(trace.WithTimestamp(end))
	return true
}

// attempt makes the span of attempt i of r. Its id is the parent id its
// callback carried (AttemptParentID); an attempt handed back (busy,
// unavailable) is listed with the number of the attempt that followed,
// so only the last record of a number gets that id, the others one of
// their own.
func (e *Exporter) attempt(ctx context.Context, tid trace.TraceID, id string, r *raftfsm.RunRecord, i int) {
	a := &r.Attempts[i]
	sid := trace.SpanID(axapi.AttemptParentID(id, r.Run, a.Attempt))
	if i+1 < len(r.Attempts) && r.Attempts[i+1].Attempt == a.Attempt {
		sid = SpanID("handed-back", id, r.Run, i+1)
	}
	start := ms(a.StartedMs)
	if a.StartedMs == 0 {
		start = ms(a.FiredMs)
	}
	stop := ms(a.EndedMs)
	if a.EndedMs == 0 || stop.Before(start) {
		stop = start
	}
	attrs := []attribute.KeyValue{
		attribute.Int("ax.attempt", a.Attempt),
		attribute.String("ax.node", a.Node),
		attribute.String("ax.outcome", a.Outcome.String()),
	}
	if a.Executor != "" {
		attrs = append(attrs, attribute.String("ax.executor", a.Executor))
	}
	if a.HTTPStatus != 0 {
		attrs = append(attrs, attribute.Int("http.response.status_code", a.HTTPStatus))
	}
	_, s := e.tracer.Start(withIDs(ctx, tid, sid), AttemptSpanName, trace.WithTimestamp(start),
		trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	if a.Outcome != raftfsm.OutcomeSuccess {
		msg := a.Outcome.String()
		if a.Error != "" {
			msg += ": " + a.Error
		}
		s.SetStatus(codes.Error, msg)
	}
	s.End(trace.WithTimestamp(stop))
}
