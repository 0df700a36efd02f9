package main

import (
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// flowSidecar answers the flow routes with a fixed flow and records the
// requests.
func flowSidecar(t *testing.T) (string, func() []string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "axflow")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "s.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var reqs []string
	flow := `{"id":"etl","state":"RUNNING","run":1,"run_due_at":"2026-12-04T03:00:00Z","succeeded_runs":0,"failed_runs":0,
"stages":[{"name":"pull","handler":"etl.pull","depends_on":[],"on_failure":"cancel","state":"SUCCESS","task_id":"flow/etl/1/pull"},
{"name":"store","handler":"etl.store","depends_on":["pull"],"on_failure":"continue","state":"PENDING"}]}`
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		reqs = append(reqs, r.Method+" "+r.URL.RequestURI()+" "+string(b))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.URL.Path == "/v1/flows" && r.Method == "GET":
			io.WriteString(w, `{"flows":[`+flow+`],"next_cursor":"etl"}`)
		case r.URL.Path == "/v1/flows/nope":
			w.WriteHeader(404)
			io.WriteString(w, `{"error":{"code":"not_found","message":"flow \"nope\" not found"}}`)
		case r.Method == "POST":
			w.WriteHeader(201)
			io.WriteString(w, flow)
		default:
			io.WriteString(w, flow)
		}
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return sock, func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), reqs...) }
}

func TestFlowCommands(t *testing.T) {
	sock, reqs := flowSidecar(t)
	file := filepath.Join(t.TempDir(), "f.json")
	os.WriteFile(file, []byte(`{"id":"etl","stages":[{"name":"pull","handler":"etl.pull"}]}`), 0o600)
	out, errOut, code := runAx(t, "flow", "submit", "-f", file, "--socket", sock)
	if code != 0 || !strings.Contains(out, "flow etl created: 2 stages, RUNNING") {
		t.Fatalf("submit: %d %q %q", code, out, errOut)
	}
	out, errOut, code = runAx(t, "flow", "get", "etl", "--socket", sock)
	if code != 0 || !strings.Contains(out, "flow etl: RUNNING, run 1") || !strings.Contains(out, "store  PENDING  etl.store  pull") {
		t.Fatalf("get: %d %q %q", code, out, errOut)
	}
	if _, errOut, code = runAx(t, "flow", "get", "nope", "--socket", sock); code == 0 || !strings.Contains(errOut, "not found") {
		t.Fatalf("get nope: %d %q", code, errOut)
	}
	out, _, code = runAx(t, "flow", "list", "--limit", "5", "--socket", sock)
	if code != 0 || !strings.Contains(out, "etl  RUNNING  1    2") || !strings.Contains(out, "more: --cursor etl") {
		t.Fatalf("list: %d %q", code, out)
	}
	if _, _, code = runAx(t, "flow", "cancel", "etl", "--socket", sock, "--json"); code != 0 {
		t.Fatalf("cancel: %d", code)
	}
	if out, _, code = runAx(t, "flow", "purge", "etl", "--socket", sock); code != 0 || !strings.Contains(out, "flow etl purged") {
		t.Fatalf("purge: %d %q", code, out)
	}
	if _, errOut, code = runAx(t, "flow", "submit", "--socket", sock); code == 0 || !strings.Contains(errOut, "-f FILE") {
		t.Fatalf("submit without -f: %d %q", code, errOut)
	}
	got := strings.Join(reqs(), "\n")
	for _, want := range []string{`POST /v1/flows {"id":"etl"`, "GET /v1/flows/etl ", "GET /v1/flows?limit=5 ", "DELETE /v1/flows/etl ", "DELETE /v1/flows/etl?purge=true "} {
		if !strings.Contains(got, want) {
			t.Errorf("requests %s\nlack %q", got, want)
		}
	}
}
