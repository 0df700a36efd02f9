package ipc

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/axsched/ax/clients/go/axapi"
)

// TestDecode_RefusesInvalidUTF8: a body with bytes that are not UTF-8 in
// any string is ErrInvalidJSON saying at which byte and, where the API has
// one, the way out. Before, the payload and the result were kept as sent
// (and served raw: not JSON) and the other strings decoded with U+FFFD.
func TestDecode_RefusesInvalidUTF8(t *testing.T) {
	submit := func(b []byte) error { _, err := DecodeSubmit(b); return err }
	batch := func(b []byte) error { _, err := DecodeSubmitBatch(b); return err }
	flow := func(b []byte) error { _, err := DecodeFlow(b); return err }
	result := func(b []byte) error { _, err := DecodeAttemptResult(b); return err }
	executor := func(b []byte) error { _, err := DecodeExecutor(b); return err }
	purge := func(b []byte) error { _, err := DecodePurge(b, time.Now()); return err }
	for _, tc := range []struct {
		name, body, hint string
		decode           func([]byte) error
	}{
		{"payload", "{\"id\":\"iu4\",\"handler\":\"a\",\"payload\":\"\xff\"}", hintPayload, submit},
		{"payload inside an object", "{\"handler\":\"a\",\"payload\":{\"k\":[1,\"ok \xc3\x28\"]}}", hintPayload, submit},
		{"payload key", "{\"handler\":\"a\",\"payload\":{\"\xfe\":1}}", hintPayload, submit},
		{"label key", "{\"handler\":\"a\",\"labels\":{\"\xff\":\"v\"}}", hintPayload, submit},
		{"two label keys", "{\"handler\":\"a\",\"labels\":{\"\xff\":\"1\",\"\xfe\":\"2\"}}", hintPayload, submit},
		{"label value", "{\"handler\":\"a\",\"labels\":{\"k\":\"v\xff\"}}", hintPayload, submit},
		{"route_key", "{\"handler\":\"a\",\"route_key\":\"r\xff\"}", hintPayload, submit},
		{"a truncated sequence", "{\"handler\":\"a\",\"route_key\":\"\xe6\x97\"}", hintPayload, submit},
		{"an encoded surrogate", "{\"handler\":\"a\",\"payload\":\"\xed\xa0\x80\"}", hintPayload, submit},
		{"batch item payload (scanned)", "{\"tasks\":[{\"id\":\"a\",\"handler\":\"h\"},{\"id\":\"b\",\"handler\":\"h\",\"payload\":\"\xff\"}]}", hintPayload, batch},
		{"batch item label (encoding/json)", "{\"tasks\":[{\"handler\":\"h\",\"labels\":{\"k\":\"\xff\"}}]}", hintPayload, batch},
		{"flow stage payload", "{\"id\":\"f\",\"stages\":[{\"name\":\"A\",\"handler\":\"h\",\"payload\":\"\xff\"}]}", hintPayload, flow},
		{"flow stage label", "{\"id\":\"f\",\"stages\":[{\"name\":\"A\",\"handler\":\"h\",\"labels\":{\"\xff\":\"v\"}}]}", hintPayload, flow},
		{"result", "{\"attempt\":1,\"status\":\"success\",\"result\":\"\xff\"}", hintResult, result},
		{"result's error", "{\"attempt\":1,\"status\":\"failed\",\"error\":\"e\xff\"}", hintResult, result},
		{"executor handler", "{\"name\":\"w\",\"handlers\":[\"h\xff\"],\"url\":\"unix:///w.sock\"}", "", executor},
		{"purge handler", "{\"handler\":\"h\xff\"}", "", purge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := []byte(tc.body)
			err := tc.decode(body)
			at := bytes.IndexFunc(body, func(r rune) bool { return r == '\uFFFD' })
			want := fmt.Sprintf("invalid json: not valid UTF-8 at byte %d: JSON text must be UTF-8", at)
			if !errors.Is(err, ErrInvalidJSON) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), tc.hint) {
				t.Fatalf("err = %v, want invalid_json containing %q and %q", err, want, tc.hint)
			}
			// The same body, valid, is taken: nothing else is wrong with it.
			fixed := bytes.ToValidUTF8(body, []byte("x"))
			if tc.name == "two label keys" {
				fixed = bytes.Replace(fixed, []byte(`"x":"2"`), []byte(`"y":"2"`), 1)
			}
			if err := tc.decode(fixed); err != nil {
				t.Fatalf("%s: %v", fixed, err)
			}
		})
	}

	// The fields' own messages come first.
	for body, msg := range map[string]string{
		"{\"handler\":\"h\",\"id\":\"a\xffb\",\"payload\":\"\xff\"}":                              "id: not valid UTF-8",
		"{\"tasks\":[{\"handler\":\"h\xfe\",\"payload\":\"\xff\"}]}":                              "tasks[0]: handler: not valid UTF-8",
		"{\"id\":\"f\xff\",\"stages\":[{\"name\":\"A\",\"handler\":\"h\"}]}":                      "id: not valid UTF-8",
		"{\"id\":\"f\",\"stages\":[{\"name\":\"A\",\"handler\":\"h\xff\",\"payload\":\"\xff\"}]}": `stage "A": handler: not valid UTF-8`,
	} {
		var err error
		if strings.Contains(body, "stages") {
			_, err = DecodeFlow([]byte(body))
		} else if strings.Contains(body, "tasks") {
			_, err = DecodeSubmitBatch([]byte(body))
		} else {
			_, err = DecodeSubmit([]byte(body))
		}
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), msg) {
			t.Errorf("%q: err = %v, want bad_request %q", body, err, msg)
		}
	}

	// A refused body gives no value either.
	if spec, err := DecodeSubmit([]byte("{\"handler\":\"a\",\"payload\":\"\xff\"}")); err == nil || !reflect.DeepEqual(spec, TaskSpec{}) {
		t.Errorf("DecodeSubmit = %+v, %v; want no spec", spec, err)
	}
	if specs, err := DecodeSubmitBatch([]byte("{\"tasks\":[{\"handler\":\"a\",\"payload\":\"\xff\"}]}")); err == nil || specs != nil {
		t.Errorf("DecodeSubmitBatch = %+v, %v; want no specs", specs, err)
	}

	// Still taken: any valid UTF-8, escapes of it, and bytes as base64.
	for _, body := range []string{
		`{"handler":"a","payload":"é 日本 😀 \u00e9 \ud83d\ude00","labels":{"ü":"日本"},"route_key":"ß"}`,
		`{"handler":"a","payload_base64":"/w=="}`,
		"{\"handler\":\"a\",\"payload\":\"\xef\xbf\xbd\"}", // U+FFFD itself
	} {
		if _, err := DecodeSubmit([]byte(body)); err != nil {
			t.Errorf("%s: %v", body, err)
		}
	}
}

// TestServer_InvalidUTF8 sends bodies that are not valid UTF-8 to each
// route that takes a body: 400 invalid_json, and nothing stored or
// changed. Before, POST /v1/tasks answered 201 and every read of the task,
// and every list page holding it, was not JSON.
func TestServer_InvalidUTF8(t *testing.T) {
	ts := startServer(t, ServerOptions{})
	const msg = "not valid UTF-8 at byte"

	ts.do("POST", "/v1/tasks", "{\"id\":\"iu4\",\"handler\":\"a\",\"payload\":\"\xff\"}").
		wantError(t, 400, "invalid_json", "not valid UTF-8 at byte 37: JSON text must be UTF-8; send bytes as payload_base64")
	ts.do("POST", "/v1/tasks", "{\"id\":\"iu5\",\"handler\":\"a\",\"labels\":{\"\xff\":\"1\",\"\xfe\":\"2\"}}").
		wantError(t, 400, "invalid_json", msg)
	ts.do("POST", "/v1/tasks", "{\"id\":\"iu6\",\"handler\":\"a\",\"route_key\":\"\xff\"}").
		wantError(t, 400, "invalid_json", msg)
	ts.do("POST", "/v1/tasks/batch", "{\"tasks\":[{\"id\":\"iu7\",\"handler\":\"a\"},{\"id\":\"iu8\",\"handler\":\"a\",\"payload\":\"\xff\"}]}").
		wantError(t, 400, "invalid_json", msg)
	for _, id := range []string{"iu4", "iu5", "iu6", "iu7", "iu8"} {
		ts.do("GET", "/v1/tasks/"+id, "").wantError(t, 404, "not_found", "not found")
	}
	if ts.backend.lastBatch != nil || ts.backend.lastSpec.ID != "" {
		t.Errorf("the backend got a submit: %+v, batch %+v", ts.backend.lastSpec, ts.backend.lastBatch)
	}
	if r := ts.do("GET", "/v1/tasks", ""); r.status != 200 || strings.Contains(string(r.body), "iu") {
		t.Errorf("list: %d %s", r.status, r.body)
	}

	// A result: refused, the attempt still running.
	ts.backend.setTask("r", func(t *Task) { t.State, t.Attempts = axapi.StateRunning, 1 })
	ts.do("POST", "/v1/tasks/r/result", "{\"attempt\":1,\"status\":\"success\",\"result\":{\"a\":\"\xff\"}}").
		wantError(t, 400, "invalid_json", msg)
	if !reflect.DeepEqual(ts.backend.lastResult, AttemptResult{}) {
		t.Errorf("the backend got a result: %+v", ts.backend.lastResult)
	}
	if got := ts.do("GET", "/v1/tasks/r", "").task(t); got.State != axapi.StateRunning {
		t.Errorf("task r is %s after a refused result, want RUNNING", got.State)
	}

	// An executor and a purge.
	ts.do("POST", "/v1/executors", "{\"name\":\"w\",\"handlers\":[\"\xff\"],\"url\":\"unix:///w.sock\"}").
		wantError(t, 400, "invalid_json", msg)
	if r := ts.do("GET", "/v1/executors", ""); r.status != 200 || strings.Contains(string(r.body), `"w"`) {
		t.Errorf("executors: %d %s", r.status, r.body)
	}
	ts.do("POST", "/v1/tasks/purge", "{\"handler\":\"\xff\"}").wantError(t, 400, "invalid_json", msg)
	if !reflect.DeepEqual(ts.backend.lastPurge, PurgeQuery{}) {
		t.Errorf("the backend got a purge: %+v", ts.backend.lastPurge)
	}

	// The way out: the same bytes as payload_base64.
	if r := ts.do("POST", "/v1/tasks", `{"id":"iu4","handler":"a","payload_base64":"/w=="}`); r.status != 201 {
		t.Fatalf("submit with payload_base64: %d %s", r.status, r.body)
	}
	if got := ts.do("GET", "/v1/tasks/iu4", "").task(t); string(got.Payload) != "\xff" || !got.PayloadBase64 {
		t.Errorf("task iu4's payload %q (base64 %v), want 0xff", got.Payload, got.PayloadBase64)
	}
}
