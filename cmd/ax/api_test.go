package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	ax "github.com/axsched/ax/clients/go"
	"github.com/axsched/ax/clients/go/axapi"
)

// These tests came with the raw caller from internal/axapi (now api.go, on
// the Go client's Client.Call).

func TestRouteMissing(t *testing.T) {
	if !isRouteMissing(&ax.APIError{Status: 404, Code: "not_found", Message: "no route for DELETE /v1/cluster/members/n3"}) {
		t.Error("a 404 no route is not recognized")
	}
	if isRouteMissing(&ax.APIError{Status: 404, Code: "not_found", Message: `member "n3": not found`}) {
		t.Error("an unknown member is taken for a missing route")
	}
	if isRouteMissing(errors.New("no route for x")) {
		t.Error("a plain error is taken for a missing route")
	}
}

func TestSocketPath(t *testing.T) {
	t.Setenv(ax.SocketEnv, "")
	if got := socketPath(""); got != "./ax.sock" {
		t.Errorf("default %q", got)
	}
	t.Setenv(ax.SocketEnv, "unix:///run/ax.sock")
	if got := socketPath(""); got != "/run/ax.sock" {
		t.Errorf("from the environment %q", got)
	}
	if got := socketPath("/x.sock"); got != "/x.sock" {
		t.Errorf("given %q", got)
	}
	if got := newCaller("unix:///x.sock", 0).Socket(); got != "/x.sock" {
		t.Errorf("caller's socket %q", got)
	}
}

// serve answers every request on a Unix socket with h (serveUnix) and
// returns a caller for it.
func serve(t *testing.T, h http.HandlerFunc) *apiCaller {
	t.Helper()
	c := newCaller(serveUnix(t, h), time.Second)
	t.Cleanup(c.Close)
	return c
}

func TestTaskCallsKeepTheRawJSON(t *testing.T) {
	const task = `{"id":"a","handler":"h","state":"WAITING","priority":2,"attempts":0,"max_attempts":4,"timeout":"30s",` +
		`"every":"5m0s","repeats":3,"until":"2030-01-01T00:00:00Z","run":2,"snoozes":1,"route_key":"k","labels":{"x":"y"},` +
		`"backoff":{"initial":"1s","max":"1m0s","multiplier":3,"jitter":0},"new_field":true,` +
		`"created_at":"2026-01-01T00:00:00Z","updated_at":"2026-01-01T00:00:00Z","payload":{"a": 1}}`
	var got []string
	c := serve(t, func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got = append(got, r.Method+" "+r.URL.RequestURI()+" "+string(body))
		w.Header().Set(axapi.HeaderBacklogWarning, "9/10")
		if r.Method == "POST" && r.URL.Path == "/v1/tasks" {
			w.WriteHeader(http.StatusOK)
		}
		io.WriteString(w, task+"\n")
	})
	ctx := context.Background()
	a, err := c.Get(ctx, "a/b", "strong")
	if err != nil {
		t.Fatal(err)
	}
	if string(a.Raw) != task {
		t.Errorf("raw %s", a.Raw)
	}
	v := a.Task
	if v.Every != "5m0s" || v.Repeats != 3 || v.Until == nil || v.Run != 2 || v.Snoozes != 1 || v.RouteKey != "k" || v.Labels["x"] != "y" ||
		v.Backoff == nil || v.Backoff.Multiplier != 3 || string(v.Payload) != `{"a": 1}` {
		t.Errorf("decoded %+v", v)
	}
	if _, err := c.Cancel(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Retry(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	s, err := c.Submit(ctx, &axapi.SubmitRequest{Handler: "h", Payload: json.RawMessage(`{"a": 1}`)})
	if err != nil {
		t.Fatal(err)
	}
	if s.Created() || s.Status != 200 || s.BacklogWarning != "9/10" {
		t.Errorf("submit answer %+v", s)
	}
	want := []string{
		"GET /v1/tasks/a%2Fb?consistency=strong ",
		"DELETE /v1/tasks/a ",
		"POST /v1/tasks/a/retry {}",
		`POST /v1/tasks {"handler":"h","payload":{"a": 1}}`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("requests\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestEncodeSubmit(t *testing.T) {
	j := 0.0
	r := &axapi.SubmitRequest{ID: "x", Handler: "h", Every: new("1m0s"), Labels: map[string]string{"a": "b"},
		Backoff: &axapi.BackoffRequest{Jitter: &j}, Payload: json.RawMessage("[1,  2]")}
	b, err := encodeSubmit(r)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"id":"x","handler":"h","every":"1m0s","backoff":{"jitter":0},"labels":{"a":"b"},"payload":[1,  2]}`; string(b) != want {
		t.Errorf("got  %s\nwant %s", b, want)
	}
	big := &axapi.SubmitRequest{Handler: "h", PayloadBase64: new(base64.StdEncoding.EncodeToString(make([]byte, axapi.PayloadMaxBytes+1)))}
	if n := payloadSize(big); n != axapi.PayloadMaxBytes+1 {
		t.Errorf("payloadSize %d", n)
	}
	if _, err := encodeSubmit(big); !errors.Is(err, ax.ErrTooLarge) {
		t.Errorf("over the limit: %v", err)
	}
	for n := 0; n < 5; n++ {
		r := &axapi.SubmitRequest{PayloadBase64: new(base64.StdEncoding.EncodeToString(make([]byte, n)))}
		if payloadSize(r) != n {
			t.Errorf("payloadSize of %d bytes: %d", n, payloadSize(r))
		}
	}
	if _, err := encodeSubmit(&axapi.SubmitRequest{Handler: "h", Payload: json.RawMessage("{")}); !errors.Is(err, ax.ErrInvalid) {
		t.Errorf("invalid JSON payload: %v", err)
	}
	if _, err := encodeSubmit(&axapi.SubmitRequest{Handler: "h", Payload: json.RawMessage("1"), PayloadBase64: new("AA==")}); !errors.Is(err, ax.ErrInvalid) {
		t.Errorf("both payloads: %v", err)
	}
}

func TestAnswersThatAreNotTheAPIs(t *testing.T) {
	ctx := context.Background()
	c := serve(t, http.NotFound)
	_, err := c.Get(ctx, "x", "")
	var ns *notSidecarError
	if !errors.As(err, &ns) || !errors.Is(err, errNotSidecar) || errors.Is(err, ax.ErrNotFound) {
		t.Fatalf("plain 404: %v", err)
	}
	if want := "ax: " + c.Socket() + " does not look like an ax sidecar (HTTP 404 Not Found: 404 page not found)"; err.Error() != want {
		t.Errorf("got  %q\nwant %q", err, want)
	}
	if _, err := c.List(ctx, listQuery{}); !errors.Is(err, errNotSidecar) {
		t.Errorf("list: %v", err)
	}

	c = serve(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, `{"hello":"world"}`) })
	for name, call := range map[string]func() error{
		"get":     func() error { _, err := c.Get(ctx, "x", ""); return err },
		"list":    func() error { _, err := c.List(ctx, listQuery{}); return err },
		"cluster": func() error { _, err := c.Cluster(ctx); return err },
	} {
		if err := call(); !errors.Is(err, errNotSidecar) || !strings.Contains(err.Error(), "HTTP 200 OK, not the API's JSON") {
			t.Errorf("%s of a 200 that is not the API's: %v", name, err)
		}
	}

	// The API's error shape is an *ax.APIError, whatever the status; its
	// Retry-After is seconds or an HTTP date.
	retryAfter := "3"
	c = serve(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", retryAfter)
		w.WriteHeader(http.StatusTooManyRequests)
		io.WriteString(w, `{"error":{"code":"queue_full","message":"backlog full","depth":10,"limit":10}}`)
	})
	_, err = c.Get(ctx, "x", "")
	var ae *ax.APIError
	if !errors.As(err, &ae) || ae.Code != "queue_full" || ae.RetryAfter != 3*time.Second || ae.Depth != 10 || !errors.Is(err, ax.ErrQueueFull) {
		t.Errorf("API error: %#v", err)
	}
	retryAfter = time.Now().Add(time.Hour).UTC().Format(http.TimeFormat)
	if _, err = c.Get(ctx, "x", ""); !errors.As(err, &ae) || ae.RetryAfter < 58*time.Minute {
		t.Errorf("Retry-After as an HTTP date: %#v", err)
	}
}
