package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"github.com/axsched/ax/clients/go/axapi"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestMain lets the test binary stand in for the ax binary: `ax bench`
// starts its nodes as `os.Executable() sidecar ...`, which is this binary
// under `go test`; with AX_TEST_MAIN=1 it runs the command line instead of
// the tests.
func TestMain(m *testing.M) {
	if os.Getenv("AX_TEST_MAIN") == "1" {
		os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// runAx runs an ax command line in-process and returns its stdout, stderr
// and exit code.
func runAx(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(args, strings.NewReader(""), &out, &errOut)
	return out.String(), errOut.String(), code
}

// fakeTask is a task of the fake sidecar, in the API's JSON shape.
type fakeTask map[string]any

// fakeSidecar is a minimal stand-in for the socket API: tasks in memory,
// pages of GET /v1/tasks by id, retry of DEAD tasks, a fixed cluster, and
// 404 "no route" for anything else (like a sidecar without DELETE
// /v1/cluster/members/{id}).
type fakeSidecar struct {
	Socket string

	mu       sync.Mutex
	tasks    map[string]fakeTask
	specs    map[string]string      // id -> body of the POST /v1/tasks that made it
	requests []string               // "METHOD path?query"
	bodies   []string               // bodies of POST /v1/tasks
	runs     map[string][]axapi.Run // id -> its runs, newest first (runs_test.go)
}

func startFake(t *testing.T) *fakeSidecar {
	t.Helper()
	dir, err := os.MkdirTemp("", "axcli")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	f := &fakeSidecar{Socket: filepath.Join(dir, "ax.sock"), tasks: map[string]fakeTask{}, specs: map[string]string{}}
	ln, err := net.Listen("unix", f.Socket)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: f}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return f
}

func (f *fakeSidecar) put(t fakeTask) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tasks[t["id"].(string)] = t
}

func (f *fakeSidecar) lastRequest() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.requests) == 0 {
		return ""
	}
	return f.requests[len(f.requests)-1]
}

func newFakeTask(id, handler, state string) fakeTask {
	now := time.Now().UTC()
	t := fakeTask{
		"id": id, "handler": handler, "state": state, "priority": 2, "attempts": 0, "max_attempts": 4,
		"timeout": "30s", "created_at": now.Format(time.RFC3339Nano), "updated_at": now.Format(time.RFC3339Nano),
		"run": 1, "snoozes": 0,
	}
	if state == "WAITING" {
		t["next_run_at"] = now.Add(time.Minute).Format(time.RFC3339Nano)
	}
	return t
}

func writeErr(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"code": code, "message": msg}})
}

func writeOK(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func (f *fakeSidecar) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	raw := r.URL.EscapedPath()
	f.requests = append(f.requests, r.Method+" "+raw+"?"+r.URL.RawQuery)
	body, _ := io.ReadAll(r.Body)
	if f.serveRuns(w, r.Method, raw) {
		return
	}
	switch {
	case r.Method == "POST" && raw == "/v1/tasks":
		f.bodies = append(f.bodies, string(body))
		var req map[string]json.RawMessage
		if err := json.Unmarshal(body, &req); err != nil {
			writeErr(w, 400, "invalid_json", "invalid json")
			return
		}
		var id, handler string
		json.Unmarshal(req["id"], &id)
		json.Unmarshal(req["handler"], &handler)
		if id == "" {
			id = "generated"
		}
		if old, ok := f.tasks[id]; ok && string(req["overwrite"]) != "true" {
			if f.specs[id] == string(body) {
				writeOK(w, 200, old)
				return
			}
			writeErr(w, 409, "conflict", fmt.Sprintf(`task %q exists with a different spec (state %s); set "overwrite": true to replace it`, id, old["state"]))
			return
		}
		t := newFakeTask(id, handler, "WAITING")
		if p, ok := req["payload"]; ok {
			t["payload"] = p
		}
		for _, k := range []string{"cron", "timezone", "every", "repeats", "until", "route_key", "labels", "payload_base64"} {
			if v, ok := req[k]; ok {
				t[k] = v
			}
		}
		if b, ok := req["backoff"]; ok {
			bo := map[string]any{"initial": "2s", "max": "30s", "multiplier": 2, "jitter": 0.2}
			var over map[string]any
			json.Unmarshal(b, &over)
			for k, v := range over {
				bo[k] = v
			}
			t["backoff"] = bo
		}
		f.tasks[id], f.specs[id] = t, string(body)
		if handler == "busy" {
			w.Header().Set("Ax-Backlog-Warning", "850/1000")
		}
		writeOK(w, 201, t)
	case r.Method == "GET" && raw == "/v1/tasks":
		q := r.URL.Query()
		limit, _ := strconv.Atoi(q.Get("limit"))
		if limit == 0 {
			limit = 100
		}
		var ids []string
		for id, t := range f.tasks {
			if (q.Get("handler") == "" || t["handler"] == q.Get("handler")) &&
				(q.Get("state") == "" || t["state"] == q.Get("state")) && id > q.Get("cursor") {
				ids = append(ids, id)
			}
		}
		sort.Strings(ids)
		page := map[string]any{}
		if len(ids) > limit {
			ids = ids[:limit]
			page["next_cursor"] = ids[limit-1]
		}
		list := []fakeTask{}
		for _, id := range ids {
			list = append(list, f.tasks[id])
		}
		page["tasks"] = list
		writeOK(w, 200, page)
	case strings.HasPrefix(raw, "/v1/tasks/"):
		rest := strings.TrimPrefix(raw, "/v1/tasks/")
		seg, action, _ := strings.Cut(rest, "/")
		id, _ := url.PathUnescape(seg)
		t, ok := f.tasks[id]
		switch {
		case !ok && (action == "" || action == "retry"):
			writeErr(w, 404, "not_found", fmt.Sprintf("task %q: not found", id))
		case r.Method == "GET" && action == "":
			writeOK(w, 200, t)
		case r.Method == "DELETE" && action == "":
			if t["state"] == "WAITING" || t["state"] == "RUNNING" {
				t["state"] = "CANCELLED"
				delete(t, "next_run_at")
				t["finished_at"] = time.Now().UTC().Format(time.RFC3339Nano)
			}
			writeOK(w, 200, t)
		case r.Method == "POST" && action == "retry":
			if t["state"] != "DEAD" && t["state"] != "FAILED" {
				writeErr(w, 409, "conflict", fmt.Sprintf("task %q is %s; only DEAD or FAILED tasks can be retried", id, t["state"]))
				return
			}
			t["state"], t["attempts"] = "WAITING", 0
			delete(t, "finished_at")
			t["next_run_at"] = time.Now().UTC().Format(time.RFC3339Nano)
			writeOK(w, 200, t)
		default:
			writeErr(w, 404, "not_found", "no route for "+r.Method+" "+raw)
		}
	case r.Method == "GET" && raw == "/v1/cluster":
		writeOK(w, 200, map[string]any{
			"node_id": "n2", "state": "Follower", "leader": "n1", "term": 7, "applied_index": 95, "commit_index": 100,
			"voters_target": 3, "failure_tolerance": 0,
			"members": []map[string]any{
				{"id": "n1", "raft_addr": "127.0.0.1:7420", "peer_addr": "127.0.0.1:7421", "suffrage": "Voter", "leader": true,
					"role": "leader", "status": "leader", "healthy": true, "reachable": true, "last_contact_ms": 0, "applied_index": 100,
					"stable_since": time.Now().Add(-90 * time.Second).UTC().Format(time.RFC3339Nano)},
				{"id": "n2", "raft_addr": "127.0.0.1:7430", "peer_addr": "127.0.0.1:7431", "suffrage": "Voter", "leader": false,
					"role": "follower", "status": "voter", "healthy": true, "reachable": true, "last_contact_ms": 120, "applied_index": 93},
				{"id": "n3", "raft_addr": "127.0.0.1:7440", "suffrage": "Nonvoter", "leader": false,
					"role": "follower", "status": "staging", "healthy": true, "reachable": true, "last_contact_ms": 250, "applied_index": 90},
				{"id": "n4", "raft_addr": "127.0.0.1:7450", "suffrage": "Voter", "leader": false,
					"status": "voter", "healthy": false, "reachable": false, "last_contact_ms": -1},
			},
		})
	default:
		writeErr(w, 404, "not_found", "no route for "+r.Method+" "+raw)
	}
}

// field returns the value of a "Name:  value" line of `ax get`.
func field(out, name string) string {
	for _, l := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(l, name+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
