package ax

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Priorities. Zero is the highest priority; tasks of a higher priority are
// picked first, and lower ones still progress (weighted round robin with
// ageing).
const (
	PriorityHighest = 0
	PriorityDefault = 2
	PriorityLowest  = 4
)

// Defaults the sidecar applies to fields a SubmitRequest leaves out.
const (
	// TaskTimeoutDefault bounds one attempt when SubmitRequest.Timeout is 0.
	TaskTimeoutDefault = 30 * time.Second
	// MaxAttemptsDefault is the number of attempts (first try included) when
	// SubmitRequest.MaxAttempts is 0.
	MaxAttemptsDefault = 4
	// PayloadMaxBytes is the sidecar's default limit on a payload (1 MiB).
	PayloadMaxBytes = 1 << 20
)

// State is the state of a task, upper case on the wire.
type State string

// Task states. A task goes WAITING → RUNNING → SUCCESS, back to WAITING for a
// retry (with backoff), or ends DEAD (attempts exhausted), FAILED (the
// executor said not to retry) or CANCELLED.
const (
	// StateWaiting: scheduled and not yet assigned to an executor, either not
	// due yet or waiting for a retry or for executor capacity.
	StateWaiting State = "WAITING"
	// StateRunning: an attempt is assigned to an executor.
	StateRunning State = "RUNNING"
	// StateSuccess: an executor answered 2xx.
	StateSuccess State = "SUCCESS"
	// StateDead: every attempt failed; kept for inspection and manual re-run.
	StateDead State = "DEAD"
	// StateFailed: an executor answered with a permanent failure (a 4xx
	// other than 429, for example through Permanent).
	StateFailed State = "FAILED"
	// StateCancelled: cancelled with Client.Cancel.
	StateCancelled State = "CANCELLED"
)

// Terminal reports whether s is a final state (SUCCESS, DEAD, FAILED or
// CANCELLED): the task will not run again unless it is re-run by hand.
func (s State) Terminal() bool {
	switch s {
	case StateSuccess, StateDead, StateFailed, StateCancelled:
		return true
	}
	return false
}

// SubmitRequest describes a task to submit. Only Handler is required; every
// zero field takes the sidecar's default.
type SubmitRequest struct {
	// ID is the task id and idempotency key: submitting the same ID with the
	// same spec again returns the existing task; with a different spec it
	// fails with ErrConflict unless Overwrite is set. Any UTF-8 string
	// (including "/", "|", "@"). Empty lets the sidecar generate one.
	ID string

	// Handler names the executor handler that runs the task
	// ("order.timeout"). Required.
	Handler string

	// Payload is marshalled to JSON with encoding/json (HTML characters are
	// not escaped) and delivered to the executor as the callback body. A
	// json.RawMessage is sent byte for byte, after a validity check. A []byte
	// is refused: use json.RawMessage for encoded JSON, or PayloadBytes for
	// binary data. Nil sends no payload.
	Payload any

	// PayloadBytes is an opaque binary payload, sent as payload_base64 and
	// delivered to the executor byte for byte. At most one of Payload and
	// PayloadBytes may be set; an empty PayloadBytes is the same as none.
	PayloadBytes []byte

	// Delay runs the task this long after the leader accepts it. At most one
	// of Delay and RunAt may be set; both zero means "run now".
	Delay time.Duration

	// RunAt runs the task at this time, never earlier. The sidecar keeps it
	// with millisecond precision.
	RunAt time.Time

	// Priority is 0 (PriorityHighest) to 4 (PriorityLowest). Nil means
	// PriorityDefault (2). With Go 1.26 write Priority: new(0).
	Priority *int

	// Timeout bounds one attempt; the executor sees it as the deadline of
	// its context. Defaults to TaskTimeoutDefault (30s).
	Timeout time.Duration

	// MaxAttempts is the number of attempts, first one included, before the
	// task is DEAD. Defaults to MaxAttemptsDefault (4).
	MaxAttempts int

	// Overwrite replaces an existing task with the same ID instead of failing
	// with ErrConflict.
	Overwrite bool

	// Cron makes the task recurring on a cron schedule: 5 fields ("0 2 * * *"),
	// 6 with seconds, or a descriptor such as "@daily", evaluated in
	// Timezone. Each slot is a run (Delivery.Run) with its own attempts. At
	// most one of Cron and Every may be set.
	Cron string

	// Timezone is the IANA time zone of Cron ("Europe/Berlin"); empty means
	// UTC. Only with Cron. A local time skipped by a DST change fires once at
	// the next valid instant; a repeated one fires once.
	Timezone string

	// Every makes the task recurring at a fixed interval (at least 1s),
	// without drift.
	//
	// The first run of a recurring task is at RunAt or after Delay when one
	// is set, else at the schedule's first slot after the submit.
	Every time.Duration

	// Repeats stops a recurring task after this many runs; 0 means no limit.
	// Only with Cron or Every.
	Repeats int

	// Until stops a recurring task: no run is due after this time. Zero means
	// no end. Only with Cron or Every.
	Until time.Time

	// Backoff overrides the retry backoff of failed attempts; nil keeps the
	// sidecar's default (BackoffDefault).
	Backoff *Backoff

	// RouteKey routes the task's attempts by consistent hashing: the tasks
	// of one key go to the same node while the membership is stable (at most
	// 256 bytes).
	RouteKey string

	// Labels are free-form key/value pairs kept with the task and returned
	// by Get and List (at most 32, each key and value at most 256 bytes).
	Labels map[string]string
}

// Backoff is the retry backoff of a task: the n-th retry of a run waits
// Initial × Multiplier^(n-1), at most Max, spread by ±Jitter (a fraction).
//
// In a SubmitRequest, a zero field keeps the sidecar's default for that
// field (see BackoffDefault); since a zero Jitter therefore means "default",
// ask for no jitter with a negative Jitter (NoJitter). In a Task, every field
// is the value in force and Jitter 0 means none.
type Backoff struct {
	// Initial is the wait before the first retry (> 0).
	Initial time.Duration
	// Max bounds every wait (>= Initial).
	Max time.Duration
	// Multiplier grows the wait after each retry (>= 1).
	Multiplier float64
	// Jitter is the random spread, a fraction from 0 to 1 (0.2 is ±20 %).
	Jitter float64
}

// NoJitter, as SubmitRequest.Backoff.Jitter, asks for retries without random
// spread (a zero Jitter keeps the default).
const NoJitter = -1.0

// BackoffDefault is the backoff the sidecar applies when a SubmitRequest has
// no Backoff, and the value of each field a Backoff leaves at zero. It is
// for reference (start from a copy of it); changing it changes nothing on
// the sidecar.
var BackoffDefault = Backoff{Initial: 2 * time.Second, Max: 30 * time.Second, Multiplier: 2, Jitter: 0.2}

// Task is a task as the sidecar reports it.
type Task struct {
	ID      string
	Handler string
	State   State
	// Priority is 0 (highest) to 4 (lowest).
	Priority int
	// Attempts counts the attempts made so far (busy answers are not
	// counted).
	Attempts    int
	MaxAttempts int
	// Timeout bounds one attempt.
	Timeout time.Duration
	// Delay is the submitted delay, zero when RunAt was used.
	Delay time.Duration
	// RunAt is the submitted due time, zero when Delay was used.
	RunAt time.Time
	// NextRunAt is when the next attempt is due; zero while the task runs
	// and once it is terminal.
	NextRunAt time.Time
	// LastError describes the last failed attempt ("http 500: ...").
	LastError string
	// Node is the node running the current attempt while RUNNING.
	Node       string
	CreatedAt  time.Time
	UpdatedAt  time.Time
	FinishedAt time.Time // zero until the task is terminal
	// Payload is the payload when it was submitted as JSON (nil otherwise).
	Payload json.RawMessage
	// PayloadBytes is the payload when it was submitted as binary
	// (SubmitRequest.PayloadBytes), nil otherwise.
	PayloadBytes []byte

	// Cron, Timezone, Every, Repeats and Until are the recurring schedule as
	// submitted (see SubmitRequest); all zero for a one-off task.
	Cron     string
	Timezone string
	Every    time.Duration
	Repeats  int
	Until    time.Time
	// Run numbers the current (or last) run of the task, from 1; it is the
	// Delivery.Run of its attempts. A recurring task starts a run per slot,
	// and Client.Retry starts a new run.
	Run int
	// Snoozes counts the busy answers (Snooze, 429 or 503) so far; they are
	// not attempts.
	Snoozes int
	// Backoff is the task's retry backoff when it was submitted with one,
	// nil when it uses the sidecar's default.
	Backoff *Backoff
	// RouteKey and Labels are as submitted.
	RouteKey string
	Labels   map[string]string

	// BacklogWarning is set by Submit and SubmitBatch when the sidecar sent
	// an Ax-Backlog-Warning header: the handler's backlog (due runs not yet
	// delivered) is at 80 % of its bound or more, as "depth/limit" ("812/1000").
	// Slow down before submits fail with ErrQueueFull; Backlog parses it.
	// Always empty from Get, List, Cancel and Retry.
	BacklogWarning string
}

// Backlog parses BacklogWarning: the handler's backlog and its bound. ok is
// false when the task carries no (well-formed) warning.
func (t *Task) Backlog() (depth, limit int, ok bool) {
	d, l, found := strings.Cut(t.BacklogWarning, "/")
	if !found {
		return 0, 0, false
	}
	depth, err1 := strconv.Atoi(strings.TrimSpace(d))
	limit, err2 := strconv.Atoi(strings.TrimSpace(l))
	if err1 != nil || err2 != nil {
		return 0, 0, false
	}
	return depth, limit, true
}

// ClusterInfo describes the Raft group as the local sidecar sees it.
type ClusterInfo struct {
	// NodeID is the id of the local node.
	NodeID string `json:"node_id"`
	// State is the Raft state of the local node: Leader, Follower,
	// Candidate or Shutdown.
	State string `json:"state"`
	// Leader is the node id of the leader, empty when none is known.
	Leader       string   `json:"leader"`
	Term         uint64   `json:"term"`
	AppliedIndex uint64   `json:"applied_index"`
	CommitIndex  uint64   `json:"commit_index"`
	Members      []Member `json:"members"`
	// VotersTarget is the number of voters autopilot keeps (--voters).
	VotersTarget int `json:"voters_target,omitempty"`
	// FailureTolerance is how many more voters may fail before the
	// cluster loses its quorum (nil when no leader is known).
	FailureTolerance *int `json:"failure_tolerance,omitempty"`
}

// Member is one server of the Raft configuration.
type Member struct {
	ID       string `json:"id"`
	RaftAddr string `json:"raft_addr"`
	PeerAddr string `json:"peer_addr,omitempty"`
	// Suffrage is Voter or Nonvoter.
	Suffrage string `json:"suffrage"`
	Leader   bool   `json:"leader"`
	// The rest is the leader's view, absent when no leader is known.
	// Reachable: heard from within about a second; LastContactMs: how
	// long ago, in milliseconds (-1: not since the leader was elected);
	// AppliedIndex: the member's applied index at its last report.
	Reachable     *bool  `json:"reachable,omitempty"`
	LastContactMs *int64 `json:"last_contact_ms,omitempty"`
	AppliedIndex  uint64 `json:"applied_index,omitempty"`
	// Role is the member's Raft state: leader, follower or candidate.
	Role string `json:"role,omitempty"`
	// Status is autopilot's: leader, voter, nonvoter, or staging (a
	// healthy non-voter to be promoted once stable).
	Status string `json:"status,omitempty"`
	// Healthy: heard from recently and caught up; StableSince: when its
	// current healthy streak began.
	Healthy     *bool      `json:"healthy,omitempty"`
	StableSince *time.Time `json:"stable_since,omitempty"`
}

// wireSubmit is the body of POST /v1/tasks, without the payload (see
// encodeSubmit).
type wireSubmit struct {
	ID            string `json:"id,omitempty"`
	Handler       string `json:"handler"`
	PayloadBase64 string `json:"payload_base64,omitempty"`
	Delay         string `json:"delay,omitempty"`
	RunAt         string `json:"run_at,omitempty"`
	Priority      *int   `json:"priority,omitempty"`
	Timeout       string `json:"timeout,omitempty"`
	MaxAttempts   int    `json:"max_attempts,omitempty"`
	Overwrite     bool   `json:"overwrite,omitempty"`

	Cron     string            `json:"cron,omitempty"`
	Timezone string            `json:"timezone,omitempty"`
	Every    string            `json:"every,omitempty"`
	Repeats  int               `json:"repeats,omitempty"`
	Until    string            `json:"until,omitempty"`
	Backoff  *wireBackoffReq   `json:"backoff,omitempty"`
	RouteKey string            `json:"route_key,omitempty"`
	Labels   map[string]string `json:"labels,omitempty"`
}

// wireBackoffReq is the "backoff" object of a submit: absent fields keep
// the sidecar's default.
type wireBackoffReq struct {
	Initial    string   `json:"initial,omitempty"`
	Max        string   `json:"max,omitempty"`
	Multiplier *float64 `json:"multiplier,omitempty"`
	Jitter     *float64 `json:"jitter,omitempty"`
}

// wireBackoff is the "backoff" object of a task view.
type wireBackoff struct {
	Initial    string  `json:"initial"`
	Max        string  `json:"max"`
	Multiplier float64 `json:"multiplier"`
	Jitter     float64 `json:"jitter"`
}

// encodeSubmit builds the JSON body of a submit. The payload is spliced in
// as is, because encoding/json would compact a json.RawMessage and change
// the bytes the executor receives.
func encodeSubmit(req SubmitRequest) ([]byte, error) {
	if req.Payload != nil && len(req.PayloadBytes) > 0 {
		return nil, fmt.Errorf("%w: both Payload and PayloadBytes are set", ErrInvalid)
	}
	w := wireSubmit{
		ID:          req.ID,
		Handler:     req.Handler,
		Priority:    req.Priority,
		MaxAttempts: req.MaxAttempts,
		Overwrite:   req.Overwrite,
	}
	if len(req.PayloadBytes) > PayloadMaxBytes {
		// Checked here: the sidecar would close the connection while the
		// body is still being sent, and the caller would see a broken pipe.
		return nil, fmt.Errorf("%w: payload is %d bytes; the limit is 1 MiB", ErrTooLarge, len(req.PayloadBytes))
	}
	if req.PayloadBytes != nil {
		w.PayloadBase64 = base64.StdEncoding.EncodeToString(req.PayloadBytes)
	}
	if req.Delay != 0 {
		w.Delay = req.Delay.String()
	}
	if !req.RunAt.IsZero() {
		w.RunAt = req.RunAt.UTC().Format(time.RFC3339Nano)
	}
	if req.Timeout != 0 {
		w.Timeout = req.Timeout.String()
	}
	w.Cron, w.Timezone, w.Repeats, w.RouteKey, w.Labels = req.Cron, req.Timezone, req.Repeats, req.RouteKey, req.Labels
	if req.Every != 0 {
		w.Every = req.Every.String()
	}
	if !req.Until.IsZero() {
		w.Until = req.Until.UTC().Format(time.RFC3339Nano)
	}
	if b := req.Backoff; b != nil {
		wb := &wireBackoffReq{}
		if b.Initial != 0 {
			wb.Initial = b.Initial.String()
		}
		if b.Max != 0 {
			wb.Max = b.Max.String()
		}
		if b.Multiplier != 0 {
			wb.Multiplier = &b.Multiplier
		}
		switch {
		case b.Jitter < 0:
			wb.Jitter = new(0.0)
		case b.Jitter > 0:
			wb.Jitter = &b.Jitter
		}
		w.Backoff = wb
	}
	body, err := json.Marshal(w)
	if err != nil {
		return nil, fmt.Errorf("ax: encode submit: %w", err)
	}
	payload, err := marshalPayload(req.Payload)
	if err != nil || payload == nil {
		return body, err
	}
	// body ends with '}' and has at least the handler field.
	out := make([]byte, 0, len(body)+len(payload)+len(`,"payload":`))
	out = append(out, body[:len(body)-1]...)
	out = append(out, `,"payload":`...)
	out = append(out, payload...)
	out = append(out, '}')
	return out, nil
}

// marshalPayload returns the JSON bytes of a SubmitRequest.Payload, nil for
// no payload.
func marshalPayload(p any) ([]byte, error) {
	switch v := p.(type) {
	case nil:
		return nil, nil
	case json.RawMessage:
		if v == nil {
			return nil, nil
		}
		if !json.Valid(v) {
			return nil, fmt.Errorf("%w: Payload is a json.RawMessage that is not valid JSON", ErrInvalid)
		}
		return v, nil
	case []byte:
		return nil, fmt.Errorf("%w: Payload is a []byte; use json.RawMessage for encoded JSON or PayloadBytes for binary data", ErrInvalid)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(p); err != nil {
		return nil, fmt.Errorf("%w: marshal Payload: %v", ErrInvalid, err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// wireTask is the JSON view of a task (the server's ipc.Task).
type wireTask struct {
	ID            string          `json:"id"`
	Handler       string          `json:"handler"`
	State         State           `json:"state"`
	Priority      int             `json:"priority"`
	Attempts      int             `json:"attempts"`
	MaxAttempts   int             `json:"max_attempts"`
	Timeout       string          `json:"timeout"`
	Delay         string          `json:"delay"`
	RunAt         *time.Time      `json:"run_at"`
	NextRunAt     *time.Time      `json:"next_run_at"`
	LastError     string          `json:"last_error"`
	Node          string          `json:"node"`
	CreatedAt     time.Time       `json:"created_at"`
	UpdatedAt     time.Time       `json:"updated_at"`
	FinishedAt    *time.Time      `json:"finished_at"`
	Payload       json.RawMessage `json:"payload"`
	PayloadBase64 *string         `json:"payload_base64"`

	Cron     string            `json:"cron"`
	Timezone string            `json:"timezone"`
	Every    string            `json:"every"`
	Repeats  int               `json:"repeats"`
	Until    *time.Time        `json:"until"`
	Run      int               `json:"run"`
	Snoozes  int               `json:"snoozes"`
	Backoff  *wireBackoff      `json:"backoff"`
	RouteKey string            `json:"route_key"`
	Labels   map[string]string `json:"labels"`
}

// task converts the wire view to a Task.
func (w *wireTask) task() (*Task, error) {
	t := &Task{
		ID:          w.ID,
		Handler:     w.Handler,
		State:       w.State,
		Priority:    w.Priority,
		Attempts:    w.Attempts,
		MaxAttempts: w.MaxAttempts,
		LastError:   w.LastError,
		Node:        w.Node,
		CreatedAt:   w.CreatedAt,
		UpdatedAt:   w.UpdatedAt,
		RunAt:       deref(w.RunAt),
		NextRunAt:   deref(w.NextRunAt),
		FinishedAt:  deref(w.FinishedAt),
		Cron:        w.Cron,
		Timezone:    w.Timezone,
		Repeats:     w.Repeats,
		Until:       deref(w.Until),
		Run:         w.Run,
		Snoozes:     w.Snoozes,
		RouteKey:    w.RouteKey,
		Labels:      w.Labels,
	}
	var err error
	if t.Every, err = parseDuration("every", w.Every); err != nil {
		return nil, err
	}
	if b := w.Backoff; b != nil {
		t.Backoff = &Backoff{Multiplier: b.Multiplier, Jitter: b.Jitter}
		if t.Backoff.Initial, err = parseDuration("backoff.initial", b.Initial); err != nil {
			return nil, err
		}
		if t.Backoff.Max, err = parseDuration("backoff.max", b.Max); err != nil {
			return nil, err
		}
	}
	if t.Timeout, err = parseDuration("timeout", w.Timeout); err != nil {
		return nil, err
	}
	if t.Delay, err = parseDuration("delay", w.Delay); err != nil {
		return nil, err
	}
	if len(w.Payload) > 0 && string(w.Payload) != "null" {
		t.Payload = w.Payload
	}
	if w.PayloadBase64 != nil {
		b, err := base64.StdEncoding.DecodeString(*w.PayloadBase64)
		if err != nil {
			b, err = base64.RawStdEncoding.DecodeString(*w.PayloadBase64)
		}
		if err != nil {
			return nil, fmt.Errorf("ax: decode task %q: payload_base64: %w", w.ID, err)
		}
		t.PayloadBytes = b
	}
	return t, nil
}

func parseDuration(field, s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("ax: decode task: %s: %w", field, err)
	}
	return d, nil
}

func deref(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}
