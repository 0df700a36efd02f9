package callback

import (
	"context"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/axsched/ax/clients/go/axapi"
	"github.com/axsched/ax/engine"
	"github.com/axsched/ax/raftfsm"
)

// payloadMaxBytes is the largest payload a submit takes (ipc.PayloadMaxBytes,
// not imported: ipc imports this package to check executor URLs).
const payloadMaxBytes = 1 << 20

// executor is a fake executor: an httptest server that records the last
// request and answers with handle.
type executor struct {
	srv  *httptest.Server
	base string

	mu   sync.Mutex
	last *recorded
}

type recorded struct {
	method, path string
	header       http.Header
	body         []byte
}

// startExecutor serves handle on a Unix socket (network "unix") or on
// loopback TCP ("tcp").
func startExecutor(t *testing.T, network string, handle http.HandlerFunc) *executor {
	t.Helper()
	return startExecutorWith(t, network, handle, nil)
}

// startExecutorWith is startExecutor with a hook to configure the
// http.Server before it starts.
func startExecutorWith(t *testing.T, network string, handle http.HandlerFunc, configure func(*http.Server)) *executor {
	t.Helper()
	ex := &executor{}
	h := func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		ex.mu.Lock()
		ex.last = &recorded{method: r.Method, path: r.URL.Path, header: r.Header.Clone(), body: body}
		ex.mu.Unlock()
		handle(w, r)
	}
	ex.srv = httptest.NewUnstartedServer(http.HandlerFunc(h))
	if network == "unix" {
		path := filepath.Join(t.TempDir(), "exec.sock")
		ln, err := net.Listen("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		ex.srv.Listener.Close()
		ex.srv.Listener = ln
		ex.base = "unix://" + path
	}
	if configure != nil {
		configure(ex.srv.Config)
	}
	ex.srv.Start()
	if network == "tcp" {
		ex.base = ex.srv.URL
	}
	t.Cleanup(ex.srv.Close)
	return ex
}

func (ex *executor) request() *recorded {
	ex.mu.Lock()
	defer ex.mu.Unlock()
	return ex.last
}

func newTestCaller(t *testing.T) *Caller {
	c := NewCaller(CallerOptions{})
	t.Cleanup(c.Close)
	return c
}

func TestCaller_PayloadAndHeaders(t *testing.T) {
	binary := make([]byte, 256)
	for i := range binary {
		binary[i] = byte(255 - i)
	}
	payloads := map[string][]byte{
		"empty":  nil,
		"json":   []byte(`{"order": 42, "note": "ü"}`),
		"binary": binary,
		"large":  []byte(strings.Repeat("0123456789", payloadMaxBytes/10)),
	}
	for _, network := range []string{"unix", "tcp"} {
		t.Run(network, func(t *testing.T) {
			ex := startExecutor(t, network, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(200) })
			c := newTestCaller(t)
			for name, payload := range payloads {
				t.Run(name, func(t *testing.T) {
					deadline := time.Now().Add(10 * time.Second)
					cb := Callback{TaskID: "ü日本|a/b@c", Handler: "order.timeout", Attempt: 2, Run: 7, Deadline: deadline, Payload: payload}
					out := c.Execute(context.Background(), ex.base, cb)
					if out.Kind != raftfsm.OutcomeSuccess || out.Status != 200 || out.Error != "" || out.Duration <= 0 {
						t.Fatalf("outcome = %+v", out)
					}
					req := ex.request()
					if req.method != "POST" || req.path != "/ax/v1/execute" {
						t.Errorf("request = %s %s", req.method, req.path)
					}
					if string(req.body) != string(payload) {
						t.Errorf("body differs: got %d bytes, want %d", len(req.body), len(payload))
					}
					want := map[string]string{
						"Content-Type":   "application/octet-stream",
						"Ax-Task-Id":     "ü日本|a/b@c",
						"Ax-Handler":     "order.timeout",
						"Ax-Attempt":     "2",
						"Ax-Run":         "7",
						"Ax-Deadline":    deadline.UTC().Format("2006-01-02T15:04:05.000Z07:00"),
						"Content-Length": strconv.Itoa(len(payload)), // sent, never chunked
					}
					for k, v := range want {
						if got := req.header.Get(k); got != v {
							t.Errorf("header %s = %q, want %q", k, got, v)
						}
					}
					if d, err := time.Parse(time.RFC3339, req.header.Get("Ax-Deadline")); err != nil || !d.Equal(deadline.Truncate(time.Millisecond)) {
						t.Errorf("Ax-Deadline %q does not parse to the deadline (%v)", req.header.Get("Ax-Deadline"), err)
					}
				})
			}
		})
	}
}

func TestCaller_StatusClasses(t *testing.T) {
	httpDate := time.Now().Add(30 * time.Second).UTC().Format(http.TimeFormat)
	tests := []struct {
		status     int
		header     map[string]string
		body       string
		kind       raftfsm.Outcome
		retryAfter time.Duration // minimum expected
		errText    string
	}{
		{200, nil, "ok", raftfsm.OutcomeSuccess, 0, ""},
		{204, nil, "", raftfsm.OutcomeSuccess, 0, ""},
		{202, nil, "later", raftfsm.OutcomeAccepted, 0, ""},
		{429, map[string]string{"Retry-After": "7"}, "slow down", raftfsm.OutcomeBusy, 7 * time.Second, "http 429: slow down"},
		{503, map[string]string{"Retry-After": httpDate}, "", raftfsm.OutcomeBusy, 25 * time.Second, "http 503: Service Unavailable"},
		{503, nil, "busy", raftfsm.OutcomeBusy, 0, "http 503: busy"},
		{400, nil, "bad payload\n", raftfsm.OutcomePermanent, 0, "http 400: bad payload"},
		{404, nil, "", raftfsm.OutcomePermanent, 0, "http 404: Not Found"},
		{410, nil, "gone", raftfsm.OutcomePermanent, 0, "http 410: gone"},
		{500, nil, "boom", raftfsm.OutcomeRetryable, 0, "http 500: boom"},
		{502, nil, "bad gateway", raftfsm.OutcomeRetryable, 0, "http 502: bad gateway"},
		{302, map[string]string{"Location": "/elsewhere"}, "", raftfsm.OutcomeRetryable, 0, "http 302: Found"},
	}
	for _, network := range []string{"unix", "tcp"} {
		t.Run(network, func(t *testing.T) {
			c := newTestCaller(t)
			for _, tc := range tests {
				ex := startExecutor(t, network, func(w http.ResponseWriter, r *http.Request) {
					for k, v := range tc.header {
						w.Header().Set(k, v)
					}
					w.WriteHeader(tc.status)
					io.WriteString(w, tc.body)
				})
				out := c.Execute(context.Background(), ex.base, Callback{TaskID: "t", Handler: "h", Attempt: 1, Run: 1, Deadline: time.Now().Add(5 * time.Second)})
				if out.Kind != tc.kind || out.Status != tc.status || out.Error != tc.errText {
					t.Errorf("%d: outcome = %+v (%s), want kind %s error %q", tc.status, out, out.Kind, tc.kind, tc.errText)
				}
				if out.RetryAfter < tc.retryAfter || (tc.retryAfter == 0 && out.RetryAfter != 0) || out.RetryAfter > tc.retryAfter+6*time.Second {
					t.Errorf("%d: RetryAfter = %s, want about %s", tc.status, out.RetryAfter, tc.retryAfter)
				}
			}
		})
	}
}

func TestCaller_ErrorTextIsBounded(t *testing.T) {
	long := strings.Repeat("é", 300) + strings.Repeat("x", 100<<10)
	ex := startExecutor(t, "unix", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(500)
		io.WriteString(w, long)
	})
	out := newTestCaller(t).Execute(context.Background(), ex.base, Callback{TaskID: "t", Handler: "h"})
	want := "http 500: " + strings.Repeat("é", 200)
	if out.Kind != raftfsm.OutcomeRetryable || out.Error != want {
		t.Errorf("error = %q (%d bytes), want 200 characters of the body", out.Error, len(out.Error))
	}
}

// blockingExecutor answers only when its request context ends, and reports
// that it saw the end.
func blockingExecutor(t *testing.T, network string) (*executor, chan struct{}) {
	aborted := make(chan struct{}, 1)
	ex := startExecutor(t, network, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
			aborted <- struct{}{}
		case <-time.After(10 * time.Second):
			w.WriteHeader(200)
		}
	})
	return ex, aborted
}

func TestCaller_TimeoutAbortsRequest(t *testing.T) {
	for _, network := range []string{"unix", "tcp"} {
		t.Run(network, func(t *testing.T) {
			ex, aborted := blockingExecutor(t, network)
			deadline := time.Now().Add(200 * time.Millisecond)
			out := newTestCaller(t).Execute(context.Background(), ex.base,
				Callback{TaskID: "t", Handler: "h", Attempt: 1, Run: 1, Deadline: deadline})
			ended := time.Now()
			if out.Kind != raftfsm.OutcomeTimeout || out.Status != 0 || out.Error != "timeout after 200ms" {
				t.Errorf("outcome = %+v, want Timeout \"timeout after 200ms\"", out)
			}
			// The call ends at the deadline, not before; Duration runs from
			// Execute's own start, a moment after the deadline was set, so
			// it may be a little under 200ms (CI saw 199.83ms).
			if ended.Before(deadline) || out.Duration < 150*time.Millisecond || out.Duration > 2*time.Second {
				t.Errorf("ended %s before the deadline, Duration = %s, want about 200ms", deadline.Sub(ended), out.Duration)
			}
			select {
			case <-aborted:
			case <-time.After(5 * time.Second):
				t.Fatal("executor did not see its request context end")
			}
		})
	}
}

func TestCaller_CtxTimeoutAndCancel(t *testing.T) {
	ex, aborted := blockingExecutor(t, "unix")
	c := newTestCaller(t)

	// ctx's own deadline, no Callback.Deadline: a timeout too.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	out := c.Execute(ctx, ex.base, Callback{TaskID: "t", Handler: "h"})
	cancel()
	// The message gives the time the attempt had, rounded to 10 ms: 100ms,
	// or a little less on a host short of CPU (CI saw 90ms).
	if out.Kind != raftfsm.OutcomeTimeout || (out.Error != "timeout after 100ms" && out.Error != "timeout after 90ms" && out.Error != "timeout after 80ms") {
		t.Errorf("ctx deadline: outcome = %+v", out)
	}
	<-aborted

	// Cancelling ctx (the task was cancelled) aborts the request in flight.
	ctx, cancel = context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	out = c.Execute(ctx, ex.base, Callback{TaskID: "t", Handler: "h", Deadline: time.Now().Add(10 * time.Second)})
	if out.Kind != raftfsm.OutcomeCancelled || out.Status != 0 || out.Duration > 5*time.Second {
		t.Errorf("cancel: outcome = %+v, want Cancelled", out)
	}
	select {
	case <-aborted:
	case <-time.After(5 * time.Second):
		t.Fatal("executor did not see its request context end")
	}

	// Already cancelled, or already past the deadline: nothing is sent.
	before := ex.request()
	if out := c.Execute(ctx, ex.base, Callback{TaskID: "t2", Handler: "h"}); out.Kind != raftfsm.OutcomeCancelled {
		t.Errorf("cancelled ctx: outcome = %+v", out)
	}
	out = c.Execute(context.Background(), ex.base, Callback{TaskID: "t3", Handler: "h", Deadline: time.Now().Add(-time.Second)})
	if out.Kind != raftfsm.OutcomeTimeout || !strings.Contains(out.Error, "deadline passed") {
		t.Errorf("past deadline: outcome = %+v", out)
	}
	if ex.request() != before {
		t.Errorf("a request was sent with a cancelled ctx or a past deadline")
	}
}

func TestCaller_ConnectionErrors(t *testing.T) {
	c := newTestCaller(t)
	missing := "unix://" + filepath.Join(t.TempDir(), "nobody.sock")
	out := c.Execute(context.Background(), missing, Callback{TaskID: "t", Handler: "h", Deadline: time.Now().Add(time.Second)})
	if out.Kind != raftfsm.OutcomeUnavailable || out.Overloaded || out.Status != 0 || !strings.Contains(out.Error, "no such file or directory") || strings.Contains(out.Error, "Post ") {
		t.Errorf("missing socket: outcome = %+v", out)
	}

	ln := mustListen(t)
	addr := ln.Addr().String()
	ln.Close()
	out = c.Execute(context.Background(), "http://"+addr, Callback{TaskID: "t", Handler: "h", Deadline: time.Now().Add(time.Second)})
	if out.Kind != raftfsm.OutcomeUnavailable || out.Overloaded || !strings.Contains(out.Error, "connection refused") {
		t.Errorf("closed port: outcome = %+v", out)
	}

	out = c.Execute(context.Background(), "ftp://x", Callback{TaskID: "t", Handler: "h"})
	if out.Kind != raftfsm.OutcomeRetryable || !strings.Contains(out.Error, `scheme "ftp" is not supported`) {
		t.Errorf("bad url: outcome = %+v", out)
	}
}

func TestCaller_ReusesConnections(t *testing.T) {
	var conns connCounter
	ex := startExecutorWith(t, "unix", func(w http.ResponseWriter, r *http.Request) {}, conns.hook)
	c := newTestCaller(t)
	for i := 0; i < 5; i++ {
		if out := c.Execute(context.Background(), ex.base, Callback{TaskID: "t", Handler: "h", Payload: []byte("x")}); out.Kind != raftfsm.OutcomeSuccess {
			t.Fatalf("outcome = %+v", out)
		}
	}
	if n := conns.count(); n != 1 {
		t.Errorf("5 sequential callbacks used %d connections, want 1", n)
	}
}

func TestParseExecutorURL(t *testing.T) {
	good := []struct{ in, network, address, url string }{
		{"unix:///run/app/exec.sock", "unix", "/run/app/exec.sock", "http://localhost/ax/v1/execute"},
		{"http://127.0.0.1:8080", "tcp", "127.0.0.1:8080", "http://127.0.0.1:8080/ax/v1/execute"},
		{"http://127.0.0.1:8080/", "tcp", "127.0.0.1:8080", "http://127.0.0.1:8080/ax/v1/execute"},
		{"http://localhost:9000/app/", "tcp", "localhost:9000", "http://localhost:9000/app/ax/v1/execute"},
		{"http://[::1]:80", "tcp", "[::1]:80", "http://[::1]:80/ax/v1/execute"},
		{"http://127.1.2.3:1", "tcp", "127.1.2.3:1", "http://127.1.2.3:1/ax/v1/execute"},
	}
	for _, tc := range good {
		network, address, err := ParseExecutorURL(tc.in)
		if err != nil || network != tc.network || address != tc.address {
			t.Errorf("ParseExecutorURL(%q) = %q, %q, %v; want %q, %q", tc.in, network, address, err, tc.network, tc.address)
		}
		if ep, _ := parseExecutorURL(tc.in); ep.url != tc.url {
			t.Errorf("callback url of %q = %q, want %q", tc.in, ep.url, tc.url)
		}
	}
	bad := map[string]string{
		"":                                    "missing scheme",
		"/run/app.sock":                       "missing scheme",
		"unix://run/app.sock":                 "absolute",
		"unix:relative.sock":                  "without user, query or fragment",
		"unix:///" + strings.Repeat("s", 120): "socket path is",
		"http://127.0.0.1":                    "port is required",
		"http://127.0.0.1:0":                  "port \"0\"",
		"http://127.0.0.1:99999":              "port \"99999\"",
		"http://10.0.0.5:8080":                "not a loopback address",
		"http://example.com:80":               "not a loopback address",
		"https://127.0.0.1:8443":              `scheme "https" is not supported`,
		"http://u:p@127.0.0.1:80":             "without user",
		"http://127.0.0.1:80/?x=1":            "without user, query or fragment",
		"http://127.0.0.1:80/#frag":           "without user, query or fragment",
		"unix:///run/app.sock?mode=x":         "without user, query or fragment",
		"http://%zz":                          "invalid URL escape",
	}
	for in, want := range bad {
		_, _, err := ParseExecutorURL(in)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseExecutorURL(%q) = %v, want an error containing %q", in, err, want)
		}
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	tests := map[string]time.Duration{
		"":                              0,
		"3":                             3 * time.Second,
		" 10 ":                          10 * time.Second,
		"0":                             0,
		"-5":                            0,
		"1.5":                           0,
		"soon":                          0,
		"999999999999":                  24 * time.Hour,
		"Mon, 30 Nov 2026 12:00:42 GMT": 42 * time.Second,
		"Mon, 30 Nov 2026 11:59:00 GMT": 0,
		"Tue, 01 Dec 2026 12:00:01 GMT": 24 * time.Hour, // a date is bounded as a delay is
		"Fri, 31 Dec 2100 00:00:00 GMT": 24 * time.Hour,
	}
	for in, want := range tests {
		if got := parseRetryAfter(in, now); got != want {
			t.Errorf("parseRetryAfter(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestRoughly(t *testing.T) {
	tests := map[time.Duration]time.Duration{
		-time.Second:                          0,
		999870 * time.Microsecond:             time.Second,
		199 * time.Millisecond:                200 * time.Millisecond,
		1496 * time.Millisecond:               1500 * time.Millisecond,
		29*time.Second + 998*time.Millisecond: 30 * time.Second,
		10*time.Minute - 3*time.Millisecond:   10 * time.Minute,
	}
	for in, want := range tests {
		if got := roughly(in); got != want {
			t.Errorf("roughly(%s) = %s, want %s", in, got, want)
		}
	}
}

func mustListen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// With CallerOptions.Clock, the deadline is on that clock: a callback
// whose deadline is an hour past on the wall clock runs on until that
// clock passes it, then times out ("timeout after" the clock's
// interval); a deadline already passed on that clock sends nothing.
func TestCaller_DeadlineOnTheGivenClock(t *testing.T) {
	ex, aborted := blockingExecutor(t, "unix")
	clock := engine.NewFakeClock(time.Now().Add(-time.Hour))
	c := NewCaller(CallerOptions{Clock: clock})
	t.Cleanup(c.Close)
	done := make(chan Outcome, 1)
	go func() {
		done <- c.Execute(context.Background(), ex.base, Callback{TaskID: "t", Handler: "h", Deadline: clock.Now().Add(time.Second)})
	}()
	// The callback has reached the executor, and its deadline timer is
	// armed on the fake clock (on the wall clock, it passed an hour ago).
	for wait := time.Now().Add(5 * time.Second); ex.request() == nil || clock.Armed() == 0; time.Sleep(time.Millisecond) {
		select {
		case out := <-done:
			t.Fatalf("ended before the fake clock moved: %+v", out)
		default:
		}
		if time.Now().After(wait) {
			t.Fatal("the callback did not reach the executor")
		}
	}
	clock.Advance(time.Second)
	select {
	case out := <-done:
		if out.Kind != raftfsm.OutcomeTimeout || out.Error != "timeout after 1s" {
			t.Errorf("outcome = %+v, want Timeout \"timeout after 1s\"", out)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no outcome after the fake clock passed the deadline")
	}
	select {
	case <-aborted:
	case <-time.After(5 * time.Second):
		t.Fatal("executor did not see its request context end")
	}
	before := ex.request()
	out := c.Execute(context.Background(), ex.base, Callback{TaskID: "t2", Handler: "h", Deadline: clock.Now().Add(-time.Millisecond)})
	if out.Kind != raftfsm.OutcomeTimeout || !strings.Contains(out.Error, "deadline passed") || ex.request() != before {
		t.Errorf("deadline passed on the given clock: %+v (sent: %v)", out, ex.request() != before)
	}
}

// TestCaller_TraceContext: every callback carries a traceparent with the
// task's trace id and flags (submitted, or derived from the task id) and
// a parent id of the attempt's own, the same when the attempt is
// delivered again; the tracestate goes as submitted.
func TestCaller_TraceContext(t *testing.T) {
	ex := startExecutor(t, "unix", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(200) })
	c := newTestCaller(t)
	const submitted = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	send := func(cb Callback) http.Header {
		t.Helper()
		if out := c.Execute(context.Background(), ex.base, cb); out.Kind != raftfsm.OutcomeSuccess {
			t.Fatalf("outcome = %+v", out)
		}
		return ex.request().header
	}
	parents := map[string]bool{}
	for attempt := 1; attempt <= 3; attempt++ {
		h := send(Callback{TaskID: "a", Handler: "h", Attempt: attempt, Run: 1, TraceParent: submitted, TraceState: "rojo=1,congo=2"})
		tp := h.Get("traceparent")
		_, err := axapi.ParseTraceParent(tp)
		if err != nil {
			t.Fatal(err)
		}
		if tp[:36] != submitted[:36] || tp[52:] != submitted[52:] || h.Get("tracestate") != "rojo=1,congo=2" {
			t.Errorf("attempt %d: traceparent %q tracestate %q", attempt, tp, h.Get("tracestate"))
		}
		if parents[tp] || tp == submitted {
			t.Errorf("attempt %d: parent id of %q not new", attempt, tp)
		}
		parents[tp] = true
		if again := send(Callback{TaskID: "a", Handler: "h", Attempt: attempt, Run: 1, TraceParent: submitted}).Get("traceparent"); again != tp {
			t.Errorf("attempt %d delivered again: %q, first %q", attempt, again, tp)
		}
	}
	h := send(Callback{TaskID: "a", Handler: "h", Attempt: 1, Run: 1})
	traceID := axapi.TaskTraceID("a")
	if tp := h.Get("traceparent"); !strings.HasPrefix(tp, "00-"+hex.EncodeToString(traceID[:])+"-") || !strings.HasSuffix(tp, "-01") {
		t.Errorf("no trace context: traceparent %q, want the trace id %x", tp, traceID)
	}
	if _, ok := h["Tracestate"]; ok {
		t.Errorf("tracestate sent for a task without one")
	}
}

func TestCaller_ShardHeadersAndPath(t *testing.T) {
	for _, network := range []string{"unix", "tcp"} {
		t.Run(network, func(t *testing.T) {
			ex := startExecutor(t, network, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(200) })
			c := newTestCaller(t)
			cb := Callback{TaskID: "shard/p/1/0", Handler: "h", Attempt: 1, Run: 1, ShardIndex: 0, ShardTotal: 8}
			if out := c.Execute(context.Background(), ex.base, cb); out.Kind != raftfsm.OutcomeSuccess {
				t.Fatalf("outcome %+v", out)
			}
			req := ex.request()
			if req.path != ExecutePath || req.header.Get("Ax-Shard-Index") != "0" || req.header.Get("Ax-Shard-Total") != "8" {
				t.Fatalf("shard callback: %s %v", req.path, req.header)
			}
			// An unsharded callback has neither header; the ask goes to ShardsPath.
			cb = Callback{TaskID: "p", Handler: "h", Attempt: 1, Run: 1, Path: ShardsPath, Payload: []byte(`{"a":1}`)}
			if out := c.Execute(context.Background(), ex.base, cb); out.Kind != raftfsm.OutcomeSuccess {
				t.Fatalf("outcome %+v", out)
			}
			req = ex.request()
			if req.path != "/ax/v1/shards" || string(req.body) != `{"a":1}` || req.header.Get("Ax-Task-Id") != "p" {
				t.Fatalf("ask: %s %q %v", req.path, req.body, req.header)
			}
			if _, ok := req.header["Ax-Shard-Index"]; ok {
				t.Fatalf("unsharded callback with Ax-Shard-Index: %v", req.header)
			}
		})
	}
}
