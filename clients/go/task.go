package ax

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
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
}

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
}

// Member is one server of the Raft configuration.
type Member struct {
	ID       string `json:"id"`
	RaftAddr string `json:"raft_addr"`
	PeerAddr string `json:"peer_addr,omitempty"`
	// Suffrage is Voter or Nonvoter.
	Suffrage string `json:"suffrage"`
	Leader   bool   `json:"leader"`
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
	}
	var err error
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
