package ax

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/axsched/ax/clients/go/axapi"
)

// Priorities. Zero is the highest priority; tasks of a higher priority are
// picked first, and lower ones still progress (weighted round robin with
// ageing).
const (
	PriorityHighest = axapi.PriorityHighest
	PriorityDefault = axapi.PriorityDefault
	PriorityLowest  = axapi.PriorityMax
)

// Defaults the sidecar applies to fields a SubmitRequest leaves out.
const (
	// TaskTimeoutDefault bounds one attempt when SubmitRequest.Timeout is 0.
	TaskTimeoutDefault = axapi.TimeoutDefault
	// MaxAttemptsDefault is the number of attempts (first try included) when
	// SubmitRequest.MaxAttempts is 0.
	MaxAttemptsDefault = axapi.MaxAttemptsDefault
	// PayloadMaxBytes is the sidecar's default limit on a payload (1 MiB).
	PayloadMaxBytes = axapi.PayloadMaxBytes
)

// State is the state of a task, upper case on the wire (axapi.State).
type State = axapi.State

// Task states. A task goes WAITING → RUNNING → SUCCESS, back to WAITING for a
// retry (with backoff), or ends DEAD (attempts exhausted), FAILED (the
// executor said not to retry) or CANCELLED.
const (
	// StateWaiting: scheduled and not yet assigned to an executor, either not
	// due yet or waiting for a retry or for executor capacity.
	StateWaiting State = axapi.StateWaiting
	// StateRunning: an attempt is assigned to an executor.
	StateRunning State = axapi.StateRunning
	// StateSuccess: an executor answered 2xx.
	StateSuccess State = axapi.StateSuccess
	// StateDead: every attempt failed; kept for inspection and manual re-run.
	StateDead State = axapi.StateDead
	// StateFailed: an executor answered with a permanent failure (a 4xx
	// other than 429, for example through Permanent).
	StateFailed State = axapi.StateFailed
	// StateCancelled: cancelled with Client.Cancel.
	StateCancelled State = axapi.StateCancelled
)

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

	// Retention is how long the task is kept once it is finished; then it
	// is purged. Zero keeps the sidecar's --retention (SUCCESS, CANCELLED)
	// or --retention-dead (DEAD, FAILED); negative is refused (ErrInvalid).
	Retention time.Duration

	// TraceParent and TraceState are the W3C trace context of the task:
	// every callback carries its trace id (Delivery.TraceParent). Empty
	// TraceParent: Submit and SubmitBatch take the trace context of their
	// ctx (WithTraceContext, else the OpenTelemetry span context in it),
	// if any. The sidecar refuses an invalid one (ErrInvalid, code
	// invalid_traceparent or invalid_tracestate). They do not make a
	// resubmit a different spec.
	TraceParent, TraceState string

	// Shards, when set, runs each run of the task as shard tasks spread
	// over the nodes, each retried on its own; nil: not sharded.
	Shards *Shards
}

// Shards splits each run of a task into shards: Count shards, or with Ask
// as many as the executor answers (its shard-count handler), at most Max.
// Set Count (1 to ShardsMax) or Ask with Max (1 to ShardsMax), not both:
// the sidecar refuses anything else (ErrInvalid, code invalid_shards).
// Each shard is a task (axapi.ShardID: "shard/<id>/<run>/<index>") whose
// callbacks carry its index and the total; the run is SUCCESS when every
// shard succeeded, DEAD when any did not.
type Shards struct {
	Count int
	Ask   bool
	Max   int
}

// ShardsMax bounds the shards of one run.
const ShardsMax = axapi.ShardsMax

// ShardProgress is a sharded task's shards in its view: as submitted
// (Count, or Ask and Max) and those of its current or last run (Total,
// Succeeded, Failed, Running).
type ShardProgress = axapi.ShardsView

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
	// Retention is the task's own retention (zero: the sidecar's).
	Retention time.Duration
	// Shards is a sharded task's shards (nil for another); while they
	// run the task is RUNNING without a Node.
	Shards *ShardProgress
	// ShardIndex (from 0) and ShardTotal describe a shard task (ShardTotal
	// 0 for any other).
	ShardIndex, ShardTotal int
	// Paused is true while the task is paused (Client.PauseTask).
	Paused bool
	// TraceID (32 hex digits) is the trace every callback of the task
	// carries: the submitted traceparent's, or the task id's
	// (axapi.TaskTraceID) when it was submitted without one. TraceParent
	// and TraceState are the trace context as submitted, if any.
	TraceID, TraceParent, TraceState string
	// LastRun is the newest run on record (Client.Run); Result is its
	// result as stored: JSON bytes, or with ResultBinary the bytes of an
	// answer that was not JSON; ResultTruncated when it was cut at 64 KiB.
	LastRun         int
	Result          []byte
	ResultBinary    bool
	ResultTruncated bool

	// WaitingReason says why a due WAITING task has not started
	// ("no_executor", "executor_busy", "executor_unavailable",
	// "circuit_open", "handler_limit", "previous_run_running", "paused"),
	// since WaitingSince; WaitingUntil is when that may end, if known.
	// Empty (zero) when the task is not waiting for one, or when the node
	// could not ask the leader.
	WaitingReason string
	WaitingSince  time.Time
	WaitingUntil  time.Time

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

// ClusterInfo describes the Raft group as the local sidecar sees it
// (axapi.ClusterInfo): the local node, its Raft state, the leader, term,
// indexes and members, and Storage while the node's disk refuses writes.
type ClusterInfo = axapi.ClusterInfo

// Member is one server of the Raft configuration (axapi.Member).
type Member = axapi.Member

// encodeSubmit builds the JSON body of a submit. The payload is spliced in
// as is, because encoding/json would compact a json.RawMessage and change
// the bytes the executor receives.
func encodeSubmit(req SubmitRequest) ([]byte, error) {
	if req.Payload != nil && len(req.PayloadBytes) > 0 {
		return nil, fmt.Errorf("%w: both Payload and PayloadBytes are set", ErrInvalid)
	}
	w := axapi.SubmitRequest{
		ID:        req.ID,
		Handler:   req.Handler,
		Priority:  req.Priority,
		Overwrite: req.Overwrite,
		Labels:    req.Labels,
		// Set by Submit from the context when the request has none.
		TraceParent: req.TraceParent,
		TraceState:  req.TraceState,
	}
	if len(req.PayloadBytes) > PayloadMaxBytes {
		// Checked here: the sidecar would close the connection while the
		// body is still being sent, and the caller would see a broken pipe.
		return nil, fmt.Errorf("%w: payload is %d bytes; the limit is 1 MiB", ErrTooLarge, len(req.PayloadBytes))
	}
	if len(req.PayloadBytes) > 0 {
		w.PayloadBase64 = new(base64.StdEncoding.EncodeToString(req.PayloadBytes))
	}
	if req.MaxAttempts != 0 {
		w.MaxAttempts = &req.MaxAttempts
	}
	w.Delay = durationField(req.Delay)
	w.Timeout = durationField(req.Timeout)
	w.Every = durationField(req.Every)
	w.Retention = durationField(req.Retention)
	w.RunAt = timeField(req.RunAt)
	w.Until = timeField(req.Until)
	w.Cron = stringField(req.Cron)
	w.Timezone = stringField(req.Timezone)
	w.RouteKey = stringField(req.RouteKey)
	if req.Repeats != 0 {
		w.Repeats = &req.Repeats
	}
	if sh := req.Shards; sh != nil {
		w.Shards = &axapi.ShardsRequest{Ask: sh.Ask}
		if sh.Count != 0 || !sh.Ask {
			w.Shards.Count = new(sh.Count)
		}
		if sh.Max != 0 || sh.Ask {
			w.Shards.Max = new(sh.Max)
		}
	}
	if b := req.Backoff; b != nil {
		wb := &axapi.BackoffRequest{Initial: durationField(b.Initial), Max: durationField(b.Max)}
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
	payload, err := marshalPayload(req.Payload)
	if err != nil {
		return nil, err
	}
	w.Payload = payload
	body, err := w.Encode()
	if err != nil {
		return nil, fmt.Errorf("ax: encode submit: %w", err)
	}
	return body, nil
}

// durationField is a duration of a submit: nil for zero (the sidecar's
// default).
func durationField(d time.Duration) *string {
	if d == 0 {
		return nil
	}
	return new(d.String())
}

// timeField is a time of a submit, RFC 3339 in UTC: nil for zero.
func timeField(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	return new(t.UTC().Format(time.RFC3339Nano))
}

// stringField is an optional string of a submit: nil for "".
func stringField(s string) *string {
	if s == "" {
		return nil
	}
	return &s
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

// taskFromWire converts the API's task view to a Task.
func taskFromWire(w *axapi.Task) (*Task, error) {
	t := &Task{
		ID:          w.ID,
		Handler:     w.Handler,
		State:       State(w.State),
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
		Paused:      w.Paused,
		TraceID:     w.TraceID,
		TraceParent: w.TraceParent,
		TraceState:  w.TraceState,
	}
	t.WaitingReason, t.WaitingSince, t.WaitingUntil = w.WaitingReason, deref(w.WaitingSince), deref(w.WaitingUntil)
	t.Shards, t.ShardTotal = w.Shards, w.ShardTotal
	if w.ShardIndex != nil {
		t.ShardIndex = *w.ShardIndex
	}
	t.LastRun, t.ResultTruncated = w.LastRun, w.ResultTruncated
	if len(w.Result) > 0 {
		t.Result = []byte(w.Result)
	} else if w.ResultBase64 != "" {
		b, err := base64.StdEncoding.DecodeString(w.ResultBase64)
		if err != nil {
			return nil, fmt.Errorf("ax: task %q: result_base64: %w", w.ID, err)
		}
		t.Result, t.ResultBinary = b, true
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
	if t.Retention, err = parseDuration("retention", w.Retention); err != nil {
		return nil, err
	}
	if t.Delay, err = parseDuration("delay", w.Delay); err != nil {
		return nil, err
	}
	switch {
	case w.PayloadBase64:
		t.PayloadBytes = w.Payload
	case len(w.Payload) > 0:
		t.Payload = json.RawMessage(w.Payload)
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
