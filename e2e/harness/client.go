package harness

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// The wire types below follow the documented JSON (docs/DESIGN.md section 5),
// not ipc's Go types, so that a change of the wire shows up here.

// Task is the JSON view of a task.
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
	// Recurring tasks.
	Cron     string `json:"cron,omitempty"`
	Timezone string `json:"timezone,omitempty"`
	Every    string `json:"every,omitempty"`
	Repeats  int    `json:"repeats,omitempty"`
	Run      int    `json:"run"`
	Snoozes  int    `json:"snoozes"`
}

// PayloadBytes returns the payload as the executor should receive it.
func (t *Task) PayloadBytes() ([]byte, error) {
	if t.PayloadBase64 != nil {
		return base64.StdEncoding.DecodeString(*t.PayloadBase64)
	}
	return []byte(t.Payload), nil
}

// ClusterInfo is the reply of GET /v1/cluster.
type ClusterInfo struct {
	NodeID       string   `json:"node_id"`
	State        string   `json:"state"`
	Leader       string   `json:"leader"`
	Term         uint64   `json:"term"`
	AppliedIndex uint64   `json:"applied_index"`
	CommitIndex  uint64   `json:"commit_index"`
	Members      []Member `json:"members"`
}

// Member is one server in ClusterInfo.
type Member struct {
	ID       string `json:"id"`
	RaftAddr string `json:"raft_addr"`
	PeerAddr string `json:"peer_addr"`
	Suffrage string `json:"suffrage"`
	Leader   bool   `json:"leader"`
}

// APIError is the body of every error reply.
type APIError struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// SubmitRequest builds the body of POST /v1/tasks. Payload is spliced into
// the body byte for byte (encoding/json would compact it), so tests can
// check that white space inside a JSON payload survives.
type SubmitRequest struct {
	ID            string `json:"id,omitempty"`
	Handler       string `json:"handler,omitempty"`
	PayloadBase64 string `json:"payload_base64,omitempty"`
	Delay         string `json:"delay,omitempty"`
	RunAt         string `json:"run_at,omitempty"`
	Priority      *int   `json:"priority,omitempty"`
	Timeout       string `json:"timeout,omitempty"`
	MaxAttempts   int    `json:"max_attempts,omitempty"`
	Overwrite     bool   `json:"overwrite,omitempty"`

	// Payload is a raw JSON value sent as "payload"; nil sends none.
	Payload []byte `json:"-"`
	// SendEmptyBase64 sends "payload_base64": "" (an empty binary payload).
	SendEmptyBase64 bool `json:"-"`
}

// Body renders the request body.
func (r SubmitRequest) Body() []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(r); err != nil {
		panic(err)
	}
	b := bytes.TrimRight(buf.Bytes(), "\n")
	b = b[:len(b)-1] // drop '}'
	sep := func() {
		if len(b) > 1 {
			b = append(b, ',')
		}
	}
	if r.SendEmptyBase64 && r.PayloadBase64 == "" {
		sep()
		b = append(b, `"payload_base64":""`...)
	}
	if r.Payload != nil {
		sep()
		b = append(b, `"payload":`...)
		b = append(b, r.Payload...)
	}
	return append(b, '}')
}

// Client talks to one node's application API over its Unix socket.
type Client struct {
	Socket string
	hc     *http.Client
	tr     *http.Transport
}

// NewClient returns a client of the API on socket.
func NewClient(socket string) *Client {
	var d net.Dialer
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return d.DialContext(ctx, "unix", socket)
		},
		Proxy:               nil,
		MaxIdleConnsPerHost: 32,
		IdleConnTimeout:     30 * time.Second,
		DisableCompression:  true,
	}
	return &Client{Socket: socket, tr: tr, hc: &http.Client{Transport: tr}}
}

// Close closes idle connections.
func (c *Client) Close() { c.tr.CloseIdleConnections() }

// SetMaxIdleConns sets how many idle keep-alive connections the client
// keeps (default 32): one per concurrent caller avoids redialling.
func (c *Client) SetMaxIdleConns(n int) { c.tr.MaxIdleConnsPerHost = n }

// Response is a raw API reply.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// String is the status and the body, for messages.
func (r *Response) String() string {
	return fmt.Sprintf("%d %s", r.Status, bytes.TrimSpace(r.Body))
}

// Task decodes the body as a task.
func (r *Response) Task() (Task, error) {
	var t Task
	if err := json.Unmarshal(r.Body, &t); err != nil {
		return t, fmt.Errorf("decode task from %s: %w", r, err)
	}
	return t, nil
}

// APIError decodes the body as an error reply.
func (r *Response) APIError() (APIError, error) {
	var e APIError
	dec := json.NewDecoder(bytes.NewReader(r.Body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil {
		return e, fmt.Errorf("decode error body from %s: %w", r, err)
	}
	return e, nil
}

// RetryAfter returns the Retry-After header in seconds (0 when absent).
func (r *Response) RetryAfter() time.Duration {
	n, _ := strconv.Atoi(r.Header.Get("Retry-After"))
	return time.Duration(n) * time.Second
}

// Do sends one request. path must already be escaped.
func (c *Client) Do(ctx context.Context, method, path string, body []byte) (*Response, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://ax"+path, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	return &Response{Status: resp.StatusCode, Header: resp.Header, Body: b}, nil
}

// TaskPath returns the escaped path of a task.
func TaskPath(id string) string { return "/v1/tasks/" + url.PathEscape(id) }

// Submit sends POST /v1/tasks with a raw body.
func (c *Client) Submit(ctx context.Context, body []byte) (*Response, error) {
	return c.Do(ctx, "POST", "/v1/tasks", body)
}

// Get sends GET /v1/tasks/{id}.
func (c *Client) Get(ctx context.Context, id string) (*Response, error) {
	return c.Do(ctx, "GET", TaskPath(id), nil)
}

// Cancel sends DELETE /v1/tasks/{id}.
func (c *Client) Cancel(ctx context.Context, id string) (*Response, error) {
	return c.Do(ctx, "DELETE", TaskPath(id), nil)
}

// GetTask returns the task, failing on any answer but 200.
func (c *Client) GetTask(ctx context.Context, id string) (Task, error) {
	resp, err := c.Get(ctx, id)
	if err != nil {
		return Task{}, err
	}
	if resp.Status != http.StatusOK {
		return Task{}, fmt.Errorf("GET %s: %s", TaskPath(id), resp)
	}
	return resp.Task()
}

// Cluster returns GET /v1/cluster.
func (c *Client) Cluster(ctx context.Context) (ClusterInfo, error) {
	var info ClusterInfo
	resp, err := c.Do(ctx, "GET", "/v1/cluster", nil)
	if err != nil {
		return info, err
	}
	if resp.Status != http.StatusOK {
		return info, fmt.Errorf("GET /v1/cluster: %s", resp)
	}
	err = json.Unmarshal(resp.Body, &info)
	return info, err
}

// SubmitRetry submits body until the answer is not a 503 (no_leader or
// not_ready) and not a connection error, or ctx ends. It polls faster than
// Retry-After (every 100ms) so that tests measure the failover, not the
// hint. It returns the last answer and how many tries it took.
func (c *Client) SubmitRetry(ctx context.Context, body []byte) (*Response, int, error) {
	for tries := 1; ; tries++ {
		rctx, cancel := context.WithTimeout(ctx, 40*time.Second)
		resp, err := c.Submit(rctx, body)
		cancel()
		if err == nil && resp.Status != http.StatusServiceUnavailable {
			return resp, tries, nil
		}
		select {
		case <-ctx.Done():
			if err == nil {
				err = fmt.Errorf("still %s", resp)
			}
			return resp, tries, fmt.Errorf("submit: %w (after %d tries: %v)", ctx.Err(), tries, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
