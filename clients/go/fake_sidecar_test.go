package ax_test

import (
	"bytes"
	"cmp"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeSidecar emulates the application API of an ax sidecar on a Unix
// socket: submit and batch submit (idempotent by id, 409 on a different
// spec), list with cursors, get, cancel, retry, heartbeat and result of a
// running attempt, executors, cluster, readyz. It records every request and
// can be told to answer the next requests with canned errors.
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
	warning  string                                            // Ax-Backlog-Warning of submits, "" for none
}

// fakeRequest is a request as the fake saw it.
type fakeRequest struct {
	Method     string
	RequestURI string // raw, as sent on the wire
	Body       []byte
	Prefer     string // the Prefer header
}

// fakeAnswer is a canned answer.
type fakeAnswer struct {
	Status     int
	RetryAfter string // Retry-After header, "" for none
	Body       string // raw body; when empty, an error body from Code and Message
	Code       string
	Message    string
	Depth      int // error.depth, 0 for none
	Limit      int // error.limit, 0 for none
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
	Cron          string
	Timezone      string
	Every         string
	Repeats       int
	Until         string
	Backoff       string // the backoff in force, JSON; "" for the default
	RouteKey      string
	Labels        string // JSON object (sorted keys), "" for none
}

type fakeTask struct {
	id         string
	spec       fakeSpec
	state      string
	attempts   int
	run        int
	lastError  string
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
	mux.HandleFunc("GET /v1/tasks", f.list)
	mux.HandleFunc("POST /v1/tasks/batch", f.submitBatch)
	mux.HandleFunc("POST /v1/tasks/{id}/heartbeat", f.heartbeat)
	mux.HandleFunc("POST /v1/tasks/{id}/result", f.result)
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
		f.requests = append(f.requests, fakeRequest{Method: r.Method, RequestURI: r.RequestURI, Body: body, Prefer: r.Header.Get("Prefer")})
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
			writeErrorDetail(w, answer.Status, map[string]any{"code": answer.Code, "message": answer.Message, "depth": answer.Depth, "limit": answer.Limit})
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

// writeErrorDetail writes an error body; zero depth and limit are left out.
func writeErrorDetail(w http.ResponseWriter, status int, detail map[string]any) {
	for _, k := range []string{"depth", "limit"} {
		if detail[k] == 0 {
			delete(detail, k)
		}
	}
	writeJSON(w, status, map[string]any{"error": detail})
}

// SetBacklogWarning makes submits answer with an Ax-Backlog-Warning header
// ("" for none).
func (f *fakeSidecar) SetBacklogWarning(v string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.warning = v
}

// SetRunning makes a stored task RUNNING its given attempt.
func (f *fakeSidecar) SetRunning(id string, attempt int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := f.tasks[id]
	t.state, t.attempts = "RUNNING", attempt
}

// fakeError is an error answer of the fake.
type fakeError struct {
	status        int
	code, message string
}

// fakeSubmit is a validated submit request.
type fakeSubmit struct {
	id        string
	overwrite bool
	spec      fakeSpec
}

func (f *fakeSidecar) submit(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	sub, ferr := parseSubmit(body)
	if ferr != nil {
		writeError(w, ferr.status, ferr.code, ferr.message)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	status, view, ferr := f.applySubmit(sub)
	if ferr != nil {
		writeError(w, ferr.status, ferr.code, ferr.message)
		return
	}
	if f.warning != "" {
		w.Header().Set("Ax-Backlog-Warning", f.warning)
	}
	writeJSON(w, status, view)
}

// submitBatch answers POST /v1/tasks/batch like the server: an invalid item
// refuses the whole batch; otherwise one result per item, with only the
// task's id and state under Prefer: return=minimal.
func (f *fakeSidecar) submitBatch(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Tasks []json.RawMessage `json:"tasks"`
	}
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_json", err.Error())
		return
	}
	if len(in.Tasks) == 0 || len(in.Tasks) > 1000 {
		writeError(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("tasks: 1 to 1000 tasks, got %d", len(in.Tasks)))
		return
	}
	minimal := r.Header.Get("Prefer") == "return=minimal"
	subs := make([]*fakeSubmit, len(in.Tasks))
	for i, raw := range in.Tasks {
		sub, ferr := parseSubmit(raw)
		if ferr != nil {
			writeError(w, ferr.status, ferr.code, fmt.Sprintf("tasks[%d]: %s", i, ferr.message))
			return
		}
		subs[i] = sub
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	results := make([]map[string]any, len(subs))
	for i, sub := range subs {
		status, view, ferr := f.applySubmit(sub)
		if ferr != nil {
			results[i] = map[string]any{"status": ferr.status, "error": map[string]string{"code": ferr.code, "message": ferr.message}}
			continue
		}
		if minimal {
			view = map[string]any{"id": view["id"], "state": view["state"]}
		}
		results[i] = map[string]any{"status": status, "task": view}
	}
	if minimal {
		w.Header().Set("Preference-Applied", "return=minimal")
	}
	if f.warning != "" {
		w.Header().Set("Ax-Backlog-Warning", f.warning)
	}
	writeJSON(w, http.StatusOK, map[string]any{"results": results})
}

// parseSubmit decodes and validates one submit request.
func parseSubmit(body []byte) (*fakeSubmit, *fakeError) {
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
		Cron          string          `json:"cron"`
		Timezone      string          `json:"timezone"`
		Every         string          `json:"every"`
		Repeats       int             `json:"repeats"`
		Until         string          `json:"until"`
		Backoff       *struct {
			Initial    *string  `json:"initial"`
			Max        *string  `json:"max"`
			Multiplier *float64 `json:"multiplier"`
			Jitter     *float64 `json:"jitter"`
		} `json:"backoff"`
		RouteKey string            `json:"route_key"`
		Labels   map[string]string `json:"labels"`
		// Accepted, not kept (trace_test.go reads them from the request).
		TraceParent string `json:"traceparent"`
		TraceState  string `json:"tracestate"`
	}
	bad := func(format string, args ...any) (*fakeSubmit, *fakeError) {
		return nil, &fakeError{http.StatusBadRequest, "bad_request", fmt.Sprintf(format, args...)}
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		return nil, &fakeError{http.StatusBadRequest, "invalid_json", err.Error()}
	}
	spec := fakeSpec{Handler: in.Handler, Delay: in.Delay, RunAt: in.RunAt, Priority: 2, Timeout: "30s", MaxAttempts: 4,
		Cron: in.Cron, Timezone: in.Timezone, Every: in.Every, Repeats: in.Repeats, Until: in.Until, RouteKey: in.RouteKey}
	switch {
	case in.Handler == "":
		return bad("handler is required")
	case in.Payload != nil && in.PayloadBase64 != nil:
		return bad("payload and payload_base64 are exclusive")
	case in.Delay != "" && in.RunAt != "":
		return bad("delay and run_at are exclusive")
	case in.Cron != "" && in.Every != "":
		return bad("cron and every: give at most one")
	case in.Timezone != "" && in.Cron == "":
		return bad("timezone: only with cron")
	case (in.Repeats != 0 || in.Until != "") && in.Cron == "" && in.Every == "":
		return bad("repeats, until: only with cron or every")
	}
	if in.Payload != nil {
		spec.Payload = string(in.Payload)
	}
	if in.PayloadBase64 != nil {
		b, err := base64.StdEncoding.DecodeString(*in.PayloadBase64)
		if err != nil {
			return bad("payload_base64: %v", err)
		}
		spec.Payload, spec.PayloadBase64 = string(b), true
	}
	if len(spec.Payload) > 1<<20 {
		return nil, &fakeError{http.StatusRequestEntityTooLarge, "payload_too_large", "payload exceeds 1048576 bytes"}
	}
	for field, v := range map[string]string{"delay": in.Delay, "every": in.Every} {
		if v != "" {
			if _, err := time.ParseDuration(v); err != nil {
				return bad("%s: %v", field, err)
			}
		}
	}
	for field, v := range map[string]string{"run_at": in.RunAt, "until": in.Until} {
		if v != "" {
			if _, err := time.Parse(time.RFC3339Nano, v); err != nil {
				return bad("%s: %v", field, err)
			}
		}
	}
	if in.Priority != nil {
		if *in.Priority < 0 || *in.Priority > 4 {
			return bad("priority must be 0..4, got %d", *in.Priority)
		}
		spec.Priority = *in.Priority
	}
	if in.Timeout != "" {
		spec.Timeout = in.Timeout
	}
	if in.MaxAttempts != 0 {
		spec.MaxAttempts = in.MaxAttempts
	}
	if b := in.Backoff; b != nil {
		view := map[string]any{"initial": "2s", "max": "30s", "multiplier": 2.0, "jitter": 0.2}
		if b.Initial != nil {
			view["initial"] = *b.Initial
		}
		if b.Max != nil {
			view["max"] = *b.Max
		}
		if b.Multiplier != nil {
			view["multiplier"] = *b.Multiplier
		}
		if b.Jitter != nil {
			view["jitter"] = *b.Jitter
		}
		j, _ := json.Marshal(view)
		spec.Backoff = string(j)
	}
	if len(in.Labels) > 0 {
		j, _ := json.Marshal(in.Labels)
		spec.Labels = string(j)
	}
	return &fakeSubmit{id: in.ID, overwrite: in.Overwrite, spec: spec}, nil
}

// applySubmit stores a submit; f.mu is held.
func (f *fakeSidecar) applySubmit(sub *fakeSubmit) (int, map[string]any, *fakeError) {
	id := sub.id
	if id == "" {
		f.nextID++
		id = fmt.Sprintf("task-%d", f.nextID)
	}
	if old, ok := f.tasks[id]; ok && !sub.overwrite {
		if old.spec == sub.spec {
			return http.StatusOK, old.view(), nil
		}
		return 0, nil, &fakeError{http.StatusConflict, "conflict", fmt.Sprintf("task %q exists with a different spec", id)}
	}
	now := f.now()
	t := &fakeTask{id: id, spec: sub.spec, state: "WAITING", run: 1, created: now, updated: now}
	f.tasks[id] = t
	return http.StatusCreated, t.view(), nil
}

// list answers GET /v1/tasks: tasks in id order after the cursor ("after:"
// and the last id of the previous page).
func (f *fakeSidecar) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	for k, v := range q {
		switch k {
		case "handler", "state", "limit", "cursor":
		default:
			writeError(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("unknown query parameter %q", k))
			return
		}
		if len(v) > 1 {
			writeError(w, http.StatusBadRequest, "bad_request", k+": give it at most once")
			return
		}
	}
	limit := 100
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			writeError(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("limit: must be an integer from 1 to 1000, got %q", v))
			return
		}
		limit = n
	}
	after := ""
	if c := q.Get("cursor"); c != "" {
		var ok bool
		if after, ok = strings.CutPrefix(c, "after:"); !ok {
			writeError(w, http.StatusBadRequest, "bad_request", "cursor: not a cursor of this server")
			return
		}
	}
	handler, state := q.Get("handler"), strings.ToUpper(q.Get("state"))
	f.mu.Lock()
	defer f.mu.Unlock()
	ids := slices.Sorted(maps.Keys(f.tasks))
	tasks := []map[string]any{}
	next := ""
	for _, id := range ids {
		t := f.tasks[id]
		if id <= after || handler != "" && t.spec.Handler != handler || state != "" && t.state != state {
			continue
		}
		if len(tasks) == limit {
			next = "after:" + tasks[len(tasks)-1]["id"].(string)
			break
		}
		tasks = append(tasks, t.view())
	}
	out := map[string]any{"tasks": tasks}
	if next != "" {
		out["next_cursor"] = next
	}
	writeJSON(w, http.StatusOK, out)
}

// runningTask returns the task of an attempt request when attempt is its
// running attempt; otherwise it answers the error itself. f.mu is held.
func (f *fakeSidecar) runningTask(w http.ResponseWriter, id string, attempt int, what string) *fakeTask {
	t, ok := f.tasks[id]
	if !ok {
		writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("task %q not found", id))
		return nil
	}
	if t.state != "RUNNING" || t.attempts != attempt {
		writeError(w, http.StatusConflict, "conflict", fmt.Sprintf("%s: that attempt of task %q is not the current one (task is %s)", what, id, t.state))
		return nil
	}
	return t
}

func (f *fakeSidecar) heartbeat(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Attempt int `json:"attempt"`
	}
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_json", err.Error())
		return
	}
	if in.Attempt < 1 {
		writeError(w, http.StatusBadRequest, "bad_request", "attempt: required, >= 1")
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	t := f.runningTask(w, r.PathValue("id"), in.Attempt, "heartbeat")
	if t == nil {
		return
	}
	t.updated = t.updated.Add(time.Second)
	writeJSON(w, http.StatusOK, t.view())
}

func (f *fakeSidecar) result(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Attempt int             `json:"attempt"`
		Status  string          `json:"status"`
		Error   string          `json:"error"`
		Result  json.RawMessage `json:"result"`
	}
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_json", err.Error())
		return
	}
	switch {
	case in.Attempt < 1:
		writeError(w, http.StatusBadRequest, "bad_request", "attempt: required, >= 1")
		return
	case in.Status != "success" && in.Status != "failed" && in.Status != "permanent":
		writeError(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("status: must be one of success, failed, permanent, got %q", in.Status))
		return
	case in.Error != "" && in.Status == "success":
		writeError(w, http.StatusBadRequest, "bad_request", `error: only with status "failed" or "permanent"`)
		return
	case len(in.Error) > 4096:
		writeError(w, http.StatusBadRequest, "bad_request", "error: over 4096 bytes")
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	t := f.runningTask(w, r.PathValue("id"), in.Attempt, "result")
	if t == nil {
		return
	}
	now := f.now().Add(5 * time.Second)
	t.updated, t.lastError = now, in.Error
	switch {
	case in.Status == "success":
		t.state, t.finishedAt = "SUCCESS", &now
	case in.Status == "permanent":
		t.state, t.finishedAt = "FAILED", &now
	case t.attempts >= t.spec.MaxAttempts:
		t.state, t.finishedAt = "DEAD", &now
	default:
		t.state = "WAITING"
	}
	writeJSON(w, http.StatusOK, t.view())
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
		"attempts":     t.attempts,
		"max_attempts": t.spec.MaxAttempts,
		"timeout":      t.spec.Timeout,
		"created_at":   t.created,
		"updated_at":   t.updated,
		"run":          t.run,
		"snoozes":      0,
	}
	for k, val := range map[string]string{"cron": t.spec.Cron, "timezone": t.spec.Timezone, "every": t.spec.Every, "until": t.spec.Until, "route_key": t.spec.RouteKey, "last_error": t.lastError} {
		if val != "" {
			v[k] = val
		}
	}
	if t.spec.Repeats != 0 {
		v["repeats"] = t.spec.Repeats
	}
	if t.spec.Backoff != "" {
		v["backoff"] = json.RawMessage(t.spec.Backoff)
	}
	if t.spec.Labels != "" {
		v["labels"] = json.RawMessage(t.spec.Labels)
	}
	due := t.created
	if t.spec.Delay != "" || t.spec.Cron == "" && t.spec.Every == "" && t.spec.RunAt == "" {
		v["delay"] = cmp.Or(t.spec.Delay, "0s")
	}
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
	t.state, t.finishedAt, t.updated, t.attempts, t.run = "WAITING", nil, f.now().Add(2*time.Second), 0, t.run+1
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
