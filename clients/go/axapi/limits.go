package axapi

import "time"

// Limits and defaults of a task (POST /v1/tasks).
const (
	// PayloadMaxBytes bounds a payload: 1 MiB of JSON bytes as sent, or of
	// the binary payload once payload_base64 is decoded.
	PayloadMaxBytes = 1 << 20
	// IDMaxBytes bounds a task id.
	IDMaxBytes = 512
	// HandlerMaxBytes bounds a handler name (and each handler pattern of
	// an executor).
	HandlerMaxBytes = 256
	// RouteKeyMaxBytes bounds a route_key.
	RouteKeyMaxBytes = 256
	// LabelsMax bounds the labels of a task; LabelMaxBytes each key and
	// value.
	LabelsMax     = 32
	LabelMaxBytes = 256

	// PriorityHighest (0) to PriorityMax (4, the lowest); PriorityDefault
	// when the submit gives none.
	PriorityHighest = 0
	PriorityDefault = 2
	PriorityMax     = 4
	// TimeoutDefault bounds an attempt when the submit gives no timeout;
	// TimeoutMax is the longest timeout allowed.
	TimeoutDefault = 30 * time.Second
	TimeoutMax     = 24 * time.Hour
	// MaxAttemptsDefault is the number of attempts (first try included)
	// when the submit gives none; MaxAttemptsMax the most allowed.
	MaxAttemptsDefault = 4
	MaxAttemptsMax     = 1000
	// EveryMin is the shortest interval of an "every" schedule.
	EveryMin = time.Second
)

// Limits of the other requests.
const (
	// BatchMaxTasks bounds the tasks of one POST /v1/tasks/batch.
	BatchMaxTasks = 1000
	// ListLimitDefault is the page size of GET /v1/tasks when the query
	// gives no limit; ListLimitMax the largest page.
	ListLimitDefault = 100
	ListLimitMax     = 1000
	// CursorMaxBytes bounds a list cursor (opaque, made by the server).
	CursorMaxBytes = 4 << 10
	// ResultErrorMaxBytes bounds the error text of POST
	// /v1/tasks/{id}/result.
	ResultErrorMaxBytes = 4 << 10
	// ExecutorNameMaxBytes bounds an executor name.
	ExecutorNameMaxBytes = 128
	// ExecutorHandlersMax bounds the handler patterns of one executor.
	ExecutorHandlersMax = 64
	// ConcurrencyMax bounds an executor's min_concurrency and
	// max_concurrency.
	ConcurrencyMax = 10000
	// PurgeLimitDefault is the limit of POST /v1/tasks/purge when the body
	// gives none; PurgeLimitMax the largest.
	PurgeLimitDefault = 1000
	PurgeLimitMax     = 10000
)

// HeaderBacklogWarning is set on a submit's answer (and a batch's) when the
// handler's backlog is at 80 % of its bound or more: "depth/limit".
const HeaderBacklogWarning = "Ax-Backlog-Warning"

// HeaderPrefer and HeaderPreferenceApplied are RFC 7240's request and
// answer headers. POST /v1/tasks/batch honours PreferReturnMinimal: each
// created or existing item's task then carries only "id" and "state", and
// the answer says Preference-Applied: return=minimal. Other preferences
// are ignored.
const (
	HeaderPrefer            = "Prefer"
	HeaderPreferenceApplied = "Preference-Applied"
	PreferReturnMinimal     = "return=minimal"
)

// State is the state of a task, upper case on the wire. Task.State is a
// plain string (the server sets it from its store); State types the keys
// of HandlerInfo.Tasks and the Go client's task states.
type State string

// Task states. A task goes WAITING → RUNNING → SUCCESS, back to WAITING
// for a retry, or ends DEAD (attempts exhausted), FAILED (not to be
// retried) or CANCELLED.
const (
	StateWaiting   = "WAITING"
	StateRunning   = "RUNNING"
	StateSuccess   = "SUCCESS"
	StateDead      = "DEAD"
	StateFailed    = "FAILED"
	StateCancelled = "CANCELLED"
)

// States lists the task states in lifecycle order.
func States() []string {
	return []string{StateWaiting, StateRunning, StateSuccess, StateDead, StateFailed, StateCancelled}
}

// Terminal reports whether s is a final state (SUCCESS, DEAD, FAILED or
// CANCELLED): the task will not run again unless it is re-run by hand.
func (s State) Terminal() bool {
	switch s {
	case StateSuccess, StateDead, StateFailed, StateCancelled:
		return true
	}
	return false
}

// Attempt result statuses (AttemptResult.Status).
const (
	// ResultSuccess: the attempt succeeded; the run is done.
	ResultSuccess = "success"
	// ResultFailed: the attempt failed; it is retried with backoff.
	ResultFailed = "failed"
	// ResultPermanent: the attempt failed and must not be retried (FAILED).
	ResultPermanent = "permanent"
)

// ResultStatuses lists the statuses of an attempt result.
func ResultStatuses() []string {
	return []string{ResultSuccess, ResultFailed, ResultPermanent}
}
