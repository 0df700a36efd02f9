package ax_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"
)

// fakeSidecar emulates the application API of an ax sidecar on a Unix
// socket: submit (idempotent by id, 409 on a different spec), get, cancel,
// cluster, readyz. It records every request and can be told to answer the
// next requests with canned errors.
type fakeSidecar struct {
	Socket string

	srv *http.Server
	now func() time.Time

	mu       sync.Mutex
	tasks    map[string]*fakeTask
	requests []fakeRequest
	inject   []fakeAnswer // answered first, in order, before normal handling
	notReady bool
	nextID   int
	hook     func(w http.ResponseWriter, r *http.Request) bool // true: answered
	execs    map[string]json.RawMessage                        // registered executors by name
}

// fakeRequest is a request as the fake saw it.
type fakeRequest struct {
	Method     string
	RequestURI string // raw, as sent on the wire
	Body       []byte
}

// fakeAnswer is a canned answer.
type fakeAnswer struct {
	Status     int
	RetryAfter string // Retry-After header, "" for none
	Body       string // raw body; when empty, an error body from Code and Message
	Code       string
	Message    string
}

// fakeSpec is the stored submit request, compared for idempotency.
type fakeSpec struct {
	Handler       string
	Payload       string
	PayloadBase64 bool
	Delay         string
	RunAt         string
	Priority      int
	Timeout       string
	MaxAttempts   int
}

type fakeTask struct {
	id         string
	spec       fakeSpec
	state      string
	created    time.Time
	updated    time.Time
	finishedAt *time.Time
}

// startFakeSidecar starts a fake in a temporary directory of t.
func startFakeSidecar(t *testing.T) *fakeSidecar {
	t.Helper()
	f, err := newFakeSidecar(shortTempDir(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	return f
}

// shortTempDir returns a temporary directory whose socket paths fit the
// ~104-byte limit of Unix socket addresses.
func shortTempDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if len(dir) < 80 {
		return dir
	}
	dir, err := os.MkdirTemp("", "ax")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// newFakeSidecar starts a fake listening on dir/ax.sock.
func newFakeSidecar(dir string) (*fakeSidecar, error) {
	f := &fakeSidecar{
		Socket: filepath.Join(dir, "ax.sock"),
		tasks:  make(map[string]*fakeTask),
		execs:  make(map[string]json.RawMessage),
		now:    func() time.Time { return time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC) },
	}
	l, err := net.Listen("unix", f.Socket)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/tasks", f.submit)
	mux.HandleFunc("GET /v1/tasks/{id}", f.get)
	mux.HandleFunc("DELETE /v1/tasks/{id}", f.cancel)
	mux.HandleFunc("POST /v1/tasks/{id}/retry", f.retry)
	mux.HandleFunc("POST /v1/executors", f.registerExecutor)
	mux.HandleFunc("DELETE /v1/executors/{name}", f.unregisterExecutor)
	mux.HandleFunc("GET /v1/cluster", f.cluster)
	mux.HandleFunc("GET /readyz", f.readyz)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") })
	f.srv = &http.Server{Handler: f.record(mux)}
	go f.srv.Serve(l)
	return f, nil
}

// Close stops the fake.
func (f *fakeSidecar) Close() { f.srv.Close() }

// Inject makes the fake answer the next len(answers) requests with answers.
func (f *fakeSidecar) Inject(answers ...fakeAnswer) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.inject = append(f.inject, answers...)
}

// SetHook installs a function that sees every request first.
func (f *fakeSidecar) SetHook(hook func(w http.ResponseWriter, r *http.Request) bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hook = hook
}

// SetReady sets the answer of /readyz.
func (f *fakeSidecar) SetReady(ready bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.notReady = !ready
}

// Requests returns the requests seen so far.
func (f *fakeSidecar) Requests() []fakeRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]fakeRequest(nil), f.requests...)
}

// LastRequest returns the last request seen.
func (f *fakeSidecar) LastRequest() fakeRequest {
	reqs := f.Requests()
	if len(reqs) == 0 {
		return fakeRequest{}
	}
	return reqs[len(reqs)-1]
}

// record logs the request and plays injected answers.
func (f *fakeSidecar) record(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		f.mu.Lock()
		f.requests = append(f.requests, fakeRequest{Method: r.Method, RequestURI: r.RequestURI, Body: body})
		hook := f.hook
		var answer *fakeAnswer
		if len(f.inject) > 0 {
			answer = &f.inject[0]
			f.inject = f.inject[1:]
		}
		f.mu.Unlock()
		if hook != nil && hook(w, r) {
			return
		}
		if answer != nil {
			if answer.RetryAfter != "" {
				w.Header().Set("Retry-After", answer.RetryAfter)
			}
			if answer.Body != "" {
				w.WriteHeader(answer.Status)
				io.WriteString(w, answer.Body)
				return
			}
			writeError(w, answer.Status, answer.Code, answer.Message)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, map[string]any{"error": map[string]string{"code": code, "message": msg}})
}

func (f *fakeSidecar) submit(w http.ResponseWriter, r *http.Request) {
	var in struct {
		ID            string          `json:"id"`
		Handler       string          `json:"handler"`
		Payload       json.RawMessage `json:"payload"`
		PayloadBase64 *string         `json:"payload_base64"`
		Delay         string          `json:"delay"`
		RunAt         string          `json:"run_at"`
		Priority      *int            `json:"priority"`
		Timeout       string          `json:"timeout"`
		MaxAttempts   int             `json:"max_attempts"`
		Overwrite     bool            `json:"overwrite"`
	}
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_json", err.Error())
		return
	}
	spec := fakeSpec{Handler: in.Handler, Delay: in.Delay, RunAt: in.RunAt, Priority: 2, Timeout: "30s", MaxAttempts: 4}
	switch {
	case in.Handler == "":
		writeError(w, http.StatusBadRequest, "bad_request", "handler is required")
		return
	case in.Payload != nil && in.PayloadBase64 != nil:
		writeError(w, http.StatusBadRequest, "bad_request", "payload and payload_base64 are exclusive")
		return
	case in.Delay != "" && in.RunAt != "":
		writeError(w, http.StatusBadRequest, "bad_request", "delay and run_at are exclusive")
		return
	}
	if in.Payload != nil {
		spec.Payload = string(in.Payload)
	}
	if in.PayloadBase64 != nil {
		b, err := base64.StdEncoding.DecodeString(*in.PayloadBase64)
		if err != nil {
			writeError(w, http.StatusBadRequest, "bad_request", "payload_base64: "+err.Error())
			return
		}
		spec.Payload, spec.PayloadBase64 = string(b), true
	}
	if len(spec.Payload) > 1<<20 {
		writeError(w, http.StatusRequestEntityTooLarge, "payload_too_large", "payload exceeds 1048576 bytes")
		return
	}
	if in.Delay != "" {
		if _, err := time.ParseDuration(in.Delay); err != nil {
			writeError(w, http.StatusBadRequest, "bad_request", "delay: "+err.Error())
			return
		}
	}
	if in.RunAt != "" {
		if _, err := time.Parse(time.RFC3339Nano, in.RunAt); err != nil {
			writeError(w, http.StatusBadRequest, "bad_request", "run_at: "+err.Error())
			return
		}
	}
	if in.Priority != nil {
		if *in.Priority < 0 || *in.Priority > 4 {
			writeError(w, http.StatusBadRequest, "bad_request", "priority must be 0..4, got "+strconv.Itoa(*in.Priority))
			return
		}
		spec.Priority = *in.Priority
	}
	if in.Timeout != "" {
		spec.Timeout = in.Timeout
	}
	if in.MaxAttempts != 0 {
		spec.MaxAttempts = in.MaxAttempts
	}

	f.mu.Lock()
	defer f.mu.Unlock()
	id := in.ID
	if id == "" {
		f.nextID++
		id = fmt.Sprintf("task-%d", f.nextID)
	}
	if old, ok := f.tasks[id]; ok && !in.Overwrite {
		if old.spec == spec {
			writeJSON(w, http.StatusOK, old.view())
			return
		}
		writeError(w, http.StatusConflict, "conflict", fmt.Sprintf("task %q exists with a different spec", id))
		return
	}
	now := f.now()
	t := &fakeTask{id: id, spec: spec, state: "WAITING", created: now, updated: now}
	f.tasks[id] = t
	writeJSON(w, http.StatusCreated, t.view())
}

func (f *fakeSidecar) get(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	id := r.PathValue("id")
	t, ok := f.tasks[id]
	if !ok {
		writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("task %q not found", id))
		return
	}
	writeJSON(w, http.StatusOK, t.view())
}

func (f *fakeSidecar) cancel(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	id := r.PathValue("id")
	t, ok := f.tasks[id]
	if !ok {
		writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("task %q not found", id))
		return
	}
	if t.state == "WAITING" || t.state == "RUNNING" {
		now := f.now().Add(time.Second)
		t.state, t.updated, t.finishedAt = "CANCELLED", now, &now
	}
	writeJSON(w, http.StatusOK, t.view())
}

func (f *fakeSidecar) cluster(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{
		"node_id": "n1", "state": "Leader", "leader": "n1", "term": 3,
		"applied_index": 42, "commit_index": 42,
		"members": []map[string]any{
			{"id": "n1", "raft_addr": "127.0.0.1:7001", "suffrage": "Voter", "leader": true},
			{"id": "n2", "raft_addr": "127.0.0.1:7002", "peer_addr": "127.0.0.1:8002", "suffrage": "Nonvoter"},
		},
	})
}

func (f *fakeSidecar) readyz(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	notReady := f.notReady
	f.mu.Unlock()
	if notReady {
		writeError(w, http.StatusServiceUnavailable, "not_ready", "no leader known")
		return
	}
	io.WriteString(w, "ok\n")
}

// view renders a task like ipc.Task.
func (t *fakeTask) view() map[string]any {
	v := map[string]any{
		"id":           t.id,
		"handler":      t.spec.Handler,
		"state":        t.state,
		"priority":     t.spec.Priority,
		"attempts":     0,
		"max_attempts": t.spec.MaxAttempts,
		"timeout":      t.spec.Timeout,
		"created_at":   t.created,
		"updated_at":   t.updated,
	}
	due := t.created
	if t.spec.Delay != "" {
		v["delay"] = t.spec.Delay
		d, _ := time.ParseDuration(t.spec.Delay)
		due = due.Add(d)
	}
	if t.spec.RunAt != "" {
		v["run_at"] = t.spec.RunAt
		due, _ = time.Parse(time.RFC3339Nano, t.spec.RunAt)
	}
	if t.state == "WAITING" {
		v["next_run_at"] = due
	}
	if t.finishedAt != nil {
		v["finished_at"] = *t.finishedAt
	}
	switch {
	case t.spec.PayloadBase64:
		v["payload_base64"] = []byte(t.spec.Payload)
	case t.spec.Payload != "":
		v["payload"] = json.RawMessage(t.spec.Payload)
	}
	return v
}

// SetState sets the state of a stored task (DEAD, FAILED, ...).
func (f *fakeSidecar) SetState(id, state string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tasks[id].state = state
}

// Executor returns the registration stored under name, nil when none.
func (f *fakeSidecar) Executor(name string) json.RawMessage {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.execs[name]
}

func (f *fakeSidecar) retry(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	id := r.PathValue("id")
	t, ok := f.tasks[id]
	if !ok {
		writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("task %q not found", id))
		return
	}
	if t.state != "DEAD" && t.state != "FAILED" {
		writeError(w, http.StatusConflict, "conflict", fmt.Sprintf("task %q is %s, not DEAD or FAILED", id, t.state))
		return
	}
	t.state, t.finishedAt, t.updated = "WAITING", nil, f.now().Add(2*time.Second)
	writeJSON(w, http.StatusOK, t.view())
}

func (f *fakeSidecar) registerExecutor(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Name           string   `json:"name"`
		Handlers       []string `json:"handlers"`
		URL            string   `json:"url"`
		MinConcurrency int      `json:"min_concurrency"`
		MaxConcurrency int      `json:"max_concurrency"`
		Timeout        string   `json:"timeout"`
	}
	body, _ := io.ReadAll(r.Body)
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_json", err.Error())
		return
	}
	if in.URL == "" {
		writeError(w, http.StatusBadRequest, "bad_request", "url: required")
		return
	}
	f.mu.Lock()
	_, existed := f.execs[in.Name]
	f.execs[in.Name] = body
	f.mu.Unlock()
	status := http.StatusCreated
	if existed {
		status = http.StatusOK
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(body)
}

func (f *fakeSidecar) unregisterExecutor(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	name := r.PathValue("name")
	if _, ok := f.execs[name]; !ok {
		writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("executor %q not found on node n1", name))
		return
	}
	delete(f.execs, name)
	w.WriteHeader(http.StatusNoContent)
}
