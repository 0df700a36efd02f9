package ipc

import (
	"errors"
	"fmt"
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
		{"cron", `{"id":"f","cron":"* * * * *","stages":[{"name":"A","handler":"h"}]}`, "cron: not supported"},
		{"delay and run_at", `{"id":"f","delay":"1s","run_at":"2030-01-01T00:00:00Z","stages":[{"name":"A","handler":"h"}]}`, "give at most one"},
		{"bad every", `{"id":"f","every":"1ms","stages":[{"name":"A","handler":"h"}]}`, "every"},
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
