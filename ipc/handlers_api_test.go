package ipc

import (
	"encoding/json"
	"net/url"
	"testing"

	"github.com/axsched/ax/clients/go/axapi"
)

func TestServer_PauseResumeTask(t *testing.T) {
	ts := startServer(t, ServerOptions{})
	for _, id := range []string{"t1", "A/B", "done"} {
		ts.do("POST", "/v1/tasks", `{"id":"`+id+`","handler":"h"}`)
	}
	ts.backend.setTask("done", func(t *Task) { t.State = axapi.StateSuccess })
	p := func(id, action string) string { return "/v1/tasks/" + url.PathEscape(id) + "/" + action }

	for _, tc := range []struct {
		name, id, action, body string
		wantPaused             bool
	}{
		{"pause", "t1", "pause", "", true},
		{"pause again (idempotent)", "t1", "pause", "{}", true},
		{"escaped id", "A/B", "pause", " { } ", true},
		{"resume", "t1", "resume", "", false},
		{"resume again (idempotent)", "t1", "resume", "", false},
		{"resume a finished task", "done", "resume", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := ts.on(t).do("POST", p(tc.id, tc.action), tc.body)
			if r.status != 200 {
				t.Fatalf("%s %s = %d %s", tc.action, tc.id, r.status, r.body)
			}
			if got := r.task(t); got.ID != tc.id || got.Paused != tc.wantPaused {
				t.Fatalf("task = %+v, want paused %v", got, tc.wantPaused)
			}
			var doc map[string]json.RawMessage
			if err := json.Unmarshal(r.body, &doc); err != nil {
				t.Fatal(err)
			}
			if _, ok := doc["paused"]; ok != tc.wantPaused {
				t.Fatalf("\"paused\" in the view = %v, want %v: %s", ok, tc.wantPaused, r.body)
			}
		})
	}
}

// Bad input to the pause routes gets a 4xx with a code, and the backend
// is not asked (or refuses).
func TestServer_PauseBadInput(t *testing.T) {
	ts := startServer(t, ServerOptions{})
	ts.do("POST", "/v1/tasks", `{"id":"t1","handler":"h"}`)
	ts.do("POST", "/v1/tasks", `{"id":"done","handler":"h"}`)
	ts.backend.setTask("done", func(t *Task) { t.State = axapi.StateCancelled })
	for _, tc := range []struct {
		name, method, path, body string
		status                   int
		code, msg                string
	}{
		{"unknown handler", "POST", "/v1/handlers/nobody/pause", "", 404, "handler_not_found", `handler "nobody"`},
		{"unknown handler resumed", "POST", "/v1/handlers/nobody/resume", "", 404, "handler_not_found", `handler "nobody"`},
		{"finished task", "POST", "/v1/tasks/done/pause", "", 409, "task_finished", `task "done" is CANCELLED`},
		{"unknown task", "POST", "/v1/tasks/ghost/pause", "", 404, "not_found", `task "ghost"`},
		{"unknown task resumed", "POST", "/v1/tasks/ghost/resume", "", 404, "not_found", `task "ghost"`},
		{"body with a field", "POST", "/v1/tasks/t1/pause", `{"force":true}`, 400, "bad_request", `unknown field "force"`},
		{"handler body with a field", "POST", "/v1/handlers/h/pause", `{"all":true}`, 400, "bad_request", `unknown field "all"`},
		{"bad json", "POST", "/v1/handlers/h/resume", `{`, 400, "invalid_json", "invalid json"},
		{"control character in a handler", "POST", "/v1/handlers/a%07b/pause", "", 400, "bad_request", "handler: control character"},
		{"blank handler", "POST", "/v1/handlers/%20/pause", "", 400, "bad_request", "handler: must not be blank"},
		{"bad escape in a task id", "POST", "/v1/tasks/a%07b/pause", "", 400, "bad_request", "id: control character"},
		{"GET of a pause route", "GET", "/v1/handlers/h/pause", "", 405, "method_not_allowed", "allowed: POST"},
		{"DELETE of a pause route", "DELETE", "/v1/tasks/t1/resume", "", 405, "method_not_allowed", "allowed: POST"},
		{"POST of the handler list", "POST", "/v1/handlers", "", 405, "method_not_allowed", "allowed: GET, HEAD"},
		{"no such action", "POST", "/v1/handlers/h/stop", "", 404, "not_found", "no route"},
		{"no handler name", "POST", "/v1/handlers//pause", "", 404, "not_found", "no route"},
		{"query on the handler list", "GET", "/v1/handlers?name=h", "", 400, "bad_request", "no query parameters"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts.on(t).do(tc.method, tc.path, tc.body).wantError(t, tc.status, tc.code, tc.msg)
		})
	}
	// Nothing was paused by the refused requests.
	if r := ts.do("GET", "/v1/tasks/t1", ""); r.task(t).Paused {
		t.Fatalf("t1 paused: %s", r.body)
	}
	if len(ts.backend.pausedHandlers) != 0 {
		t.Fatalf("paused handlers %v", ts.backend.pausedHandlers)
	}
}

func TestServer_PauseHandlerAndList(t *testing.T) {
	ts := startServer(t, ServerOptions{})
	ts.do("POST", "/v1/tasks", `{"id":"t1","handler":"mail/send"}`)
	ts.do("POST", "/v1/tasks", `{"id":"t2","handler":"mail/send"}`)
	ts.do("POST", "/v1/tasks", `{"id":"t3","handler":"sms"}`)

	r := ts.do("GET", "/v1/handlers", "")
	if r.status != 200 {
		t.Fatalf("list = %d %s", r.status, r.body)
	}
	const want0 = `{"handlers":[{"name":"mail/send","paused":false,"parked":{},"tasks":{"WAITING":2},"executors":[]},` +
		`{"name":"sms","paused":false,"parked":{},"tasks":{"WAITING":1},"executors":[]}]}` + "\n"
	if string(r.body) != want0 {
		t.Fatalf("list = %s\nwant   %s", r.body, want0)
	}

	for _, tc := range []struct {
		action string
		paused bool
	}{{"pause", true}, {"pause", true}, {"resume", false}, {"resume", false}, {"pause", true}} {
		r := ts.do("POST", "/v1/handlers/"+url.PathEscape("mail/send")+"/"+tc.action, "")
		want := `{"name":"mail/send","paused":` + map[bool]string{true: "true", false: "false"}[tc.paused] + "}\n"
		if r.status != 200 || string(r.body) != want {
			t.Fatalf("%s = %d %s, want 200 %s", tc.action, r.status, r.body, want)
		}
	}
	var list struct {
		Handlers []HandlerInfo `json:"handlers"`
	}
	if err := json.Unmarshal(ts.do("GET", "/v1/handlers", "").body, &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Handlers) != 2 || !list.Handlers[0].Paused || list.Handlers[1].Paused {
		t.Fatalf("list after pause: %+v", list.Handlers)
	}
}
