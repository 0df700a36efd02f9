package axapi

import (
	"encoding/json"
	"time"
)

// SubmitRequest is the JSON body of POST /v1/tasks and an item of POST
// /v1/tasks/batch (schema SubmitRequest). Only Handler is required. A nil
// pointer (or empty field) is left out, and the server fills its default;
// durations are Go duration strings ("1.5s") and times RFC 3339.
//
// Build the body with Encode, which keeps Payload byte for byte. The
// server decodes the same type (ipc.DecodeSubmit) and documents the rules
// of each field there.
type SubmitRequest struct {
	// ID is the task id and idempotency key; empty: the server makes one.
	ID      string `json:"id,omitempty"`
	Handler string `json:"handler"`
	// PayloadBase64 is a binary payload, standard base64 with padding.
	// At most one of PayloadBase64 and Payload.
	PayloadBase64 *string `json:"payload_base64,omitempty"`
	// Delay (Go duration, >= 0) or RunAt (RFC 3339), not both.
	Delay *string `json:"delay,omitempty"`
	RunAt *string `json:"run_at,omitempty"`
	// Priority: PriorityHighest (0) to PriorityMax (4).
	Priority *int `json:"priority,omitempty"`
	// Timeout bounds one attempt (Go duration, at most TimeoutMax).
	Timeout *string `json:"timeout,omitempty"`
	// MaxAttempts: 1 to MaxAttemptsMax.
	MaxAttempts *int `json:"max_attempts,omitempty"`
	// Overwrite replaces a task with the same id and another spec.
	Overwrite bool `json:"overwrite,omitempty"`

	// Cron (in Timezone, an IANA name) or Every (a Go duration, at least
	// EveryMin) make the task recurring; Repeats (>= 0, 0: no limit) and
	// Until (RFC 3339) end it.
	Cron     *string `json:"cron,omitempty"`
	Timezone *string `json:"timezone,omitempty"`
	Every    *string `json:"every,omitempty"`
	Repeats  *int    `json:"repeats,omitempty"`
	Until    *string `json:"until,omitempty"`
	// Backoff overrides the retry backoff; absent fields keep the default.
	Backoff *BackoffRequest `json:"backoff,omitempty"`
	// RouteKey (at most RouteKeyMaxBytes) routes by consistent hashing.
	RouteKey *string `json:"route_key,omitempty"`
	// Labels: at most LabelsMax, each key and value at most LabelMaxBytes.
	Labels map[string]string `json:"labels,omitempty"`
	// Retention (Go duration) keeps the task this long once finished.
	Retention *string `json:"retention,omitempty"`
	// TraceParent and TraceState are the W3C trace context of the submit
	// (ParseTraceParent, CheckTraceState); they win over the request's
	// traceparent and tracestate headers. Empty: none (the headers, if
	// any, apply). A TraceState needs a TraceParent.
	TraceParent string `json:"traceparent,omitempty"`
	TraceState  string `json:"tracestate,omitempty"`
	// Shards runs each run of the task as shards: {"count": N} (1 to
	// ShardsMax) or {"ask": true, "max": M} (M 1 to ShardsMax: the
	// executor answers POST ShardsPath with the count). Nil: not sharded.
	Shards *ShardsRequest `json:"shards,omitempty"`

	// Payload is a JSON payload, any JSON value, at most PayloadMaxBytes.
	// Encode sends it byte for byte (json.Marshal would compact it).
	Payload json.RawMessage `json:"payload,omitempty"`
}

// ShardsRequest is the "shards" object of a SubmitRequest: Count, or Ask
// with Max, not both (the server answers 400 invalid_shards otherwise).
type ShardsRequest struct {
	Count *int `json:"count,omitempty"`
	Ask   bool `json:"ask,omitempty"`
	Max   *int `json:"max,omitempty"`
}

// ShardCount is the body of an executor's answer to POST ShardsPath: how
// many shards the run gets, at least 1 (bounded by the task's max).
type ShardCount struct {
	Count int `json:"count"`
}

// BackoffRequest is the "backoff" object of a SubmitRequest: the n-th retry
// waits Initial × Multiplier^(n-1), at most Max, spread by ±Jitter. Nil
// fields keep the server's default (2s × 2 up to 30s, ±20 %).
type BackoffRequest struct {
	Initial    *string  `json:"initial,omitempty"`
	Max        *string  `json:"max,omitempty"`
	Multiplier *float64 `json:"multiplier,omitempty"`
	Jitter     *float64 `json:"jitter,omitempty"`
}

// Encode returns the JSON body of the request. Payload is spliced in last,
// as is (it is not checked: the server refuses invalid JSON). Encode fails
// only when a field cannot be marshalled.
func (r *SubmitRequest) Encode() ([]byte, error) {
	c := *r
	c.Payload = nil
	body, err := json.Marshal(&c)
	if err != nil || len(r.Payload) == 0 {
		return body, err
	}
	// body ends with '}' and has at least the handler field.
	out := make([]byte, 0, len(body)+len(r.Payload)+len(`,"payload":`)+1)
	out = append(out, body[:len(body)-1]...)
	out = append(out, `,"payload":`...)
	out = append(out, r.Payload...)
	return append(out, '}'), nil
}

// BatchRequest is the body of POST /v1/tasks/batch: 1 to BatchMaxTasks
// submit requests, each encoded (SubmitRequest.Encode).
type BatchRequest struct {
	Tasks []json.RawMessage `json:"tasks"`
}

// BatchResponse is the answer of POST /v1/tasks/batch: one result per
// item, in order.
type BatchResponse struct {
	Results []BatchResult `json:"results"`
}

// BatchResult is one item of a BatchResponse: Status 201 (created) or 200
// (existed with the same spec) with Task, or an error status (409 for a
// conflict) with Error.
type BatchResult struct {
	Status int          `json:"status"`
	Task   *Task        `json:"task,omitempty"`
	Error  *ErrorDetail `json:"error,omitempty"`
}

// ListPage is the answer of GET /v1/tasks (?handler=&state=&limit=&cursor=):
// tasks in id order, and the cursor of the next page, absent on the last.
type ListPage struct {
	Tasks      []Task `json:"tasks"`
	NextCursor string `json:"next_cursor,omitempty"`
}

// Heartbeat is the body of POST /v1/tasks/{id}/heartbeat.
type Heartbeat struct {
	// Attempt is the Ax-Attempt of the running attempt (>= 1).
	Attempt int `json:"attempt"`
}

// AttemptResult is the body of POST /v1/tasks/{id}/result: the outcome of
// an attempt its executor answered 202.
type AttemptResult struct {
	// Attempt is the Ax-Attempt of the callback (>= 1).
	Attempt int `json:"attempt"`
	// Status is ResultSuccess, ResultFailed (retried) or ResultPermanent
	// (FAILED, not retried).
	Status string `json:"status"`
	// Error becomes the task's last_error; only with a failure, at most
	// ResultErrorMaxBytes of UTF-8.
	Error string `json:"error,omitempty"`
	// Result, with ResultSuccess, is the run's result: any JSON value, at
	// most ResultMaxBytes (GET /v1/tasks/{id}/runs/{run}).
	Result json.RawMessage `json:"result,omitempty"`
}

// ExecutorSpec is an executor registered on a node: the body of POST
// /v1/executors and an item of GET /v1/executors (schema ExecutorSpec).
type ExecutorSpec struct {
	// Name: 1 to ExecutorNameMaxBytes of A-Z a-z 0-9 . _ : - (not "." or "..").
	Name string `json:"name"`
	// Handlers: 1 to ExecutorHandlersMax patterns; "*" = every handler,
	// "order.*" = by prefix.
	Handlers []string `json:"handlers"`
	// URL: unix:///abs/path.sock or http://127.0.0.1:PORT.
	URL string `json:"url"`
	// MinConcurrency, MaxConcurrency: 0 (the node's default) or 1 to
	// ConcurrencyMax.
	MinConcurrency int `json:"min_concurrency,omitempty"`
	MaxConcurrency int `json:"max_concurrency,omitempty"`
	// Timeout (Go duration) is the attempt timeout of its tasks that give
	// none.
	Timeout string `json:"timeout,omitempty"`
	// FromFlag: registered by the sidecar's --executor (read only).
	FromFlag bool `json:"from_flag,omitempty"`
}

// ExecutorList is the answer of GET /v1/executors.
type ExecutorList struct {
	Executors []ExecutorSpec `json:"executors"`
}

// HandlerPause is the answer of POST /v1/handlers/{name}/pause and
// /resume: the handler and whether it is paused now.
type HandlerPause struct {
	Name   string `json:"name"`
	Paused bool   `json:"paused"`
}

// HandlerList is the answer of GET /v1/handlers, sorted by name.
type HandlerList struct {
	Handlers []HandlerInfo `json:"handlers"`
}

// HandlerInfo is one handler of GET /v1/handlers. The fields marked
// "leader's view" are what the leader knows (a follower asks it); they are
// absent (Backlog nil, Circuit "", Parked empty) when no leader answered.
type HandlerInfo struct {
	Name string `json:"name"`
	// Paused: the handler's runs wait until it is resumed.
	Paused bool `json:"paused"`
	// Backlog is the handler's runs that are due and not yet delivered:
	// held by the leader plus queued for an executor slot on the nodes
	// (the depth that --backlog-limit bounds). Leader's view.
	Backlog *int `json:"backlog,omitempty"`
	// Parked counts the due runs that wait, by waiting reason
	// ("paused", "no_executor", ...). Leader's view; a reason with no run
	// is left out.
	Parked map[string]int `json:"parked"`
	// Circuit is the state of the handler's circuit breaker: "closed",
	// "open" or "half-open"; CircuitUntil, while open, is when the
	// cool-down ends. Leader's view.
	Circuit      string     `json:"circuit,omitempty"`
	CircuitUntil *time.Time `json:"circuit_until,omitempty"`
	// Tasks counts the handler's stored tasks by state (WAITING ...); a
	// state with no task is left out.
	Tasks map[State]int `json:"tasks"`
	// Executors are the executors, on every node, whose handler patterns
	// match the handler.
	Executors []HandlerExecutor `json:"executors"`
}

// HandlerExecutor is an executor of a HandlerInfo.
type HandlerExecutor struct {
	Node string `json:"node"`
	Name string `json:"name"`
	URL  string `json:"url"`
	// MaxConcurrency is the registered bound; 0 (absent from the JSON)
	// for an executor registered without one: the node's default (its
	// --delivery-concurrency) applies. The Python client reads it as None.
	MaxConcurrency int `json:"max_concurrency,omitempty"`
	// Limit is the executor's current concurrency limit (adaptive, between
	// its min and max), for the executors of the node asked and of the
	// leader; absent for the others and before the first delivery.
	Limit int `json:"limit,omitempty"`
	// CircuitUntil is set while the handler's circuit is open on this
	// executor's node (the node's own breaker, fed by the callbacks it
	// makes; or half-open with its probe out there): when the node takes
	// the handler's attempts again. Meanwhile the leader routes the
	// handler's runs to its other nodes. Leader's view, from the node's
	// load report (absent from a node of an older version).
	CircuitUntil *time.Time `json:"circuit_until,omitempty"`
}

// PurgeRequest is the body of POST /v1/tasks/purge; every field is
// optional (an empty body is {}).
type PurgeRequest struct {
	// Handler: only tasks of this handler.
	Handler string `json:"handler,omitempty"`
	// State: SUCCESS, CANCELLED, DEAD or FAILED; empty: any finished state.
	State State `json:"state,omitempty"`
	// FinishedBefore (RFC 3339): only tasks that finished before it; empty:
	// the time of the request.
	FinishedBefore string `json:"finished_before,omitempty"`
	// Limit: 1 to PurgeLimitMax; 0: PurgeLimitDefault.
	Limit int `json:"limit,omitempty"`
	// Cursor: the NextCursor of the previous answer, to read on from
	// where it stopped; empty: from the oldest finished task.
	Cursor string `json:"cursor,omitempty"`
}

// PurgeResult is the reply of the purge endpoints.
type PurgeResult struct {
	// Purged is how many tasks were deleted.
	Purged int `json:"purged"`
	// More, for POST /v1/tasks/purge, says that more tasks may match:
	// send the request again, with NextCursor as its cursor.
	More bool `json:"more"`
	// NextCursor, for POST /v1/tasks/purge, is where the next request
	// reads on (its cursor); present when More is, except after a purge
	// that failed part way on a request sent without a cursor (the next
	// request then starts over). Without it a request
	// reads from the oldest finished task again: it still ends, but it
	// walks again what earlier requests purged, and when more than
	// 100 000 finished tasks ahead of the matching ones do not match the
	// filter, it purges nothing and answers more, request after request.
	NextCursor string `json:"next_cursor,omitempty"`
}

// ClusterInfo is the reply of GET /v1/cluster.
type ClusterInfo struct {
	NodeID       string `json:"node_id"`
	State        string `json:"state"`  // Raft state of this node: Leader, Follower, Candidate, Shutdown
	Leader       string `json:"leader"` // node id of the leader, "" when none is known
	Term         uint64 `json:"term"`
	AppliedIndex uint64 `json:"applied_index"`
	CommitIndex  uint64 `json:"commit_index"`
	// StateIndex is the index of the last entry at or below CommitIndex
	// that the state machine applies (a command or a configuration
	// change): what AppliedIndex reaches once the node has caught up. It
	// is below CommitIndex while the newest committed entries are a new
	// leader's no-op or barriers, which change no state. 0 from an older
	// sidecar.
	StateIndex uint64   `json:"state_index,omitempty"`
	Members    []Member `json:"members"`
	// Storage is set while this node's storage cannot take writes: every
	// write is then answered 503 storage_unavailable. Absent when healthy.
	Storage *StorageStatus `json:"storage,omitempty"`
	// VotersTarget is the number of voters autopilot keeps (--voters).
	VotersTarget int `json:"voters_target,omitempty"`
	// FailureTolerance is how many more voters may fail before the
	// cluster loses its quorum: the reachable voters less a quorum of all
	// voters (the leader's view; absent when no leader is known).
	FailureTolerance *int `json:"failure_tolerance,omitempty"`
}

// Lag returns how many entries that change the state a node whose state
// machine has applied up to applied still has to apply to reach this
// node's commit index: StateIndex (CommitIndex from an older sidecar,
// which counts a new leader's no-op and barriers too) less applied, 0
// when applied is at or past it.
func (c *ClusterInfo) Lag(applied uint64) uint64 {
	target := c.StateIndex
	if target == 0 {
		target = c.CommitIndex
	}
	if target > applied {
		return target - applied
	}
	return 0
}

// Member is one server of the Raft configuration.
type Member struct {
	ID       string `json:"id"`
	RaftAddr string `json:"raft_addr"`
	PeerAddr string `json:"peer_addr,omitempty"`
	Suffrage string `json:"suffrage"` // Voter, Nonvoter
	Leader   bool   `json:"leader"`
	// Reachable says whether the leader heard from the member within the
	// liveness window (about a second); LastContactMs is how long ago, in
	// milliseconds (-1: never since this leader was elected), and
	// AppliedIndex the member's applied index at its last report. All three
	// are the leader's view (a follower asks the leader); absent when no
	// leader is known.
	Reachable     *bool  `json:"reachable,omitempty"`
	LastContactMs *int64 `json:"last_contact_ms,omitempty"`
	AppliedIndex  uint64 `json:"applied_index,omitempty"`
	// Role is the member's Raft state at its last report: leader,
	// follower or candidate; absent when it has not been heard from.
	Role string `json:"role,omitempty"`
	// Status is autopilot's: leader, voter, nonvoter, or staging (a
	// healthy non-voter autopilot will promote once it is stable).
	Status string `json:"status,omitempty"`
	// Healthy: heard from recently and caught up with the leader's
	// commit index (autopilot's rule); StableSince is when its current
	// healthy streak began (absent while unhealthy). Leader's view.
	Healthy     *bool      `json:"healthy,omitempty"`
	StableSince *time.Time `json:"stable_since,omitempty"`
}

// StorageStatus says why a node refuses writes (ClusterInfo.Storage).
type StorageStatus struct {
	// Cause names the failure: the data dir is below its free-space
	// reserve or not writable, a badger write is being retried, or a Raft
	// log write failed.
	Cause string `json:"cause"`
	// Since is when the node stopped accepting writes.
	Since time.Time `json:"since"`
}
