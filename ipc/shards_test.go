package ipc

import (
	"net/http"
	"strings"
	"testing"

	"github.com/axsched/ax/clients/go/axapi"
)

func TestSubmitShards(t *testing.T) {
	ts := startServer(t, ServerOptions{})
	for _, tc := range []struct {
		name, body string
		want       ShardsSpec
	}{
		{"count", `{"handler":"h","shards":{"count":8}}`, ShardsSpec{Count: 8}},
		{"count 1024", `{"handler":"h","shards":{"count":1024}}`, ShardsSpec{Count: 1024}},
		{"ask", `{"handler":"h","shards":{"ask":true,"max":5}}`, ShardsSpec{Ask: true, Max: 5}},
		{"id at the limit", `{"id":"` + strings.Repeat("a", ShardParentIDMaxBytes) + `","handler":"h","shards":{"count":2}}`, ShardsSpec{Count: 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := ts.on(t).doTrace("POST", "/v1/tasks", tc.body, nil)
			if r.status != http.StatusCreated {
				t.Fatalf("status %d: %s", r.status, r.body)
			}
			if got := ts.backend.lastSpec.Shards; got == nil || *got != tc.want {
				t.Fatalf("stored shards %+v, want %+v", got, tc.want)
			}
		})
	}
	for _, tc := range []struct {
		name, body, code, msg string
	}{
		{"both", `{"handler":"h","shards":{"count":2,"ask":true,"max":3}}`, axapi.CodeInvalidShards, "not both"},
		{"neither", `{"handler":"h","shards":{}}`, axapi.CodeInvalidShards, `give {"count": N}`},
		{"ask false alone", `{"handler":"h","shards":{"ask":false}}`, axapi.CodeInvalidShards, `give {"count": N}`},
		{"count 0", `{"handler":"h","shards":{"count":0}}`, axapi.CodeInvalidShards, "between 1 and 1024, got 0"},
		{"count negative", `{"handler":"h","shards":{"count":-3}}`, axapi.CodeInvalidShards, "between 1 and 1024, got -3"},
		{"count 1025", `{"handler":"h","shards":{"count":1025}}`, axapi.CodeInvalidShards, "got 1025"},
		{"count with max", `{"handler":"h","shards":{"count":2,"max":3}}`, axapi.CodeInvalidShards, `"max" goes with "ask"`},
		{"ask without max", `{"handler":"h","shards":{"ask":true}}`, axapi.CodeInvalidShards, "required"},
		{"ask max 0", `{"handler":"h","shards":{"ask":true,"max":0}}`, axapi.CodeInvalidShards, "shards.max"},
		{"ask max 2000", `{"handler":"h","shards":{"ask":true,"max":2000}}`, axapi.CodeInvalidShards, "got 2000"},
		{"unknown field", `{"handler":"h","shards":{"count":2,"size":3}}`, axapi.CodeBadRequest, `shards: unknown field "size"`},
		// A shards of the wrong type, or a field of it, is invalid_shards
		// as a count out of range is (it was bad_request).
		{"not an object", `{"handler":"h","shards":8}`, axapi.CodeInvalidShards, `shards: must be an object {"count": N} or {"ask": true, "max": M}, got JSON number`},
		{"count a string", `{"handler":"h","shards":{"count":"8"}}`, axapi.CodeInvalidShards, "shards.count: must be an integer from 1 to 1024, got JSON string"},
		{"count a bool", `{"handler":"h","shards":{"count":true}}`, axapi.CodeInvalidShards, "shards.count: must be an integer from 1 to 1024, got JSON bool"},
		{"count a fraction", `{"handler":"h","shards":{"count":2.5}}`, axapi.CodeInvalidShards, "shards.count: must be an integer from 1 to 1024, got JSON number"},
		{"ask a string", `{"handler":"h","shards":{"ask":"yes","max":3}}`, axapi.CodeInvalidShards, "shards.ask: must be a boolean, got JSON string"},
		{"max a string", `{"handler":"h","shards":{"ask":true,"max":"3"}}`, axapi.CodeInvalidShards, "shards.max: must be an integer from 1 to 1024, got JSON string"},
		{"id too long", `{"id":"` + strings.Repeat("a", ShardParentIDMaxBytes+1) + `","handler":"h","shards":{"count":2}}`, axapi.CodeInvalidShards, "the limit for a task with shards"},
		{"reserved prefix", `{"id":"shard/x/1/0","handler":"h"}`, axapi.CodeBadRequest, "reserved for shard tasks"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts.backend.lastSpec = TaskSpec{}
			r := ts.on(t).doTrace("POST", "/v1/tasks", tc.body, nil)
			r.wantError(t, http.StatusBadRequest, tc.code, tc.msg)
			if ts.backend.lastSpec.Handler != "" {
				t.Errorf("the backend got a submit: %+v", ts.backend.lastSpec)
			}
		})
	}
}

func TestFlowStageShards(t *testing.T) {
	fs, err := DecodeFlow([]byte(`{"id":"f","stages":[{"name":"a","handler":"h","shards":{"count":3}}]}`))
	if err != nil || fs.Stages[0].Task.Shards == nil || fs.Stages[0].Task.Shards.Count != 3 {
		t.Fatalf("%+v %v", fs, err)
	}
	long := strings.Repeat("f", FlowIDMaxBytes)
	_, err = DecodeFlow([]byte(`{"id":"` + long + `","stages":[{"name":"` + strings.Repeat("s", 100) + `","handler":"h","shards":{"count":3}}]}`))
	if !strings.Contains(errText(err), "limit for a task with shards") {
		t.Fatalf("long stage id with shards: %v", err)
	}
	// A type error names the stage's field as a task's does, not the Go
	// types it decodes into (it said "submitRequest.SubmitRequest.shards:
	// must be a axapi.ShardsRequest").
	_, err = DecodeFlow([]byte(`{"id":"f","stages":[{"name":"a","handler":"h","shards":"x"}]}`))
	if msg := errText(err); !strings.Contains(msg, `shards: must be an object {"count": N} or {"ask": true, "max": M}, got JSON string`) || strings.Contains(msg, "SubmitRequest") {
		t.Fatalf("stage shards of the wrong type: %v", err)
	}
	_, err = DecodeFlow([]byte(`{"id":"f","stages":[{"name":"a","handler":"h","shards":{"count":0}}]}`))
	if !strings.Contains(errText(err), "shards.count") {
		t.Fatalf("bad stage shards: %v", err)
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// A stage's shards of the wrong type is 400 invalid_shards naming the
// stage's field, as a count out of range is, and nothing is submitted: it
// was bad_request (a flow submit and a batch item alike).
func TestShardsTypeErrorsInFlowAndBatch(t *testing.T) {
	ts, fb := startFlowServer(t)
	for _, tc := range []struct{ name, shards, msg string }{
		{"count a string", `{"count":"3"}`, "stages[0]: shards.count: must be an integer from 1 to 1024, got JSON string"},
		{"count a bool", `{"count":true}`, "stages[0]: shards.count: must be an integer from 1 to 1024, got JSON bool"},
		{"count a fraction", `{"count":3.5}`, "stages[0]: shards.count: must be an integer from 1 to 1024, got JSON number 3.5"},
		{"max a string", `{"ask":true,"max":"3"}`, "stages[0]: shards.max: must be an integer from 1 to 1024, got JSON string"},
		{"not an object", `[3]`, `stages[0]: shards: must be an object {"count": N} or {"ask": true, "max": M}, got JSON array`},
	} {
		t.Run("flow "+tc.name, func(t *testing.T) {
			r := ts.on(t).do("POST", "/v1/flows", `{"id":"f","stages":[{"name":"a","handler":"h","shards":`+tc.shards+`}]}`)
			r.wantError(t, http.StatusBadRequest, axapi.CodeInvalidShards, tc.msg)
			if fb.submits != 0 {
				t.Fatalf("the backend got a flow: %+v", fb.lastFlow)
			}
		})
	}
	r := ts.on(t).do("POST", "/v1/tasks/batch", `{"tasks":[{"handler":"h"},{"handler":"h","shards":{"count":"3"}}]}`)
	r.wantError(t, http.StatusBadRequest, axapi.CodeInvalidShards, "tasks[1]: shards.count: must be an integer from 1 to 1024, got JSON string")
	if fb.lastSpec.Handler != "" {
		t.Errorf("the backend got a submit: %+v", fb.lastSpec)
	}
}
