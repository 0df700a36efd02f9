package ipc

import (
	"context"
	"time"
)

// Backend is everything the application API needs from a node. The sidecar
// implements it; ipc never imports raft or raftfsm, and handler tests use a
// fake. Errors returned by a Backend should wrap one of the sentinels in
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
	// its error, the others their task. err is for the batch as a whole
	// (no leader).
	SubmitBatch(ctx context.Context, specs []TaskSpec) ([]BatchItem, error)
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

// ListPage is one page of List.
type ListPage struct {
	Tasks      []Task `json:"tasks"`
	NextCursor string `json:"next_cursor,omitempty"` // empty on the last page
}

// List page sizes.
const (
	ListLimitDefault = 100
	ListLimitMax     = 1000
)

// AttemptResult is the body of POST /v1/tasks/{id}/result.
type AttemptResult struct {
	Attempt int    `json:"attempt"`
	Status  string `json:"status"` // "success", "failed" (retry), "permanent" (no retry)
	Error   string `json:"error,omitempty"`
}

// ExecutorSpec is an executor registered on a node (POST /v1/executors).
type ExecutorSpec struct {
	Name           string   `json:"name"`
	Handlers       []string `json:"handlers"` // "*" = every handler; "order.*" = by prefix
	URL            string   `json:"url"`      // unix:///abs/path.sock or http://127.0.0.1:PORT
	MinConcurrency int      `json:"min_concurrency,omitempty"`
	MaxConcurrency int      `json:"max_concurrency,omitempty"`
	Timeout        string   `json:"timeout,omitempty"`   // Go duration; default attempt timeout for its tasks
	FromFlag       bool     `json:"from_flag,omitempty"` // registered by --executor (read only)
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
}

// BackoffSpec is the retry backoff of a task: the n-th retry waits
// Initial × Multiplier^(n-1), at most Max, with ±Jitter (a fraction) of
// random spread.
type BackoffSpec struct {
	Initial    time.Duration
	Max        time.Duration
	Multiplier float64
	Jitter     float64
}

// Recurring reports whether the spec has a schedule.
func (s TaskSpec) Recurring() bool { return s.Cron != "" || s.Every > 0 }

// SameSpec reports whether a and b describe the same task, ignoring Overwrite.
func SameSpec(a, b TaskSpec) bool {
	return a.ID == b.ID && a.Handler == b.Handler && string(a.Payload) == string(b.Payload) &&
		a.PayloadBase64 == b.PayloadBase64 && a.Delay == b.Delay && a.RunAt.Equal(b.RunAt) &&
		a.Priority == b.Priority && a.Timeout == b.Timeout && a.MaxAttempts == b.MaxAttempts &&
		a.Cron == b.Cron && a.Timezone == b.Timezone && a.Every == b.Every && a.Repeats == b.Repeats &&
		a.Until.Equal(b.Until) && sameBackoff(a.Backoff, b.Backoff) && a.RouteKey == b.RouteKey && sameLabels(a.Labels, b.Labels)
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

// Defaults for submit fields the client leaves out.
const (
	PriorityDefault    = 2
	PriorityMax        = 4
	TimeoutDefault     = 30 * time.Second
	TimeoutMax         = 24 * time.Hour
	MaxAttemptsDefault = 4 // 3 retries, seed 000's default
	MaxAttemptsMax     = 1000
	// PayloadMaxBytes bounds a payload (DESIGN.md section 9): 1 MiB.
	PayloadMaxBytes = 1 << 20
	// IDMaxBytes bounds a task id.
	IDMaxBytes = 512
	// HandlerMaxBytes bounds a handler name.
	HandlerMaxBytes = 256
)

// Task states, upper case on the wire (DESIGN.md section 2).
const (
	StateWaiting   = "WAITING"
	StateRunning   = "RUNNING"
	StateSuccess   = "SUCCESS"
	StateDead      = "DEAD"
	StateFailed    = "FAILED"
	StateCancelled = "CANCELLED"
)

// Task is the JSON view of a task returned by the API.
type Task struct {
	ID          string `json:"id"`
	Handler     string `json:"handler"`
	State       string `json:"state"`
	Priority    int    `json:"priority"`
	Attempts    int    `json:"attempts"`
	MaxAttempts int    `json:"max_attempts"`
	// Timeout is a Go duration string ("30s").
	Timeout string `json:"timeout"`
	// Delay (Go duration string) or RunAt, as submitted.
	Delay string     `json:"delay,omitempty"`
	RunAt *time.Time `json:"run_at,omitempty"`
	// NextRunAt is when the next attempt is due; absent for a task that is
	// running or terminal.
	NextRunAt *time.Time `json:"next_run_at,omitempty"`
	// LastError describes the last failed attempt ("http 500: ...").
	LastError string `json:"last_error,omitempty"`
	// Node runs the current attempt while the task is RUNNING.
	Node string `json:"node,omitempty"`
	// Recurring tasks: the schedule as submitted and the number of runs
	// started so far (Ax-Run of the current or last run).
	Cron     string     `json:"cron,omitempty"`
	Timezone string     `json:"timezone,omitempty"`
	Every    string     `json:"every,omitempty"`
	Repeats  int        `json:"repeats,omitempty"`
	Until    *time.Time `json:"until,omitempty"`
	Run      int        `json:"run"`
	// Snoozes counts busy answers (429/503), which are not attempts.
	Snoozes    int               `json:"snoozes"`
	Backoff    *BackoffView      `json:"backoff,omitempty"`
	RouteKey   string            `json:"route_key,omitempty"`
	Labels     map[string]string `json:"labels,omitempty"`
	CreatedAt  time.Time         `json:"created_at"`
	UpdatedAt  time.Time         `json:"updated_at"`
	FinishedAt *time.Time        `json:"finished_at,omitempty"`
	// Payload is the payload when it was submitted as JSON; PayloadBase64
	// when it was submitted as payload_base64.
	Payload       []byte `json:"-"`
	PayloadBase64 bool   `json:"-"`
	// BacklogWarning, set on a submit's answer when the handler's backlog
	// is at 80 % of its bound or more ("depth/limit"), is sent as the
	// Ax-Backlog-Warning header.
	BacklogWarning string `json:"-"`
}

// BackoffView is a task's retry backoff in the API (durations as Go
// duration strings).
type BackoffView struct {
	Initial    string  `json:"initial"`
	Max        string  `json:"max"`
	Multiplier float64 `json:"multiplier"`
	Jitter     float64 `json:"jitter"`
}

// ClusterInfo is the reply of GET /v1/cluster.
type ClusterInfo struct {
	NodeID       string   `json:"node_id"`
	State        string   `json:"state"`  // Raft state of this node: Leader, Follower, Candidate, Shutdown
	Leader       string   `json:"leader"` // node id of the leader, "" when none is known
	Term         uint64   `json:"term"`
	AppliedIndex uint64   `json:"applied_index"`
	CommitIndex  uint64   `json:"commit_index"`
	Members      []Member `json:"members"`
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
