package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	ax "github.com/axsched/ax/clients/go"
	"github.com/axsched/ax/clients/go/axapi"
)

// The commands call the sidecar through the Go client's raw calls
// (ax.Client.Call) rather than its typed ones, so that --json prints the
// API's JSON as received, with every field and in the server's order; the
// answers are decoded into the wire types of axapi for the text output.
// Errors are the client's: an error answer is an *ax.APIError, no answer an
// error matching ax.ErrUnavailable that names the socket. An answer that is
// not the API's JSON (the socket is something else, such as an executor) is
// a *notSidecarError, matching errNotSidecar.

// errNotSidecar matches the error of an answer that is not the API's JSON:
// the socket is served by something other than an ax sidecar.
var errNotSidecar = errors.New("not an ax sidecar")

// errRouteMissing is returned when the sidecar answers 404 "no route" for
// the path: it is older than the call (for example DELETE
// /v1/cluster/members/{id}).
var errRouteMissing = errors.New("not supported by this sidecar yet")

// notSidecarError is an answer that is neither the API's JSON nor its JSON
// error shape ({"error": {"code", "message"}}): the socket belongs to
// something else (an executor, another HTTP server).
type notSidecarError struct {
	Socket string
	Status int
	// Body is the start of the answer's body, on one line.
	Body string
}

func (e *notSidecarError) Error() string {
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

func (e *notSidecarError) Is(target error) bool { return target == errNotSidecar }

// socketPath resolves a socket path the way the Go client does: the given
// path, else $AX_SOCKET, else ./ax.sock; a "unix://" prefix is dropped.
func socketPath(p string) string {
	if p == "" {
		p = os.Getenv(ax.SocketEnv)
	}
	p = strings.TrimPrefix(p, "unix://")
	if p == "" {
		p = ax.SocketPathDefault
	}
	return p
}

// apiCaller sends raw API calls to one sidecar socket through an ax.Client.
// It is safe for concurrent use and keeps connections open.
type apiCaller struct {
	c *ax.Client
}

// newCaller returns an apiCaller for the sidecar at socket (see socketPath).
// timeout bounds each request (0: ax.TimeoutDefault; negative: no bound).
func newCaller(socket string, timeout time.Duration) *apiCaller {
	return &apiCaller{c: ax.New(ax.Config{SocketPath: socketPath(socket), Timeout: timeout, UserAgent: "ax-cli"})}
}

// Socket returns the socket path the apiCaller talks to.
func (c *apiCaller) Socket() string { return c.c.Socket() }

// Close closes idle connections.
func (c *apiCaller) Close() { c.c.CloseIdleConnections() }

// Do sends one request (body nil for none) and returns the body of a 2xx
// answer. Other answers become an *ax.APIError, or a *notSidecarError when
// the body is not the API's error shape.
func (c *apiCaller) Do(ctx context.Context, method, path string, body []byte) ([]byte, int, error) {
	r, err := c.DoResponse(ctx, method, path, body)
	if r == nil {
		return nil, 0, err
	}
	return r.Body, r.Status, err
}

// DoResponse is Do with the answer's headers. On an error answer the
// Response is returned as well.
func (c *apiCaller) DoResponse(ctx context.Context, method, path string, body []byte) (*ax.Response, error) {
	r, err := c.c.Call(ctx, method, path, body)
	var apiErr *ax.APIError
	if r != nil && errors.As(err, &apiErr) && apiErr.Code == "" {
		return r, c.notSidecar(r.Status, r.Body)
	}
	return r, err
}

func (c *apiCaller) notSidecar(status int, body []byte) error {
	s := strings.Join(strings.Fields(string(body)), " ")
	if r := []rune(s); len(r) > 80 {
		s = string(r[:79]) + "…"
	}
	return &notSidecarError{Socket: c.Socket(), Status: status, Body: s}
}

// taskAnswer is an answer that is one task: the API's JSON as received and
// decoded.
type taskAnswer struct {
	Raw  json.RawMessage
	Task axapi.Task
	// Status is the HTTP status: a submit answers 201 when it created the
	// task and 200 when the task existed with the same spec.
	Status int
	// BacklogWarning is the Ax-Backlog-Warning header of a submit's answer
	// ("depth/limit"), empty when absent.
	BacklogWarning string
}

// Created reports whether a submit created the task (201), rather than
// finding it with the same spec (200).
func (a *taskAnswer) Created() bool { return a.Status == http.StatusCreated }

// taskCall sends a request answered with one task.
func (c *apiCaller) taskCall(ctx context.Context, method, path string, body []byte) (*taskAnswer, error) {
	r, err := c.DoResponse(ctx, method, path, body)
	if err != nil {
		return nil, err
	}
	a := &taskAnswer{Raw: bytes.TrimSpace(r.Body), Status: r.Status, BacklogWarning: r.Header.Get(axapi.HeaderBacklogWarning)}
	if a.Task.UnmarshalJSON(a.Raw) != nil || a.Task.ID == "" || a.Task.State == "" {
		return nil, c.notSidecar(r.Status, r.Body)
	}
	return a, nil
}

// Get returns a task. consistency is "" (the server's default, local) or
// "local" or "strong" (a linearizable read through the leader).
func (c *apiCaller) Get(ctx context.Context, id, consistency string) (*taskAnswer, error) {
	path := axapi.TaskPath(id)
	if consistency != "" {
		path += "?consistency=" + url.QueryEscape(consistency)
	}
	return c.taskCall(ctx, http.MethodGet, path, nil)
}

// Cancel cancels a task and returns it; a terminal task comes back
// unchanged.
func (c *apiCaller) Cancel(ctx context.Context, id string) (*taskAnswer, error) {
	return c.taskCall(ctx, http.MethodDelete, axapi.TaskPath(id), nil)
}

// Retry runs a DEAD or FAILED task again and returns it.
func (c *apiCaller) Retry(ctx context.Context, id string) (*taskAnswer, error) {
	return c.taskCall(ctx, http.MethodPost, axapi.TaskPath(id)+"/retry", []byte("{}"))
}

// payloadSize is the size of a submit's payload as the API counts it: the
// JSON bytes, or the binary payload decoded.
func payloadSize(r *axapi.SubmitRequest) int {
	if len(r.Payload) > 0 || r.PayloadBase64 == nil {
		return len(r.Payload)
	}
	b64 := *r.PayloadBase64
	return base64.StdEncoding.DecodedLen(len(b64)) - strings.Count(b64[max(0, len(b64)-2):], "=")
}

// encodeSubmit returns the JSON body of a submit (axapi.SubmitRequest.Encode,
// which keeps the payload's bytes). A payload over axapi.PayloadMaxBytes is
// refused here, since the sidecar would close the connection while the body
// is still being sent; so are both payloads at once and a payload that is
// not JSON.
func encodeSubmit(r *axapi.SubmitRequest) ([]byte, error) {
	if len(r.Payload) > 0 && r.PayloadBase64 != nil && *r.PayloadBase64 != "" {
		return nil, fmt.Errorf("%w: both payload and payload_base64 are set", ax.ErrInvalid)
	}
	if n := payloadSize(r); n > axapi.PayloadMaxBytes {
		return nil, fmt.Errorf("%w: payload is %d bytes; the limit is 1 MiB", ax.ErrTooLarge, n)
	}
	if len(r.Payload) > 0 && !json.Valid(r.Payload) {
		return nil, fmt.Errorf("%w: payload is not valid JSON", ax.ErrInvalid)
	}
	return r.Encode()
}

// Submit submits a task: POST /v1/tasks. The answer's Status tells a new
// task (201) from an existing one with the same spec (200).
func (c *apiCaller) Submit(ctx context.Context, req *axapi.SubmitRequest) (*taskAnswer, error) {
	body, err := encodeSubmit(req)
	if err != nil {
		return nil, err
	}
	return c.taskCall(ctx, http.MethodPost, "/v1/tasks", body)
}

// clusterAnswer is the answer of GET /v1/cluster, raw and decoded.
type clusterAnswer struct {
	Raw  json.RawMessage
	Info axapi.ClusterInfo
}

// Cluster returns the Raft group as the node sees it: GET /v1/cluster.
func (c *apiCaller) Cluster(ctx context.Context) (*clusterAnswer, error) {
	r, err := c.DoResponse(ctx, http.MethodGet, "/v1/cluster", nil)
	if err != nil {
		return nil, err
	}
	a := &clusterAnswer{Raw: bytes.TrimSpace(r.Body)}
	var probe map[string]json.RawMessage
	if json.Unmarshal(a.Raw, &probe) != nil || probe["node_id"] == nil || json.Unmarshal(a.Raw, &a.Info) != nil {
		return nil, c.notSidecar(r.Status, r.Body)
	}
	return a, nil
}

// listQuery filters List. Empty fields do not filter.
type listQuery struct {
	Handler string
	State   string
	Limit   int // page size, 1..axapi.ListLimitMax; 0: the server's default
	Cursor  string
}

// taskPage is one page of List: the tasks as raw JSON and decoded.
type taskPage struct {
	Raw        []json.RawMessage
	Tasks      []axapi.Task
	NextCursor string
}

// List returns one page of tasks in id order.
func (c *apiCaller) List(ctx context.Context, q listQuery) (*taskPage, error) {
	v := url.Values{}
	for k, s := range map[string]string{"handler": q.Handler, "state": q.State, "cursor": q.Cursor} {
		if s != "" {
			v.Set(k, s)
		}
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	path := "/v1/tasks"
	if len(v) > 0 {
		path += "?" + v.Encode()
	}
	data, status, err := c.Do(ctx, http.MethodGet, path, nil)
	if err != nil {
		return nil, err
	}
	var raw struct {
		Tasks []json.RawMessage `json:"tasks"`
	}
	var page axapi.ListPage
	if json.Unmarshal(data, &raw) != nil || raw.Tasks == nil || json.Unmarshal(data, &page) != nil {
		return nil, c.notSidecar(status, data)
	}
	return &taskPage{Raw: raw.Tasks, Tasks: page.Tasks, NextCursor: page.NextCursor}, nil
}

// RemoveMember removes a node from the Raft configuration: DELETE
// /v1/cluster/members/{id}. It returns the answer's body (possibly empty).
// A sidecar without the route gives an error matching errRouteMissing.
func (c *apiCaller) RemoveMember(ctx context.Context, id string) ([]byte, error) {
	data, _, err := c.Do(ctx, http.MethodDelete, "/v1/cluster/members/"+url.PathEscape(id), nil)
	if isRouteMissing(err) {
		return nil, fmt.Errorf("%w (it has no route DELETE /v1/cluster/members/{id})", errRouteMissing)
	}
	return data, err
}

// isRouteMissing reports whether err is the sidecar's answer to a path it
// has no route for (404 "no route for ...").
func isRouteMissing(err error) bool {
	var e *ax.APIError
	return errors.As(err, &e) && e.Status == http.StatusNotFound && strings.HasPrefix(e.Message, "no route for ")
}
