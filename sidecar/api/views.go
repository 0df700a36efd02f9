package api

import (
	"encoding/hex"
	"sync/atomic"
	"time"

	"github.com/axsched/ax/clients/go/axapi"
	"github.com/axsched/ax/ipc"
	"github.com/axsched/ax/raftfsm"
)

// The waiting reasons a stored task carries itself (a run handed back by
// its executor's node without counting an attempt), spelled as package
// scheduler spells them (sidecar's wire test checks).
const (
	ReasonExecutorUnavailable = "executor_unavailable"
	ReasonExecutorBusy        = "executor_busy"
)

// WaitingView is why a due run waits, as the API shows it (and the peer
// API carries it): the reason, since when (Unix ms) and, for circuit_open
// and executor_unavailable, until when it may end.
type WaitingView struct {
	Reason  string `json:"reason"`
	SinceMs int64  `json:"since_ms"`
	UntilMs int64  `json:"until_ms,omitempty"`
}

// durationString is d.String() through a small cache of the durations
// last formatted (64 slots by a hash of d, each the last one there): a
// busy node's answers repeat a few timeouts and delays, and each String
// was an allocation of every task view.
func durationString(d time.Duration) string {
	slot := &durationTexts[uint64(d)*0x9e3779b97f4a7c15>>58]
	if e := slot.Load(); e != nil && e.d == d {
		return e.s
	}
	s := d.String()
	slot.Store(&durationText{d: d, s: s})
	return s
}

var durationTexts [64]atomic.Pointer[durationText]

type durationText struct {
	d time.Duration
	s string
}

func msTime(ms int64) *time.Time {
	if ms == 0 {
		return nil
	}
	t := time.UnixMilli(ms).UTC()
	return &t
}

// TaskView converts a stored task to the API's view (GET /v1/tasks/{id}
// without the newest run's result).
func TaskView(t *raftfsm.Task) ipc.Task { return taskView(t) }

// taskView converts a stored task to the API's view.
func taskView(t *raftfsm.Task) ipc.Task {
	v := ipc.Task{
		ID: t.ID, Handler: t.Spec.Handler, State: t.State.String(), Priority: t.Spec.Priority,
		Attempts: t.Attempts, MaxAttempts: t.Spec.MaxAttempts, Timeout: durationString(time.Duration(t.Spec.TimeoutNs)),
		RunAt: msTime(t.Spec.RunAtMs), LastError: t.LastError,
		CreatedAt: time.UnixMilli(t.CreatedMs).UTC(), UpdatedAt: time.UnixMilli(t.UpdatedMs).UTC(),
		FinishedAt: msTime(t.FinishedMs), Payload: t.Spec.Payload, PayloadBase64: t.Spec.PayloadBase64,
	}
	if t.Spec.RunAtMs == 0 && (t.Spec.DelayNs != 0 || !t.Spec.Recurring()) {
		v.Delay = durationString(time.Duration(t.Spec.DelayNs))
	}
	v.Run, v.Snoozes = t.RunNumber(), t.Snoozes
	if t.State == raftfsm.StateWaiting && t.HeldBy != 0 {
		// Handed back by its executor's node without counting an attempt:
		// it waits until its due time (the next probe, or Retry-After)
		// for that reason. Once due, the leader's reason replaces this
		// one (addWaiting), if it parks the run.
		v.WaitingReason = ReasonExecutorUnavailable
		if t.HeldBy == raftfsm.OutcomeBusy {
			v.WaitingReason = ReasonExecutorBusy
		}
		v.WaitingSince, v.WaitingUntil = msTime(t.UpdatedMs), msTime(t.DueMs)
	}
	v.Cron, v.Timezone, v.Repeats, v.RouteKey, v.Labels = t.Spec.Cron, t.Spec.Timezone, t.Spec.Repeats, t.Spec.RouteKey, t.Spec.Labels
	if t.Spec.EveryNs > 0 {
		v.Every = time.Duration(t.Spec.EveryNs).String()
	}
	v.Until = msTime(t.Spec.UntilMs)
	if t.Spec.RetentionNs > 0 {
		v.Retention = time.Duration(t.Spec.RetentionNs).String()
	}
	v.Paused = t.Paused
	traceID, _ := axapi.TraceOf(t.Spec.TraceParent, t.ID)
	v.TraceID = hex.EncodeToString(traceID[:])
	v.TraceParent, v.TraceState = t.Spec.TraceParent, t.Spec.TraceState
	if b := t.Spec.Backoff; b != nil {
		v.Backoff = &ipc.BackoffView{Initial: time.Duration(b.InitialNs).String(), Max: time.Duration(b.MaxNs).String(), Multiplier: b.Multiplier, Jitter: b.Jitter}
	}
	if sh := t.Spec.Shards; sh != nil {
		v.Shards = &ipc.ShardsView{Count: sh.Count, Ask: sh.Ask, Max: sh.Max}
		if r := t.Shards; r != nil {
			v.Shards.Total, v.Shards.Succeeded, v.Shards.Failed, v.Shards.Running = r.Total, r.Succeeded, r.Failed, r.Running()
			if t.State.Terminal() && v.Shards.Running > 0 {
				// A task that ended runs no shard: its cancel cancelled
				// the unfinished ones, which count as failed. The FSM
				// stores them so (cancelRunShards), but the cancel's
				// answer is the task before that, and a node of an
				// earlier version stored it so.
				v.Shards.Failed, v.Shards.Running = r.Total-r.Succeeded, 0
			}
		}
	}
	if t.Spec.ShardTotal > 0 {
		i := t.Spec.ShardIndex
		v.ShardIndex, v.ShardTotal = &i, t.Spec.ShardTotal
	}
	switch t.State {
	case raftfsm.StateWaiting:
		v.NextRunAt = msTime(t.DueMs)
	case raftfsm.StateRunning:
		v.Node = t.Node
	}
	return v
}

func executorView(x raftfsm.Executor) ipc.ExecutorSpec {
	e := ipc.ExecutorSpec{Name: x.Name, Handlers: x.Handlers, URL: x.URL, MinConcurrency: x.MinConcurrency, MaxConcurrency: x.MaxConcurrency, FromFlag: x.FromFlag}
	if x.TimeoutNs > 0 {
		e.Timeout = time.Duration(x.TimeoutNs).String()
	}
	return e
}
