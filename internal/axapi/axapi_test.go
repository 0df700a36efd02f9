package axapi

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ax "github.com/axsched/ax/clients/go"
)

func TestTaskFromClientMatchesTheAPI(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 6e6, time.FixedZone("x", 3600))
	v := TaskFromClient(&ax.Task{
		ID: "a", Handler: "h", State: ax.StateDead, Priority: 1, Attempts: 4, MaxAttempts: 4,
		Timeout: 90 * time.Second, Delay: time.Minute, NextRunAt: at, CreatedAt: at, UpdatedAt: at,
		LastError: "http 500", PayloadBytes: []byte{0, 1, 2},
	})
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"id":"a","handler":"h","state":"DEAD","priority":1,"attempts":4,"max_attempts":4,"timeout":"1m30s","delay":"1m0s",` +
		`"next_run_at":"2026-01-02T02:04:05.006Z","last_error":"http 500","created_at":"2026-01-02T02:04:05.006Z",` +
		`"updated_at":"2026-01-02T02:04:05.006Z","payload_base64":"AAEC"}`
	if string(b) != want {
		t.Errorf("got  %s\nwant %s", b, want)
	}
}

func TestRouteMissing(t *testing.T) {
	if !IsRouteMissing(&ax.APIError{Status: 404, Code: "not_found", Message: "no route for DELETE /v1/cluster/members/n3"}) {
		t.Error("a 404 no route is not recognized")
	}
	if IsRouteMissing(&ax.APIError{Status: 404, Code: "not_found", Message: `member "n3": not found`}) {
		t.Error("an unknown member is taken for a missing route")
	}
	if IsRouteMissing(errors.New("no route for x")) {
		t.Error("a plain error is taken for a missing route")
	}
}

func TestSocketPath(t *testing.T) {
	t.Setenv(ax.SocketEnv, "")
	if got := SocketPath(""); got != "./ax.sock" {
		t.Errorf("default %q", got)
	}
	t.Setenv(ax.SocketEnv, "unix:///run/ax.sock")
	if got := SocketPath(""); got != "/run/ax.sock" {
		t.Errorf("from the environment %q", got)
	}
	if got := SocketPath("/x.sock"); got != "/x.sock" {
		t.Errorf("given %q", got)
	}
	err := (&unavailableError{socket: "/x.sock", err: errors.New("boom")}).Error()
	if !strings.Contains(err, "/x.sock") {
		t.Errorf("unavailable error %q does not name the socket", err)
	}
}

// serve answers every request on a Unix socket with h and returns a Caller
// for it.
func serve(t *testing.T, h http.HandlerFunc) *Caller {
	t.Helper()
	dir, err := os.MkdirTemp("", "axapi")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "s.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	c := New(sock, time.Second)
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
		w.Header().Set(HeaderBacklogWarning, "9/10")
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
	s, err := c.Submit(ctx, &SubmitRequest{Handler: "h", Payload: json.RawMessage(`{"a": 1}`)})
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

func TestSubmitRequestEncode(t *testing.T) {
	j := 0.0
	r := &SubmitRequest{ID: "x", Handler: "h", Every: "1m0s", Labels: map[string]string{"a": "b"},
		Backoff: &BackoffRequest{Jitter: &j}, Payload: json.RawMessage("[1,  2]")}
	b, err := r.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"id":"x","handler":"h","every":"1m0s","labels":{"a":"b"},"backoff":{"jitter":0},"payload":[1,  2]}`; string(b) != want {
		t.Errorf("got  %s\nwant %s", b, want)
	}
	big := &SubmitRequest{Handler: "h", PayloadBase64: base64.StdEncoding.EncodeToString(make([]byte, PayloadMaxBytes+1))}
	if n := big.PayloadSize(); n != PayloadMaxBytes+1 {
		t.Errorf("PayloadSize %d", n)
	}
	if _, err := big.Encode(); !errors.Is(err, ax.ErrTooLarge) {
		t.Errorf("over the limit: %v", err)
	}
	for n := 0; n < 5; n++ {
		r := &SubmitRequest{PayloadBase64: base64.StdEncoding.EncodeToString(make([]byte, n))}
		if r.PayloadSize() != n {
			t.Errorf("PayloadSize of %d bytes: %d", n, r.PayloadSize())
		}
	}
	if _, err := (&SubmitRequest{Handler: "h", Payload: json.RawMessage("{"), PayloadBase64: ""}).Encode(); !errors.Is(err, ax.ErrInvalid) {
		t.Errorf("invalid JSON payload: %v", err)
	}
}

func TestAnswersThatAreNotTheAPIs(t *testing.T) {
	ctx := context.Background()
	c := serve(t, http.NotFound)
	_, err := c.Get(ctx, "x", "")
	var ns *NotSidecarError
	if !errors.As(err, &ns) || !errors.Is(err, ErrNotSidecar) || errors.Is(err, ax.ErrNotFound) {
		t.Fatalf("plain 404: %v", err)
	}
	if want := "ax: " + c.Socket() + " does not look like an ax sidecar (HTTP 404 Not Found: 404 page not found)"; err.Error() != want {
		t.Errorf("got  %q\nwant %q", err, want)
	}
	if _, err := c.List(ctx, ListQuery{}); !errors.Is(err, ErrNotSidecar) {
		t.Errorf("list: %v", err)
	}

	c = serve(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, `{"hello":"world"}`) })
	for name, call := range map[string]func() error{
		"get":     func() error { _, err := c.Get(ctx, "x", ""); return err },
		"list":    func() error { _, err := c.List(ctx, ListQuery{}); return err },
		"cluster": func() error { _, err := c.Cluster(ctx); return err },
		"batch":   func() error { _, err := c.SubmitBatch(ctx, []json.RawMessage{json.RawMessage(`{}`)}); return err },
	} {
		if err := call(); !errors.Is(err, ErrNotSidecar) || !strings.Contains(err.Error(), "HTTP 200 OK, not the API's JSON") {
			t.Errorf("%s of a 200 that is not the API's: %v", name, err)
		}
	}

	// The API's error shape is an *ax.APIError, whatever the status.
	c = serve(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "3")
		w.WriteHeader(http.StatusTooManyRequests)
		io.WriteString(w, `{"error":{"code":"queue_full","message":"backlog full","depth":10,"limit":10}}`)
	})
	_, err = c.Get(ctx, "x", "")
	var ae *ax.APIError
	if !errors.As(err, &ae) || ae.Code != "queue_full" || ae.RetryAfter != 3*time.Second || ae.Depth != 10 || !errors.Is(err, ax.ErrQueueFull) {
		t.Errorf("API error: %#v", err)
	}
}
