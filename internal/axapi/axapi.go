// Package axapi makes the calls of the ax socket API (ipc/openapi.yaml) that
// the Go client (clients/go) does not offer yet: batch submit, list,
// executors and member removal. Everything else goes through the client.
//
// Each call returns the API's JSON as received (which `ax ... --json`
// prints unchanged) next to a decoded view. Errors are the client's own
// types: an error answer is an *ax.APIError (so errors.Is(err,
// ax.ErrNotFound) works the same for both), and no answer at all is an
// error matching ax.ErrUnavailable that names the socket.
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
)

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

// Do sends one request (body nil for none) and returns the body of a 2xx
// answer. Other answers become an *ax.APIError.
func (c *Caller) Do(ctx context.Context, method, path string, body []byte) ([]byte, int, error) {
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
		return nil, 0, fmt.Errorf("ax: %s %s: %w", method, path, err)
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "ax-cli")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, 0, c.transportError(ctx, rctx, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, responseMaxBytes))
	if err != nil {
		return nil, resp.StatusCode, c.transportError(ctx, rctx, err)
	}
	if resp.StatusCode/100 != 2 {
		return data, resp.StatusCode, apiError(resp, data)
	}
	return data, resp.StatusCode, nil
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

// apiError decodes an error answer into the client's *ax.APIError.
func apiError(resp *http.Response, body []byte) error {
	e := &ax.APIError{Status: resp.StatusCode}
	if s, err := strconv.Atoi(strings.TrimSpace(resp.Header.Get("Retry-After"))); err == nil && s > 0 {
		e.RetryAfter = time.Duration(s) * time.Second
	}
	var wire struct {
		Error *struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &wire) == nil && wire.Error != nil {
		e.Code, e.Message = wire.Error.Code, wire.Error.Message
	} else {
		e.Message = strings.TrimSpace(string(body))
		if len(e.Message) > 512 {
			e.Message = e.Message[:512] + "..."
		}
	}
	return e
}

// Task is the JSON view of a task (ipc/openapi.yaml, schema Task).
type Task struct {
	ID            string          `json:"id"`
	Handler       string          `json:"handler"`
	State         string          `json:"state"`
	Priority      int             `json:"priority"`
	Attempts      int             `json:"attempts"`
	MaxAttempts   int             `json:"max_attempts"`
	Timeout       string          `json:"timeout"`
	Delay         string          `json:"delay,omitempty"`
	RunAt         *time.Time      `json:"run_at,omitempty"`
	NextRunAt     *time.Time      `json:"next_run_at,omitempty"`
	LastError     string          `json:"last_error,omitempty"`
	Node          string          `json:"node,omitempty"`
	CreatedAt     time.Time       `json:"created_at"`
	UpdatedAt     time.Time       `json:"updated_at"`
	FinishedAt    *time.Time      `json:"finished_at,omitempty"`
	Payload       json.RawMessage `json:"payload,omitempty"`
	PayloadBase64 *string         `json:"payload_base64,omitempty"`
}

// TaskFromClient converts the client's Task to the API's JSON view, so that
// answers obtained through clients/go print the same as raw ones.
func TaskFromClient(t *ax.Task) Task {
	v := Task{
		ID: t.ID, Handler: t.Handler, State: string(t.State), Priority: t.Priority,
		Attempts: t.Attempts, MaxAttempts: t.MaxAttempts, Timeout: t.Timeout.String(),
		LastError: t.LastError, Node: t.Node,
		CreatedAt: t.CreatedAt.UTC(), UpdatedAt: t.UpdatedAt.UTC(),
		RunAt: timePtr(t.RunAt), NextRunAt: timePtr(t.NextRunAt), FinishedAt: timePtr(t.FinishedAt),
		Payload: t.Payload,
	}
	if t.Delay != 0 {
		v.Delay = t.Delay.String()
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
	if err := json.Unmarshal(data, &out); err != nil {
		return nil, fmt.Errorf("decode batch answer: %w", err)
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
	data, _, err := c.Do(ctx, http.MethodGet, path, nil)
	if err != nil {
		return nil, err
	}
	var wire struct {
		Tasks      []json.RawMessage `json:"tasks"`
		NextCursor string            `json:"next_cursor"`
	}
	if err := json.Unmarshal(data, &wire); err != nil {
		return nil, fmt.Errorf("decode task list: %w", err)
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
