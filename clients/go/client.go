package ax

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/axsched/ax/clients/go/axapi"
)

// Defaults of Config.
const (
	// SocketEnv is the environment variable that names the sidecar's socket
	// when Config.SocketPath is empty.
	SocketEnv = "AX_SOCKET"
	// SocketPathDefault is the socket path used when Config.SocketPath is
	// empty and SocketEnv is unset: ax.sock in the working directory.
	SocketPathDefault = "./ax.sock"
	// TimeoutDefault bounds one request when Config.Timeout is 0.
	TimeoutDefault = 10 * time.Second
)

// Retries of answers "no_leader" (HTTP 503, ErrNoLeader): an election
// usually ends within a second or two, so a few short waits hide it.
const (
	noLeaderRetries     = 3                      // retries after the first try
	noLeaderBackoff     = 100 * time.Millisecond // first wait, doubled after each retry
	noLeaderMaxWait     = 5 * time.Second        // a longer Retry-After is returned to the caller instead
	responseMaxBytes    = 16 << 20               // a task view carries at most a 1 MiB payload, base64-encoded
	errorBodyMaxMessage = 512                    // bytes of a non-JSON error body kept as Message
)

// Config configures a Client. The zero value is ready to use.
type Config struct {
	// SocketPath is the path of the sidecar's Unix socket. A "unix://"
	// prefix is accepted and ignored.
	//
	// Defaults to the value of the AX_SOCKET environment variable (read by
	// New), or SocketPathDefault ("./ax.sock") when that is unset.
	SocketPath string

	// Timeout bounds each HTTP request to the sidecar, from connecting to
	// reading the whole answer; a call that retries (see ErrNoLeader) gives
	// each try its own Timeout. The context given to a call can shorten it
	// further. A negative value disables the bound, leaving only the
	// context.
	//
	// Defaults to TimeoutDefault (10s).
	Timeout time.Duration

	// UserAgent is sent as the User-Agent of every request. Defaults to
	// "ax-go".
	UserAgent string
}

// Client talks to the local ax sidecar over its Unix socket. It is safe for
// concurrent use; create one per process and reuse it, since it keeps
// connections open.
type Client struct {
	socket    string
	timeout   time.Duration
	userAgent string
	hc        *http.Client
}

// New returns a Client for the sidecar described by cfg. It does not connect;
// the first call does (use Ready to check the sidecar at start-up).
func New(cfg Config) *Client {
	socket := cfg.SocketPath
	if socket == "" {
		socket = os.Getenv(SocketEnv)
	}
	socket = strings.TrimPrefix(socket, "unix://")
	if socket == "" {
		socket = SocketPathDefault
	}
	timeout := cfg.Timeout
	switch {
	case timeout == 0:
		timeout = TimeoutDefault
	case timeout < 0:
		timeout = 0
	}
	transport := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
	userAgent := cfg.UserAgent
	if userAgent == "" {
		userAgent = "ax-go"
	}
	return &Client{
		socket:    socket,
		timeout:   timeout,
		userAgent: userAgent,
		hc: &http.Client{
			Transport: transport,
			CheckRedirect: func(*http.Request, []*http.Request) error {
				return http.ErrUseLastResponse
			},
		},
	}
}

// Submit submits a task and returns it as stored. It waits until the task is
// durable on a quorum of the cluster.
//
// Submitting is idempotent by SubmitRequest.ID: when a task with that id
// exists with the same spec, Submit returns the existing task (whatever its
// state) and creates nothing. When the existing task has a different spec,
// Submit fails with an error matching ErrConflict, unless Overwrite is set.
//
// When the handler's backlog nears its bound, the returned task's
// BacklogWarning is set ("depth/limit"): slow down.
//
// Other errors: ErrInvalid for a request the sidecar rejects (the message
// says which field), ErrTooLarge, ErrQueueFull (see APIError.RetryAfter,
// APIError.Depth and APIError.Limit), ErrNoLeader after a few retries,
// ErrUnavailable.
func (c *Client) Submit(ctx context.Context, req SubmitRequest) (*Task, error) {
	if req.Handler == "" {
		return nil, fmt.Errorf("%w: handler: required", ErrInvalid)
	}
	body, err := encodeSubmit(withTrace(ctx, req))
	if err != nil {
		return nil, err
	}
	var w axapi.Task
	hdr, err := c.doHeader(ctx, http.MethodPost, "/v1/tasks", body, &w)
	if err != nil {
		return nil, err
	}
	t, err := taskFromWire(&w)
	if err != nil {
		return nil, err
	}
	t.BacklogWarning = hdr.Get(HeaderBacklogWarning)
	return t, nil
}

// Get returns the task with the given id: its state, attempts, next run
// and last error. An unknown id gives an error matching ErrNotFound.
func (c *Client) Get(ctx context.Context, id string) (*Task, error) {
	if id == "" {
		return nil, fmt.Errorf("%w: empty task id", ErrInvalid)
	}
	var w axapi.Task
	if err := c.do(ctx, http.MethodGet, taskPath(id), nil, &w); err != nil {
		return nil, err
	}
	return taskFromWire(&w)
}

// Cancel cancels the task with the given id and returns it in its new
// state. A waiting task becomes CANCELLED at once; for a running task the
// sidecar also aborts the executor's callback request (the handler's
// context is cancelled). Cancelling a task that is already terminal returns
// it unchanged. An unknown id gives an error matching ErrNotFound.
func (c *Client) Cancel(ctx context.Context, id string) (*Task, error) {
	if id == "" {
		return nil, fmt.Errorf("%w: empty task id", ErrInvalid)
	}
	var w axapi.Task
	if err := c.do(ctx, http.MethodDelete, taskPath(id), nil, &w); err != nil {
		return nil, err
	}
	return taskFromWire(&w)
}

// Retry re-runs a DEAD or FAILED task and returns it: WAITING again, due
// now, with its attempts counted from zero. A task in another state gives an
// error matching ErrConflict; an unknown id, ErrNotFound.
func (c *Client) Retry(ctx context.Context, id string) (*Task, error) {
	if id == "" {
		return nil, fmt.Errorf("%w: empty task id", ErrInvalid)
	}
	var w axapi.Task
	if err := c.do(ctx, http.MethodPost, taskPath(id)+"/retry", []byte("{}"), &w); err != nil {
		return nil, err
	}
	return taskFromWire(&w)
}

// Cluster describes the Raft group as the local sidecar sees it: members,
// leader, term and indexes.
func (c *Client) Cluster(ctx context.Context) (*ClusterInfo, error) {
	var info ClusterInfo
	if err := c.do(ctx, http.MethodGet, "/v1/cluster", nil, &info); err != nil {
		return nil, err
	}
	return &info, nil
}

// Ready returns nil when the sidecar is ready to serve: a leader is known and
// the local state has caught up with it. Otherwise it returns an error
// matching ErrNotReady (the sidecar answered, but is not ready) or
// ErrUnavailable (no answer). Ready does not retry; poll it to wait for a
// sidecar that is starting.
func (c *Client) Ready(ctx context.Context) error {
	_, err := c.doOnce(ctx, http.MethodGet, "/readyz", nil, nil)
	var apiErr *APIError
	if errors.As(err, &apiErr) && apiErr.Code == "" && apiErr.Status == http.StatusServiceUnavailable {
		apiErr.Code = CodeNotReady
	}
	return err
}

// CloseIdleConnections closes the connections to the sidecar that are not in
// use. The Client stays usable. Calling it is never required.
func (c *Client) CloseIdleConnections() { c.hc.CloseIdleConnections() }

// taskPath returns the escaped path of a task; ids are opaque and may hold
// "/", "|", "@", spaces or any UTF-8.
func taskPath(id string) string { return axapi.TaskPath(id) }

// HeaderBacklogWarning is the header of a submit's answer that warns of a
// backlog at 80 % of its bound or more: "depth/limit" (Task.BacklogWarning).
const HeaderBacklogWarning = axapi.HeaderBacklogWarning

// do runs one API call, retrying "no_leader" answers a few times.
func (c *Client) do(ctx context.Context, method, path string, body []byte, out any) error {
	_, err := c.doHeader(ctx, method, path, body, out)
	return err
}

// doHeader is do that also returns the headers of a 2xx answer.
func (c *Client) doHeader(ctx context.Context, method, path string, body []byte, out any) (http.Header, error) {
	backoff := noLeaderBackoff
	for retry := 0; ; retry++ {
		hdr, err := c.doOnce(ctx, method, path, body, out)
		var apiErr *APIError
		if retry >= noLeaderRetries || !errors.As(err, &apiErr) || apiErr.Code != CodeNoLeader {
			return hdr, err
		}
		wait := max(apiErr.RetryAfter, backoff)
		if wait > noLeaderMaxWait {
			return nil, err
		}
		if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < wait {
			return nil, err
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil, err
		case <-timer.C:
		}
		backoff *= 2
	}
}

// doOnce sends one request. A 2xx answer is decoded into out (when not nil)
// and its headers returned; any other answer becomes an *APIError.
func (c *Client) doOnce(ctx context.Context, method, path string, body []byte, out any) (http.Header, error) {
	resp, err := c.roundTrip(ctx, method, path, body, responseMaxBytes)
	if err != nil {
		return nil, err
	}
	if out == nil {
		return resp.Header, nil
	}
	if err := json.Unmarshal(resp.Body, out); err != nil {
		return nil, fmt.Errorf("ax: %s %s: decode answer: %w", method, path, err)
	}
	return resp.Header, nil
}

// roundTrip sends one request and reads at most maxBody bytes of the
// answer. A non-2xx answer returns the Response and an *APIError; no
// (complete) answer returns a nil Response and the error of
// transportError.
func (c *Client) roundTrip(ctx context.Context, method, path string, body []byte, maxBody int64) (*Response, error) {
	reqCtx := ctx
	if c.timeout > 0 {
		var cancel context.CancelFunc
		reqCtx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	// The host is never resolved: every connection goes to the socket.
	req, err := http.NewRequestWithContext(reqCtx, method, "http://ax"+path, rd)
	if err != nil {
		return nil, fmt.Errorf("ax: %s %s: %w", method, path, err)
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", c.userAgent)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if v, ok := ctx.Value(preferKey{}).(string); ok {
		req.Header.Set(axapi.HeaderPrefer, v)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, c.transportError(ctx, reqCtx, method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return nil, c.transportError(ctx, reqCtx, method, path, err)
	}
	r := &Response{Status: resp.StatusCode, Header: resp.Header, Body: data}
	if resp.StatusCode/100 != 2 {
		return r, newAPIError(resp, data)
	}
	return r, nil
}

// transportError explains a request that got no (complete) answer.
func (c *Client) transportError(ctx, reqCtx context.Context, method, path string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("ax: %s %s: %w", method, path, context.Cause(ctx))
	}
	if reqCtx.Err() != nil {
		return fmt.Errorf("ax: %s %s: no answer from sidecar at %s within %v: %w",
			method, path, c.socket, c.timeout, context.DeadlineExceeded)
	}
	var opErr *net.OpError
	dial := errors.As(err, &opErr) && opErr.Op == "dial"
	return &unavailableError{socket: c.socket, dial: dial, err: err}
}

// newAPIError builds the error of a non-2xx answer.
func newAPIError(resp *http.Response, body []byte) *APIError {
	e := &APIError{
		Status:     resp.StatusCode,
		RetryAfter: axapi.ParseRetryAfter(resp.Header.Get("Retry-After"), time.Now()),
	}
	var wire struct {
		Error *axapi.ErrorDetail `json:"error"`
	}
	if json.Unmarshal(body, &wire) == nil && wire.Error != nil {
		fillAPIError(e, wire.Error)
		return e
	}
	msg := strings.TrimSpace(string(body))
	if len(msg) > errorBodyMaxMessage {
		msg = msg[:errorBodyMaxMessage] + "..."
	}
	e.Message = msg
	return e
}

// fillAPIError copies the "error" object of an error answer, or of a
// failed batch item, into e.
func fillAPIError(e *APIError, w *axapi.ErrorDetail) {
	e.Code, e.Message, e.Depth, e.Limit = w.Code, w.Message, w.Depth, w.Limit
}
