package ax_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	ax "github.com/axsched/ax/clients/go"
	"github.com/axsched/ax/clients/go/axapi"
)

// Test_Client_Call checks the raw call: the answer as received, an
// *APIError with the Response for an error status, Retry-After as seconds
// or an HTTP date, no retry of no_leader, and the configured User-Agent.
func Test_Client_Call(t *testing.T) {
	f := startFakeSidecar(t)
	c := ax.New(ax.Config{SocketPath: f.Socket, UserAgent: "ax-test"})
	t.Cleanup(c.CloseIdleConnections)
	ctx := testContext(t)
	if c.Socket() != f.Socket {
		t.Errorf("Socket() = %q, want %q", c.Socket(), f.Socket)
	}

	body := []byte(`{"id":"a","handler":"h","payload":{"b":1}}`)
	r, err := c.Call(ctx, http.MethodPost, "/v1/tasks", body)
	if err != nil || r.Status != http.StatusCreated || !strings.Contains(string(r.Body), `"payload":{"b":1}`) {
		t.Fatalf("Call(submit) = %+v, %v", r, err)
	}
	var task axapi.Task
	if err := task.UnmarshalJSON(r.Body); err != nil || task.ID != "a" || string(task.Payload) != `{"b":1}` {
		t.Fatalf("answer %s decodes to %+v, %v", r.Body, task, err)
	}
	hook := func(ua *string) func(http.ResponseWriter, *http.Request) bool {
		return func(_ http.ResponseWriter, req *http.Request) bool { *ua = req.UserAgent(); return false }
	}
	var ua string
	f.SetHook(hook(&ua))
	if _, err := c.Call(ctx, http.MethodGet, axapi.TaskPath("a"), nil); err != nil || ua != "ax-test" {
		t.Fatalf("Call(get): %v, User-Agent %q", err, ua)
	}
	f.SetHook(nil)

	// An error answer: the Response and an *APIError; no retry of no_leader.
	n := len(f.Requests())
	f.Inject(fakeAnswer{Status: 503, Code: "no_leader", Message: "election", RetryAfter: "2"})
	r, err = c.Call(ctx, http.MethodGet, axapi.TaskPath("a"), nil)
	var apiErr *ax.APIError
	if !errors.As(err, &apiErr) || !errors.Is(err, ax.ErrNoLeader) || apiErr.RetryAfter != 2*time.Second || r == nil || r.Status != 503 {
		t.Fatalf("Call(no_leader) = %+v, %v", r, err)
	}
	if got := len(f.Requests()) - n; got != 1 {
		t.Errorf("Call sent %d requests for a no_leader answer, want 1", got)
	}
	date := time.Now().Add(time.Hour).UTC().Format(http.TimeFormat)
	f.Inject(fakeAnswer{Status: 429, Code: "queue_full", Message: "full", RetryAfter: date})
	_, err = c.Call(ctx, http.MethodGet, axapi.TaskPath("a"), nil)
	if !errors.As(err, &apiErr) || apiErr.RetryAfter < 58*time.Minute || apiErr.RetryAfter > time.Hour {
		t.Fatalf("Retry-After %q read as %v (%v)", date, apiErr.RetryAfter, err)
	}

	// Not the API's error shape: Code is empty, the body is in the Response.
	f.Inject(fakeAnswer{Status: 404, Body: "404 page not found\n"})
	r, err = c.Call(ctx, http.MethodGet, "/v1/nothing", nil)
	if !errors.As(err, &apiErr) || apiErr.Code != "" || r == nil || string(r.Body) != "404 page not found\n" {
		t.Fatalf("Call(not the API) = %+v, %v", r, err)
	}

	// No answer: no Response, ErrUnavailable.
	gone := ax.New(ax.Config{SocketPath: shortTempDir(t) + "/none.sock"})
	if r, err := gone.Call(ctx, http.MethodGet, "/healthz", nil); r != nil || !errors.Is(err, ax.ErrUnavailable) {
		t.Fatalf("Call(no sidecar) = %+v, %v", r, err)
	}
}
