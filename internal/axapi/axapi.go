// Package axapi makes raw calls of the ax socket API (ipc/openapi.yaml) for
// the ax command line: submit, get, list, cancel, retry, batch submit,
// executors, cluster and member removal.
//
// Each call returns the API's JSON as received (which `ax ... --json`
// prints unchanged, so no field the Go client does not know is lost) next
// to a decoded view. Errors are the client's own types: an error answer is
// an *ax.APIError (so errors.Is(err, ax.ErrNotFound) works the same for
// both), and no answer at all is an error matching ax.ErrUnavailable that
// names the socket. An answer that is not the API's JSON (the socket is
// something else, such as an executor) is a *NotSidecarError, matching
// ErrNotSidecar.
package axapi

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	ax "github.com/axsched/ax/clients/go"
)

// Limits of the API (ipc/openapi.yaml).
const (
	// BatchMax is the most tasks one POST /v1/tasks/batch takes.
	BatchMax = 1000
	// ListLimitMax is the largest page GET /v1/tasks answers.
	ListLimitMax = 1000
	// responseMaxBytes bounds an answer read into memory (a page of 1000
	// tasks with payloads can be large).
	responseMaxBytes = 256 << 20

	// PayloadMaxBytes is the largest payload a task takes: 1 MiB, of the
	// JSON bytes or of the binary payload decoded.
	PayloadMaxBytes = 1 << 20
	// MaxAttemptsMax is the largest max_attempts.
	MaxAttemptsMax = 1000
	// PriorityMax is the lowest priority (0 is the highest).
	PriorityMax = 4
	// TimeoutMax bounds a task's per-attempt timeout.
	TimeoutMax = 24 * time.Hour
	// EveryMin is the shortest interval of an "every" schedule.
	EveryMin = time.Second
	// IDMaxBytes, HandlerMaxBytes, RouteKeyMaxBytes and LabelMaxBytes bound
	// a task id, a handler name, a route key and each label key and value.
	IDMaxBytes       = 512
	HandlerMaxBytes  = 256
	RouteKeyMaxBytes = 256
	LabelMaxBytes    = 256
	// LabelsMax is the most labels a task has.
	LabelsMax = 32

	// HeaderBacklogWarning is set on a submit's answer when the handler's
	// backlog is at 80 % of its bound or more ("depth/limit").
	HeaderBacklogWarning = "Ax-Backlog-Warning"
)

// ErrNotSidecar matches the error of an answer that is not the API's JSON:
// the socket is served by something other than an ax sidecar.
var ErrNotSidecar = errors.New("not an ax sidecar")

// NotSidecarError is an answer that is neither the API's JSON nor its JSON
// error shape ({"error": {"code", "message"}}): the socket belongs to
// something else (an executor, another HTTP server).
type NotSidecarError struct {
	Socket string
	Status int
	// Body is the start of the answer's body, on one line.
	Body string
}

func (e *NotSidecarError) Error() string {
	what := fmt.Sprintf("HTTP %d", e.Status)
	if t := http.StatusText(e.Status); t != "" {
		what += " " + t
	}
	switch {
	case e.Status/100 == 2:
		what += ", not the API's JSON"
	case e.Body != "":
		what += ": " + e.Body
	}
	return fmt.Sprintf("ax: %s does not look like an ax sidecar (%s)", e.Socket, what)
}

func (e *NotSidecarError) Is(target error) bool { return target == ErrNotSidecar }

func (c *Caller) notSidecar(status int, body []byte) error {
	s := strings.Join(strings.Fields(string(body)), " ")
	if r := []rune(s); len(r) > 80 {
		s = string(r[:79]) + "…"
	}
	return &NotSidecarError{Socket: c.socket, Status: status, Body: s}
}

// ErrRouteMissing is returned when the sidecar answers 404 "no route" for
// the path: it is older than the call (for example DELETE
// /v1/cluster/members/{id}).
var ErrRouteMissing = errors.New("not supported by this sidecar yet")

// SocketPath resolves a socket path the way the Go client does: the given
// path, else $AX_SOCKET, else ./ax.sock; a "unix://" prefix is dropped.
func SocketPath(p string) string {
	if p == "" {
		p = os.Getenv(ax.SocketEnv)
	}
	p = strings.TrimPrefix(p, "unix://")
	if p == "" {
		p = ax.SocketPathDefault
	}
	return p
}

// Caller sends raw API calls to one sidecar socket. It is safe for
// concurrent use and keeps connections open.
type Caller struct {
	socket  string
	timeout time.Duration
	hc      *http.Client
}

// New returns a Caller for the sidecar at socket (see SocketPath). timeout
// bounds each request (0: ax.TimeoutDefault; negative: no bound).
func New(socket string, timeout time.Duration) *Caller {
	socket = SocketPath(socket)
	switch {
	case timeout == 0:
		timeout = ax.TimeoutDefault
	case timeout < 0:
		timeout = 0
	}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
		MaxIdleConnsPerHost: 64,
		// Below the sidecar's read timeout (ipc.ReadTimeoutDefault, 10s),
		// which ends idle keep-alive connections with an unsolicited 400
		// that net/http logs ("Unsolicited response received on idle HTTP
		// channel").
		IdleConnTimeout:    5 * time.Second,
		DisableCompression: true,
	}
	return &Caller{socket: socket, timeout: timeout, hc: &http.Client{Transport: tr}}
}

// Socket returns the socket path the Caller talks to.
func (c *Caller) Socket() string { return c.socket }

// Close closes idle connections.
func (c *Caller) Close() { c.hc.CloseIdleConnections() }

// Response is a 2xx answer: its status, headers and body.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// Do sends one request (body nil for none) and returns the body of a 2xx
// answer. Other answers become an *ax.APIError, or a *NotSidecarError when
// the body is not the API's error shape.
func (c *Caller) Do(ctx context.Context, method, path string, body []byte) ([]byte, int, error) {
	r, err := c.DoResponse(ctx, method, path, body)
	if r == nil {
		return nil, 0, err
	}
	return r.Body, r.Status, err
}

// DoResponse is Do with the answer's headers. On an error answer the
// Response is returned as well.
func (c *Caller) DoResponse(ctx context.Context, method, path string, body []byte) (*Response, error) {
	rctx := ctx
	if c.timeout > 0 {
		var cancel context.CancelFunc
		rctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(rctx, method, "http://ax"+path, rd)
	if err != nil {
		return nil, fmt.Errorf("ax: %s %s: %w", method, path, err)
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "ax-cli")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, c.transportError(ctx, rctx, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, responseMaxBytes))
	r := &Response{Status: resp.StatusCode, Header: resp.Header, Body: data}
	if err != nil {
		return r, c.transportError(ctx, rctx, err)
	}
	if resp.StatusCode/100 != 2 {
		if e := apiError(resp, data); e != nil {
			return r, e
		}
		return r, c.notSidecar(resp.StatusCode, data)
	}
	return r, nil
}

func (c *Caller) transportError(ctx, rctx context.Context, err error) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	if rctx.Err() != nil {
		return fmt.Errorf("no answer from sidecar at %s within %v: %w", c.socket, c.timeout, context.DeadlineExceeded)
	}
	return &unavailableError{socket: c.socket, err: err}
}

// unavailableError matches ax.ErrUnavailable, like the client's.
type unavailableError struct {
	socket string
	err    error
}

func (e *unavailableError) Error() string {
	cause := e.err
	var op *net.OpError
	if errors.As(e.err, &op) && op.Err != nil {
		cause = op.Err
		if op.Op == "dial" {
			return fmt.Sprintf("ax: cannot reach sidecar at %s: %v", e.socket, cause)
		}
	}
	return fmt.Sprintf("ax: lost connection to sidecar at %s: %v", e.socket, cause)
}

func (e *unavailableError) Unwrap() error        { return e.err }
func (e *unavailableError) Is(target error) bool { return target == ax.ErrUnavailable }

// apiError decodes an error answer into the client's *ax.APIError, or
// returns nil when the body is not the API's error shape
// {"error": {"code": "...", "message": "..."}}.
func apiError(resp *http.Response, body []byte) *ax.APIError {
	var wire struct {
		Error *struct {
			Code    *string `json:"code"`
			Message string  `json:"message"`
			Depth   int     `json:"depth"`
			Limit   int     `json:"limit"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &wire) != nil || wire.Error == nil || wire.Error.Code == nil || *wire.Error.Code == "" {
		return nil
	}
	e := &ax.APIError{Status: resp.StatusCode, Code: *wire.Error.Code, Message: wire.Error.Message,
		Depth: wire.Error.Depth, Limit: wire.Error.Limit}
	if s, err := strconv.Atoi(strings.TrimSpace(resp.Header.Get("Retry-After"))); err == nil && s > 0 {
		e.RetryAfter = time.Duration(s) * time.Second
	}
	return e
}

// Task is the JSON view of a task (ipc/openapi.yaml, schema Task).
type Task struct {
	ID          string     `json:"id"`
	Handler     string     `json:"handler"`
	State       string     `json:"state"`
	Priority    int        `json:"priority"`
	Attempts    int        `json:"attempts"`
	MaxAttempts int        `json:"max_attempts"`
	Timeout     string     `json:"timeout"`
	Delay       string     `json:"delay,omitempty"`
	RunAt       *time.Time `json:"run_at,omitempty"`
	NextRunAt   *time.Time `json:"next_run_at,omitempty"`
	LastError   string     `json:"last_error,omitempty"`
	Node        string     `json:"node,omitempty"`
	// Cron (with Timezone) or Every is the schedule of a recurring task;
	// Repeats (0: no limit) and Until end it.
	Cron     string     `json:"cron,omitempty"`
	Timezone string     `json:"timezone,omitempty"`
	Every    string     `json:"every,omitempty"`
	Repeats  int        `json:"repeats,omitempty"`
	Until    *time.Time `json:"until,omitempty"`
	// Run numbers the current (or last) run, from 1.
	Run int `json:"run,omitempty"`
	// Snoozes counts busy answers (429/503) so far; they are not attempts.
	Snoozes       int               `json:"snoozes,omitempty"`
	Backoff       *Backoff          `json:"backoff,omitempty"`
	RouteKey      string            `json:"route_key,omitempty"`
	Labels        map[string]string `json:"labels,omitempty"`
	CreatedAt     time.Time         `json:"created_at"`
	UpdatedAt     time.Time         `json:"updated_at"`
	FinishedAt    *time.Time        `json:"finished_at,omitempty"`
	Payload       json.RawMessage   `json:"payload,omitempty"`
	PayloadBase64 *string           `json:"payload_base64,omitempty"`
}

// Backoff is a task's retry backoff (schema BackoffView): the n-th retry
// waits Initial × Multiplier^(n-1), at most Max, spread by ±Jitter.
type Backoff struct {
	Initial    string  `json:"initial"`
	Max        string  `json:"max"`
	Multiplier float64 `json:"multiplier"`
	Jitter     float64 `json:"jitter"`
}

// TaskFromClient converts the client's Task to the API's JSON view.
func TaskFromClient(t *ax.Task) Task {
	v := Task{
		ID: t.ID, Handler: t.Handler, State: string(t.State), Priority: t.Priority,
		Attempts: t.Attempts, MaxAttempts: t.MaxAttempts, Timeout: t.Timeout.String(),
		LastError: t.LastError, Node: t.Node,
		CreatedAt: t.CreatedAt.UTC(), UpdatedAt: t.UpdatedAt.UTC(),
		RunAt: timePtr(t.RunAt), NextRunAt: timePtr(t.NextRunAt), FinishedAt: timePtr(t.FinishedAt),
		Payload: t.Payload,
		Cron:    t.Cron, Timezone: t.Timezone, Repeats: t.Repeats, Until: timePtr(t.Until),
		Run: t.Run, Snoozes: t.Snoozes, RouteKey: t.RouteKey, Labels: t.Labels,
	}
	if t.Delay != 0 {
		v.Delay = t.Delay.String()
	}
	if t.Every != 0 {
		v.Every = t.Every.String()
	}
	if b := t.Backoff; b != nil {
		v.Backoff = &Backoff{Initial: b.Initial.String(), Max: b.Max.String(), Multiplier: b.Multiplier, Jitter: b.Jitter}
	}
	if t.PayloadBytes != nil {
		s := base64.StdEncoding.EncodeToString(t.PayloadBytes)
		v.PayloadBase64 = &s
	}
	return v
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

// TaskAnswer is an answer that is one task: the API's JSON as received and
// decoded.
type TaskAnswer struct {
	Raw  json.RawMessage
	Task Task
	// Status is the HTTP status: a submit answers 201 when it created the
	// task and 200 when the task existed with the same spec.
	Status int
	// BacklogWarning is the Ax-Backlog-Warning header of a submit's answer
	// ("depth/limit"), empty when absent.
	BacklogWarning string
}

// Created reports whether a submit created the task (201), rather than
// finding it with the same spec (200).
func (a *TaskAnswer) Created() bool { return a.Status == http.StatusCreated }

// taskCall sends a request answered with one task.
func (c *Caller) taskCall(ctx context.Context, method, path string, body []byte) (*TaskAnswer, error) {
	r, err := c.DoResponse(ctx, method, path, body)
	if err != nil {
		return nil, err
	}
	a := &TaskAnswer{Raw: bytes.TrimSpace(r.Body), Status: r.Status, BacklogWarning: r.Header.Get(HeaderBacklogWarning)}
	if json.Unmarshal(a.Raw, &a.Task) != nil || a.Task.ID == "" || a.Task.State == "" {
		return nil, c.notSidecar(r.Status, r.Body)
	}
	return a, nil
}

// TaskPath is the path of a task: the id as one escaped segment.
func TaskPath(id string) string { return "/v1/tasks/" + url.PathEscape(id) }

// Get returns a task. consistency is "" (the server's default, local) or
// "local" or "strong" (a linearizable read through the leader).
func (c *Caller) Get(ctx context.Context, id, consistency string) (*TaskAnswer, error) {
	path := TaskPath(id)
	if consistency != "" {
		path += "?consistency=" + url.QueryEscape(consistency)
	}
	return c.taskCall(ctx, http.MethodGet, path, nil)
}

// Cancel cancels a task and returns it; a terminal task comes back
// unchanged.
func (c *Caller) Cancel(ctx context.Context, id string) (*TaskAnswer, error) {
	return c.taskCall(ctx, http.MethodDelete, TaskPath(id), nil)
}

// Retry runs a DEAD or FAILED task again and returns it.
func (c *Caller) Retry(ctx context.Context, id string) (*TaskAnswer, error) {
	return c.taskCall(ctx, http.MethodPost, TaskPath(id)+"/retry", []byte("{}"))
}

// SubmitRequest is the body of POST /v1/tasks (schema SubmitRequest).
// Durations are Go duration strings and times RFC 3339; empty fields are
// left out (the server's defaults apply).
type SubmitRequest struct {
	ID            string            `json:"id,omitempty"`
	Handler       string            `json:"handler"`
	PayloadBase64 string            `json:"payload_base64,omitempty"`
	Delay         string            `json:"delay,omitempty"`
	RunAt         string            `json:"run_at,omitempty"`
	Priority      *int              `json:"priority,omitempty"`
	Timeout       string            `json:"timeout,omitempty"`
	MaxAttempts   int               `json:"max_attempts,omitempty"`
	Overwrite     bool              `json:"overwrite,omitempty"`
	Cron          string            `json:"cron,omitempty"`
	Timezone      string            `json:"timezone,omitempty"`
	Every         string            `json:"every,omitempty"`
	Repeats       int               `json:"repeats,omitempty"`
	Until         string            `json:"until,omitempty"`
	RouteKey      string            `json:"route_key,omitempty"`
	Labels        map[string]string `json:"labels,omitempty"`
	Backoff       *BackoffRequest   `json:"backoff,omitempty"`
	// Payload is a JSON payload, sent byte for byte (not with
	// PayloadBase64).
	Payload json.RawMessage `json:"-"`
}

// BackoffRequest overrides the default retry backoff; nil fields keep the
// default.
type BackoffRequest struct {
	Initial    string   `json:"initial,omitempty"`
	Max        string   `json:"max,omitempty"`
	Multiplier *float64 `json:"multiplier,omitempty"`
	Jitter     *float64 `json:"jitter,omitempty"`
}

// PayloadSize is the size of the request's payload as the API counts it:
// the JSON bytes, or the binary payload decoded.
func (r *SubmitRequest) PayloadSize() int {
	if len(r.Payload) > 0 {
		return len(r.Payload)
	}
	return base64.StdEncoding.DecodedLen(len(r.PayloadBase64)) - strings.Count(r.PayloadBase64[max(0, len(r.PayloadBase64)-2):], "=")
}

// Encode returns the JSON body of the request. The payload is spliced in as
// is: encoding/json would compact it and change the bytes the executor
// receives. A payload over PayloadMaxBytes is refused here, since the
// sidecar would close the connection while the body is still being sent.
func (r *SubmitRequest) Encode() ([]byte, error) {
	if len(r.Payload) > 0 && r.PayloadBase64 != "" {
		return nil, fmt.Errorf("%w: both payload and payload_base64 are set", ax.ErrInvalid)
	}
	if n := r.PayloadSize(); n > PayloadMaxBytes {
		return nil, fmt.Errorf("%w: payload is %d bytes; the limit is 1 MiB", ax.ErrTooLarge, n)
	}
	if len(r.Payload) > 0 && !json.Valid(r.Payload) {
		return nil, fmt.Errorf("%w: payload is not valid JSON", ax.ErrInvalid)
	}
	body, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	if len(r.Payload) == 0 {
		return body, nil
	}
	// body ends with '}' and has at least the handler field.
	out := make([]byte, 0, len(body)+len(r.Payload)+len(`,"payload":`))
	out = append(out, body[:len(body)-1]...)
	out = append(out, `,"payload":`...)
	out = append(out, r.Payload...)
	return append(out, '}'), nil
}

// Submit submits a task: POST /v1/tasks. The answer's Status tells a new
// task (201) from an existing one with the same spec (200).
func (c *Caller) Submit(ctx context.Context, req *SubmitRequest) (*TaskAnswer, error) {
	body, err := req.Encode()
	if err != nil {
		return nil, err
	}
	return c.taskCall(ctx, http.MethodPost, "/v1/tasks", body)
}

// ClusterAnswer is the answer of GET /v1/cluster, raw and decoded.
type ClusterAnswer struct {
	Raw  json.RawMessage
	Info ax.ClusterInfo
}

// Cluster returns the Raft group as the node sees it: GET /v1/cluster.
func (c *Caller) Cluster(ctx context.Context) (*ClusterAnswer, error) {
	r, err := c.DoResponse(ctx, http.MethodGet, "/v1/cluster", nil)
	if err != nil {
		return nil, err
	}
	a := &ClusterAnswer{Raw: bytes.TrimSpace(r.Body)}
	var probe map[string]json.RawMessage
	if json.Unmarshal(a.Raw, &probe) != nil || probe["node_id"] == nil || json.Unmarshal(a.Raw, &a.Info) != nil {
		return nil, c.notSidecar(r.Status, r.Body)
	}
	return a, nil
}

// BatchResult is one item of a batch answer: Status 201 (created) or 200
// (existed with the same spec) with Task, or an error status with Error.
type BatchResult struct {
	Status int   `json:"status"`
	Task   *Task `json:"task,omitempty"`
	Error  *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error,omitempty"`
}

// SubmitBatch submits up to BatchMax tasks in one request. Each item is a
// submit request body (the fields of POST /v1/tasks). The results come in
// the order of the items.
func (c *Caller) SubmitBatch(ctx context.Context, items []json.RawMessage) ([]BatchResult, error) {
	body, err := json.Marshal(struct {
		Tasks []json.RawMessage `json:"tasks"`
	}{items})
	if err != nil {
		return nil, err
	}
	data, _, err := c.Do(ctx, http.MethodPost, "/v1/tasks/batch", body)
	if err != nil {
		return nil, err
	}
	var out struct {
		Results []BatchResult `json:"results"`
	}
	if err := json.Unmarshal(data, &out); err != nil || out.Results == nil {
		return nil, c.notSidecar(http.StatusOK, data)
	}
	if len(out.Results) != len(items) {
		return nil, fmt.Errorf("batch of %d answered with %d results", len(items), len(out.Results))
	}
	return out.Results, nil
}

// ListQuery filters List. Empty fields do not filter.
type ListQuery struct {
	Handler string
	State   string
	Limit   int // page size, 1..ListLimitMax; 0: the server's default
	Cursor  string
}

// Page is one page of List: the tasks as raw JSON and decoded.
type Page struct {
	Raw        []json.RawMessage
	Tasks      []Task
	NextCursor string
}

// List returns one page of tasks in id order.
func (c *Caller) List(ctx context.Context, q ListQuery) (*Page, error) {
	v := url.Values{}
	if q.Handler != "" {
		v.Set("handler", q.Handler)
	}
	if q.State != "" {
		v.Set("state", q.State)
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	if q.Cursor != "" {
		v.Set("cursor", q.Cursor)
	}
	path := "/v1/tasks"
	if len(v) > 0 {
		path += "?" + v.Encode()
	}
	data, status, err := c.Do(ctx, http.MethodGet, path, nil)
	if err != nil {
		return nil, err
	}
	var wire struct {
		Tasks      []json.RawMessage `json:"tasks"`
		NextCursor string            `json:"next_cursor"`
	}
	if err := json.Unmarshal(data, &wire); err != nil || wire.Tasks == nil {
		return nil, c.notSidecar(status, data)
	}
	p := &Page{Raw: wire.Tasks, NextCursor: wire.NextCursor, Tasks: make([]Task, len(wire.Tasks))}
	for i, raw := range wire.Tasks {
		if err := json.Unmarshal(raw, &p.Tasks[i]); err != nil {
			return nil, fmt.Errorf("decode task list: %w", err)
		}
	}
	return p, nil
}

// ExecutorSpec is an executor registration (schema ExecutorSpec).
type ExecutorSpec struct {
	Name           string   `json:"name"`
	Handlers       []string `json:"handlers"`
	URL            string   `json:"url"`
	MinConcurrency int      `json:"min_concurrency,omitempty"`
	MaxConcurrency int      `json:"max_concurrency,omitempty"`
	Timeout        string   `json:"timeout,omitempty"`
}

// RegisterExecutor registers (or replaces, by name) an executor on the node.
func (c *Caller) RegisterExecutor(ctx context.Context, e ExecutorSpec) error {
	body, err := json.Marshal(e)
	if err != nil {
		return err
	}
	_, _, err = c.Do(ctx, http.MethodPost, "/v1/executors", body)
	return err
}

// UnregisterExecutor removes the executor registered under name.
func (c *Caller) UnregisterExecutor(ctx context.Context, name string) error {
	_, _, err := c.Do(ctx, http.MethodDelete, "/v1/executors/"+url.PathEscape(name), nil)
	return err
}

// RemoveMember removes a node from the Raft configuration: DELETE
// /v1/cluster/members/{id}. It returns the answer's body (possibly empty).
// A sidecar without the route gives an error matching ErrRouteMissing.
func (c *Caller) RemoveMember(ctx context.Context, id string) ([]byte, error) {
	data, _, err := c.Do(ctx, http.MethodDelete, "/v1/cluster/members/"+url.PathEscape(id), nil)
	if IsRouteMissing(err) {
		return nil, fmt.Errorf("%w (it has no route DELETE /v1/cluster/members/{id})", ErrRouteMissing)
	}
	return data, err
}

// IsRouteMissing reports whether err is the sidecar's answer to a path it
// has no route for (404 "no route for ...").
func IsRouteMissing(err error) bool {
	var e *ax.APIError
	return errors.As(err, &e) && e.Status == http.StatusNotFound && strings.HasPrefix(e.Message, "no route for ")
}
