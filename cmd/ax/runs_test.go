package main

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/axsched/ax/clients/go/axapi"
)

// serveRuns answers GET /v1/tasks/{id}/runs[/{run}] from f.runs; f.mu is
// held. It reports whether the path was one of those.
func (f *fakeSidecar) serveRuns(w http.ResponseWriter, method, raw string) bool {
	rest, ok := strings.CutPrefix(raw, "/v1/tasks/")
	if !ok || method != "GET" {
		return false
	}
	seg, tail, _ := strings.Cut(rest, "/")
	if tail != "runs" && !strings.HasPrefix(tail, "runs/") {
		return false
	}
	id, _ := url.PathUnescape(seg)
	runs, known := f.runs[id]
	if !known {
		writeErr(w, 404, "not_found", "task "+strconv.Quote(id)+" not found")
		return true
	}
	if n, ok := strings.CutPrefix(tail, "runs/"); ok {
		for _, r := range runs {
			if strconv.Itoa(r.Run) == n {
				writeOK(w, 200, r)
				return true
			}
		}
		writeErr(w, 404, "not_found", "run "+n+" of task "+strconv.Quote(id)+" not found")
		return true
	}
	writeOK(w, 200, axapi.RunsPage{Runs: runs})
	return true
}

func TestRunsTableAndOneRun(t *testing.T) {
	f := startFake(t)
	due := time.Date(2026, 12, 4, 3, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *time.Time { v := due.Add(d); return &v }
	f.runs = map[string][]axapi.Run{"rep|1": {
		{Run: 2, State: "SUCCESS", TraceID: "4bf92f3577b34da6a3ce929d0e0e4736", DueAt: due.Add(time.Hour), FiredAt: due.Add(time.Hour), StartedAt: at(time.Hour + 40*time.Millisecond), FinishedAt: at(time.Hour + time.Second),
			Lateness: &axapi.Lateness{TotalMs: 40, ParkedMs: 30, ParkedReason: "handler_limit", CommitMs: 5, QueueMs: 4.5, ConnectMs: 0.5},
			Attempts: []axapi.RunAttempt{
				{Attempt: 1, Node: "n1", Executor: "app", FiredAt: due.Add(time.Hour), Outcome: "retryable", HTTPStatus: 500, Error: "http 500: boom", DurationMs: 12},
				{Attempt: 2, Node: "n2", Executor: "app", FiredAt: due.Add(time.Hour), Outcome: "success", HTTPStatus: 200, DurationMs: 8},
			},
			Result: json.RawMessage(`{"rows":3}`)},
		{Run: 1, State: "DEAD", DueAt: due, FiredAt: due, Attempts: []axapi.RunAttempt{{Attempt: 1, Node: "n1", FiredAt: due, Outcome: "timeout"}}},
	}}

	out, errOut, code := runAx(t, "runs", "rep|1", "--socket", f.Socket)
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "RUN") || !strings.Contains(lines[0], "LATENESS") {
		t.Fatalf("table:\n%s", out)
	}
	for _, want := range []string{"SUCCESS", "2 (last on n2)", "40ms = parked 30ms handler_limit + commit 5ms + queue 4ms + connect 0.5ms"} {
		if !strings.Contains(lines[1], want) {
			t.Errorf("run 2 line lacks %q:\n%s", want, lines[1])
		}
	}
	if !strings.Contains(lines[2], "DEAD") {
		t.Errorf("run 1 line: %s", lines[2])
	}
	if got := f.lastRequest(); got != "GET /v1/tasks/rep%7C1/runs?limit=20" {
		t.Errorf("request %q", got)
	}

	out, errOut, code = runAx(t, "runs", "rep|1", "2", "--socket", f.Socket)
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	if field(out, "State") != "SUCCESS" || field(out, "Trace") != "4bf92f3577b34da6a3ce929d0e0e4736" || field(out, "Result") != `{"rows":3}` || !strings.Contains(out, "http 500: boom") || !strings.Contains(out, "retryable") {
		t.Errorf("one run:\n%s", out)
	}

	out, _, code = runAx(t, "runs", "rep|1", "--socket", f.Socket, "--json")
	var page axapi.RunsPage
	if code != 0 || json.Unmarshal([]byte(out), &page) != nil || len(page.Runs) != 2 {
		t.Errorf("--json: exit %d, %s", code, out)
	}

	_, errOut, code = runAx(t, "runs", "rep|1", "9", "--socket", f.Socket)
	if code != exitAPIError || !strings.Contains(errOut, "run 9") {
		t.Errorf("unknown run: exit %d, stderr %q", code, errOut)
	}
	_, errOut, code = runAx(t, "runs", "nope", "--socket", f.Socket)
	if code != exitAPIError || errOut != "ax: task \"nope\" not found\n" {
		t.Errorf("unknown task: exit %d, stderr %q", code, errOut)
	}
	if _, _, code = runAx(t, "runs", "rep|1", "x", "--socket", f.Socket); code != 2 {
		t.Errorf("bad RUN: exit %d, want 2", code)
	}
}

// latenessText names the retries only when a run had any: the time in
// attempts that never reached the executor is not Raft's commit.
func TestLatenessTextRetries(t *testing.T) {
	l := &axapi.Lateness{TotalMs: 7162.5, ParkedMs: 0.5, RetriesMs: 7000, CommitMs: 160, QueueMs: 1, ConnectMs: 1}
	if got, want := latenessText(l), "7.163s = parked 0.5ms + retries 7s + commit 160ms + queue 1ms + connect 1ms"; got != want {
		t.Errorf("latenessText = %q, want %q", got, want)
	}
	l.RetriesMs, l.CommitMs = 0, 7160
	if got := latenessText(l); strings.Contains(got, "retries") {
		t.Errorf("latenessText = %q: retries without any", got)
	}
}
