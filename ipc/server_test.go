package ipc

import (
	"bufio"
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
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/axsched/ax/clients/go/axapi"
)

// testServer is a Server on a Unix socket in t.TempDir() with a plain
// net/http client dialing it.
type testServer struct {
	t       *testing.T
	srv     *Server
	backend *fakeBackend
	path    string
	client  *http.Client
	done    chan error
}

func startServer(t *testing.T, opts ServerOptions) *testServer {
	t.Helper()
	fb := newFakeBackend()
	return serveBackend(t, fb, fb, opts)
}

// serveBackend starts a server on b, whose fake backend (b itself or the
// one it wraps) is fb, and returns it once it accepts connections.
func serveBackend(t *testing.T, b Backend, fb *fakeBackend, opts ServerOptions) *testServer {
	t.Helper()
	ts := &testServer{t: t, backend: fb, done: make(chan error, 1)}
	ts.path = filepath.Join(t.TempDir(), "ax.sock")
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.DebugLevel)
	ts.srv = NewServer(b, log, opts)
	go func() { ts.done <- ts.srv.ServeUnix(ts.path) }()
	ts.client = &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", ts.path)
		},
	}}
	waitFor(t, 5*time.Second, func() bool {
		c, err := net.Dial("unix", ts.path)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	t.Cleanup(func() { ts.stop() })
	return ts
}

// on returns ts reporting to t, for use in subtests.
func (ts *testServer) on(t *testing.T) *testServer {
	c := *ts
	c.t = t
	return &c
}

// stop shuts the server down once and checks ServeUnix returned nil.
func (ts *testServer) stop() {
	ts.t.Helper()
	if ts.done == nil {
		return
	}
	ts.client.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := ts.srv.Shutdown(ctx); err != nil {
		ts.t.Errorf("Shutdown: %v", err)
	}
	select {
	case err := <-ts.done:
		if err != nil {
			ts.t.Errorf("ServeUnix returned %v, want nil", err)
		}
	case <-time.After(5 * time.Second):
		ts.t.Errorf("ServeUnix did not return after Shutdown")
	}
	ts.done = nil
}

// waitFor polls cond every 10ms until it holds or total passes.
func waitFor(t *testing.T, total time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(total)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met after %s", total)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

type reply struct {
	status int
	header http.Header
	body   []byte
}

// do sends a request; path is sent as is (already escaped).
func (ts *testServer) do(method, path, body string) reply {
	ts.t.Helper()
	return ts.doWith(method, path, body, nil)
}

// doWith is do with the request headers hdr added.
func (ts *testServer) doWith(method, path, body string, hdr http.Header) reply {
	ts.t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, "http://ax"+path, r)
	if err != nil {
		ts.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, vs := range hdr {
		req.Header[k] = vs
	}
	resp, err := ts.client.Do(req)
	if err != nil {
		ts.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		ts.t.Fatal(err)
	}
	return reply{status: resp.StatusCode, header: resp.Header, body: b}
}

// task decodes a reply as a task view.
func (r reply) task(t *testing.T) Task {
	t.Helper()
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q, want application/json", ct)
	}
	var task Task
	if err := json.Unmarshal(r.body, &task); err != nil {
		t.Fatalf("decode task %s: %v", r.body, err)
	}
	return task
}

// wantError checks an error reply: status, code, a message fragment and
// the JSON shape.
func (r reply) wantError(t *testing.T, status int, code, msgPart string) {
	t.Helper()
	if r.status != status {
		t.Errorf("status = %d, want %d (body %s)", r.status, status, r.body)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q, want application/json", ct)
	}
	var body map[string]map[string]string
	if err := json.Unmarshal(r.body, &body); err != nil || len(body) != 1 || len(body["error"]) != 2 {
		t.Fatalf("error body %s is not {\"error\":{\"code\",\"message\"}} (%v)", r.body, err)
	}
	if got := body["error"]["code"]; got != code {
		t.Errorf("code = %q, want %q (body %s)", got, code, r.body)
	}
	if got := body["error"]["message"]; !strings.Contains(got, msgPart) {
		t.Errorf("message = %q, want it to contain %q", got, msgPart)
	}
}

func (ts *testServer) wantHealthy() {
	ts.t.Helper()
	if r := ts.do("GET", "/healthz", ""); r.status != 200 || string(r.body) != "{\"status\":\"ok\"}\n" {
		ts.t.Fatalf("GET /healthz = %d %s, want 200 {\"status\":\"ok\"}", r.status, r.body)
	}
}

func TestServer_HealthReadyCluster(t *testing.T) {
	ts := startServer(t, ServerOptions{})
	ts.wantHealthy()
	if r := ts.do("GET", "/healthz?verbose=1", ""); r.status != 200 {
		t.Errorf("GET /healthz?verbose=1 = %d", r.status)
	}
	if r := ts.do("HEAD", "/healthz", ""); r.status != 200 || len(r.body) != 0 {
		t.Errorf("HEAD /healthz = %d %q", r.status, r.body)
	}

	r := ts.do("GET", "/readyz", "")
	if r.status != 200 || string(r.body) != "{\"status\":\"ready\"}\n" {
		t.Errorf("GET /readyz = %d %s", r.status, r.body)
	}
	ts.backend.set(func(f *fakeBackend) { f.readyErr = Errorf(ErrNotReady, "catching up: applied 5 of 9") })
	ts.do("GET", "/readyz", "").wantError(t, 503, "not_ready", "catching up: applied 5 of 9")
	ts.backend.set(func(f *fakeBackend) { f.readyErr = errors.New("no leader known") })
	ts.do("GET", "/readyz", "").wantError(t, 503, "not_ready", "no leader known")
	ts.backend.set(func(f *fakeBackend) { f.readyErr = ErrNoLeader })
	r = ts.do("GET", "/readyz", "")
	r.wantError(t, 503, "no_leader", "no leader")
	if got := r.header.Get("Retry-After"); got != "1" {
		t.Errorf("Retry-After = %q, want 1", got)
	}
	ts.wantHealthy() // healthz is always 200 while serving

	r = ts.do("GET", "/v1/cluster", "")
	if r.status != 200 || !strings.Contains(string(r.body), `"members":[]`) {
		t.Errorf("GET /v1/cluster = %d %s, want 200 with members []", r.status, r.body)
	}
	want := ClusterInfo{NodeID: "n1", State: "Leader", Leader: "n1", Term: 3, AppliedIndex: 42, CommitIndex: 42,
		Members: []Member{{ID: "n1", RaftAddr: "10.0.0.1:7001", Suffrage: "Voter", Leader: true}}}
	ts.backend.set(func(f *fakeBackend) { f.cluster = want })
	r = ts.do("GET", "/v1/cluster", "")
	var got ClusterInfo
	if err := json.Unmarshal(r.body, &got); err != nil || r.status != 200 {
		t.Fatalf("GET /v1/cluster = %d %s (%v)", r.status, r.body, err)
	}
	if got.NodeID != "n1" || got.Term != 3 || len(got.Members) != 1 || !got.Members[0].Leader {
		t.Errorf("cluster = %+v, want %+v", got, want)
	}
	ts.backend.set(func(f *fakeBackend) { f.clusterErr = ErrNoLeader })
	ts.do("GET", "/v1/cluster", "").wantError(t, 503, "no_leader", "no leader")
}

func TestServer_SocketFile(t *testing.T) {
	ts := startServer(t, ServerOptions{})
	fi, err := os.Stat(ts.path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o660 {
		t.Errorf("socket mode = %v, want socket with 0660", fi.Mode())
	}

	// A second server on the same live socket must refuse, not steal it.
	other := NewServer(newFakeBackend(), zerolog.Nop(), ServerOptions{})
	if err := other.ServeUnix(ts.path); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Errorf("ServeUnix on a live socket = %v, want an 'in use' error", err)
	}
	ts.wantHealthy()

	ts.stop()
	if _, err := os.Stat(ts.path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket file still there after Shutdown: %v", err)
	}
	if err := ts.srv.Serve(mustListen(t)); !errors.Is(err, ErrServerClosed) {
		t.Errorf("Serve after Shutdown = %v, want ErrServerClosed", err)
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

func TestServer_ServeUnixStaleAndNonSocket(t *testing.T) {
	dir := t.TempDir()

	// A stale socket: the file exists, nobody listens.
	stale := filepath.Join(dir, "stale.sock")
	ln, err := net.Listen("unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	if _, err := os.Stat(stale); err != nil {
		t.Fatalf("stale socket not left behind: %v", err)
	}
	s := NewServer(newFakeBackend(), zerolog.Nop(), ServerOptions{SocketMode: 0o600})
	done := make(chan error, 1)
	go func() { done <- s.ServeUnix(stale) }()
	waitFor(t, 5*time.Second, func() bool {
		c, err := net.Dial("unix", stale)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	if fi, err := os.Stat(stale); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket mode = %v (%v), want 0600 from SocketMode", fi.Mode(), err)
	}
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Errorf("ServeUnix = %v, want nil after Shutdown", err)
	}

	// A regular file is never removed.
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	s = NewServer(newFakeBackend(), zerolog.Nop(), ServerOptions{})
	if err := s.ServeUnix(file); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Errorf("ServeUnix on a regular file = %v, want 'not a socket'", err)
	}
	if b, _ := os.ReadFile(file); string(b) != "keep" {
		t.Errorf("regular file was changed")
	}
}

func TestServer_SubmitCreatedExistingConflict(t *testing.T) {
	ts := startServer(t, ServerOptions{})
	body := `{"id":"order-1","handler":"order.timeout","payload":{"order":1},"delay":"30m","priority":1}`

	r := ts.do("POST", "/v1/tasks", body)
	if r.status != 201 {
		t.Fatalf("first submit = %d %s, want 201", r.status, r.body)
	}
	if loc := r.header.Get("Location"); loc != "/v1/tasks/order-1" {
		t.Errorf("Location = %q", loc)
	}
	task := r.task(t)
	if task.ID != "order-1" || task.Handler != "order.timeout" || task.State != axapi.StateWaiting ||
		task.Priority != 1 || task.Delay != "30m0s" || task.MaxAttempts != axapi.MaxAttemptsDefault || task.Timeout != "30s" {
		t.Errorf("task = %+v", task)
	}
	spec := ts.backend.lastSpec
	if spec.Delay != 30*time.Minute || spec.Priority != 1 || spec.Timeout != axapi.TimeoutDefault || string(spec.Payload) != `{"order":1}` {
		t.Errorf("spec = %+v", spec)
	}

	// Same spec again, with defaults spelled out: 200 and the same task.
	same := `{"id":"order-1","handler":"order.timeout","payload":{"order":1},"delay":"30m","priority":1,"timeout":"30s","max_attempts":4}`
	r = ts.do("POST", "/v1/tasks", same)
	if r.status != 200 {
		t.Fatalf("same submit = %d %s, want 200", r.status, r.body)
	}
	if got := r.task(t); got.ID != "order-1" || got.State != axapi.StateWaiting {
		t.Errorf("existing task = %+v", got)
	}

	// Different spec: 409.
	diff := `{"id":"order-1","handler":"order.timeout","payload":{"order":2},"delay":"30m","priority":1}`
	ts.do("POST", "/v1/tasks", diff).wantError(t, 409, "conflict", `task "order-1" exists with a different spec`)

	// Different spec with overwrite: created again.
	over := `{"id":"order-1","handler":"order.timeout","payload":{"order":2},"overwrite":true}`
	if r := ts.do("POST", "/v1/tasks", over); r.status != 201 || string(r.task(t).Payload) != `{"order":2}` {
		t.Errorf("overwrite submit = %d %s, want 201 with the new payload", r.status, r.body)
	}

	// No id: a random one.
	r = ts.do("POST", "/v1/tasks", `{"handler":"h"}`)
	if r.status != 201 {
		t.Fatalf("submit without id = %d %s", r.status, r.body)
	}
	if id := r.task(t).ID; len(id) != 32 {
		t.Errorf("generated id = %q, want 32 hex characters", id)
	}
}

func TestServer_GetCancel(t *testing.T) {
	ts := startServer(t, ServerOptions{})
	ts.do("POST", "/v1/tasks", `{"id":"t1","handler":"h"}`)

	r := ts.do("GET", "/v1/tasks/t1", "")
	if r.status != 200 || r.task(t).State != axapi.StateWaiting {
		t.Fatalf("GET = %d %s", r.status, r.body)
	}
	// An unknown parameter is refused, as DELETE's are (it was ignored:
	// this typo of consistency=strong read locally).
	ts.do("GET", "/v1/tasks/t1?consistent=true", "").wantError(t, 400, "bad_request", `unknown query parameter "consistent"; known: consistency`)
	r = ts.do("DELETE", "/v1/tasks/t1", "")
	if r.status != 200 {
		t.Fatalf("DELETE = %d %s", r.status, r.body)
	}
	if got := r.task(t); got.State != axapi.StateCancelled || got.FinishedAt == nil {
		t.Errorf("cancelled task = %+v", got)
	}
	if r := ts.do("GET", "/v1/tasks/t1", ""); r.task(t).State != axapi.StateCancelled {
		t.Errorf("GET after cancel: %s", r.body)
	}

	ts.do("GET", "/v1/tasks/nope", "").wantError(t, 404, "not_found", `task "nope": not found`)
	ts.do("DELETE", "/v1/tasks/nope", "").wantError(t, 404, "not_found", `task "nope"`)
	ts.wantHealthy()
}

func TestServer_OpaqueIDs(t *testing.T) {
	ts := startServer(t, ServerOptions{})
	for _, id := range []string{"order|42", "a@b", "A/B", "ü日本", "a b", "%41", "a?b#c", "..", "x/../y", "batch"} {
		t.Run(id, func(t *testing.T) {
			ts := ts.on(t)
			body, _ := json.Marshal(map[string]any{"id": id, "handler": "h", "payload": map[string]string{"id": id}})
			r := ts.do("POST", "/v1/tasks", string(body))
			if r.status != 201 {
				t.Fatalf("submit = %d %s", r.status, r.body)
			}
			if got := r.task(t).ID; got != id {
				t.Errorf("submitted id = %q, want %q", got, id)
			}
			if loc := r.header.Get("Location"); loc != "/v1/tasks/"+url.PathEscape(id) {
				t.Errorf("Location = %q", loc)
			}
			path := "/v1/tasks/" + url.PathEscape(id)
			if got := ts.do("GET", path, "").task(t).ID; got != id {
				t.Errorf("GET %s: id = %q, want %q", path, got, id)
			}
			if r := ts.do("DELETE", path, ""); r.status != 200 || r.task(t).ID != id {
				t.Errorf("DELETE %s = %d %s", path, r.status, r.body)
			}
		})
	}
	// An unescaped slash is a path separator: no such route.
	ts.do("GET", "/v1/tasks/A/B", "").wantError(t, 404, "not_found", "no route")
}

// TestServer_RawRequestLine sends ids unescaped (or only partly escaped) on
// the request line, as a sloppy client might.
func TestServer_RawRequestLine(t *testing.T) {
	ts := startServer(t, ServerOptions{})
	for _, id := range []string{"order|42", "a@b", "ü日本"} {
		ts.do("POST", "/v1/tasks", `{"id":"`+id+`","handler":"h"}`)
		r := ts.raw("GET /v1/tasks/" + id + " HTTP/1.1\r\nHost: ax\r\n\r\n")
		if r.status != 200 || r.task(t).ID != id {
			t.Errorf("raw GET %s = %d %s", id, r.status, r.body)
		}
	}
}

// raw writes req (request line, headers, maybe a body) on a new connection
// and reads one response.
func (ts *testServer) raw(req string) reply {
	ts.t.Helper()
	conn, err := net.Dial("unix", ts.path)
	if err != nil {
		ts.t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, req); err != nil {
		ts.t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		ts.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		ts.t.Fatal(err)
	}
	return reply{status: resp.StatusCode, header: resp.Header, body: b}
}

func TestServer_PayloadRoundTrip(t *testing.T) {
	ts := startServer(t, ServerOptions{})
	binary := make([]byte, 256)
	for i := range binary {
		binary[i] = byte(i)
	}
	tests := []struct {
		name     string
		field    string // the submit body's payload part
		wantSpec []byte
		wantB64  bool
		wantView string // the view's payload part, "" for none
	}{
		{"json object with spaces", `"payload": {"a": 1, "b" : [true, null, "<&>"]}`, []byte(`{"a": 1, "b" : [true, null, "<&>"]}`), false, `"payload":{"a": 1, "b" : [true, null, "<&>"]}`},
		{"json string", `"payload":"héllo \u00e9"`, []byte(`"héllo \u00e9"`), false, `"payload":"héllo \u00e9"`},
		{"json number", `"payload":12.50`, []byte(`12.50`), false, `"payload":12.50`},
		{"json null is no payload", `"payload":null`, nil, false, ""},
		{"absent", ``, nil, false, ""},
		{"binary", `"payload_base64":"` + base64.StdEncoding.EncodeToString(binary) + `"`, binary, true, `"payload_base64":"` + base64.StdEncoding.EncodeToString(binary) + `"`},
		{"empty base64 is no payload", `"payload_base64":""`, nil, false, ""},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ts := ts.on(t)
			id := "p" + string(rune('a'+i))
			body := `{"id":"` + id + `","handler":"h"`
			if tc.field != "" {
				body += "," + tc.field
			}
			body += "}"
			r := ts.do("POST", "/v1/tasks", body)
			if r.status != 201 {
				t.Fatalf("submit = %d %s", r.status, r.body)
			}
			spec := ts.backend.lastSpec
			if !bytes.Equal(spec.Payload, tc.wantSpec) || spec.PayloadBase64 != tc.wantB64 {
				t.Errorf("spec payload = %q (base64 %v), want %q (%v)", spec.Payload, spec.PayloadBase64, tc.wantSpec, tc.wantB64)
			}
			for _, r := range []reply{r, ts.do("GET", "/v1/tasks/"+id, "")} {
				view := string(r.body)
				if tc.wantView == "" {
					if strings.Contains(view, `"payload`) {
						t.Errorf("view %s has a payload, want none", view)
					}
				} else if !strings.Contains(view, tc.wantView) {
					t.Errorf("view %s does not contain %s", view, tc.wantView)
				}
				if got := r.task(t); !bytes.Equal(got.Payload, tc.wantSpec) || got.PayloadBase64 != tc.wantB64 {
					t.Errorf("decoded view payload = %q (%v), want %q (%v)", got.Payload, got.PayloadBase64, tc.wantSpec, tc.wantB64)
				}
			}
		})
	}
}

func TestServer_BadInput(t *testing.T) {
	ts := startServer(t, ServerOptions{})
	big := `{"handler":"h","payload":"` + strings.Repeat("x", PayloadMaxBytes) + `"}`
	tests := []struct {
		name, method, path, body string
		status                   int
		code, msg                string
	}{
		{"malformed json", "POST", "/v1/tasks", `{"handler":`, 400, "invalid_json", "invalid json"},
		{"syntax error", "POST", "/v1/tasks", `{"handler" "h"}`, 400, "invalid_json", "invalid json at byte"},
		{"not an object", "POST", "/v1/tasks", `["h"]`, 400, "invalid_json", "want a JSON object"},
		{"trailing data", "POST", "/v1/tasks", `{"handler":"h"} {}`, 400, "invalid_json", "after the JSON object"},
		{"empty body", "POST", "/v1/tasks", ``, 400, "invalid_json", "empty"},
		{"missing handler", "POST", "/v1/tasks", `{"id":"x"}`, 400, "bad_request", "handler: required"},
		{"negative delay", "POST", "/v1/tasks", `{"handler":"h","delay":"-1s"}`, 400, "bad_request", `delay: must not be negative, got "-1s"`},
		{"bad delay", "POST", "/v1/tasks", `{"handler":"h","delay":"soon"}`, 400, "bad_request", "delay: must be a Go duration"},
		{"delay as number", "POST", "/v1/tasks", `{"handler":"h","delay":5}`, 400, "bad_request", "delay: must be a Go duration string"},
		{"delay and run_at", "POST", "/v1/tasks", `{"handler":"h","delay":"1s","run_at":"2026-01-02T15:04:05Z"}`, 400, "bad_request", "delay and run_at: give at most one"},
		{"bad run_at", "POST", "/v1/tasks", `{"handler":"h","run_at":"tomorrow"}`, 400, "bad_request", "run_at: must be an RFC 3339 time"},
		{"priority too high", "POST", "/v1/tasks", `{"handler":"h","priority":5}`, 400, "bad_request", "priority: must be between 0 (highest) and 4 (lowest), got 5"},
		{"priority negative", "POST", "/v1/tasks", `{"handler":"h","priority":-1}`, 400, "bad_request", "priority: must be between"},
		{"priority not integer", "POST", "/v1/tasks", `{"handler":"h","priority":1.5}`, 400, "bad_request", "priority: must be an integer from 0 to 4"},
		{"unknown field", "POST", "/v1/tasks", `{"handler":"h","colour":"red"}`, 400, "bad_request", `unknown field "colour"`},
		{"bad cron", "POST", "/v1/tasks", `{"handler":"h","cron":"0 25 * * *"}`, 400, "bad_request", "cron: "},
		{"bad label", "POST", "/v1/tasks", `{"handler":"h","labels":{"":"b"}}`, 400, "bad_request", "labels: empty key"},
		{"both payloads", "POST", "/v1/tasks", `{"handler":"h","payload":1,"payload_base64":"AA=="}`, 400, "bad_request", "payload and payload_base64"},
		{"bad base64", "POST", "/v1/tasks", `{"handler":"h","payload_base64":"!!"}`, 400, "bad_request", "payload_base64: not standard base64"},
		{"zero timeout", "POST", "/v1/tasks", `{"handler":"h","timeout":"0s"}`, 400, "bad_request", "timeout: must be > 0"},
		{"zero max_attempts", "POST", "/v1/tasks", `{"handler":"h","max_attempts":0}`, 400, "bad_request", "max_attempts: must be between 1"},
		{"control char in id", "POST", "/v1/tasks", `{"id":"a\nb","handler":"h"}`, 400, "bad_request", "id: control character"},
		{"payload too large", "POST", "/v1/tasks", big, 413, "payload_too_large", "payload:"},
		{"unknown id", "GET", "/v1/tasks/ghost", "", 404, "not_found", `task "ghost": not found`},
		{"unknown path", "GET", "/v2/tasks", "", 404, "not_found", "no route for GET /v2/tasks"},
		{"trailing slash", "GET", "/v1/tasks/", "", 404, "not_found", "no route"},
		{"wrong method on tasks", "PUT", "/v1/tasks", "{}", 405, "method_not_allowed", "allowed: GET, HEAD, POST"},
		{"wrong method on task", "PUT", "/v1/tasks/x", "{}", 405, "method_not_allowed", "allowed: GET, HEAD, DELETE"},
		{"wrong method on healthz", "POST", "/healthz", "{}", 405, "method_not_allowed", "method POST not allowed"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ts := ts.on(t)
			r := ts.do(tc.method, tc.path, tc.body)
			r.wantError(t, tc.status, tc.code, tc.msg)
			if tc.status == 405 && r.header.Get("Allow") == "" {
				t.Errorf("405 without Allow header")
			}
			ts.wantHealthy()
		})
	}

	// A body over MaxRequestBodyBytes is refused from its Content-Length,
	// before it is read. A raw connection sees the answer even though the
	// server does not read the body.
	ts.raw(fmt.Sprintf("POST /v1/tasks HTTP/1.1\r\nHost: ax\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", MaxRequestBodyDefault+1)).
		wantError(t, 413, "payload_too_large", "request body over")
	ts.raw("GET /v1/tasks/a%zz HTTP/1.1\r\nHost: ax\r\n\r\n").wantError(t, 400, "bad_request", "bad URL escape")
	ts.wantHealthy()
}

func TestServer_BackendErrors(t *testing.T) {
	ts := startServer(t, ServerOptions{})
	tests := []struct {
		name       string
		err        error
		status     int
		code, msg  string
		retryAfter string
	}{
		{"no leader", fmt.Errorf("submit: %w", ErrNoLeader), 503, "no_leader", "submit: no leader", "1"},
		{"queue full", Errorf(ErrQueueFull, "backlog of %q is full (depth %d)", "h", 1000).WithRetryAfter(2500 * time.Millisecond), 429, "queue_full", `backlog of "h" is full (depth 1000)`, "3"},
		{"not ready", ErrNotReady, 503, "not_ready", "not ready", ""},
		{"internal", errors.New("badger: disk on fire"), 500, "internal", "internal error", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ts := ts.on(t)
			ts.backend.set(func(f *fakeBackend) { f.submitErr = tc.err })
			r := ts.do("POST", "/v1/tasks", `{"handler":"h"}`)
			r.wantError(t, tc.status, tc.code, tc.msg)
			if got := r.header.Get("Retry-After"); got != tc.retryAfter {
				t.Errorf("Retry-After = %q, want %q", got, tc.retryAfter)
			}
			if strings.Contains(string(r.body), "disk on fire") {
				t.Errorf("internal detail leaked: %s", r.body)
			}
		})
	}
}

func TestServer_RequestTimeout(t *testing.T) {
	ts := startServer(t, ServerOptions{RequestTimeout: 50 * time.Millisecond})
	ts.backend.set(func(f *fakeBackend) { f.block = true })
	start := time.Now()
	r := ts.do("POST", "/v1/tasks", `{"id":"slow","handler":"h"}`)
	r.wantError(t, 503, "not_ready", "timed out")
	if r.header.Get("Retry-After") != "1" {
		t.Errorf("Retry-After = %q, want 1", r.header.Get("Retry-After"))
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("request took %s with a 50ms request timeout", d)
	}
	ts.wantHealthy()
}

func TestServer_PanicIsInternal(t *testing.T) {
	ts := startServer(t, ServerOptions{})
	ts.backend.set(func(f *fakeBackend) { f.panicOn = "boom" })
	ts.do("GET", "/v1/tasks/boom", "").wantError(t, 500, "internal", "internal error")
	ts.wantHealthy()
}

func TestServer_ShutdownCancelsStuckRequests(t *testing.T) {
	ts := startServer(t, ServerOptions{RequestTimeout: time.Minute})
	ts.backend.set(func(f *fakeBackend) { f.block = true })
	got := make(chan reply, 1)
	go func() {
		req, _ := http.NewRequest("POST", "http://ax/v1/tasks", strings.NewReader(`{"handler":"h"}`))
		resp, err := ts.client.Do(req)
		if err != nil {
			got <- reply{}
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		got <- reply{status: resp.StatusCode, header: resp.Header, body: b}
	}()
	time.Sleep(100 * time.Millisecond) // let the request reach the backend
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := ts.srv.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Shutdown with a stuck request = %v, want DeadlineExceeded", err)
	}
	select {
	case r := <-got:
		if r.status != 503 {
			t.Errorf("stuck request answered %d %s, want 503", r.status, r.body)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("stuck request was not cancelled by Shutdown")
	}
	if err := ts.srv.Shutdown(context.Background()); err != nil {
		t.Errorf("second Shutdown = %v", err)
	}
	if err := <-ts.done; err != nil {
		t.Errorf("ServeUnix = %v", err)
	}
	ts.done = nil
}

// TestServer_ServeTCP checks Serve with a listener of the caller's own.
func TestServer_ServeTCP(t *testing.T) {
	s := NewServer(newFakeBackend(), zerolog.Nop(), ServerOptions{})
	ln := mustListen(t)
	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()
	resp, err := http.Get("http://" + ln.Addr().String() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("healthz over TCP = %d", resp.StatusCode)
	}
	http.DefaultClient.CloseIdleConnections()
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Errorf("Serve = %v, want nil", err)
	}
}

// TestServer_ServeUnixModeAndShutdownWhileStarting: a client that can
// connect to the socket already sees SocketMode (it was once the umask's
// mode until a chmod after listen), and a Shutdown that comes before the
// server registers the listener still makes ServeUnix return nil (it
// returned ErrServerClosed).
func TestServer_ServeUnixModeAndShutdownWhileStarting(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ax.sock")
	s := NewServer(newFakeBackend(), zerolog.Nop(), ServerOptions{SocketMode: 0o600})
	var mode os.FileMode
	var statErr, dialErr error
	testHookListening = func(p string) {
		c, err := net.Dial("unix", p)
		if dialErr = err; err == nil {
			c.Close()
		}
		var fi os.FileInfo
		if fi, statErr = os.Stat(p); statErr == nil {
			mode = fi.Mode().Perm()
		}
		_ = s.Shutdown(context.Background())
	}
	t.Cleanup(func() { testHookListening = nil })
	if err := s.ServeUnix(path); err != nil {
		t.Errorf("ServeUnix with Shutdown while starting = %v, want nil", err)
	}
	if dialErr != nil || statErr != nil || mode != 0o600 {
		t.Errorf("socket when it first accepts: dial %v, stat %v, mode %v; want 0600", dialErr, statErr, mode)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket file still there after Shutdown: %v", err)
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 0 {
		t.Errorf("files left beside the socket: %v", entries)
	}
}
