package ipc

import (
	"context"
	"time"

	"github.com/axsched/ax/engine"
)

// Backend is everything the application API needs from a node. The sidecar
// implements it; the handlers never use raft or raftfsm, and handler tests
// use a fake. Errors returned by a Backend should wrap one of the sentinels in
// errors.go (ErrNotFound, ErrConflict, ErrNoLeader, ErrInvalid, ...) so that
// the server can map them to an HTTP status with errors.Is.
type Backend interface {
	// Submit stores a new task, validated by the server. It returns the stored
	// task and created=true, or the existing task and created=false when a
	// task with spec.ID exists with the same spec. A task with the same id and
	// a different spec fails with ErrConflict unless spec.Overwrite is set.
	Submit(ctx context.Context, spec TaskSpec) (task Task, created bool, err error)
	// Task returns the task with the given id, or ErrNotFound.
	Task(ctx context.Context, id string) (Task, error)
	// Cancel cancels a task and returns it in its new state. Cancelling a task
	// that is already terminal returns it unchanged. Unknown id: ErrNotFound.
	Cancel(ctx context.Context, id string) (Task, error)
	// Cluster describes the Raft group as this node sees it.
	Cluster(ctx context.Context) (ClusterInfo, error)
	// RemoveMember removes a node from the Raft configuration (a dead
	// one, typically). Unknown id: ErrNotFound.
	RemoveMember(ctx context.Context, id string) error
	// Ready returns nil when a leader is known and the local state has
	// caught up with it; otherwise an error saying why (ErrNotReady).
	Ready(ctx context.Context) error

	// SubmitBatch submits several tasks in one Raft round trip. It returns
	// one item per spec, in order; an item that failed (conflict) carries
	// its error, the others their task: the full view, or with minimal
	// (the caller asked for Prefer: return=minimal) only its ID, State
	// and BacklogWarning. err is for the batch as a whole (no leader).
	SubmitBatch(ctx context.Context, specs []TaskSpec, minimal bool) ([]BatchItem, error)
	// List returns a page of tasks in id order, filtered by q.
	List(ctx context.Context, q ListQuery) (ListPage, error)
	// Retry re-runs a DEAD or FAILED task (ErrConflict for other states).
	Retry(ctx context.Context, id string) (Task, error)
	// Heartbeat extends the deadline of the running attempt number attempt
	// (ErrConflict when that attempt is not the current one).
	Heartbeat(ctx context.Context, id string, attempt int) (Task, error)
	// ReportResult records the outcome of an attempt that the executor
	// answered with 202 (ErrConflict when the attempt is not current).
	ReportResult(ctx context.Context, id string, r AttemptResult) (Task, error)
	// RegisterExecutor registers (or replaces, by name) an executor of this
	// node; created is false when it replaced one.
	RegisterExecutor(ctx context.Context, e ExecutorSpec) (ex ExecutorSpec, created bool, err error)
	// UnregisterExecutor removes an executor of this node (ErrNotFound).
	UnregisterExecutor(ctx context.Context, name string) error
	// Executors lists this node's executors.
	Executors(ctx context.Context) ([]ExecutorSpec, error)

	// PurgeTask deletes a finished task now and returns 1: ErrNotFound
	// for an unknown id, ErrConflict for a task that is not finished.
	PurgeTask(ctx context.Context, id string) (int, error)
	// PurgeTasks deletes up to q.Limit finished tasks that match q.
	PurgeTasks(ctx context.Context, q PurgeQuery) (PurgeResult, error)
	// PauseHandler pauses (paused true) or resumes a handler's runs
	// (handlers_api.go); ErrHandlerNotFound for a handler with no task,
	// no executor and no pause. Idempotent.
	PauseHandler(ctx context.Context, name string, paused bool) (HandlerPause, error)
	// PauseTask pauses or resumes one task and returns it; ErrNotFound,
	// or ErrTaskFinished for a pause of a finished task. Idempotent.
	PauseTask(ctx context.Context, id string, paused bool) (Task, error)
	// Handlers lists the handlers that have tasks, an executor or a
	// pause, sorted by name.
	Handlers(ctx context.Context) ([]HandlerInfo, error)
	// Runs returns a page of task id's run history, newest first
	// (ErrNotFound for an unknown task); Run one run (ErrNotFound when
	// the task or that run's record is absent). Both read the local
	// state, on any node.
	Runs(ctx context.Context, id string, q RunsQuery) (RunsPage, error)
	Run(ctx context.Context, id string, run int) (Run, error)
}

// RunsQuery pages GET /v1/tasks/{id}/runs.
type RunsQuery struct {
	Limit int // 1..axapi.RunsLimitMax; the server fills axapi.RunsLimitDefault
	// Before, when positive, returns only runs numbered below it (from a
	// cursor).
	Before int
}

// BatchItem is one result of SubmitBatch.
type BatchItem struct {
	Task    Task
	Created bool
	Err     error // nil on success
}

// ListQuery filters GET /v1/tasks. Empty fields do not filter.
type ListQuery struct {
	Handler string
	State   string // one of the State* names
	Limit   int    // 1..ListLimitMax; the server fills ListLimitDefault
	Cursor  string // opaque, from a previous page's NextCursor
}

// TaskSpec is a validated submit request: what the client asked for, with
// defaults filled in. Two submits with the same id are "the same spec" when
// their TaskSpecs are equal ignoring Overwrite (see SameSpec).
type TaskSpec struct {
	ID      string // never empty: the server generates one when the client gives none
	Handler string // never empty
	Payload []byte // raw bytes delivered to the executor as the callback body
	// PayloadBase64 is true when the client sent payload_base64, so views
	// return the payload the same way.
	PayloadBase64 bool
	// Delay counts from the time the leader accepts the submit. Zero with a
	// zero RunAt means "now".
	Delay time.Duration
	// RunAt is an absolute due time (UTC); zero when Delay is used.
	RunAt       time.Time
	Priority    int           // 0 (highest) … 4 (lowest)
	Timeout     time.Duration // per attempt
	MaxAttempts int           // >= 1
	Overwrite   bool          // replace an existing task with the same id

	// Recurring tasks: Cron (with Timezone, an IANA name; "" = UTC) or
	// Every, not both. Delay or RunAt, when given, set the first run;
	// otherwise the first run is the schedule's first slot after the
	// submit. Repeats (0 = unlimited) and Until (zero = none) end the
	// schedule.
	Cron     string
	Timezone string
	Every    time.Duration
	Repeats  int
	Until    time.Time
	// Backoff overrides the retry backoff; nil uses the default (2s × 2
	// up to 30s, ±20 % jitter).
	Backoff *BackoffSpec
	// RouteKey routes the task's attempts by consistent hashing (hash
	// routing); "" = the default routing.
	RouteKey string
	// Labels are free-form key/value pairs kept with the task.
	Labels map[string]string
	// Retention, when positive, is how long the task is kept once
	// finished, instead of the node's --retention or --retention-dead.
	Retention time.Duration
	// TraceParent and TraceState are the W3C trace context the task was
	// submitted with (validated; "" for none): every callback carries a
	// traceparent with its trace id and flags, and the tracestate as is.
	// They are not part of SameSpec: the same submit retried from another
	// trace is the same task (200 with the stored one), not a conflict.
	TraceParent string
	TraceState  string
	// Shards, when set, runs each run of the task as shards (validated:
	// Count 1..ShardsMax, or Ask with Max 1..ShardsMax); nil: not
	// sharded.
	Shards *ShardsSpec
}

// ShardsSpec is a task's shards: Count shards per run, or, with Ask, as
// many as the executor answers on POST axapi.ShardsPath, at most Max.
type ShardsSpec struct {
	Count int
	Ask   bool
	Max   int
}

func sameShards(a, b *ShardsSpec) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// BackoffSpec is the retry backoff of a task, validated: the n-th retry
// waits Initial × Multiplier^(n-1), at most Max, with ±Jitter (a fraction)
// of random spread. It is the engine's Backoff, which computes the waits.
type BackoffSpec = engine.Backoff

// Recurring reports whether the spec has a schedule.
func (s TaskSpec) Recurring() bool { return s.Cron != "" || s.Every > 0 }

// SameSpec reports whether a and b describe the same task, ignoring
// Overwrite and the trace context (TraceParent, TraceState: see TaskSpec).
func SameSpec(a, b TaskSpec) bool {
	return a.ID == b.ID && a.Handler == b.Handler && string(a.Payload) == string(b.Payload) &&
		a.PayloadBase64 == b.PayloadBase64 && a.Delay == b.Delay && a.RunAt.Equal(b.RunAt) &&
		a.Priority == b.Priority && a.Timeout == b.Timeout && a.MaxAttempts == b.MaxAttempts &&
		a.Cron == b.Cron && a.Timezone == b.Timezone && a.Every == b.Every && a.Repeats == b.Repeats &&
		a.Until.Equal(b.Until) && sameBackoff(a.Backoff, b.Backoff) && a.RouteKey == b.RouteKey && sameLabels(a.Labels, b.Labels) &&
		a.Retention == b.Retention && sameShards(a.Shards, b.Shards)
}

func sameBackoff(a, b *BackoffSpec) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

func sameLabels(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}
