package ipc

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/axsched/ax/clients/go/axapi"
)

func TestDecodeFlow(t *testing.T) {
	fs, err := DecodeFlow([]byte(`{"id":"f","every":"2s","stages":[{"name":"A","handler":"h","payload":{"x":1},"max_attempts":2},
		{"name":"B","handler":"h","depends_on":["A"],"on_failure":"continue","priority":1,"timeout":"5s","route_key":"k","labels":{"a":"b"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if fs.ID != "f" || fs.Every.String() != "2s" || len(fs.Stages) != 2 || fs.Stages[0].Task.MaxAttempts != 2 ||
		!fs.Stages[1].Continue || fs.Stages[1].Task.Priority != 1 || fs.Stages[1].Task.RouteKey != "k" || string(fs.Stages[0].Task.Payload) != `{"x":1}` {
		t.Fatalf("decoded: %+v", fs)
	}
}

// A cron flow keeps its expression and time zone (the task rules: the
// expression trimmed).
func TestDecodeFlowCron(t *testing.T) {
	fs, err := DecodeFlow([]byte(`{"id":"f","cron":" 30 2 * * * ","timezone":"Europe/Berlin","stages":[{"name":"A","handler":"h"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if fs.Cron != "30 2 * * *" || fs.Timezone != "Europe/Berlin" || fs.Every != 0 {
		t.Fatalf("decoded: %+v", fs)
	}
}

// Every bad input is a 400 with code bad_request (or invalid_json) and a
// message naming the problem.
func TestDecodeFlowInvalid(t *testing.T) {
	many := make([]string, FlowStagesMax+1)
	for i := range many {
		many[i] = fmt.Sprintf(`{"name":"s%d","handler":"h"}`, i)
	}
	for _, tc := range []struct{ name, body, want string }{
		{"cycle", `{"id":"f","stages":[{"name":"A","handler":"h","depends_on":["C"]},{"name":"B","handler":"h","depends_on":["A"]},{"name":"C","handler":"h","depends_on":["B"]}]}`, "dependency cycle: A -> C -> B -> A"},
		{"self cycle", `{"id":"f","stages":[{"name":"A","handler":"h","depends_on":["A"]}]}`, "dependency cycle: A -> A"},
		{"unknown dependency", `{"id":"f","stages":[{"name":"A","handler":"h","depends_on":["X"]}]}`, `stage "A": depends_on: unknown stage "X"`},
		{"duplicate dependency", `{"id":"f","stages":[{"name":"A","handler":"h"},{"name":"B","handler":"h","depends_on":["A","A"]}]}`, `"A" twice`},
		{"duplicate names", `{"id":"f","stages":[{"name":"A","handler":"h"},{"name":"A","handler":"h"}]}`, `duplicate stage name "A"`},
		{"too many", `{"id":"f","stages":[` + strings.Join(many, ",") + `]}`, "1001 stages, at most 1000"},
		{"empty stages", `{"id":"f","stages":[]}`, "at least one stage"},
		{"no stages", `{"id":"f"}`, "at least one stage"},
		{"no id", `{"stages":[{"name":"A","handler":"h"}]}`, "id: required"},
		{"id with a trailing space", `{"id":"f ","stages":[{"name":"A","handler":"h"}]}`, "id: must not begin or end with white space"},
		{"run_at after 9999", `{"id":"f","run_at":"9999-12-31T23:59:59-23:59","stages":[{"name":"A","handler":"h"}]}`, "run_at: must be before 10000-01-01T00:00:00Z"},
		{"run_at in the last millisecond of 9999", `{"id":"f","run_at":"9999-12-31T23:59:59.9999Z","stages":[{"name":"A","handler":"h"}]}`, "run_at: must be before 10000-01-01T00:00:00Z"},
		{"no name", `{"id":"f","stages":[{"handler":"h"}]}`, "stages[0]: name required"},
		{"bad name", `{"id":"f","stages":[{"name":"a/b","handler":"h"}]}`, "only letters"},
		{"no handler", `{"id":"f","stages":[{"name":"A"}]}`, `stage "A": handler: required`},
		{"bad priority", `{"id":"f","stages":[{"name":"A","handler":"h","priority":9}]}`, `stage "A": priority`},
		{"bad timeout", `{"id":"f","stages":[{"name":"A","handler":"h","timeout":"x"}]}`, `stage "A": timeout`},
		{"bad max_attempts", `{"id":"f","stages":[{"name":"A","handler":"h","max_attempts":0}]}`, `stage "A": max_attempts`},
		{"stage timing", `{"id":"f","stages":[{"name":"A","handler":"h","delay":"1s"}]}`, `stage "A": delay: not allowed on a stage`},
		{"stage schedule", `{"id":"f","stages":[{"name":"A","handler":"h","every":"1s"}]}`, `stage "A": every: not allowed`},
		{"bad on_failure", `{"id":"f","stages":[{"name":"A","handler":"h","on_failure":"ignore"}]}`, "on_failure"},
		{"unknown stage field", `{"id":"f","stages":[{"name":"A","handler":"h","bogus":{}}]}`, "stages[0]: unknown field"},
		{"unknown field", `{"id":"f","x":1,"stages":[{"name":"A","handler":"h"}]}`, "unknown field"},
		{"bad cron", `{"id":"f","cron":"not a cron","stages":[{"name":"A","handler":"h"}]}`, "cron: "},
		{"bad timezone", `{"id":"f","cron":"0 * * * *","timezone":"Mars/Olympus","stages":[{"name":"A","handler":"h"}]}`, "timezone: "},
		{"timezone without cron", `{"id":"f","timezone":"UTC","stages":[{"name":"A","handler":"h"}]}`, "timezone: only with cron"},
		{"cron and every", `{"id":"f","cron":"0 * * * *","every":"1h","stages":[{"name":"A","handler":"h"}]}`, "cron and every: give at most one"},
		{"stage cron", `{"id":"f","stages":[{"name":"A","handler":"h","cron":"0 * * * *"}]}`, `stage "A": cron: not allowed`},
		{"delay and run_at", `{"id":"f","delay":"1s","run_at":"2030-01-01T00:00:00Z","stages":[{"name":"A","handler":"h"}]}`, "give at most one"},
		{"bad every", `{"id":"f","every":"1ms","stages":[{"name":"A","handler":"h"}]}`, "every"},
		// Its slots are whole milliseconds apart: 1.5005s ran every 1.5 s.
		{"every not whole milliseconds", `{"id":"f","every":"1.5005s","stages":[{"name":"A","handler":"h"}]}`, `every: a flow's interval must be a whole number of milliseconds, got "1.5005s"`},
		// Its stages' task ids would pass the 512-byte id limit.
		{"long id", `{"id":"` + strings.Repeat("x", FlowIDMaxBytes+1) + `","stages":[{"name":"A","handler":"h"}]}`, "the limit for a flow is 357"},
		{"long stage name", `{"id":"f","stages":[{"name":"` + strings.Repeat("a", StageNameMaxBytes+1) + `","handler":"h"}]}`, "at most 128 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeFlow([]byte(tc.body))
			var e *Error
			if !errors.As(err, &e) || e.Status != 400 || !strings.Contains(e.Message, tc.want) {
				t.Fatalf("got %v, want a 400 containing %q", err, tc.want)
			}
		})
	}
}

// A stage that is not an object is 400 bad_request saying so, as a
// batch's item is: null said "stages[0]: name required", and a number
// or a string was invalid_json.
func TestDecodeFlowStageNotAnObject(t *testing.T) {
	for _, tc := range []struct{ stage, want string }{
		{`null`, "stages[1]: must be a JSON object (a stage), got null"},
		{`3`, "stages[1]: must be a JSON object (a stage), got a number"},
		{`"a"`, "stages[1]: must be a JSON object (a stage), got a string"},
		{`[]`, "stages[1]: must be a JSON object (a stage), got an array"},
		{`true`, "stages[1]: must be a JSON object (a stage), got a boolean"},
	} {
		_, err := DecodeFlow([]byte(`{"id":"f","stages":[{"name":"A","handler":"h"}, ` + tc.stage + `]}`))
		var e *Error
		if !errors.As(err, &e) || e.Code != axapi.CodeBadRequest || e.Message != tc.want {
			t.Errorf("stage %s: got %v, want bad_request %q", tc.stage, err, tc.want)
		}
	}
}

// The longest flow id with the longest stage name and a run number of 20
// digits makes a stage task id of exactly axapi.IDMaxBytes.
func TestFlowIDMaxLeavesRoomForStageIDs(t *testing.T) {
	id := FlowStagePrefix + strings.Repeat("x", FlowIDMaxBytes) + "/18446744073709551615/" + strings.Repeat("a", StageNameMaxBytes)
	if err := ValidateID(id); err != nil || len(id) != axapi.IDMaxBytes {
		t.Fatalf("longest stage task id: %d bytes, %v", len(id), err)
	}
	body := `{"id":"` + strings.Repeat("x", FlowIDMaxBytes) + `","stages":[{"name":"` + strings.Repeat("a", StageNameMaxBytes) + `","handler":"h"}]}`
	if _, err := DecodeFlow([]byte(body)); err != nil {
		t.Fatalf("a flow at both limits: %v", err)
	}
}

func TestSubmitRefusesFlowStageIDs(t *testing.T) {
	_, err := DecodeSubmit([]byte(`{"id":"flow/f/1/A","handler":"h"}`))
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "reserved") {
		t.Fatalf("got %v", err)
	}
}

// The flow routes answer 400 with the validation message before the
// backend is asked, and 404 from a backend without flows.
func TestFlowRoutes(t *testing.T) {
	ts := startServer(t, ServerOptions{})
	r := ts.do("POST", "/v1/flows", `{"id":"f","stages":[{"name":"A","handler":"h","depends_on":["B"]},{"name":"B","handler":"h","depends_on":["A"]}]}`)
	if r.status != 400 || !strings.Contains(string(r.body), `"code":"bad_request"`) || !strings.Contains(string(r.body), "dependency cycle: A -> B -> A") {
		t.Fatalf("POST of a cycle: %d %s", r.status, r.body)
	}
	if r := ts.do("POST", "/v1/flows", `{"id":"f","stages":[{"name":"A","handler":"h"}]}`); r.status != 404 {
		t.Fatalf("POST to a backend without flows: %d %s", r.status, r.body)
	}
	for _, path := range []string{"/v1/flows", "/v1/flows/f"} {
		if r := ts.do("GET", path, ""); r.status != 404 || !strings.Contains(string(r.body), "flows are not served") {
			t.Fatalf("GET %s: %d %s", path, r.status, r.body)
		}
	}
	if r := ts.do("PUT", "/v1/flows/f", ""); r.status != 405 {
		t.Fatalf("PUT: %d", r.status)
	}
}

// flowsBackend is the fake backend with flows: it records the last
// submitted flow spec and the Flows call.
type flowsBackend struct {
	*fakeBackend
	lastFlow   FlowSpec
	submits    int
	lastAfter  string
	lastLimit  int
	listCalled int
}

func (b *flowsBackend) SubmitFlow(_ context.Context, spec FlowSpec) (Flow, bool, error) {
	b.lastFlow = spec
	b.submits++
	return Flow{ID: spec.ID, State: "WAITING"}, true, nil
}
func (b *flowsBackend) Flow(_ context.Context, id string) (Flow, error) {
	return Flow{}, Errorf(ErrNotFound, "flow %q not found", id)
}
func (b *flowsBackend) Flows(_ context.Context, after string, limit int) (FlowPage, error) {
	b.lastAfter, b.lastLimit = after, limit
	b.listCalled++
	return FlowPage{}, nil
}
func (b *flowsBackend) CancelFlow(_ context.Context, id string) (Flow, error) {
	return Flow{ID: id, State: "CANCELLED"}, nil
}
func (b *flowsBackend) PurgeFlow(context.Context, string) (int, error) { return 1, nil }

func startFlowServer(t *testing.T) (*testServer, *flowsBackend) {
	t.Helper()
	fb := &flowsBackend{fakeBackend: newFakeBackend()}
	return serveBackend(t, fb, fb.fakeBackend, ServerOptions{}), fb
}

// A flow submit takes its trace context from its fields or, without
// them, from the request's headers, validated as a task submit's; every
// stage task gets it (sidecar/api). Invalid: 400 with the trace codes,
// nothing submitted.
func TestSubmitFlowTraceContext(t *testing.T) {
	ts, fb := startFlowServer(t)
	hdr := func(kv ...string) http.Header {
		h := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			h[kv[i]] = append(h[kv[i]], kv[i+1])
		}
		return h
	}
	const stages = `"stages":[{"name":"A","handler":"h"}]`
	for _, tc := range []struct {
		name              string
		body              string
		hdr               http.Header
		wantTP, wantState string
	}{
		{"none", `{"id":"f",` + stages + `}`, nil, "", ""},
		{"fields", `{"id":"f","traceparent":"` + tpA + `","tracestate":"rojo=1",` + stages + `}`, nil, tpA, "rojo=1"},
		{"headers", `{"id":"f",` + stages + `}`, hdr("traceparent", tpA, "tracestate", "rojo=1"), tpA, "rojo=1"},
		{"fields win", `{"id":"f","traceparent":"` + tpB + `",` + stages + `}`, hdr("traceparent", tpA, "tracestate", "rojo=1"), tpB, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := ts.on(t).doTrace("POST", "/v1/flows", tc.body, tc.hdr)
			if r.status != http.StatusCreated {
				t.Fatalf("status %d: %s", r.status, r.body)
			}
			if got := fb.lastFlow; got.TraceParent != tc.wantTP || got.TraceState != tc.wantState {
				t.Errorf("traceparent %q tracestate %q, want %q %q", got.TraceParent, got.TraceState, tc.wantTP, tc.wantState)
			}
		})
	}
	n := fb.submits
	for _, tc := range []struct {
		name, body string
		hdr        http.Header
		code       string
	}{
		{"bad field", `{"id":"f","traceparent":"x",` + stages + `}`, nil, axapi.CodeInvalidTraceparent},
		{"tracestate field alone", `{"id":"f","tracestate":"rojo=1",` + stages + `}`, nil, axapi.CodeInvalidTracestate},
		{"bad header", `{"id":"f",` + stages + `}`, hdr("traceparent", "garbage"), axapi.CodeInvalidTraceparent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts.on(t).doTrace("POST", "/v1/flows", tc.body, tc.hdr).wantError(t, http.StatusBadRequest, tc.code, "")
		})
	}
	if fb.submits != n {
		t.Fatalf("an invalid trace context reached the backend")
	}
}

// GET /v1/flows checks its query as GET /v1/tasks does: limit and
// cursor, each at most once; anything else is 400 bad_request and the
// backend is not asked.
func TestListFlowsQuery(t *testing.T) {
	ts, fb := startFlowServer(t)
	r := ts.do("GET", "/v1/flows?limit=7&cursor=etl%2F1", "")
	if r.status != 200 || fb.lastAfter != "etl/1" || fb.lastLimit != 7 || !strings.Contains(string(r.body), `"flows":[]`) {
		t.Fatalf("good query: %d %s, backend got %q %d", r.status, r.body, fb.lastAfter, fb.lastLimit)
	}
	if r := ts.do("GET", "/v1/flows?limit=&cursor=", ""); r.status != 200 || fb.lastAfter != "" || fb.lastLimit != ListLimitDefault {
		t.Fatalf("empty values: %d %s, backend got %q %d", r.status, r.body, fb.lastAfter, fb.lastLimit)
	}
	calls := fb.listCalled
	for _, tc := range []struct{ name, query, msg string }{
		{"unknown parameter", "state=RUNNING", `unknown query parameter "state"`},
		{"typo", "limt=5", `unknown query parameter "limt"`},
		{"limit twice", "limit=1&limit=2", "limit: give it at most once"},
		{"bad limit", "limit=x", "limit: must be an integer"},
		{"limit too big", "limit=1000000", "limit: must be an integer"},
		{"cursor too long", "cursor=" + strings.Repeat("x", FlowIDMaxBytes+1), "not a cursor of this API"},
		{"control character in cursor", "cursor=a%01b", "not a cursor of this API"},
		{"cursor not UTF-8", "cursor=%ff", "not a cursor of this API"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts.on(t).do("GET", "/v1/flows?"+tc.query, "").wantError(t, http.StatusBadRequest, axapi.CodeBadRequest, tc.msg)
		})
	}
	if fb.listCalled != calls {
		t.Fatalf("the backend was asked for a refused query")
	}
}

// A field of the wrong type is named by its JSON type, as every other
// field is: "stages" of a string or an object said "must be a
// []json.RawMessage", "depends_on" of a string "must be a []string" (the
// Go types of the decoder), and a null among the dependencies was read as
// the stage name "" ("unknown stage \"\"").
func TestDecodeFlowWrongTypesNameJSONTypes(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{`{"id":"f","stages":"a"}`, "stages: must be an array of stages (JSON objects), got JSON string"},
		{`{"id":"f","stages":{}}`, "stages: must be an array of stages (JSON objects), got JSON object"},
		{`{"id":"f","stages":3}`, "stages: must be an array of stages (JSON objects), got JSON number"},
		{`{"id":"f","stages":[{"name":"A","handler":"h","depends_on":"B"}]}`, "stages[0]: depends_on: must be an array of stage names, got JSON string"},
		{`{"id":"f","stages":[{"name":"A","handler":"h","depends_on":{}}]}`, "stages[0]: depends_on: must be an array of stage names, got JSON object"},
		{`{"id":"f","stages":[{"name":"A","handler":"h","depends_on":[3]}]}`, "stages[0]: depends_on: must be an array of stage names, got JSON number"},
		{`{"id":"f","stages":[{"name":"A","handler":"h","depends_on":[null]}]}`, "stage \"A\": depends_on[0]: must be a stage name, got null"},
		{`{"id":"f","stages":[{"name":"A","handler":"h","on_failure":5}]}`, `stages[0]: on_failure: must be "cancel" or "continue", got JSON number`},
	} {
		_, err := DecodeFlow([]byte(tc.body))
		var e *Error
		if !errors.As(err, &e) || e.Code != axapi.CodeBadRequest || e.Message != tc.want {
			t.Errorf("%s: got %v, want bad_request %q", tc.body, err, tc.want)
		}
	}
}
