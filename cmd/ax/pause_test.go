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

// pauseFake answers the pause routes and GET /v1/handlers on a Unix
// socket, and records the requests.
func pauseFake(t *testing.T) (socket string, requests func() []string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "axpause")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	socket = filepath.Join(dir, "ax.sock")
	ln, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen []string
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		seen = append(seen, r.Method+" "+r.RequestURI+" "+string(b))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		answer := func(status int, body string) {
			w.WriteHeader(status)
			io.WriteString(w, body)
		}
		switch r.RequestURI {
		case "/v1/handlers/mail%2Fsend/pause":
			answer(200, `{"name":"mail/send","paused":true}`)
		case "/v1/handlers/mail%2Fsend/resume":
			answer(200, `{"name":"mail/send","paused":false}`)
		case "/v1/handlers/typo/pause":
			answer(404, `{"error":{"code":"handler_not_found","message":"handler \"typo\": no task, no executor and no pause names it"}}`)
		case "/v1/tasks/order%7C42/pause":
			answer(200, `{"id":"order|42","handler":"h","state":"WAITING","timeout":"30s","next_run_at":"2026-01-01T00:00:00Z","paused":true,"created_at":"2026-01-01T00:00:00Z","updated_at":"2026-01-01T00:00:00Z"}`)
		case "/v1/tasks/done/pause":
			answer(409, `{"error":{"code":"task_finished","message":"pause: task \"done\" is SUCCESS: a finished task has no run to pause"}}`)
		case "/v1/tasks/ghost/pause":
			answer(404, `{"error":{"code":"not_found","message":"task \"ghost\" not found"}}`)
		case "/v1/handlers":
			answer(200, `{"handlers":[{"name":"mail/send","paused":true,"backlog":3,"parked":{"paused":3},"circuit":"closed","tasks":{"WAITING":3,"SUCCESS":2},"executors":[{"node":"n1","name":"w","url":"unix:///w.sock","limit":8}]},`+
				`{"name":"sms","paused":false,"parked":{},"tasks":{},"executors":[]}]}`)
		default:
			answer(404, `{"error":{"code":"not_found","message":"no route for `+r.Method+` `+r.RequestURI+`"}}`)
		}
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return socket, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), seen...)
	}
}

func TestCLIPauseResume(t *testing.T) {
	socket, requests := pauseFake(t)
	for _, tc := range []struct {
		args     []string
		code     int
		out, err string
	}{
		{[]string{"pause", "handler", "mail/send"}, 0, "handler mail/send: paused\n", ""},
		{[]string{"resume", "handler", "mail/send"}, 0, "handler mail/send: resumed\n", ""},
		{[]string{"pause", "handler", "typo"}, 1, "", "handler_not_found"},
		{[]string{"pause", "task", "order|42"}, 0, "task 'order|42': paused (WAITING", ""},
		{[]string{"pause", "task", "done"}, 1, "", "task_finished"},
		{[]string{"pause", "task", "ghost"}, 1, "", `task "ghost" not found`},
		{[]string{"pause"}, 2, "", "say what to pause"},
		{[]string{"pause", "handler"}, 2, "", "missing NAME"},
		{[]string{"resume", "task", ""}, 2, "", "ID must not be empty"},
		{[]string{"pause", "handler", "mail/send", "--json"}, 0, `"paused": true`, ""},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			args := tc.args
			if len(args) > 1 {
				args = append(args, "--socket", socket)
			}
			out, errOut, code := runAx(t, args...)
			if code != tc.code || !strings.Contains(out, tc.out) || !strings.Contains(errOut, tc.err) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want exit %d, stdout with %q, stderr with %q", code, out, errOut, tc.code, tc.out, tc.err)
			}
		})
	}
	got := requests()
	if len(got) == 0 || got[0] != "POST /v1/handlers/mail%2Fsend/pause {}" {
		t.Fatalf("requests %q", got)
	}
}

func TestCLIHandlers(t *testing.T) {
	socket, _ := pauseFake(t)
	out, errOut, code := runAx(t, "handlers", "--socket", socket)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "HANDLER") {
		t.Fatalf("table:\n%s", out)
	}
	for _, want := range []string{"mail/send", "yes", "paused=3", "closed", "WAITING=3 SUCCESS=2", "n1/w (limit 8)"} {
		if !strings.Contains(lines[1], want) {
			t.Errorf("row %q has no %q", lines[1], want)
		}
	}
	if f := strings.Fields(lines[2]); len(f) != 7 || f[0] != "sms" || f[1] != "no" || f[2] != "-" {
		t.Errorf("row %q", lines[2])
	}
}
