package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

func TestSubmitSendsTheFlags(t *testing.T) {
	f := startFake(t)
	out, errOut, code := runAx(t, "submit", "order.timeout", "--socket", f.Socket, "--id", "order|42",
		"--delay", "30m", "--payload", `{"order_id": 42}`, "--priority", "0", "--timeout", "1m", "--max-attempts", "7", "--overwrite",
		"--traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "--tracestate", "rojo=1")
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	if !strings.HasPrefix(out, "submitted order|42: WAITING, runs ") {
		t.Errorf("stdout %q", out)
	}
	body := f.bodies[0]
	for _, want := range []string{`"id":"order|42"`, `"handler":"order.timeout"`, `"delay":"30m0s"`, `"priority":0`,
		`"timeout":"1m0s"`, `"max_attempts":7`, `"overwrite":true`, `"payload":{"order_id": 42}`,
		`"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"`, `"tracestate":"rojo=1"`} {
		if !strings.Contains(body, want) {
			t.Errorf("request body %s lacks %s", body, want)
		}
	}
}

func TestSubmitJSONAndRunAt(t *testing.T) {
	f := startFake(t)
	out, errOut, code := runAx(t, "submit", "h", "--socket", f.Socket, "--id", "a", "--run-at", "2030-01-02T03:04:05Z", "--json")
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	var task map[string]any
	if err := json.Unmarshal([]byte(out), &task); err != nil {
		t.Fatalf("stdout is not JSON: %v\n%s", err, out)
	}
	if task["id"] != "a" || task["state"] != "WAITING" || task["timeout"] != "30s" {
		t.Errorf("task %v", task)
	}
	if !strings.Contains(f.bodies[0], `"run_at":"2030-01-02T03:04:05Z"`) {
		t.Errorf("body %s", f.bodies[0])
	}
}

func TestSubmitConflictSaysOverwrite(t *testing.T) {
	f := startFake(t)
	f.put(newFakeTask("x", "h", "WAITING"))
	_, errOut, code := runAx(t, "submit", "h", "--socket", f.Socket, "--id", "x")
	if code != exitAPIError {
		t.Errorf("exit %d, want %d", code, exitAPIError)
	}
	if want := "ax: task \"x\" exists with a different spec (state WAITING); use --overwrite to replace it\n"; errOut != want {
		t.Errorf("stderr %q, want %q", errOut, want)
	}
}

func TestUsageErrorsExit2(t *testing.T) {
	f := startFake(t)
	for _, args := range [][]string{
		{"submit"},
		{"submit", "h", "--delay", "1s", "--run-at", "2030-01-01T00:00:00Z"},
		{"submit", "h", "--payload", "not json"},
		{"submit", "h", "--payload", "1", "--payload-file", "x"},
		{"submit", "h", "--priority", "9"},
		{"submit", "h", "--run-at", "tomorrow"},
		{"get"},
		{"get", "a", "b"},
		{"list", "--state", "sleeping"},
		{"list", "--nope"},
		{"list", "extra"},
		{"cluster", "remove"},
		{"frobnicate"},
		{"bench", "delayed", "--spread", "5s"},
		{"bench", "delayed", "--nodes", "2"},
		{"bench", "burst", "--limits", "x"},
	} {
		args := append(args, "--socket", f.Socket)
		out, errOut, code := runAx(t, args...)
		if code != exitUsage {
			t.Errorf("%v: exit %d, want %d (stderr %q)", args, code, exitUsage, errOut)
		}
		if out != "" || !strings.HasPrefix(errOut, "ax: ") || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%v: want one line on stderr and nothing on stdout, got stdout %q stderr %q", args, out, errOut)
		}
	}
	if len(f.requests) != 0 {
		t.Errorf("usage errors sent requests: %v", f.requests)
	}
}

func TestGetShowsTheTask(t *testing.T) {
	f := startFake(t)
	task := newFakeTask("A/B|1", "report.build", "DEAD")
	task["attempts"], task["last_error"] = 4, "http 500: boom"
	task["finished_at"] = task["updated_at"]
	task["payload"] = json.RawMessage(`{"k":"v"}`)
	f.put(task)

	out, errOut, code := runAx(t, "get", "A/B|1", "--socket", f.Socket)
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	for k, want := range map[string]string{"ID": "A/B|1", "State": "DEAD", "Attempts": "4 of 4", "Last error": "http 500: boom", "Payload": `{"k":"v"}`} {
		if got := field(out, k); got != want {
			t.Errorf("%s: %q, want %q in\n%s", k, got, want, out)
		}
	}
	if field(out, "Finished") == "" {
		t.Errorf("no Finished line:\n%s", out)
	}
	if got := f.lastRequest(); got != "GET /v1/tasks/A%2FB%7C1?" {
		t.Errorf("request %q: the id must be one escaped segment", got)
	}

	out, _, code = runAx(t, "get", "A/B|1", "--socket", f.Socket, "--json")
	var v map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &v) != nil || v["state"] != "DEAD" || v["last_error"] != "http 500: boom" {
		t.Errorf("--json: exit %d, %s", code, out)
	}
}

func TestGetNotFound(t *testing.T) {
	f := startFake(t)
	out, errOut, code := runAx(t, "get", "nope", "--socket", f.Socket)
	if code != exitAPIError || out != "" || errOut != "ax: task \"nope\" not found\n" {
		t.Errorf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

func TestSocketFromEnvironment(t *testing.T) {
	f := startFake(t)
	f.put(newFakeTask("x", "h", "WAITING"))
	t.Setenv("AX_SOCKET", f.Socket)
	if _, errOut, code := runAx(t, "get", "x"); code != 0 {
		t.Errorf("with AX_SOCKET: exit %d, stderr %q", code, errOut)
	}
}

func TestUnreachableSidecar(t *testing.T) {
	_, errOut, code := runAx(t, "list", "--socket", "/nonexistent/ax.sock")
	if code != exitAPIError {
		t.Errorf("exit %d", code)
	}
	want := "ax: cannot reach sidecar at /nonexistent/ax.sock: connect: no such file or directory (is the sidecar running? see --socket or $AX_SOCKET)\n"
	if errOut != want {
		t.Errorf("stderr %q, want %q", errOut, want)
	}
}

func TestListFollowsCursors(t *testing.T) {
	f := startFake(t)
	for i := 0; i < 2500; i++ {
		task := newFakeTask(fmt.Sprintf("t%04d", i), "h", "WAITING")
		if i%2 == 1 {
			task = newFakeTask(fmt.Sprintf("t%04d", i), "other", "DEAD")
			task["last_error"] = strings.Repeat("very long error ", 10)
		}
		f.put(task)
	}
	out, errOut, code := runAx(t, "list", "--socket", f.Socket, "--limit", "0")
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2501 {
		t.Fatalf("%d lines, want a header and 2500 rows", len(lines))
	}
	if h := strings.Fields(lines[0]); strings.Join(h, " ") != "ID HANDLER STATE ATTEMPTS NEXT RUN / FINISHED LAST ERROR" {
		t.Errorf("header %q", lines[0])
	}
	if !strings.Contains(lines[2], "t0001") || !strings.Contains(lines[2], "DEAD") || !strings.HasSuffix(lines[2], "…") {
		t.Errorf("row %q: want t0001, DEAD and a truncated error", lines[2])
	}
	if len([]rune(lines[2])) > 200 {
		t.Errorf("row too wide (%d): %q", len([]rune(lines[2])), lines[2])
	}

	out, errOut, _ = runAx(t, "list", "--socket", f.Socket, "--limit", "1200")
	if n := strings.Count(out, "\n"); n != 1201 {
		t.Errorf("--limit 1200: %d lines", n)
	}
	if !strings.Contains(errOut, "showing the first 1200") {
		t.Errorf("--limit 1200: stderr %q should say more match", errOut)
	}

	out, _, code = runAx(t, "list", "--socket", f.Socket, "--state", "dead", "--handler", "other", "--limit", "0", "--json")
	var page struct {
		Tasks []map[string]any `json:"tasks"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &page) != nil || len(page.Tasks) != 1250 {
		t.Fatalf("--json: exit %d, %d tasks", code, len(page.Tasks))
	}
	if !strings.Contains(f.lastRequest(), "state=DEAD") || !strings.Contains(f.lastRequest(), "handler=other") {
		t.Errorf("filters not sent: %s", f.lastRequest())
	}
}

func TestListEmpty(t *testing.T) {
	f := startFake(t)
	out, errOut, code := runAx(t, "list", "--socket", f.Socket)
	if code != 0 || out != "" || errOut != "no tasks\n" {
		t.Errorf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	out, _, _ = runAx(t, "list", "--socket", f.Socket, "--json")
	if strings.TrimSpace(out) != "{\n  \"tasks\": []\n}" {
		t.Errorf("--json: %q", out)
	}
}

func TestCancelAndRetry(t *testing.T) {
	f := startFake(t)
	f.put(newFakeTask("w", "h", "WAITING"))
	f.put(newFakeTask("d", "h", "DEAD"))

	out, errOut, code := runAx(t, "cancel", "w", "--socket", f.Socket)
	if code != 0 || out != "cancelled w\n" {
		t.Errorf("cancel: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	out, _, code = runAx(t, "cancel", "d", "--socket", f.Socket)
	if code != 0 || out != "d was already DEAD; nothing to cancel\n" {
		t.Errorf("cancel of a DEAD task: exit %d, stdout %q", code, out)
	}
	out, errOut, code = runAx(t, "retry", "d", "--socket", f.Socket)
	if code != 0 || !strings.HasPrefix(out, "retrying d: WAITING, runs ") {
		t.Errorf("retry: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	_, errOut, code = runAx(t, "retry", "w", "--socket", f.Socket)
	if code != exitAPIError || errOut != "ax: task \"w\" is CANCELLED; only DEAD or FAILED tasks can be retried\n" {
		t.Errorf("retry of a CANCELLED task: exit %d, stderr %q", code, errOut)
	}
	_, errOut, code = runAx(t, "cancel", "zz", "--socket", f.Socket)
	if code != exitAPIError || errOut != "ax: task \"zz\" not found\n" {
		t.Errorf("cancel of an unknown task: exit %d, stderr %q", code, errOut)
	}
	out, _, code = runAx(t, "cancel", "w", "--socket", f.Socket, "--json")
	if code != 0 || !strings.Contains(out, `"state": "CANCELLED"`) {
		t.Errorf("cancel --json: %s", out)
	}
}
