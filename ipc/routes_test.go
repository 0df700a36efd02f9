package ipc

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"testing"

	"github.com/axsched/ax/clients/go/axapi"
)

func TestRoutes_Table(t *testing.T) {
	seen := map[string]bool{}
	for i := range routes {
		r := &routes[i]
		key := r.Method + " " + r.Pattern
		if seen[key] {
			t.Errorf("route %s twice", key)
		}
		seen[key] = true
		if r.handle == nil {
			t.Errorf("route %s has no handler", key)
		}
		// Every route is reachable, with "batch" as the parameter too.
		for _, arg := range []string{"x", "batch", "retry", "a%2Fb"} {
			path := strings.NewReplacer("{id}", arg, "{name}", arg, "{run}", "7").Replace(r.Pattern)
			def, param, _ := match(r.Method, []byte(path))
			if def != r {
				t.Errorf("%s %s: matched %v, want %s", r.Method, path, def, key)
			}
			want := arg
			if strings.Contains(r.Pattern, "{run}") {
				want = arg + "/7" // two parameters: splitParams
			}
			if strings.Contains(r.Pattern, "{") && param != want {
				t.Errorf("%s %s: param = %q, want %q", r.Method, path, param, want)
			}
		}
	}
	for _, tc := range []struct{ method, path, allow string }{
		{"PUT", "/v1/tasks", "GET, HEAD, POST"},
		{"PUT", "/v1/tasks/batch", "GET, HEAD, POST, DELETE"},
		{"PATCH", "/v1/tasks/x", "GET, HEAD, DELETE"},
		{"GET", "/v1/tasks/x/retry", "POST"},
		{"PUT", "/v1/executors", "GET, HEAD, POST"},
		{"GET", "/v1/executors/w", "DELETE"},
		{"POST", "/healthz", "GET, HEAD"},
		{"GET", "/v1/tasks/x/nope", ""},
		{"GET", "/v1/tasks//retry", ""},
		{"GET", "/v1/tasks/", ""},
		{"GET", "/v1/executors/", ""},
		{"GET", "/v1/tasks/a/b", ""},
		{"GET", "/", ""},
		{"GET", "", ""},
	} {
		if def, _, allow := match(tc.method, []byte(tc.path)); def != nil || allow != tc.allow {
			t.Errorf("match(%s %s) = %v, allow %q; want nil, allow %q", tc.method, tc.path, def, allow, tc.allow)
		}
	}
}

// doc decodes a reply as a JSON object of raw values.
func (r reply) doc(t *testing.T) map[string]json.RawMessage {
	t.Helper()
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q, want application/json", ct)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("decode %s: %v", r.body, err)
	}
	return m
}

// listIDs decodes a list page: the task ids and next_cursor ("" when
// absent; absent must mean absent, not empty).
func (r reply) listIDs(t *testing.T) (ids []string, next string) {
	t.Helper()
	if r.status != 200 {
		t.Fatalf("list = %d %s", r.status, r.body)
	}
	m := r.doc(t)
	var tasks []Task
	if err := json.Unmarshal(m["tasks"], &tasks); err != nil || tasks == nil {
		t.Fatalf("tasks of %s: %v", r.body, err)
	}
	for _, task := range tasks {
		ids = append(ids, task.ID)
	}
	if raw, ok := m["next_cursor"]; ok {
		if err := json.Unmarshal(raw, &next); err != nil || next == "" {
			t.Errorf("next_cursor = %s, want a non-empty string or no field", raw)
		}
	}
	if len(m) != 1 && len(m) != 2 {
		t.Errorf("list page has fields %v", m)
	}
	return ids, next
}

func TestServer_List(t *testing.T) {
	ts := startServer(t, ServerOptions{})
	r := ts.do("GET", "/v1/tasks", "")
	if r.status != 200 || string(r.body) != "{\"tasks\":[]}\n" {
		t.Fatalf("empty list = %d %s, want {\"tasks\":[]}", r.status, r.body)
	}
	if q := ts.backend.lastQuery; q != (ListQuery{Limit: ListLimitDefault}) {
		t.Errorf("query = %+v, want the default limit only", q)
	}

	for _, id := range []string{"t1", "t2", "t3", "t4", "t5"} {
		h := "a"
		if id == "t4" {
			h = "order|b"
		}
		ts.do("POST", "/v1/tasks", `{"id":"`+id+`","handler":"`+h+`","payload":{"n": 1}}`)
	}
	ts.backend.setTask("t2", func(t *Task) { t.State = axapi.StateDead })

	ids, next := ts.do("GET", "/v1/tasks", "").listIDs(t)
	if strings.Join(ids, ",") != "t1,t2,t3,t4,t5" || next != "" {
		t.Errorf("all = %v next %q", ids, next)
	}
	// The payload keeps its bytes in the list too.
	if r := ts.do("GET", "/v1/tasks?limit=1", ""); !strings.Contains(string(r.body), `"payload":{"n": 1}`) {
		t.Errorf("list view %s lost the payload bytes", r.body)
	}

	// Pages of two: the cursor goes through unchanged; the last page has no
	// next_cursor field at all.
	var got []string
	path := "/v1/tasks?limit=2"
	for pages := 0; ; pages++ {
		if pages > 5 {
			t.Fatal("pagination does not end")
		}
		r := ts.do("GET", path, "")
		ids, next := r.listIDs(t)
		got = append(got, ids...)
		if next == "" {
			if strings.Contains(string(r.body), "next_cursor") {
				t.Errorf("last page %s has next_cursor", r.body)
			}
			if pages != 2 {
				t.Errorf("%d pages, want 3", pages+1)
			}
			break
		}
		if len(ids) != 2 {
			t.Errorf("page %d has %d tasks, want 2", pages, len(ids))
		}
		path = "/v1/tasks?limit=2&cursor=" + url.QueryEscape(next)
	}
	if strings.Join(got, ",") != "t1,t2,t3,t4,t5" {
		t.Errorf("pages = %v", got)
	}

	// Filters: escaped values are unescaped; state in lower case is accepted.
	ids, _ = ts.do("GET", "/v1/tasks?handler=order%7Cb", "").listIDs(t)
	if strings.Join(ids, ",") != "t4" || ts.backend.lastQuery.Handler != "order|b" {
		t.Errorf("handler filter = %v (query %+v)", ids, ts.backend.lastQuery)
	}
	ids, _ = ts.do("GET", "/v1/tasks?state=dead&limit=1000", "").listIDs(t)
	if strings.Join(ids, ",") != "t2" || ts.backend.lastQuery.State != axapi.StateDead || ts.backend.lastQuery.Limit != 1000 {
		t.Errorf("state filter = %v (query %+v)", ids, ts.backend.lastQuery)
	}
	ts.do("GET", "/v1/tasks?handler=a&state=WAITING&cursor=a%26b%7Cc%20d&limit=7", "").listIDs(t)
	if q := ts.backend.lastQuery; q != (ListQuery{Handler: "a", State: axapi.StateWaiting, Cursor: "a&b|c d", Limit: 7}) {
		t.Errorf("query = %+v", q)
	}
	// Empty values do not filter.
	ts.do("GET", "/v1/tasks?handler=&state=&limit=&cursor=", "").listIDs(t)
	if q := ts.backend.lastQuery; q != (ListQuery{Limit: ListLimitDefault}) {
		t.Errorf("query with empty values = %+v", q)
	}
	if r := ts.do("HEAD", "/v1/tasks", ""); r.status != 200 || len(r.body) != 0 {
		t.Errorf("HEAD /v1/tasks = %d %q", r.status, r.body)
	}

	for _, tc := range []struct{ query, code, msg string }{
		{"state=bogus", "bad_request", `state: must be one of WAITING, RUNNING, SUCCESS, DEAD, FAILED, CANCELLED, got "bogus"`},
		{"limit=0", "bad_request", `limit: must be an integer from 1 to 1000, got "0"`},
		{"limit=1001", "bad_request", `limit: must be an integer from 1 to 1000, got "1001"`},
		{"limit=ten", "bad_request", `limit: must be an integer from 1 to 1000, got "ten"`},
		{"limit=-1", "bad_request", "limit: must be an integer"},
		{"limit=2&limit=3", "bad_request", "limit: give it at most once"},
		{"colour=red", "bad_request", `unknown query parameter "colour"`},
		{"handler=a&consistent=true", "bad_request", `unknown query parameter "consistent"`},
		{"handler=a%07b", "bad_request", "handler: control character U+0007"},
		{"handler=" + strings.Repeat("h", axapi.HandlerMaxBytes+1), "bad_request", "handler: 257 bytes"},
		{"cursor=%FF", "bad_request", "cursor: not valid UTF-8"},
		{"cursor=bad", "bad_request", "cursor: not one of ours"}, // from the Backend
	} {
		t.Run(tc.query, func(t *testing.T) {
			ts.on(t).do("GET", "/v1/tasks?"+tc.query, "").wantError(t, 400, tc.code, tc.msg)
		})
	}
	ts.backend.set(func(f *fakeBackend) { f.listErr = fmt.Errorf("list: %w", ErrNotReady) })
	ts.do("GET", "/v1/tasks", "").wantError(t, 503, "not_ready", "list: not ready")
}

// batchResult is one entry of a batch reply.
type batchResult struct {
	Status int             `json:"status"`
	Task   json.RawMessage `json:"task"`
	Error  *errorDetail    `json:"error"`
}

func (r reply) batch(t *testing.T) []batchResult {
	t.Helper()
	if r.status != 200 {
		t.Fatalf("batch = %d %s", r.status, r.body)
	}
	m := r.doc(t)
	var res []batchResult
	if err := json.Unmarshal(m["results"], &res); err != nil || len(m) != 1 {
		t.Fatalf("batch reply %s: %v", r.body, err)
	}
	return res
}

func TestServer_Batch(t *testing.T) {
	ts := startServer(t, ServerOptions{})
	ts.do("POST", "/v1/tasks", `{"id":"same","handler":"h"}`)
	ts.do("POST", "/v1/tasks", `{"id":"taken","handler":"h","payload":1}`)

	body := `{"tasks":[
		{"id":"new|1","handler":"h","payload":{"a": [1, 2]}},
		{"handler":"gen","payload_base64":"AP8="},
		{"id":"same","handler":"h"},
		{"id":"taken","handler":"h","payload":2},
		{"id":"batch","handler":"h","delay":"1m"}
	]}`
	res := ts.do("POST", "/v1/tasks/batch", body).batch(t)
	if len(res) != 5 {
		t.Fatalf("%d results, want 5", len(res))
	}
	for i, want := range []int{201, 201, 200, 409, 201} {
		if res[i].Status != want {
			t.Errorf("results[%d].status = %d, want %d", i, res[i].Status, want)
		}
		if (res[i].Error != nil) == (res[i].Task != nil) {
			t.Errorf("results[%d] has task %s and error %+v; want exactly one", i, res[i].Task, res[i].Error)
		}
	}
	if e := res[3].Error; e == nil || e.Code != "conflict" || !strings.Contains(e.Message, `task "taken" exists with a different spec`) {
		t.Errorf("results[3].error = %+v", e)
	}
	if !strings.Contains(string(res[0].Task), `"payload":{"a": [1, 2]}`) || !strings.Contains(string(res[0].Task), `"id":"new|1"`) {
		t.Errorf("results[0].task = %s, want the payload bytes as sent", res[0].Task)
	}
	var gen Task
	if err := json.Unmarshal(res[1].Task, &gen); err != nil || len(gen.ID) != 32 || string(gen.Payload) != "\x00\xff" || !gen.PayloadBase64 {
		t.Errorf("results[1].task = %s (%v), want a generated id and the binary payload", res[1].Task, err)
	}
	if specs := ts.backend.lastBatch; len(specs) != 5 || specs[4].Delay.String() != "1m0s" || specs[2].Priority != axapi.PriorityDefault {
		t.Errorf("specs = %+v", specs)
	}
	// A task named "batch" is a task like any other, except for POST.
	if r := ts.do("GET", "/v1/tasks/batch", ""); r.status != 200 || r.task(t).ID != "batch" {
		t.Errorf("GET /v1/tasks/batch = %d %s", r.status, r.body)
	}
	if r := ts.do("DELETE", "/v1/tasks/batch", ""); r.status != 200 || r.task(t).State != axapi.StateCancelled {
		t.Errorf("DELETE /v1/tasks/batch = %d %s", r.status, r.body)
	}
	r := ts.do("PUT", "/v1/tasks/batch", "{}")
	r.wantError(t, 405, "method_not_allowed", "allowed: GET, HEAD, POST, DELETE")
	if got := r.header.Get("Allow"); got != "GET, HEAD, POST, DELETE" {
		t.Errorf("Allow = %q", got)
	}

	// Item errors of other kinds keep their status; internal details stay
	// in the log.
	ts.backend.set(func(f *fakeBackend) {
		f.itemErr = map[string]error{"full": Errorf(ErrQueueFull, "backlog of %q is full", "h"), "disk": errors.New("disk on fire")}
	})
	r = ts.do("POST", "/v1/tasks/batch", `{"tasks":[{"id":"full","handler":"h"},{"id":"disk","handler":"h"},{"id":"fine","handler":"h"}]}`)
	res = r.batch(t)
	if len(res) != 3 || res[0].Status != 429 || res[0].Error.Code != "queue_full" || res[1].Status != 500 ||
		res[1].Error.Code != "internal" || res[1].Error.Message != "internal error" || res[2].Status != 201 {
		t.Errorf("results = %s", r.body)
	}
	if strings.Contains(string(r.body), "on fire") {
		t.Errorf("internal detail leaked: %s", r.body)
	}

	// The batch as a whole fails like a submit.
	ts.backend.set(func(f *fakeBackend) { f.batchErr = ErrNoLeader })
	r = ts.do("POST", "/v1/tasks/batch", `{"tasks":[{"handler":"h"}]}`)
	r.wantError(t, 503, "no_leader", "no leader")
	if r.header.Get("Retry-After") != "1" {
		t.Errorf("Retry-After = %q", r.header.Get("Retry-After"))
	}
	ts.backend.set(func(f *fakeBackend) { f.batchErr, f.batchShort = nil, true })
	ts.do("POST", "/v1/tasks/batch", `{"tasks":[{"handler":"h"},{"handler":"h"}]}`).wantError(t, 500, "internal", "internal error")
	ts.backend.set(func(f *fakeBackend) { f.batchShort = false })

	// The largest batch passes.
	items := strings.TrimSuffix(strings.Repeat(`{"handler":"h"},`, axapi.BatchMaxTasks), ",")
	if res := ts.do("POST", "/v1/tasks/batch", `{"tasks":[`+items+`]}`).batch(t); len(res) != axapi.BatchMaxTasks {
		t.Errorf("%d results, want %d", len(res), axapi.BatchMaxTasks)
	}
}

func TestServer_BatchInvalid(t *testing.T) {
	ts := startServer(t, ServerOptions{})
	tooMany := `{"tasks":[` + strings.TrimSuffix(strings.Repeat(`{"handler":"h"},`, axapi.BatchMaxTasks+1), ",") + `]}`
	big := `{"tasks":[{"handler":"h"},{"handler":"h","payload":"` + strings.Repeat("x", PayloadMaxBytes) + `"}]}`
	for _, tc := range []struct {
		name, body string
		status     int
		code, msg  string
	}{
		{"empty body", ``, 400, "invalid_json", "request body is empty"},
		{"malformed", `{"tasks":[{"handler":"h"}`, 400, "invalid_json", "invalid json"},
		{"not an object", `[{"handler":"h"}]`, 400, "invalid_json", "want a JSON object"},
		{"no tasks", `{}`, 400, "bad_request", "tasks: required"},
		{"null tasks", `{"tasks":null}`, 400, "bad_request", "tasks: required"},
		{"zero tasks", `{"tasks":[]}`, 400, "bad_request", "tasks: must hold 1 to 1000 submit requests, got 0"},
		{"too many", tooMany, 400, "bad_request", "tasks: must hold 1 to 1000 submit requests, got 1001"},
		{"tasks not array", `{"tasks":{"handler":"h"}}`, 400, "bad_request", "tasks: must be an array of submit requests"},
		{"unknown field", `{"tasks":[{"handler":"h"}],"atomic":true}`, 400, "bad_request", `unknown field "atomic"`},
		{"item missing handler", `{"tasks":[{"handler":"h"},{"handler":"h"},{"handler":"h"},{"id":"x"}]}`, 400, "bad_request", "tasks[3]: handler: required"},
		{"item unknown field", `{"tasks":[{"handler":"h","colour":"red"}]}`, 400, "bad_request", `tasks[0]: unknown field "colour"`},
		{"item bad delay", `{"tasks":[{"handler":"h"},{"handler":"h","delay":"-1s"}]}`, 400, "bad_request", `tasks[1]: delay: must not be negative`},
		{"item priority type", `{"tasks":[{"handler":"h","priority":"high"}]}`, 400, "bad_request", "tasks[0]: priority: must be an integer from 0 to 4"},
		{"item cron", `{"tasks":[{"handler":"h","cron":"61 * * * *"}]}`, 400, "bad_request", "tasks[0]: cron: "},
		{"item string", `{"tasks":[{"handler":"h"},"h"]}`, 400, "bad_request", "tasks[1]: must be a JSON object, got a string"},
		{"item null", `{"tasks":[null]}`, 400, "bad_request", "tasks[0]: must be a JSON object, got null"},
		{"item array", `{"tasks":[[]]}`, 400, "bad_request", "tasks[0]: must be a JSON object, got an array"},
		{"item payload too large", big, 413, "payload_too_large", "tasks[1]: payload: 1048578 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := ts.on(t)
			ts.backend.set(func(f *fakeBackend) { f.lastBatch = nil })
			ts.do("POST", "/v1/tasks/batch", tc.body).wantError(t, tc.status, tc.code, tc.msg)
			if ts.backend.lastBatch != nil {
				t.Errorf("the backend got a batch of %d", len(ts.backend.lastBatch))
			}
		})
	}
}

func TestServer_RetryHeartbeatResult(t *testing.T) {
	ts := startServer(t, ServerOptions{})
	for _, id := range []string{"t1", "A/B", "order|42", "x/retry"} {
		ts.do("POST", "/v1/tasks", `{"id":"`+id+`","handler":"h"}`)
	}
	p := func(id, action string) string { return "/v1/tasks/" + url.PathEscape(id) + "/" + action }

	// retry
	ts.do("POST", p("t1", "retry"), "").wantError(t, 409, "conflict", `task "t1" is WAITING, not DEAD or FAILED`)
	for _, tc := range []struct{ id, body string }{{"t1", ""}, {"A/B", "{}"}, {"order|42", " { } \n"}, {"x/retry", ""}} {
		ts.backend.setTask(tc.id, func(t *Task) { t.State, t.Attempts = axapi.StateDead, 4 })
		r := ts.do("POST", p(tc.id, "retry"), tc.body)
		if r.status != 200 {
			t.Fatalf("retry %q = %d %s", tc.id, r.status, r.body)
		}
		if got := r.task(t); got.ID != tc.id || got.State != axapi.StateWaiting || got.Attempts != 0 {
			t.Errorf("retried task = %+v", got)
		}
	}
	ts.do("POST", p("t1", "retry"), `{"force":true}`).wantError(t, 400, "bad_request", `unknown field "force"`)
	ts.do("POST", p("t1", "retry"), `{`).wantError(t, 400, "invalid_json", "invalid json")
	ts.do("POST", p("ghost", "retry"), "").wantError(t, 404, "not_found", `task "ghost"`)
	ts.raw("POST /v1/tasks/a%zz/retry HTTP/1.1\r\nHost: ax\r\n\r\n").wantError(t, 400, "bad_request", "id: bad URL escape")
	ts.do("POST", "/v1/tasks/a%07b/retry", "").wantError(t, 400, "bad_request", "id: control character")

	// heartbeat and result need the current attempt of a running task.
	for _, id := range []string{"t1", "A/B"} {
		ts.backend.setTask(id, func(t *Task) { t.State, t.Attempts, t.NextRunAt = axapi.StateRunning, 2, nil })
		r := ts.do("POST", p(id, "heartbeat"), `{"attempt":2}`)
		if r.status != 200 || r.task(t).ID != id || r.task(t).State != axapi.StateRunning || ts.backend.lastHeartbeat != 2 {
			t.Errorf("heartbeat %q = %d %s", id, r.status, r.body)
		}
	}
	ts.do("POST", p("t1", "heartbeat"), `{"attempt":1}`).wantError(t, 409, "conflict", `task "t1": attempt 1 is not running`)
	ts.do("POST", p("ghost", "heartbeat"), `{"attempt":1}`).wantError(t, 404, "not_found", `task "ghost"`)

	r := ts.do("POST", p("A/B", "result"), `{"attempt":2,"status":"failed","error":"http 500: <boom> é"}`)
	if r.status != 200 {
		t.Fatalf("result = %d %s", r.status, r.body)
	}
	if got := r.task(t); got.ID != "A/B" || got.State != axapi.StateWaiting || got.LastError != "http 500: <boom> é" {
		t.Errorf("task after result = %+v", got)
	}
	if res := ts.backend.lastResult; !reflect.DeepEqual(res, AttemptResult{Attempt: 2, Status: axapi.ResultFailed, Error: "http 500: <boom> é"}) {
		t.Errorf("result = %+v", res)
	}
	if r := ts.do("POST", p("t1", "result"), `{"attempt":2,"status":"success"}`); r.status != 200 || r.task(t).State != axapi.StateSuccess {
		t.Errorf("success result = %d %s", r.status, r.body)
	}
	ts.do("POST", p("t1", "result"), `{"attempt":2,"status":"success"}`).wantError(t, 409, "conflict", "attempt 2 is not running")
	ts.backend.setTask("order|42", func(t *Task) { t.State, t.Attempts = axapi.StateRunning, 1 })
	if r := ts.do("POST", p("order|42", "result"), `{"attempt":1,"status":"permanent","error":"bad input"}`); r.task(t).State != axapi.StateFailed {
		t.Errorf("permanent result = %d %s", r.status, r.body)
	}

	for _, tc := range []struct {
		name, action, body string
		code, msg          string
	}{
		{"heartbeat empty body", "heartbeat", "", "invalid_json", "request body is empty"},
		{"heartbeat no attempt", "heartbeat", `{}`, "bad_request", "attempt: required"},
		{"heartbeat attempt 0", "heartbeat", `{"attempt":0}`, "bad_request", "attempt: must be >= 1, got 0"},
		{"heartbeat attempt -3", "heartbeat", `{"attempt":-3}`, "bad_request", "attempt: must be >= 1, got -3"},
		{"heartbeat attempt string", "heartbeat", `{"attempt":"2"}`, "bad_request", "attempt: must be an integer >= 1, got JSON string"},
		{"heartbeat attempt float", "heartbeat", `{"attempt":1.5}`, "bad_request", "attempt: must be an integer >= 1"},
		{"heartbeat unknown field", "heartbeat", `{"attempt":1,"extend":"1m"}`, "bad_request", `unknown field "extend"`},
		{"result empty body", "result", "", "invalid_json", "request body is empty"},
		{"result no attempt", "result", `{"status":"success"}`, "bad_request", "attempt: required"},
		{"result attempt 0", "result", `{"attempt":0,"status":"success"}`, "bad_request", "attempt: must be >= 1, got 0"},
		{"result no status", "result", `{"attempt":1}`, "bad_request", `status: required, one of "success", "failed", "permanent"`},
		{"result bad status", "result", `{"attempt":1,"status":"ok"}`, "bad_request", `status: must be one of "success", "failed", "permanent", got "ok"`},
		{"result upper status", "result", `{"attempt":1,"status":"SUCCESS"}`, "bad_request", `got "SUCCESS"`},
		{"result status type", "result", `{"attempt":1,"status":true}`, "bad_request", `status: must be one of "success", "failed", "permanent", got JSON bool`},
		{"result error on success", "result", `{"attempt":1,"status":"success","error":"x"}`, "bad_request", `error: only with status "failed" or "permanent"`},
		{"result error too long", "result", `{"attempt":1,"status":"failed","error":"` + strings.Repeat("e", axapi.ResultErrorMaxBytes+1) + `"}`, "bad_request", "error: 4097 bytes, the limit is 4096"},
		{"result error type", "result", `{"attempt":1,"status":"failed","error":{"msg":"x"}}`, "bad_request", "error: must be a string"},
		{"result unknown field", "result", `{"attempt":1,"status":"failed","retry_in":"5s"}`, "bad_request", `unknown field "retry_in"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts.on(t).do("POST", p("t1", tc.action), tc.body).wantError(t, 400, tc.code, tc.msg)
		})
	}

	// Other methods and paths.
	for _, action := range []string{"retry", "heartbeat", "result"} {
		r := ts.do("GET", p("t1", action), "")
		r.wantError(t, 405, "method_not_allowed", "allowed: POST")
		if r.header.Get("Allow") != "POST" {
			t.Errorf("Allow = %q, want POST", r.header.Get("Allow"))
		}
	}
	ts.do("POST", "/v1/tasks/t1/cancel", "").wantError(t, 404, "not_found", "no route for POST /v1/tasks/t1/cancel")
	ts.do("POST", "/v1/tasks//retry", "").wantError(t, 404, "not_found", "no route")
	ts.do("POST", "/v1/tasks/A/B/retry", "").wantError(t, 404, "not_found", "no route")
	ts.do("POST", "/v1/tasks/t1", `{"handler":"h"}`).wantError(t, 405, "method_not_allowed", "allowed: GET, HEAD, DELETE")
	ts.wantHealthy()
}

// executorBody decodes an executor reply strictly.
func (r reply) executor(t *testing.T) ExecutorSpec {
	t.Helper()
	r.doc(t)
	var e ExecutorSpec
	dec := json.NewDecoder(strings.NewReader(string(r.body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil {
		t.Fatalf("executor %s: %v", r.body, err)
	}
	return e
}

func TestServer_Executors(t *testing.T) {
	ts := startServer(t, ServerOptions{})
	if r := ts.do("GET", "/v1/executors", ""); r.status != 200 || string(r.body) != "{\"executors\":[]}\n" {
		t.Errorf("empty executors = %d %s", r.status, r.body)
	}

	body := `{"name":"w:1","handlers":["order.*","payment"],"url":"unix:///run/app/worker.sock","min_concurrency":2,"max_concurrency":8,"timeout":"1m"}`
	r := ts.do("POST", "/v1/executors", body)
	if r.status != 201 {
		t.Fatalf("register = %d %s", r.status, r.body)
	}
	want := ExecutorSpec{Name: "w:1", Handlers: []string{"order.*", "payment"}, URL: "unix:///run/app/worker.sock", MinConcurrency: 2, MaxConcurrency: 8, Timeout: "1m0s"}
	if got := r.executor(t); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("executor = %+v, want %+v", got, want)
	}
	if got := ts.backend.lastExecutor; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("backend got %+v, want %+v", got, want)
	}
	// The same name again replaces it: 200.
	r = ts.do("POST", "/v1/executors", `{"name":"w:1","handlers":["*"],"url":"http://127.0.0.1:8080"}`)
	if r.status != 200 {
		t.Fatalf("replace = %d %s", r.status, r.body)
	}
	if got := r.executor(t); got.URL != "http://127.0.0.1:8080" || got.Timeout != "" || got.MaxConcurrency != 0 || len(got.Handlers) != 1 {
		t.Errorf("replaced executor = %+v", got)
	}
	if strings.Contains(string(r.body), "concurrency") || strings.Contains(string(r.body), "timeout") {
		t.Errorf("unset fields in %s", r.body)
	}
	ts.do("POST", "/v1/executors", `{"name":"a.b_c-d","handlers":["h"],"url":"http://localhost:9/app","min_concurrency":3,"max_concurrency":3}`)
	ts.do("POST", "/v1/executors", `{"name":"only-min","handlers":["h"],"url":"http://[::1]:9","min_concurrency":10000}`)
	ts.backend.set(func(f *fakeBackend) {
		f.executors["flag"] = ExecutorSpec{Name: "flag", Handlers: []string{"*"}, URL: "unix:///x.sock", FromFlag: true}
	})

	r = ts.do("GET", "/v1/executors", "")
	var list struct {
		Executors []ExecutorSpec `json:"executors"`
	}
	if err := json.Unmarshal(r.body, &list); err != nil || r.status != 200 {
		t.Fatalf("list = %d %s (%v)", r.status, r.body, err)
	}
	var names []string
	for _, e := range list.Executors {
		names = append(names, e.Name)
	}
	if strings.Join(names, ",") != "a.b_c-d,flag,only-min,w:1" || !list.Executors[1].FromFlag {
		t.Errorf("executors = %s", r.body)
	}
	if r := ts.do("HEAD", "/v1/executors", ""); r.status != 200 || len(r.body) != 0 {
		t.Errorf("HEAD /v1/executors = %d %q", r.status, r.body)
	}

	// The Backend decides about executors from flags.
	ts.do("POST", "/v1/executors", `{"name":"flag","handlers":["*"],"url":"unix:///y.sock"}`).
		wantError(t, 409, "conflict", `executor "flag" is set by --executor`)

	// DELETE: the name is unescaped.
	for _, path := range []string{"/v1/executors/w%3A1", "/v1/executors/a.b_c-d"} {
		r = ts.do("DELETE", path, "")
		if r.status != 204 || len(r.body) != 0 {
			t.Errorf("DELETE %s = %d %q", path, r.status, r.body)
		}
		if ct := r.header.Get("Content-Type"); ct != "" {
			t.Errorf("DELETE %s: Content-Type %q on a 204", path, ct)
		}
	}
	ts.do("DELETE", "/v1/executors/w:1", "").wantError(t, 404, "not_found", `executor "w:1": not found`)
	ts.do("DELETE", "/v1/executors/a%2Fb", "").wantError(t, 400, "bad_request", `name: '/' at byte 1 is not allowed`)
	ts.do("DELETE", "/v1/executors/%2E%2E", "").wantError(t, 400, "bad_request", `name: ".." is not allowed`)
	ts.raw("DELETE /v1/executors/a%zz HTTP/1.1\r\nHost: ax\r\n\r\n").wantError(t, 400, "bad_request", "name: bad URL escape")
	ts.do("DELETE", "/v1/executors/"+strings.Repeat("n", axapi.ExecutorNameMaxBytes+1), "").wantError(t, 400, "bad_request", "name: 129 bytes, the limit is 128")
	ts.do("DELETE", "/v1/executors/", "").wantError(t, 404, "not_found", "no route")
	r = ts.do("PUT", "/v1/executors", "{}")
	r.wantError(t, 405, "method_not_allowed", "allowed: GET, HEAD, POST")
	if r.header.Get("Allow") != "GET, HEAD, POST" {
		t.Errorf("Allow = %q", r.header.Get("Allow"))
	}
	ts.do("GET", "/v1/executors/w", "").wantError(t, 405, "method_not_allowed", "allowed: DELETE")

	ts.backend.set(func(f *fakeBackend) { f.executorsErr = ErrNoLeader })
	ts.do("GET", "/v1/executors", "").wantError(t, 503, "no_leader", "no leader")
	ts.do("DELETE", "/v1/executors/x", "").wantError(t, 503, "no_leader", "no leader")
	ts.wantHealthy()
}

func TestServer_ExecutorInvalid(t *testing.T) {
	ts := startServer(t, ServerOptions{})
	ok := `"handlers":["h"],"url":"unix:///w.sock"`
	manyHandlers := `["h` + strings.Repeat(`","h`, axapi.ExecutorHandlersMax) + `"]`
	for _, tc := range []struct {
		name, body string
		code, msg  string
	}{
		{"empty body", ``, "invalid_json", "request body is empty"},
		{"malformed", `{"name":`, "invalid_json", "invalid json"},
		{"no name", `{` + ok + `}`, "bad_request", "name: required"},
		{"empty name", `{"name":"",` + ok + `}`, "bad_request", "name: required"},
		{"long name", `{"name":"` + strings.Repeat("n", axapi.ExecutorNameMaxBytes+1) + `",` + ok + `}`, "bad_request", "name: 129 bytes, the limit is 128"},
		{"space in name", `{"name":"a b",` + ok + `}`, "bad_request", `name: ' ' at byte 1 is not allowed; use A-Z a-z 0-9 . _ : -`},
		{"slash in name", `{"name":"a/b",` + ok + `}`, "bad_request", `name: '/' at byte 1 is not allowed`},
		{"unicode name", `{"name":"wü",` + ok + `}`, "bad_request", `name: 'ü' at byte 1 is not allowed`},
		{"dot name", `{"name":".",` + ok + `}`, "bad_request", `name: "." is not allowed`},
		{"dotdot name", `{"name":"..",` + ok + `}`, "bad_request", `name: ".." is not allowed`},
		{"name type", `{"name":7,` + ok + `}`, "bad_request", "name: must be a string, got JSON number"},
		{"no handlers", `{"name":"w","url":"unix:///w.sock"}`, "bad_request", "handlers: required, 1 to 64 handler patterns"},
		{"zero handlers", `{"name":"w","handlers":[],"url":"unix:///w.sock"}`, "bad_request", "handlers: required"},
		{"too many handlers", `{"name":"w","handlers":` + manyHandlers + `,"url":"unix:///w.sock"}`, "bad_request", "handlers: 65 patterns, the limit is 64"},
		{"empty handler", `{"name":"w","handlers":["a",""],"url":"unix:///w.sock"}`, "bad_request", "handlers[1]: must not be empty"},
		{"inner star", `{"name":"w","handlers":["a*b"],"url":"unix:///w.sock"}`, "bad_request", `handlers[0]: "a*b": "*" may only stand alone or end the pattern`},
		{"two stars", `{"name":"w","handlers":["h","order.**"],"url":"unix:///w.sock"}`, "bad_request", `handlers[1]: "order.**"`},
		{"leading star", `{"name":"w","handlers":["*.x"],"url":"unix:///w.sock"}`, "bad_request", `handlers[0]: "*.x"`},
		{"control in handler", `{"name":"w","handlers":["a\u0001"],"url":"unix:///w.sock"}`, "bad_request", "handlers[0]: control character U+0001"},
		{"long handler", `{"name":"w","handlers":["` + strings.Repeat("h", axapi.HandlerMaxBytes+1) + `"],"url":"unix:///w.sock"}`, "bad_request", "handlers[0]: 257 bytes"},
		{"handlers type", `{"name":"w","handlers":"*","url":"unix:///w.sock"}`, "bad_request", "handlers: must be an array of handler patterns"},
		{"handler type", `{"name":"w","handlers":[1],"url":"unix:///w.sock"}`, "bad_request", "must be an array of handler patterns"},
		{"no url", `{"name":"w","handlers":["h"]}`, "bad_request", "url: required"},
		{"relative socket", `{"name":"w","handlers":["h"],"url":"unix://w.sock"}`, "bad_request", `url: executor url "unix://w.sock": the socket path must be absolute`},
		{"remote url", `{"name":"w","handlers":["h"],"url":"http://10.0.0.1:80"}`, "bad_request", `url: executor url "http://10.0.0.1:80": host "10.0.0.1" is not a loopback address`},
		{"https", `{"name":"w","handlers":["h"],"url":"https://127.0.0.1:443"}`, "bad_request", `url: executor url "https://127.0.0.1:443": scheme "https" is not supported`},
		{"no port", `{"name":"w","handlers":["h"],"url":"http://127.0.0.1"}`, "bad_request", "url: executor url"},
		{"negative min", `{"name":"w",` + ok + `,"min_concurrency":-1}`, "bad_request", "min_concurrency: must be 0 (the default) or from 1 to 10000, got -1"},
		{"big max", `{"name":"w",` + ok + `,"max_concurrency":10001}`, "bad_request", "max_concurrency: must be 0 (the default) or from 1 to 10000, got 10001"},
		{"min over max", `{"name":"w",` + ok + `,"min_concurrency":5,"max_concurrency":4}`, "bad_request", "min_concurrency: 5 is more than max_concurrency 4"},
		{"max type", `{"name":"w",` + ok + `,"max_concurrency":"8"}`, "bad_request", "max_concurrency: must be an integer from 0 to 10000, got JSON string"},
		{"zero timeout", `{"name":"w",` + ok + `,"timeout":"0s"}`, "bad_request", `timeout: must be > 0 and <= 24h0m0s, got "0s"`},
		{"negative timeout", `{"name":"w",` + ok + `,"timeout":"-1s"}`, "bad_request", `timeout: must be > 0`},
		{"long timeout", `{"name":"w",` + ok + `,"timeout":"25h"}`, "bad_request", `timeout: must be > 0 and <= 24h0m0s, got "25h"`},
		{"bad timeout", `{"name":"w",` + ok + `,"timeout":"soon"}`, "bad_request", `timeout: must be a Go duration like "30s", got "soon"`},
		{"empty timeout", `{"name":"w",` + ok + `,"timeout":""}`, "bad_request", `timeout: must be a Go duration like "30s", got ""`},
		{"timeout number", `{"name":"w",` + ok + `,"timeout":30}`, "bad_request", `timeout: must be a Go duration string`},
		{"from_flag", `{"name":"w",` + ok + `,"from_flag":true}`, "bad_request", "from_flag: read only"},
		{"unknown field", `{"name":"w",` + ok + `,"weight":2}`, "bad_request", `unknown field "weight"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := ts.on(t)
			ts.do("POST", "/v1/executors", tc.body).wantError(t, 400, tc.code, tc.msg)
		})
	}
	if r := ts.do("GET", "/v1/executors", ""); string(r.body) != "{\"executors\":[]}\n" {
		t.Errorf("an invalid executor was registered: %s", r.body)
	}
}

func TestValidateExecutor(t *testing.T) {
	in := ExecutorSpec{Name: "w", Handlers: []string{"*"}, URL: "unix:///w.sock", Timeout: "90s"}
	out, err := ValidateExecutor(in)
	if err != nil || out.Timeout != "1m30s" {
		t.Fatalf("ValidateExecutor = %+v, %v", out, err)
	}
	out.Handlers[0] = "changed"
	if in.Handlers[0] != "*" {
		t.Errorf("ValidateExecutor shares the handlers slice with its argument")
	}
	for _, name := range []string{"w", "W-1", "a.b", "...", "a:b:c", "_", strings.Repeat("n", axapi.ExecutorNameMaxBytes)} {
		if err := ValidateExecutorName(name); err != nil {
			t.Errorf("ValidateExecutorName(%q) = %v", name, err)
		}
	}
	for _, e := range []ExecutorSpec{
		{Name: "w", Handlers: []string{"*"}, URL: "unix:///w.sock", MinConcurrency: -1},
		{Name: "w", Handlers: []string{"*"}, URL: "unix:///w.sock", Timeout: "x"},
		{Name: "w", Handlers: []string{"\xff"}, URL: "unix:///w.sock"},
	} {
		if _, err := ValidateExecutor(e); !errors.Is(err, ErrInvalid) {
			t.Errorf("ValidateExecutor(%+v) = %v, want ErrInvalid", e, err)
		}
	}
}

// Prefer: return=minimal (RFC 7240) answers each created or existing item
// with its task's id and state only, and says Preference-Applied; errors
// are answered as without it. Other preferences, and return=representation,
// leave the full views.
func TestServer_BatchMinimal(t *testing.T) {
	ts := startServer(t, ServerOptions{})
	ts.do("POST", "/v1/tasks", `{"id":"same","handler":"h"}`)
	ts.do("POST", "/v1/tasks", `{"id":"taken","handler":"h","payload":1}`)
	body := `{"tasks":[{"handler":"h","delay":"1m"},{"id":"same","handler":"h"},{"id":"taken","handler":"h","payload":2}]}`
	for n, prefer := range []string{"return=minimal", `respond-async, RETURN="Minimal"; x=y`, "handling=lenient,return=minimal"} {
		newID := fmt.Sprintf("new%d", n)
		body := strings.Replace(body, `{"handler"`, `{"id":"`+newID+`","handler"`, 1)
		r := ts.doWith("POST", "/v1/tasks/batch", body, http.Header{"Prefer": {prefer}})
		res := r.batch(t)
		if got := r.header.Get("Preference-Applied"); got != "return=minimal" {
			t.Errorf("Prefer %q: Preference-Applied %q, want return=minimal", prefer, got)
		}
		if !ts.backend.lastMinimal {
			t.Errorf("Prefer %q: the backend was not asked for minimal items", prefer)
		}
		if len(res) != 3 || res[0].Status != 201 || res[1].Status != 200 || res[2].Status != 409 {
			t.Fatalf("Prefer %q: results %+v", prefer, res)
		}
		for i, id := range []string{newID, "same"} {
			if want := `{"id":"` + id + `","state":"WAITING"}`; string(res[i].Task) != want {
				t.Errorf("Prefer %q: results[%d].task = %s, want %s", prefer, i, res[i].Task, want)
			}
		}
		if e := res[2].Error; e == nil || e.Code != "conflict" || res[2].Task != nil {
			t.Errorf("Prefer %q: results[2] = %+v, want the conflict error", prefer, res[2])
		}
	}
	// Two Prefer headers are one list.
	r := ts.doWith("POST", "/v1/tasks/batch", strings.Replace(body, `{"handler"`, `{"id":"two","handler"`, 1),
		http.Header{"Prefer": {"handling=lenient", "return=minimal"}})
	if res := r.batch(t); r.header.Get("Preference-Applied") != "return=minimal" || string(res[0].Task) != `{"id":"two","state":"WAITING"}` {
		t.Errorf("two Prefer headers: Preference-Applied %q, results[0].task %s", r.header.Get("Preference-Applied"), res[0].Task)
	}
	for _, prefer := range []string{"", "return=representation", "handling=strict", "return", "minimal"} {
		body := strings.Replace(body, `{"handler"`, `{"id":"full`+prefer+`","handler"`, 1)
		r := ts.doWith("POST", "/v1/tasks/batch", body, http.Header{"Prefer": {prefer}})
		res := r.batch(t)
		if got := r.header.Get("Preference-Applied"); got != "" || ts.backend.lastMinimal {
			t.Errorf("Prefer %q: Preference-Applied %q, backend minimal %v; want neither", prefer, got, ts.backend.lastMinimal)
		}
		if len(res) != 3 || !strings.Contains(string(res[0].Task), `"handler":"h"`) {
			t.Errorf("Prefer %q: results[0].task = %s, want the full view", prefer, res[0].Task)
		}
	}
}

// match reads the path in place: a route without a parameter allocates
// nothing (the path's string copy was an allocation of every request),
// and a parameter is a copy, which the request's buffer, reused by the
// next request, does not change.
func TestRoutes_MatchInPlace(t *testing.T) {
	raw := []byte("/v1/tasks")
	if n := testing.AllocsPerRun(100, func() {
		if def, _, _ := match("POST", raw); def == nil {
			t.Fatal("POST /v1/tasks: no route")
		}
	}); n != 0 && !raceDetector {
		t.Fatalf("%.1f allocations a match, want 0", n)
	}
	raw = []byte("/v1/tasks/abc")
	def, param, _ := match("GET", raw)
	if def == nil || param != "abc" {
		t.Fatalf("GET %s: %v %q", raw, def, param)
	}
	copy(raw, "/v1/tasks/xyz")
	if param != "abc" {
		t.Fatalf("the parameter changed with the request's buffer: %q", param)
	}
}
