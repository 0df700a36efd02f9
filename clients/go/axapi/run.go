package axapi

import (
	"encoding/json"
	"strconv"
	"time"
)

// Limits of the run history (GET /v1/tasks/{id}/runs).
const (
	// RunsLimitDefault is the page size of GET /v1/tasks/{id}/runs when the
	// query gives no limit; RunsLimitMax the largest page.
	RunsLimitDefault = 20
	RunsLimitMax     = 100
	// ResultMaxBytes bounds a stored result: an executor's 2xx body beyond
	// it is cut and flagged result_truncated; a POST
	// /v1/tasks/{id}/result carrying a longer one is refused.
	ResultMaxBytes = 64 << 10
	// RunErrorMaxBytes bounds an attempt's error text in a run record.
	RunErrorMaxBytes = 1 << 10
)

// RunsPath returns the path of a task's run history,
// /v1/tasks/{id}/runs; RunPath that of one run.
func RunsPath(id string) string { return TaskPath(id) + "/runs" }

// RunPath returns /v1/tasks/{id}/runs/{run}.
func RunPath(id string, run int) string { return RunsPath(id) + "/" + strconv.Itoa(run) }

// Run is one run of a task as GET /v1/tasks/{id}/runs reports it (schema
// Run of openapi.yaml). Times are UTC.
type Run struct {
	// Run is the run number executors see (Ax-Run).
	Run int `json:"run"`
	// TraceID (32 lowercase hex digits) is the trace the run's callbacks
	// carried: the task's (Task.TraceID, from its current trace context),
	// and that of its spans when the node exports them (--otel-endpoint).
	TraceID string `json:"trace_id,omitempty"`
	// State is RUNNING or WAITING (a retry is due) while the run goes on,
	// then SUCCESS, FAILED, DEAD or CANCELLED.
	State string `json:"state"`
	// DueAt is when the run was due; FiredAt the start time the leader
	// gave its first attempt; StartedAt when the first callback began
	// (on the delivering node's clock); FinishedAt when the run ended.
	DueAt      time.Time  `json:"due_at"`
	FiredAt    time.Time  `json:"fired_at"`
	StartedAt  *time.Time `json:"started_at,omitempty"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
	// Lateness is where the time from DueAt to the first callback went;
	// absent until a callback started.
	Lateness *Lateness `json:"lateness,omitempty"`
	// Attempts, oldest first, the one running last (without an outcome);
	// busy answers, which are not counted as attempts, are listed with the
	// attempt number they gave back. AttemptsDropped counts older ones no
	// longer kept.
	Attempts        []RunAttempt `json:"attempts"`
	AttemptsDropped int          `json:"attempts_dropped,omitempty"`
	// Result is the successful attempt's answer body when it is JSON;
	// ResultBase64 when it is not; ResultTruncated when the executor sent
	// more than ResultMaxBytes (a cut JSON body is sent as result_base64).
	Result          json.RawMessage `json:"result,omitempty"`
	ResultBase64    string          `json:"result_base64,omitempty"`
	ResultTruncated bool            `json:"result_truncated,omitempty"`
	// Shards, for a run of a sharded task, is its number of shard tasks,
	// ShardID(id, Run, i) for i from 0 to Shards-1 (ShardIDs lists them
	// for runs of up to 64 shards); ShardsSucceeded and ShardsFailed
	// count those that ended (a shard its run's cancel cancelled counts
	// as failed). The run is RUNNING until all have ended; once it ended
	// they add up to Shards (see the schema Run of openapi.yaml for when
	// a cancelled run cannot tell).
	Shards          int      `json:"shards,omitempty"`
	ShardIDs        []string `json:"shard_ids,omitempty"`
	ShardsSucceeded int      `json:"shards_succeeded,omitempty"`
	ShardsFailed    int      `json:"shards_failed,omitempty"`
}

// Lateness splits a run's lateness (the first callback's start, plus its
// connect, minus the due time) into where it went. Durations are in
// milliseconds (fractions allowed); they add up to TotalMs.
type Lateness struct {
	TotalMs float64 `json:"total_ms"`
	// ParkedMs: the leader held the run back before its first Fire, for
	// ParkedReason when it knew one (handler_limit, no_executor, ...) —
	// or its timer was late.
	ParkedMs     float64 `json:"parked_ms"`
	ParkedReason string  `json:"parked_reason,omitempty"`
	// RetriesMs: the run's attempts before the first that reached an
	// executor, and the waits after them: attempts that found it
	// unavailable (no connection) or ended with no report of a call (a
	// lost node). 0 when the first attempt reached it.
	RetriesMs float64 `json:"retries_ms"`
	// CommitMs: from the Fire's time to its commit and apply on the
	// delivering node (clocks of two nodes: skew shows here); the Fire of
	// the attempt that first reached the executor.
	CommitMs float64 `json:"commit_ms"`
	// QueueMs: waiting on the node for a slot of the executor.
	QueueMs float64 `json:"queue_ms"`
	// ConnectMs: waiting for a connection to the executor.
	ConnectMs float64 `json:"connect_ms"`
}

// RunAttempt is one attempt of a run.
type RunAttempt struct {
	Attempt int    `json:"attempt"`
	Node    string `json:"node"`
	// SpanID (16 lowercase hex digits) is the parent id of the
	// traceparent the attempt's callback carried (AttemptParentID): the
	// span id of the attempt's span when the node exports spans.
	SpanID string `json:"span_id,omitempty"`
	// Executor is the name of the executor called; absent when the node
	// reported nothing (a timeout, a lost node).
	Executor  string     `json:"executor,omitempty"`
	FiredAt   time.Time  `json:"fired_at"`
	StartedAt *time.Time `json:"started_at,omitempty"`
	EndedAt   *time.Time `json:"ended_at,omitempty"`
	// DurationMs is the callback's length.
	DurationMs float64 `json:"duration_ms,omitempty"`
	// Outcome is success, retryable, permanent, timeout, busy, lost,
	// unavailable or cancelled; absent while the attempt runs.
	Outcome    string `json:"outcome,omitempty"`
	HTTPStatus int    `json:"http_status,omitempty"`
	// Error is the failure text, at most RunErrorMaxBytes.
	Error string `json:"error,omitempty"`
}

// RunsPage is the answer of GET /v1/tasks/{id}/runs: runs newest first;
// NextCursor, when set, fetches the older ones.
type RunsPage struct {
	Runs       []Run  `json:"runs"`
	NextCursor string `json:"next_cursor,omitempty"`
}
