package ax_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	ax "github.com/axsched/ax/clients/go"
)

func newClient(t *testing.T, f *fakeSidecar) *ax.Client {
	t.Helper()
	c := ax.New(ax.Config{SocketPath: f.Socket})
	t.Cleanup(c.CloseIdleConnections)
	return c
}

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func mustJSON(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("body %q: %v", b, err)
	}
	return m
}

func Test_Client_SubmitGetCancel(t *testing.T) {
	f := startFakeSidecar(t)
	c := newClient(t, f)
	ctx := testContext(t)

	req := ax.SubmitRequest{
		ID:          "order|42",
		Handler:     "order.timeout",
		Payload:     map[string]int{"order_id": 42},
		Delay:       3 * time.Second,
		Priority:    new(0),
		Timeout:     5 * time.Second,
		MaxAttempts: 7,
	}
	task, err := c.Submit(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	sent := f.LastRequest()
	if sent.Method != "POST" || sent.RequestURI != "/v1/tasks" {
		t.Fatalf("request %s %s", sent.Method, sent.RequestURI)
	}
	want := `{"id":"order|42","handler":"order.timeout","delay":"3s","priority":0,"timeout":"5s","max_attempts":7,"payload":{"order_id":42}}`
	if string(sent.Body) != want {
		t.Fatalf("body\n got %s\nwant %s", sent.Body, want)
	}
	created := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	if task.ID != "order|42" || task.Handler != "order.timeout" || task.State != ax.StateWaiting ||
		task.Priority != 0 || task.MaxAttempts != 7 || task.Timeout != 5*time.Second || task.Delay != 3*time.Second ||
		!task.CreatedAt.Equal(created) || !task.NextRunAt.Equal(created.Add(3*time.Second)) ||
		!task.FinishedAt.IsZero() || !task.RunAt.IsZero() || string(task.Payload) != `{"order_id":42}` || task.PayloadBytes != nil {
		t.Fatalf("task %+v", task)
	}

	// Same id, same spec: the existing task.
	again, err := c.Submit(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if again.ID != task.ID || !again.CreatedAt.Equal(task.CreatedAt) {
		t.Fatalf("resubmit %+v", again)
	}

	// Same id, different spec: conflict.
	changed := req
	changed.Delay = 4 * time.Second
	_, err = c.Submit(ctx, changed)
	var apiErr *ax.APIError
	if !errors.Is(err, ax.ErrConflict) || !errors.As(err, &apiErr) || apiErr.Status != 409 || apiErr.Code != ax.CodeConflict {
		t.Fatalf("conflict: %v", err)
	}
	if got := err.Error(); got != `ax: task "order|42" exists with a different spec (conflict, http 409)` {
		t.Fatalf("message %q", got)
	}
	changed.Overwrite = true
	if task, err = c.Submit(ctx, changed); err != nil || task.Delay != 4*time.Second {
		t.Fatalf("overwrite: %+v, %v", task, err)
	}
	if m := mustJSON(t, f.LastRequest().Body); m["overwrite"] != true {
		t.Fatalf("overwrite not sent: %v", m)
	}

	got, err := c.Get(ctx, "order|42")
	if err != nil || got.ID != "order|42" || got.State != ax.StateWaiting {
		t.Fatalf("get: %+v, %v", got, err)
	}
	if r := f.LastRequest(); r.Method != "GET" || r.RequestURI != "/v1/tasks/order%7C42" {
		t.Fatalf("get request %s %s", r.Method, r.RequestURI)
	}

	cancelled, err := c.Cancel(ctx, "order|42")
	if err != nil || cancelled.State != ax.StateCancelled || !cancelled.State.Terminal() ||
		cancelled.FinishedAt.IsZero() || !cancelled.NextRunAt.IsZero() {
		t.Fatalf("cancel: %+v, %v", cancelled, err)
	}
	if r := f.LastRequest(); r.Method != "DELETE" || r.RequestURI != "/v1/tasks/order%7C42" {
		t.Fatalf("cancel request %s %s", r.Method, r.RequestURI)
	}

	_, err = c.Get(ctx, "nope")
	if !errors.Is(err, ax.ErrNotFound) || errors.Is(err, ax.ErrConflict) {
		t.Fatalf("get unknown: %v", err)
	}
	_, err = c.Cancel(ctx, "nope")
	if !errors.Is(err, ax.ErrNotFound) {
		t.Fatalf("cancel unknown: %v", err)
	}
}

func Test_Client_SubmitMinimalAndRunAt(t *testing.T) {
	f := startFakeSidecar(t)
	c := newClient(t, f)
	ctx := testContext(t)

	task, err := c.Submit(ctx, ax.SubmitRequest{Handler: "h"})
	if err != nil {
		t.Fatal(err)
	}
	if got := string(f.LastRequest().Body); got != `{"handler":"h"}` {
		t.Fatalf("minimal body %s", got)
	}
	if task.ID != "task-1" || task.Priority != ax.PriorityDefault || task.Timeout != ax.TaskTimeoutDefault ||
		task.MaxAttempts != ax.MaxAttemptsDefault || task.Payload != nil {
		t.Fatalf("defaults %+v", task)
	}

	runAt := time.Date(2027, 1, 2, 3, 4, 5, 600, time.FixedZone("CET", 3600))
	task, err = c.Submit(ctx, ax.SubmitRequest{Handler: "h", RunAt: runAt, Priority: new(ax.PriorityLowest)})
	if err != nil {
		t.Fatal(err)
	}
	if got := string(f.LastRequest().Body); got != `{"handler":"h","run_at":"2027-01-02T02:04:05.0000006Z","priority":4}` {
		t.Fatalf("run_at body %s", got)
	}
	if !task.RunAt.Equal(runAt) || !task.NextRunAt.Equal(runAt) || task.Delay != 0 || task.Priority != 4 {
		t.Fatalf("run_at task %+v", task)
	}
}

func Test_Client_IDEscaping(t *testing.T) {
	f := startFakeSidecar(t)
	c := newClient(t, f)
	ctx := testContext(t)

	cases := []struct{ id, uri string }{
		{"order|42", "/v1/tasks/order%7C42"},
		{"a@b", "/v1/tasks/a@b"},
		{"A/B", "/v1/tasks/A%2FB"},
		{"/lead/and/trail/", "/v1/tasks/%2Flead%2Fand%2Ftrail%2F"},
		{"../x", "/v1/tasks/..%2Fx"},
		{"über/日本", "/v1/tasks/%C3%BCber%2F%E6%97%A5%E6%9C%AC"},
		{"sp ace?q=1#f", "/v1/tasks/sp%20ace%3Fq=1%23f"},
		{"100%", "/v1/tasks/100%25"},
		{"a;b,c", "/v1/tasks/a%3Bb%2Cc"},
	}
	for _, tc := range cases {
		t.Run(tc.uri, func(t *testing.T) {
			if _, err := c.Submit(ctx, ax.SubmitRequest{ID: tc.id, Handler: "h"}); err != nil {
				t.Fatal(err)
			}
			task, err := c.Get(ctx, tc.id)
			if err != nil {
				t.Fatalf("get %q: %v", tc.id, err)
			}
			if task.ID != tc.id {
				t.Fatalf("get %q returned %q", tc.id, task.ID)
			}
			if got := f.LastRequest().RequestURI; got != tc.uri {
				t.Fatalf("GET request URI %q, want %q", got, tc.uri)
			}
			if _, err := c.Cancel(ctx, tc.id); err != nil {
				t.Fatal(err)
			}
			if got := f.LastRequest().RequestURI; got != tc.uri {
				t.Fatalf("DELETE request URI %q, want %q", got, tc.uri)
			}
		})
	}
}

func Test_Client_PayloadByteIdentity(t *testing.T) {
	f := startFakeSidecar(t)
	c := newClient(t, f)
	ctx := testContext(t)

	// A json.RawMessage goes out byte for byte: whitespace and "<>&" kept.
	raw := json.RawMessage("{ \"html\": \"<b>&amp;</b>\",\n  \"n\": 1.50 }")
	if _, err := c.Submit(ctx, ax.SubmitRequest{ID: "raw", Handler: "h", Payload: raw}); err != nil {
		t.Fatal(err)
	}
	body := f.LastRequest().Body
	if !bytes.HasSuffix(body, append([]byte(`"payload":`), append(raw, '}')...)) {
		t.Fatalf("raw payload changed in body %s", body)
	}
	var decoded struct {
		Payload json.RawMessage `json:"payload"`
	}
	if err := json.Unmarshal(body, &decoded); err != nil || !bytes.Equal(decoded.Payload, raw) {
		t.Fatalf("payload field %q, %v", decoded.Payload, err)
	}

	// Marshalled values do not get HTML escaping.
	if _, err := c.Submit(ctx, ax.SubmitRequest{ID: "html", Handler: "h", Payload: map[string]string{"s": "<a&b>"}}); err != nil {
		t.Fatal(err)
	}
	if body := string(f.LastRequest().Body); !strings.HasSuffix(body, `"payload":{"s":"<a&b>"}}`) {
		t.Fatalf("marshalled payload in body %s", body)
	}

	// Binary payloads go as base64 and come back identical.
	bin := make([]byte, 256)
	for i := range bin {
		bin[i] = byte(i)
	}
	if _, err := c.Submit(ctx, ax.SubmitRequest{ID: "bin", Handler: "h", PayloadBytes: bin}); err != nil {
		t.Fatal(err)
	}
	if m := mustJSON(t, f.LastRequest().Body); m["payload_base64"] != base64.StdEncoding.EncodeToString(bin) || m["payload"] != nil {
		t.Fatalf("binary body %v", m)
	}
	task, err := c.Get(ctx, "bin")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(task.PayloadBytes, bin) || task.Payload != nil {
		t.Fatalf("binary payload came back as %v / %q", task.PayloadBytes, task.Payload)
	}

	// An empty PayloadBytes is no payload.
	if _, err := c.Submit(ctx, ax.SubmitRequest{ID: "empty", Handler: "h", PayloadBytes: []byte{}}); err != nil {
		t.Fatal(err)
	}
	if got := string(f.LastRequest().Body); got != `{"id":"empty","handler":"h"}` {
		t.Fatalf("empty PayloadBytes body: %s", got)
	}
}

func Test_Client_RefusesInvalidRequests(t *testing.T) {
	f := startFakeSidecar(t)
	c := newClient(t, f)
	ctx := testContext(t)

	cases := map[string]ax.SubmitRequest{
		"no handler":    {ID: "x"},
		"both payloads": {Handler: "h", Payload: 1, PayloadBytes: []byte{1}},
		"byte slice":    {Handler: "h", Payload: []byte(`{"a":1}`)},
		"bad raw json":  {Handler: "h", Payload: json.RawMessage(`{"a":`)},
		"unmarshalable": {Handler: "h", Payload: func() {}},
	}
	for name, req := range cases {
		if _, err := c.Submit(ctx, req); !errors.Is(err, ax.ErrInvalid) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := c.Get(ctx, ""); !errors.Is(err, ax.ErrInvalid) {
		t.Errorf("get empty id: %v", err)
	}
	if _, err := c.Cancel(ctx, ""); !errors.Is(err, ax.ErrInvalid) {
		t.Errorf("cancel empty id: %v", err)
	}
	if n := len(f.Requests()); n != 0 {
		t.Fatalf("%d requests sent", n)
	}

	// The sidecar's own validation comes back as ErrInvalid too.
	_, err := c.Submit(ctx, ax.SubmitRequest{Handler: "h", Priority: new(9)})
	var apiErr *ax.APIError
	if !errors.Is(err, ax.ErrInvalid) || !errors.As(err, &apiErr) || apiErr.Code != ax.CodeBadRequest ||
		apiErr.Message != "priority must be 0..4, got 9" {
		t.Fatalf("server validation: %v", err)
	}
}

func Test_Client_ErrorMapping(t *testing.T) {
	f := startFakeSidecar(t)
	c := newClient(t, f)
	ctx := testContext(t)
	sentinels := []error{ax.ErrNotFound, ax.ErrConflict, ax.ErrInvalid, ax.ErrQueueFull, ax.ErrNoLeader,
		ax.ErrNotReady, ax.ErrTooLarge, ax.ErrUnavailable}
	httpDate := time.Now().Add(90 * time.Second).UTC().Format(http.TimeFormat)

	cases := []struct {
		name       string
		answer     fakeAnswer
		want       error // nil: no sentinel matches
		code       string
		retryAfter time.Duration // approximate for HTTP dates
	}{
		{"not_found", fakeAnswer{Status: 404, Code: "not_found", Message: "m"}, ax.ErrNotFound, "not_found", 0},
		{"conflict", fakeAnswer{Status: 409, Code: "conflict", Message: "m"}, ax.ErrConflict, "conflict", 0},
		{"bad_request", fakeAnswer{Status: 400, Code: "bad_request", Message: "m"}, ax.ErrInvalid, "bad_request", 0},
		{"invalid_json", fakeAnswer{Status: 400, Code: "invalid_json", Message: "m"}, ax.ErrInvalid, "invalid_json", 0},
		{"too_large", fakeAnswer{Status: 413, Code: "payload_too_large", Message: "m"}, ax.ErrTooLarge, "payload_too_large", 0},
		{"queue_full", fakeAnswer{Status: 429, Code: "queue_full", Message: "depth 10000", RetryAfter: "7"}, ax.ErrQueueFull, "queue_full", 7 * time.Second},
		{"queue_full_date", fakeAnswer{Status: 429, Code: "queue_full", Message: "m", RetryAfter: httpDate}, ax.ErrQueueFull, "queue_full", 90 * time.Second},
		{"queue_full_garbage", fakeAnswer{Status: 429, Code: "queue_full", Message: "m", RetryAfter: "soon"}, ax.ErrQueueFull, "queue_full", 0},
		{"not_ready", fakeAnswer{Status: 503, Code: "not_ready", Message: "m", RetryAfter: "1"}, ax.ErrNotReady, "not_ready", time.Second},
		{"internal", fakeAnswer{Status: 500, Code: "internal", Message: "m"}, nil, "internal", 0},
		{"method", fakeAnswer{Status: 405, Code: "method_not_allowed", Message: "m"}, nil, "method_not_allowed", 0},
		{"plain_404", fakeAnswer{Status: 404, Body: "404 page not found\n"}, ax.ErrNotFound, "", 0},
		{"plain_502", fakeAnswer{Status: 502, Body: "bad gateway"}, nil, "", 0},
		{"unknown_code_409", fakeAnswer{Status: 409, Code: "brand_new", Message: "m"}, ax.ErrConflict, "brand_new", 0},
		{"unknown_code_503", fakeAnswer{Status: 503, Code: "brand_new", Message: "m"}, nil, "brand_new", 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f.Inject(tc.answer)
			_, err := c.Get(ctx, "x")
			var apiErr *ax.APIError
			if !errors.As(err, &apiErr) {
				t.Fatalf("not an *APIError: %v", err)
			}
			if apiErr.Status != tc.answer.Status || apiErr.Code != tc.code {
				t.Fatalf("status %d code %q", apiErr.Status, apiErr.Code)
			}
			if d := apiErr.RetryAfter - tc.retryAfter; d < -2*time.Second || d > 0 || (tc.retryAfter == 0 && d != 0) {
				t.Fatalf("RetryAfter %v, want %v", apiErr.RetryAfter, tc.retryAfter)
			}
			for _, s := range sentinels {
				if errors.Is(err, s) != (s == tc.want) {
					t.Errorf("errors.Is(%v, %v) = %v", err, s, !(s == tc.want))
				}
			}
		})
	}

	f.Inject(fakeAnswer{Status: 502, Body: "bad gateway\n"})
	_, err := c.Get(ctx, "x")
	if got := err.Error(); got != "ax: bad gateway (no code, http 502)" {
		t.Fatalf("plain message %q", got)
	}
	f.Inject(fakeAnswer{Status: 429, Code: "queue_full", Message: "handler h has 10000 due runs", RetryAfter: "2"})
	_, err = c.Submit(ctx, ax.SubmitRequest{Handler: "h"})
	if got := err.Error(); got != "ax: handler h has 10000 due runs (queue_full, http 429, retry after 2s)" {
		t.Fatalf("message %q", got)
	}
	if n := len(f.Requests()); n != len(cases)+2 {
		t.Fatalf("%d requests: errors other than no_leader must not be retried", n)
	}
}

func Test_Client_Unavailable(t *testing.T) {
	dir := shortTempDir(t)
	ctx := testContext(t)

	missing := filepath.Join(dir, "missing.sock")
	c := ax.New(ax.Config{SocketPath: missing})
	_, err := c.Get(ctx, "x")
	if want := "ax: cannot reach sidecar at " + missing + ": connect: no such file or directory"; err == nil || err.Error() != want {
		t.Fatalf("got %v\nwant %s", err, want)
	}
	if !errors.Is(err, ax.ErrUnavailable) || !errors.Is(err, syscall.ENOENT) || errors.Is(err, ax.ErrNotFound) {
		t.Fatalf("error matching: %v", err)
	}
	var apiErr *ax.APIError
	if errors.As(err, &apiErr) {
		t.Fatal("an unavailable sidecar is not an APIError")
	}
	if err := c.Ready(ctx); !errors.Is(err, ax.ErrUnavailable) {
		t.Fatalf("ready: %v", err)
	}

	// A stale socket file nobody listens on.
	stale := filepath.Join(dir, "stale.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: stale, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()
	_, err = ax.New(ax.Config{SocketPath: stale}).Submit(ctx, ax.SubmitRequest{Handler: "h"})
	if want := "ax: cannot reach sidecar at " + stale + ": connect: connection refused"; err == nil || err.Error() != want {
		t.Fatalf("got %v\nwant %s", err, want)
	}
	if !errors.Is(err, ax.ErrUnavailable) || !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("error matching: %v", err)
	}

	// The sidecar dies mid-request.
	f := startFakeSidecar(t)
	f.SetHook(func(w http.ResponseWriter, r *http.Request) bool {
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
		return true
	})
	_, err = newClient(t, f).Get(ctx, "x")
	if !errors.Is(err, ax.ErrUnavailable) || !strings.HasPrefix(err.Error(), "ax: lost connection to sidecar at "+f.Socket+": ") {
		t.Fatalf("mid-request failure: %v", err)
	}
}

func Test_Client_NoLeaderRetry(t *testing.T) {
	f := startFakeSidecar(t)
	c := newClient(t, f)
	ctx := testContext(t)
	noLeader := fakeAnswer{Status: 503, Code: "no_leader", Message: "election in progress"}

	// Two no_leader answers, then success.
	f.Inject(noLeader, noLeader)
	start := time.Now()
	task, err := c.Submit(ctx, ax.SubmitRequest{ID: "a", Handler: "h"})
	if err != nil || task.ID != "a" {
		t.Fatalf("%+v, %v", task, err)
	}
	if n := len(f.Requests()); n != 3 {
		t.Fatalf("%d requests, want 3", n)
	}
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Fatalf("retried without backoff (%v)", d)
	}

	// Retry-After is honoured.
	f.Inject(fakeAnswer{Status: 503, Code: "no_leader", Message: "m", RetryAfter: "1"})
	start = time.Now()
	if _, err := c.Get(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < time.Second {
		t.Fatalf("Retry-After: 1 not honoured (%v)", d)
	}

	// No leader for good: a few retries, then ErrNoLeader.
	before := len(f.Requests())
	f.Inject(noLeader, noLeader, noLeader, noLeader, noLeader, noLeader)
	_, err = c.Get(ctx, "a")
	var apiErr *ax.APIError
	if !errors.Is(err, ax.ErrNoLeader) || !errors.As(err, &apiErr) || apiErr.Status != 503 {
		t.Fatalf("no leader: %v", err)
	}
	if n := len(f.Requests()) - before; n != 4 {
		t.Fatalf("%d tries, want 4", n)
	}
	f.Inject(noLeader, noLeader) // drain the rest
	_, _ = c.Get(ctx, "a")

	// A Retry-After beyond the context's deadline: no waiting.
	before = len(f.Requests())
	f.Inject(fakeAnswer{Status: 503, Code: "no_leader", Message: "m", RetryAfter: "3"})
	short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	start = time.Now()
	_, err = c.Get(short, "a")
	if !errors.Is(err, ax.ErrNoLeader) || time.Since(start) > 400*time.Millisecond {
		t.Fatalf("short context: %v after %v", err, time.Since(start))
	}
	if n := len(f.Requests()) - before; n != 1 {
		t.Fatalf("%d tries, want 1", n)
	}

	// Cancelled while waiting: the no_leader error, promptly.
	f.Inject(noLeader, noLeader, noLeader, noLeader)
	cctx, cancel2 := context.WithCancel(ctx)
	time.AfterFunc(50*time.Millisecond, cancel2)
	start = time.Now()
	_, err = c.Get(cctx, "a")
	if !errors.Is(err, ax.ErrNoLeader) || time.Since(start) > 500*time.Millisecond {
		t.Fatalf("cancelled wait: %v after %v", err, time.Since(start))
	}
}

func Test_Client_TimeoutAndContext(t *testing.T) {
	f := startFakeSidecar(t)
	release := make(chan struct{})
	defer close(release)
	f.SetHook(func(w http.ResponseWriter, r *http.Request) bool {
		select {
		case <-r.Context().Done():
		case <-release:
		}
		return true
	})
	ctx := testContext(t)

	c := ax.New(ax.Config{SocketPath: f.Socket, Timeout: 100 * time.Millisecond})
	_, err := c.Get(ctx, "x")
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ax.ErrUnavailable) ||
		err.Error() != "ax: GET /v1/tasks/x: no answer from sidecar at "+f.Socket+" within 100ms: context deadline exceeded" {
		t.Fatalf("timeout: %v", err)
	}

	c = newClient(t, f)
	cctx, cancel := context.WithCancel(ctx)
	time.AfterFunc(50*time.Millisecond, cancel)
	_, err = c.Get(cctx, "x")
	if !errors.Is(err, context.Canceled) || err.Error() != "ax: GET /v1/tasks/x: context canceled" {
		t.Fatalf("cancel: %v", err)
	}
}

func Test_Client_ReadyAndCluster(t *testing.T) {
	f := startFakeSidecar(t)
	c := newClient(t, f)
	ctx := testContext(t)

	if err := c.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	f.SetReady(false)
	if err := c.Ready(ctx); !errors.Is(err, ax.ErrNotReady) || errors.Is(err, ax.ErrNoLeader) {
		t.Fatalf("not ready: %v", err)
	}
	if n := len(f.Requests()); n != 2 {
		t.Fatalf("Ready must not retry: %d requests", n)
	}
	f.Inject(fakeAnswer{Status: 503, Body: "starting"})
	if err := c.Ready(ctx); !errors.Is(err, ax.ErrNotReady) {
		t.Fatalf("plain 503: %v", err)
	}

	info, err := c.Cluster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.NodeID != "n1" || info.Leader != "n1" || info.Term != 3 || info.AppliedIndex != 42 || len(info.Members) != 2 ||
		!info.Members[0].Leader || info.Members[1].Suffrage != "Nonvoter" || info.Members[1].PeerAddr != "127.0.0.1:8002" {
		t.Fatalf("cluster %+v", info)
	}
}

func Test_Config_SocketDefaults(t *testing.T) {
	f := startFakeSidecar(t)
	ctx := testContext(t)

	t.Setenv(ax.SocketEnv, f.Socket)
	if err := ax.New(ax.Config{}).Ready(ctx); err != nil {
		t.Fatalf("AX_SOCKET: %v", err)
	}
	t.Setenv(ax.SocketEnv, "unix://"+f.Socket)
	if err := ax.New(ax.Config{}).Ready(ctx); err != nil {
		t.Fatalf("AX_SOCKET with unix://: %v", err)
	}
	// An explicit path wins over the environment.
	t.Setenv(ax.SocketEnv, "/nonexistent/ax.sock")
	if err := ax.New(ax.Config{SocketPath: f.Socket}).Ready(ctx); err != nil {
		t.Fatalf("explicit path: %v", err)
	}
	t.Setenv(ax.SocketEnv, "")
	t.Chdir(t.TempDir())
	err := ax.New(ax.Config{}).Ready(ctx)
	if err == nil || !strings.HasPrefix(err.Error(), "ax: cannot reach sidecar at ./ax.sock: ") {
		t.Fatalf("default path: %v", err)
	}
}
