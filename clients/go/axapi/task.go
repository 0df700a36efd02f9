package axapi

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// TaskPath returns the path of a task, /v1/tasks/{id}, with the id escaped
// as one segment (ids are opaque and may hold "/", "|", "@", spaces or any
// UTF-8).
func TaskPath(id string) string { return "/v1/tasks/" + url.PathEscape(id) }

// Task is the JSON view of a task, as every answer that carries a task
// sends it (schema Task of openapi.yaml). Times are UTC; durations are Go
// duration strings ("30s"). Run and Snoozes are always sent.
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
	// WaitingReason says why a WAITING task that is due has not started:
	// no_executor, executor_busy, executor_unavailable, circuit_open,
	// handler_limit, previous_run_running or paused; absent when it is
	// not due or not waiting, or when the leader could not be asked.
	// WaitingSince is when it began to wait; WaitingUntil, for
	// circuit_open and executor_unavailable, when that may end.
	WaitingReason string     `json:"waiting_reason,omitempty"`
	WaitingSince  *time.Time `json:"waiting_since,omitempty"`
	WaitingUntil  *time.Time `json:"waiting_until,omitempty"`
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
	// Retention (Go duration string) is the task's own retention, when
	// it was submitted with one.
	Retention string `json:"retention,omitempty"`
	// Shards, for a sharded task, is its "shards" as submitted (Count, or
	// Ask and Max) and the shards of its current or last run: Total,
	// Succeeded, Failed (DEAD, FAILED or CANCELLED) and Running. While
	// they run the task is RUNNING without a node.
	Shards *ShardsView `json:"shards,omitempty"`
	// ShardIndex (from 0) and ShardTotal are set on a shard task
	// (ShardPrefix), as its callbacks' Ax-Shard-Index and Ax-Shard-Total.
	ShardIndex *int `json:"shard_index,omitempty"`
	ShardTotal int  `json:"shard_total,omitempty"`
	// Paused is true while the task is paused (POST
	// /v1/tasks/{id}/pause): its due runs wait until it is resumed.
	Paused bool `json:"paused,omitempty"`
	// LastRun is the number of the newest run on record (GET
	// /v1/tasks/{id}/runs/{run}); Result, ResultBase64 and
	// ResultTruncated are that run's result, as in Run.
	LastRun         int             `json:"last_run,omitempty"`
	Result          json.RawMessage `json:"result,omitempty"`
	ResultBase64    string          `json:"result_base64,omitempty"`
	ResultTruncated bool            `json:"result_truncated,omitempty"`
	// TraceID (32 lowercase hex digits) is the trace every callback of the
	// task carries in its traceparent: the submitted traceparent's, or,
	// when the task was submitted without one, the first 16 bytes of the
	// SHA-256 of its id. TraceParent and TraceState are the trace context
	// as submitted, when there was one.
	TraceID     string `json:"trace_id,omitempty"`
	TraceParent string `json:"traceparent,omitempty"`
	TraceState  string `json:"tracestate,omitempty"`
	// Payload is the payload when it was submitted as JSON; PayloadBase64
	// when it was submitted as payload_base64.
	Payload       []byte `json:"-"`
	PayloadBase64 bool   `json:"-"`
	// BacklogWarning, set on a submit's answer when the handler's backlog
	// is at 80 % of its bound or more ("depth/limit"), is sent as the
	// Ax-Backlog-Warning header.
	BacklogWarning string `json:"-"`
}

// ShardsView is a sharded task's "shards" in the API (see Task.Shards).
type ShardsView struct {
	Count     int  `json:"count,omitempty"`
	Ask       bool `json:"ask,omitempty"`
	Max       int  `json:"max,omitempty"`
	Total     int  `json:"total"`
	Succeeded int  `json:"succeeded"`
	Failed    int  `json:"failed"`
	Running   int  `json:"running"`
}

// ShardPrefix starts the id of every shard task: shard i of run r of task
// t is ShardID(t, r, i), "shard/<t>/<r>/<i>". Task submits may not use it.
const ShardPrefix = "shard/"

// ShardsMax bounds the shards of one run (count, or max with ask).
const ShardsMax = 1024

// ShardID returns the id of shard index of run run of task id.
func ShardID(id string, run, index int) string {
	return ShardPrefix + id + "/" + strconv.Itoa(run) + "/" + strconv.Itoa(index)
}

// ShardParent returns the task and run a shard task id belongs to
// (ShardID's inverse); ok is false for any other id.
func ShardParent(id string) (parent string, run int, ok bool) {
	rest, found := strings.CutPrefix(id, ShardPrefix)
	if !found {
		return "", 0, false
	}
	i := strings.LastIndexByte(rest, '/')
	if i <= 0 {
		return "", 0, false
	}
	if _, err := strconv.Atoi(rest[i+1:]); err != nil {
		return "", 0, false
	}
	rest = rest[:i]
	j := strings.LastIndexByte(rest, '/')
	if j <= 0 {
		return "", 0, false
	}
	run, err := strconv.Atoi(rest[j+1:])
	if err != nil || run < 1 {
		return "", 0, false
	}
	return rest[:j], run, true
}

// BackoffView is a task's retry backoff in the API (durations as Go
// duration strings).
type BackoffView struct {
	Initial    string  `json:"initial"`
	Max        string  `json:"max"`
	Multiplier float64 `json:"multiplier"`
	Jitter     float64 `json:"jitter"`
}

// taskAlias has Task's fields without its methods, to avoid recursion.
type taskAlias Task

// taskJSON adds payload_base64 to the view; payload is spliced in raw.
type taskJSON struct {
	taskAlias
	PayloadB64 string `json:"payload_base64,omitempty"`
}

// MarshalJSON encodes the task view. The payload appears as "payload", the
// JSON value byte for byte as submitted, when the task was submitted with a
// JSON payload, or as "payload_base64" when it was submitted base64 (or when
// its bytes are not valid JSON, UTF-8 included); neither when the payload is
// empty.
//
// The exact bytes survive when MarshalJSON is called directly (the server
// does); json.Marshal of a value containing a Task compacts the output, which
// removes insignificant white space inside the payload.
func (t Task) MarshalJSON() ([]byte, error) {
	v := taskJSON{taskAlias: taskAlias(t)}
	// JSON text is UTF-8 (RFC 8259 section 8.1), which json.Valid does not
	// check: a payload stored with other bytes (a sidecar before the check
	// of request bodies took them) goes out as base64, or the view would not
	// be JSON.
	raw := len(t.Payload) > 0 && !t.PayloadBase64 && utf8.Valid(t.Payload) && json.Valid(t.Payload)
	if len(t.Payload) > 0 && !raw {
		v.PayloadB64 = base64.StdEncoding.EncodeToString(t.Payload)
	}
	out, ok := appendTaskJSON(make([]byte, 0, 512+len(t.Payload)), &v)
	if !ok {
		var err error
		if out, err = marshalNoHTML(v); err != nil {
			return nil, err
		}
	}
	if !raw {
		return out, nil
	}
	// out ends with '}' and is never "{}" (id is always present).
	out = append(out[:len(out)-1], `,"payload":`...)
	out = append(out, t.Payload...)
	return append(out, '}'), nil
}

// UnmarshalJSON decodes a task view produced by MarshalJSON: "payload" is
// kept as raw JSON bytes, "payload_base64" is decoded (standard base64,
// with or without padding) and sets PayloadBase64.
func (t *Task) UnmarshalJSON(b []byte) error {
	aux := struct {
		*taskAlias
		Payload    json.RawMessage `json:"payload"`
		PayloadB64 *string         `json:"payload_base64"`
	}{taskAlias: (*taskAlias)(t)}
	t.Payload, t.PayloadBase64 = nil, false
	if err := json.Unmarshal(b, &aux); err != nil {
		return err
	}
	switch {
	case aux.PayloadB64 != nil:
		p, err := base64.StdEncoding.DecodeString(*aux.PayloadB64)
		if err != nil {
			p, err = base64.RawStdEncoding.DecodeString(*aux.PayloadB64) // without padding
		}
		if err != nil {
			return fmt.Errorf("payload_base64: %w", err)
		}
		t.Payload, t.PayloadBase64 = p, true
	case len(aux.Payload) > 0 && string(aux.Payload) != "null":
		t.Payload = []byte(aux.Payload)
	}
	return nil
}
