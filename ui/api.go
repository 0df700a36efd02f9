package ui

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
	"strings"
	"time"

	"github.com/axsched/ax/clients/go/axapi"
)

// apiBodyMax bounds an answer of the socket API the UI reads (a page of
// 1000 tasks with large payloads stays well below).
const apiBodyMax = 64 << 20

// APIError is an error answer of the socket API: its HTTP status and the
// body's code and message, shown to the user as they are.
type APIError struct {
	Status  int
	Code    string
	Message string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Message)
}

// routeMissing reports whether err is the API's answer to a path it has
// no route for (an older node), as opposed to a missing task.
func routeMissing(err error) bool {
	e, ok := err.(*APIError)
	return ok && e.Status == http.StatusNotFound && strings.HasPrefix(e.Message, "no route for")
}

// api is a client of one node's socket API over plain net/http.
type api struct {
	hc      *http.Client
	timeout time.Duration
}

func newAPI(socket string, timeout time.Duration) *api {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
		MaxIdleConnsPerHost: 8,
		IdleConnTimeout:     30 * time.Second,
	}
	return &api{hc: &http.Client{Transport: tr}, timeout: timeout}
}

func (a *api) close() { a.hc.CloseIdleConnections() }

// call sends method path with body (JSON-encoded unless nil) and decodes a
// 2xx answer into out (unless nil); an error answer is an *APIError.
func (a *api) call(ctx context.Context, method, path string, body, out any) error {
	b, err := a.raw(ctx, method, path, body)
	if err != nil {
		return err
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("%s %s: decode answer: %w", method, path, err)
	}
	return nil
}

// raw is call without decoding: the body of a 2xx answer.
func (a *api) raw(ctx context.Context, method, path string, body any) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://ax"+path, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := a.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: the node's socket: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, apiBodyMax))
	if err != nil {
		return nil, fmt.Errorf("%s %s: read answer: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		var eb axapi.ErrorBody
		if json.Unmarshal(b, &eb) != nil || eb.Error.Code == "" {
			eb.Error.Code, eb.Error.Message = "http_"+strconv.Itoa(resp.StatusCode), strings.TrimSpace(string(b))
		}
		return nil, &APIError{Status: resp.StatusCode, Code: eb.Error.Code, Message: eb.Error.Message}
	}
	return b, nil
}

func (a *api) cluster(ctx context.Context) (*axapi.ClusterInfo, error) {
	var ci axapi.ClusterInfo
	return &ci, a.call(ctx, "GET", "/v1/cluster", nil, &ci)
}

func (a *api) handlers(ctx context.Context) ([]axapi.HandlerInfo, error) {
	var hl axapi.HandlerList
	return hl.Handlers, a.call(ctx, "GET", "/v1/handlers", nil, &hl)
}

func (a *api) task(ctx context.Context, id string) (*axapi.Task, error) {
	var t axapi.Task
	return &t, a.call(ctx, "GET", axapi.TaskPath(id), nil, &t)
}

// listQuery is GET /v1/tasks's query.
type listQuery struct {
	Handler, State, Cursor string
	Limit                  int
}

func (a *api) list(ctx context.Context, q listQuery) (*axapi.ListPage, error) {
	v := url.Values{}
	if q.Handler != "" {
		v.Set("handler", q.Handler)
	}
	if q.State != "" {
		v.Set("state", q.State)
	}
	if q.Cursor != "" {
		v.Set("cursor", q.Cursor)
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	var p axapi.ListPage
	return &p, a.call(ctx, "GET", "/v1/tasks?"+v.Encode(), nil, &p)
}

// cursorAfter is the list cursor that starts a page after id. The API
// documents cursors as opaque; the node makes them as the base64url of the
// last id scanned (sidecar/api/read.go), and the id-prefix filter, which
// must seek, is the one place that relies on it.
func cursorAfter(id string) string { return base64.RawURLEncoding.EncodeToString([]byte(id)) }

// runs reads one page of a task's run history, newest first, from
// cursor (a next_cursor of the API, "" for the newest). A node without
// the route answers 404 "no route" (routeMissing): the task page then
// says so.
func (a *api) runs(ctx context.Context, id string, limit int, cursor string) (*axapi.RunsPage, error) {
	v := url.Values{"limit": {strconv.Itoa(limit)}}
	if cursor != "" {
		v.Set("cursor", cursor)
	}
	var p axapi.RunsPage
	return &p, a.call(ctx, "GET", axapi.RunsPath(id)+"?"+v.Encode(), nil, &p)
}

func (a *api) metrics(ctx context.Context) ([]byte, error) {
	return a.raw(ctx, "GET", "/metrics", nil)
}
