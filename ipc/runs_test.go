package ipc

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/axsched/ax/clients/go/axapi"
)

// Runs and Run of the fake: every task has runs 1..fakeRuns, run n due
// at fakeNow + n s; run 2 failed its first attempt.
const fakeRuns = 5

func (f *fakeBackend) Runs(_ context.Context, id string, q RunsQuery) (RunsPage, error) {
	f.mu.Lock()
	_, ok := f.tasks[id]
	f.lastRuns = q
	f.mu.Unlock()
	if !ok {
		return RunsPage{}, fmt.Errorf("task %q: %w", id, ErrNotFound)
	}
	var page RunsPage
	top := fakeRuns
	if q.Before > 0 {
		top = min(top, q.Before-1)
	}
	for n := top; n >= 1; n-- {
		if len(page.Runs) == q.Limit {
			page.NextCursor = RunsCursor(n + 1)
			break
		}
		page.Runs = append(page.Runs, fakeRun(n))
	}
	return page, nil
}

func (f *fakeBackend) Run(_ context.Context, id string, run int) (Run, error) {
	f.mu.Lock()
	_, ok := f.tasks[id]
	f.mu.Unlock()
	if !ok || run > fakeRuns {
		return Run{}, fmt.Errorf("run %d of %q: %w", run, id, ErrNotFound)
	}
	return fakeRun(run), nil
}

func fakeRun(n int) Run {
	due := fakeNow.Add(time.Duration(n) * time.Second)
	r := Run{Run: n, State: axapi.StateSuccess, DueAt: due, FiredAt: due, Result: json.RawMessage(`{"n":1}`)}
	if n == 2 {
		r.Attempts = append(r.Attempts, RunAttempt{Attempt: 1, Node: "n1", Outcome: "retryable", HTTPStatus: 500, Error: "http 500: boom"})
	}
	r.Attempts = append(r.Attempts, RunAttempt{Attempt: len(r.Attempts) + 1, Node: "n2", Outcome: "success", HTTPStatus: 200})
	return r
}

func TestServer_Runs(t *testing.T) {
	ts := startServer(t, ServerOptions{})
	ts.do("POST", "/v1/tasks", `{"id":"A/B","handler":"h"}`)

	r := ts.do("GET", "/v1/tasks/A%2FB/runs?limit=2", "")
	if r.status != 200 {
		t.Fatalf("runs = %d %s", r.status, r.body)
	}
	var page axapi.RunsPage
	if err := json.Unmarshal(r.body, &page); err != nil {
		t.Fatal(err)
	}
	if len(page.Runs) != 2 || page.Runs[0].Run != 5 || page.Runs[1].Run != 4 || page.NextCursor == "" {
		t.Fatalf("page %s", r.body)
	}
	r = ts.do("GET", "/v1/tasks/A%2FB/runs?cursor="+page.NextCursor, "")
	page = axapi.RunsPage{}
	if err := json.Unmarshal(r.body, &page); err != nil || len(page.Runs) != 3 || page.Runs[1].Run != 2 || page.NextCursor != "" {
		t.Fatalf("second page %d %s", r.status, r.body)
	}
	if ts.backend.lastRuns.Limit != axapi.RunsLimitDefault || ts.backend.lastRuns.Before != 4 {
		t.Fatalf("query %+v", ts.backend.lastRuns)
	}
	if a := page.Runs[1].Attempts[0]; a.HTTPStatus != 500 || a.Error != "http 500: boom" {
		t.Fatalf("attempt %+v", a)
	}

	r = ts.do("GET", "/v1/tasks/A%2FB/runs/2", "")
	var run axapi.Run
	if err := json.Unmarshal(r.body, &run); r.status != 200 || err != nil || run.Run != 2 || string(run.Result) != `{"n":1}` {
		t.Fatalf("run = %d %s", r.status, r.body)
	}
}

// Bad input to the runs routes gets a 4xx with a code.
func TestServer_RunsBadInput(t *testing.T) {
	ts := startServer(t, ServerOptions{})
	ts.do("POST", "/v1/tasks", `{"id":"t1","handler":"h"}`)
	for _, tc := range []struct {
		name, method, path string
		status             int
		code, msg          string
	}{
		{"unknown task", "GET", "/v1/tasks/ghost/runs", 404, "not_found", `task "ghost"`},
		{"unknown task run", "GET", "/v1/tasks/ghost/runs/1", 404, "not_found", `"ghost"`},
		{"unknown run", "GET", "/v1/tasks/t1/runs/99", 404, "not_found", "run 99"},
		{"run zero", "GET", "/v1/tasks/t1/runs/0", 400, "bad_request", "run: must be a run number"},
		{"run not a number", "GET", "/v1/tasks/t1/runs/x", 400, "bad_request", "run: must be a run number"},
		{"limit too big", "GET", "/v1/tasks/t1/runs?limit=101", 400, "bad_request", "limit: must be an integer from 1 to 100"},
		{"limit zero", "GET", "/v1/tasks/t1/runs?limit=0", 400, "bad_request", "limit"},
		{"bad cursor", "GET", "/v1/tasks/t1/runs?cursor=abc", 400, "bad_request", "cursor"},
		{"unknown parameter", "GET", "/v1/tasks/t1/runs?state=DEAD", 400, "bad_request", `unknown query parameter "state"`},
		{"limit twice", "GET", "/v1/tasks/t1/runs?limit=1&limit=2", 400, "bad_request", "at most once"},
		{"bad id", "GET", "/v1/tasks/a%07b/runs", 400, "bad_request", "id: control character"},
		{"POST", "POST", "/v1/tasks/t1/runs", 405, "method_not_allowed", "allowed: GET, HEAD"},
		{"DELETE a run", "DELETE", "/v1/tasks/t1/runs/1", 405, "method_not_allowed", "allowed: GET, HEAD"},
		{"no run", "GET", "/v1/tasks/t1/runs/", 404, "not_found", "no route"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts.on(t).do(tc.method, tc.path, "").wantError(t, tc.status, tc.code, tc.msg)
		})
	}
}

func TestDecodeAttemptResult_Result(t *testing.T) {
	r, err := DecodeAttemptResult([]byte(`{"attempt":1,"status":"success","result":{"rows":3}}`))
	if err != nil || string(r.Result) != `{"rows":3}` {
		t.Fatalf("%+v %v", r, err)
	}
	if _, err := DecodeAttemptResult([]byte(`{"attempt":1,"status":"failed","result":1}`)); err == nil {
		t.Fatal("result with a failure accepted")
	}
	big := `"` + string(make([]byte, 0)) + fmt.Sprintf("%0*d", axapi.ResultMaxBytes, 0) + `"`
	if _, err := DecodeAttemptResult([]byte(`{"attempt":1,"status":"success","result":` + big + `}`)); err == nil {
		t.Fatal("result over the limit accepted")
	}
}
