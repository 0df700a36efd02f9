package ipc

import (
	"net/http"
	"testing"

	"github.com/axsched/ax/clients/go/axapi"
)

// A malformed query string is 400 bad_request on every route that reads
// its query: a percent escape without two hex digits (?handler=a%2 was
// taken as the three bytes "a%2") and a parameter without a name (?= was
// dropped and the whole list answered). GET /v1/tasks/{id} refuses an
// unknown parameter as DELETE does (?consistent=true read locally), and
// GET /v1/tasks/{id}/runs/{run} and GET /v1/flows/{id} take none.
func TestServer_QueryStrings(t *testing.T) {
	ts, _ := startFlowServer(t)
	ts.do("POST", "/v1/tasks", `{"id":"t1","handler":"h"}`)
	for _, tc := range []struct{ method, path, msg string }{
		{"GET", "/v1/tasks?handler=a%2", `query: bad percent escape "%2" at byte 9 of the query string`},
		{"GET", "/v1/tasks?handler=%zz", `query: bad percent escape "%zz" at byte 8`},
		{"GET", "/v1/tasks?handler=h%", `query: bad percent escape "%" at byte 9`},
		{"GET", "/v1/tasks?%g1=h", `bad percent escape "%g1"`},
		{"GET", "/v1/tasks?=", "query: parameter 1 has no name (it starts with '='): want name=value"},
		{"GET", "/v1/tasks?=h", "query: parameter 1 has no name"},
		{"GET", "/v1/tasks?handler=h&&=", "query: parameter 2 has no name"},
		{"GET", "/v1/tasks/t1/runs?limit=1%", "bad percent escape"},
		{"GET", "/v1/tasks/t1/runs?=", "has no name"},
		{"GET", "/v1/flows?cursor=%f", "bad percent escape"},
		{"GET", "/v1/handlers?=", "has no name"},
		{"GET", "/v1/tasks/t1?=", "has no name"},
		{"GET", "/v1/tasks/t1?consistency=stro%6", "bad percent escape"},
		{"GET", "/v1/tasks/t1?x=1", `unknown query parameter "x"; known: consistency`},
		{"GET", "/v1/tasks/t1?consistency=strong&consistency=local", "consistency: give it at most once"},
		{"HEAD", "/v1/tasks/t1?x=1", ""},
		{"GET", "/v1/tasks/t1/runs/1?x=1", `GET /v1/tasks/{id}/runs/{run} takes no query parameters, got "x=1"`},
		{"GET", "/v1/flows/f1?x=1", `GET /v1/flows/{id} takes no query parameters`},
		{"DELETE", "/v1/tasks/t1?purge=tru%", "bad percent escape"},
		{"DELETE", "/v1/tasks/t1?=", "has no name"},
		{"DELETE", "/v1/flows/f1?purge=%", "bad percent escape"},
		{"POST", "/v1/tasks/purge?=", "has no name"},
	} {
		r := ts.on(t).do(tc.method, tc.path, "")
		if tc.method == "HEAD" {
			if r.status != http.StatusBadRequest {
				t.Errorf("HEAD %s = %d, want 400", tc.path, r.status)
			}
			continue
		}
		r.wantError(t, http.StatusBadRequest, axapi.CodeBadRequest, tc.msg)
	}
	// Nothing changed: the task still waits.
	if r := ts.do("GET", "/v1/tasks/t1", ""); r.status != 200 || r.task(t).State != axapi.StateWaiting {
		t.Fatalf("after the refused requests: %d %s", r.status, r.body)
	}
	// Well-formed ones still pass: escapes, '+', empty parameters.
	for _, path := range []string{
		"/v1/tasks?handler=%68", "/v1/tasks?handler=a+b", "/v1/tasks?", "/v1/tasks?&", "/v1/tasks?handler=h&", "/v1/tasks?handler",
		"/v1/tasks/t1?consistency=strong", "/v1/tasks/t1?consistency=%6Cocal", "/v1/tasks/t1?", "/v1/tasks/t1/runs?limit=5",
	} {
		if r := ts.on(t).do("GET", path, ""); r.status != 200 {
			t.Errorf("GET %s = %d %s", path, r.status, r.body)
		}
	}
	ts.do("GET", "/v1/tasks?handler=%68%2Fx", "")
	if got := ts.backend.lastQuery.Handler; got != "h/x" {
		t.Errorf("?handler=%%68%%2Fx listed handler %q, want h/x", got)
	}
}

// Every route that reads no query string refuses one, before it acts: a
// submit with ?overwrite=true (meant as the body's field) was created
// without the overwrite, answered 201; a pause with ?x=1 paused.
func TestServer_RoutesWithoutQueryRefuseOne(t *testing.T) {
	ts, _ := startFlowServer(t)
	ts.do("POST", "/v1/tasks", `{"id":"t1","handler":"h"}`)
	for _, tc := range []struct{ method, path, body, msg string }{
		{"POST", "/v1/tasks?overwrite=true", `{"id":"t2","handler":"h"}`, `POST /v1/tasks takes no query parameters, got "overwrite=true"`},
		{"POST", "/v1/tasks?handler=a%2", `{"id":"t2","handler":"h"}`, "bad percent escape"},
		{"POST", "/v1/tasks/batch?x=1", `{"tasks":[{"id":"t2","handler":"h"}]}`, "POST /v1/tasks/batch takes no query parameters"},
		{"POST", "/v1/flows?x=1", `{"id":"f2","stages":[{"name":"a","handler":"h"}]}`, "POST /v1/flows takes no query parameters"},
		{"POST", "/v1/tasks/t1/pause?x=1", "", "POST /v1/tasks/{id}/pause takes no query parameters"},
		{"POST", "/v1/handlers/h/pause?x=1", "", "POST /v1/handlers/{name}/pause takes no query parameters"},
		{"GET", "/v1/executors?x=1", "", "GET /v1/executors takes no query parameters"},
		{"GET", "/v1/cluster?x=1", "", "GET /v1/cluster takes no query parameters"},
	} {
		ts.on(t).do(tc.method, tc.path, tc.body).wantError(t, http.StatusBadRequest, axapi.CodeBadRequest, tc.msg)
	}
	if r := ts.do("GET", "/v1/tasks/t1", ""); r.status != 200 || r.task(t).Paused {
		t.Errorf("t1 after the refused pause: %d %s", r.status, r.body)
	}
	// Nothing was created or paused.
	for _, path := range []string{"/v1/tasks/t2", "/v1/flows/f2"} {
		if r := ts.do("GET", path, ""); r.status != http.StatusNotFound {
			t.Errorf("GET %s after the refused submits: %d %s", path, r.status, r.body)
		}
	}
	// Every route in the table either reads its query or refuses one:
	// the table names only routes that exist.
	known := map[string]bool{}
	for _, r := range routes {
		known[r.Method+" "+r.Pattern] = true
	}
	for route := range readsQuery {
		if !known[route] {
			t.Errorf("readsQuery names %q, which is no route", route)
		}
	}
}
