package ipc

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/axsched/ax/clients/go/axapi"
)

// decodeAny runs the decoder of route on body.
func decodeAny(route string, body []byte) error {
	var err error
	switch route {
	case "submit":
		_, err = DecodeSubmit(body)
	case "batch":
		_, err = DecodeSubmitBatch(body)
	case "flow":
		_, err = DecodeFlow(body)
	case "purge":
		_, err = DecodePurge(body, time.Now())
	case "heartbeat":
		_, err = DecodeHeartbeat(body)
	case "result":
		_, err = DecodeAttemptResult(body)
	case "executor":
		_, err = DecodeExecutor(body)
	case "empty": // retry, pause, resume
		err = decodeEmpty(body)
	default:
		panic(route)
	}
	return err
}

// TestDecode_RefusesDuplicateKeys: encoding/json keeps the last of two
// equal keys (field names compared without regard to case) and drops the
// others silently, so {"tasks":[A],"tasks":[B]} stored B alone and
// answered 200. Every body decoded with encoding/json refuses them, at
// any depth of the request, with invalid_json naming the key and where.
func TestDecode_RefusesDuplicateKeys(t *testing.T) {
	for _, tc := range []struct {
		name, route, body, msg string
	}{
		{"batch tasks twice", "batch", `{"tasks":[{"id":"a","handler":"h"}],"tasks":[{"id":"b","handler":"h"}]}`, `invalid json: duplicate key "tasks"`},
		{"batch tasks in another case", "batch", `{"tasks":[{"id":"a","handler":"h"}],"Tasks":[{"id":"b","handler":"h"}]}`, `invalid json: duplicate key "Tasks", the same field as "tasks"`},
		{"batch item handler twice", "batch", `{"tasks":[{"handler":"h"},{"id":"b","handler":"a","handler":"b"}]}`, `invalid json: duplicate key "handler" in tasks[1]`},
		{"batch item label twice", "batch", `{"tasks":[{"handler":"h","labels":{"k":"1","k":"2"}}]}`, `invalid json: duplicate key "k" in tasks[0].labels`},
		{"batch item backoff field twice", "batch", `{"tasks":[{"handler":"h","backoff":{"max":"1m","Max":"2m"}}]}`, `duplicate key "Max" in tasks[0].backoff, the same field as "max"`},
		{"submit handler twice", "submit", `{"handler":"a","handler":"b"}`, `invalid json: duplicate key "handler"`},
		{"submit handler in another case", "submit", `{"handler":"a","HANDLER":"b"}`, `invalid json: duplicate key "HANDLER", the same field as "handler"`},
		{"submit handler, an escape", "submit", `{"handler":"a","h\u0061ndler":"b"}`, `invalid json: duplicate key "handler"`},
		{"submit with a Kelvin sign", "submit", `{"handler":"h","route_key":"a","route_\u212aey":"b"}`, "duplicate key \"route_\u212aey\", the same field as \"route_key\""},
		{"submit label twice", "submit", `{"handler":"h","labels":{"k":"1","a":"x","k":"2"}}`, `invalid json: duplicate key "k" in labels`},
		{"submit labels twice", "submit", `{"handler":"h","labels":{"a":"1"},"Labels":{"b":"2"}}`, `duplicate key "Labels", the same field as "labels"`},
		{"submit payload twice", "submit", `{"handler":"h","payload":1,"payload":2}`, `invalid json: duplicate key "payload"`},
		{"submit payload in another case", "submit", `{"handler":"h","payload":1,"Payload":2}`, `duplicate key "Payload", the same field as "payload"`},
		{"submit shards field twice", "submit", `{"handler":"h","shards":{"count":2,"count":3}}`, `duplicate key "count" in shards`},
		{"flow stages twice", "flow", `{"id":"f","stages":[{"name":"a","handler":"h"}],"stages":[{"name":"b","handler":"h"}]}`, `invalid json: duplicate key "stages"`},
		{"flow stage name twice", "flow", `{"id":"f","stages":[{"name":"a","handler":"h","name":"b"}]}`, `invalid json: duplicate key "name" in stages[0]`},
		{"flow stage label twice", "flow", `{"id":"f","stages":[{"name":"a","handler":"h"},{"name":"b","handler":"h","labels":{"k":"1","k":"2"}}]}`, `duplicate key "k" in stages[1].labels`},
		{"purge limit twice", "purge", `{"limit":1,"limit":1000}`, `invalid json: duplicate key "limit"`},
		{"heartbeat attempt twice", "heartbeat", `{"attempt":1,"Attempt":2}`, `duplicate key "Attempt", the same field as "attempt"`},
		{"result status twice", "result", `{"attempt":1,"status":"failed","status":"success"}`, `invalid json: duplicate key "status"`},
		{"result result twice", "result", `{"attempt":1,"status":"success","result":1,"result":2}`, `invalid json: duplicate key "result"`},
		{"executor url twice", "executor", `{"name":"e","handlers":["*"],"url":"unix:///a.sock","url":"unix:///b.sock"}`, `invalid json: duplicate key "url"`},
		{"empty body, a key twice", "empty", `{"a":1,"a":2}`, `invalid json: duplicate key "a"`},
		// A key that is not UTF-8, twice: named as sent (the body would be
		// refused as not UTF-8 after the decoder, checkUTF8, if it were not
		// here).
		{"submit a key twice, not UTF-8", "submit", "{\"handler\":\"h\",\"ro\x8fte\":\"\",\"ro\x8fte\":\"\"}", `invalid json: duplicate key "ro\x8fte"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := decodeAny(tc.route, []byte(tc.body))
			if !errors.Is(err, ErrInvalidJSON) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("err = %v, want invalid_json containing %q", err, tc.msg)
			}
		})
	}
}

// TestDecode_DuplicateKeysInOpaqueValues: a payload (of a task, a batch
// item, a flow stage) and an attempt's result are the user's JSON, kept
// byte for byte: keys twice inside them are theirs, and accepted. Label
// keys are a map's: they differ by case.
func TestDecode_DuplicateKeysInOpaqueValues(t *testing.T) {
	const p = `{"a":1,"a":2,"A":{"b":[{"c":1,"c":1}]}}`

	spec, err := DecodeSubmit([]byte(`{"handler":"h","labels":{"x":"1"},"payload":` + p + `}`))
	if err != nil || string(spec.Payload) != p {
		t.Fatalf("submit: payload %s, %v; want %s", spec.Payload, err, p)
	}
	spec, err = DecodeSubmit([]byte(`{"handler":"h","labels":{"x":"1"},"Payload":` + p + `}`))
	if err != nil || string(spec.Payload) != p {
		t.Fatalf("submit, Payload: payload %s, %v; want %s", spec.Payload, err, p)
	}
	specs, err := DecodeSubmitBatch([]byte(`{"tasks":[{"handler":"h","labels":{"x":"1"},"payload":` + p + `},{"handler":"h","payload":` + p + `}]}`))
	if err != nil || len(specs) != 2 || string(specs[0].Payload) != p || string(specs[1].Payload) != p {
		t.Fatalf("batch: %+v, %v; want two payloads %s", specs, err, p)
	}
	fs, err := DecodeFlow([]byte(`{"id":"f","stages":[{"name":"a","handler":"h","payload":` + p + `}]}`))
	if err != nil || len(fs.Stages) != 1 || string(fs.Stages[0].Task.Payload) != p {
		t.Fatalf("flow: %+v, %v; want the stage's payload %s", fs, err, p)
	}
	r, err := DecodeAttemptResult([]byte(`{"attempt":1,"status":"success","result":` + p + `}`))
	if err != nil || string(r.Result) != p {
		t.Fatalf("result: %s, %v; want %s", r.Result, err, p)
	}

	spec, err = DecodeSubmit([]byte(`{"handler":"h","labels":{"k":"1","K":"2","\u212a":"3"}}`))
	if err != nil || len(spec.Labels) != 3 || spec.Labels["k"] != "1" || spec.Labels["K"] != "2" {
		t.Fatalf("labels differing by case: %v, %v; want three labels", spec.Labels, err)
	}
}

// TestServer_DuplicateKeys: the socket API answers 400 invalid_json to a
// batch with "tasks" twice and submits nothing; a payload or a result
// with keys twice inside is accepted and kept as sent.
func TestServer_DuplicateKeys(t *testing.T) {
	ts := startServer(t, ServerOptions{})

	ts.do("POST", "/v1/tasks/batch", `{"tasks":[{"id":"a","handler":"h"}],"tasks":[{"id":"b","handler":"h"}]}`).
		wantError(t, 400, "invalid_json", `invalid json: duplicate key "tasks"`)
	ts.do("POST", "/v1/tasks/batch", `{"tasks":[{"id":"a","handler":"h"}],"TASKS":[{"id":"b","handler":"h"}]}`).
		wantError(t, 400, "invalid_json", `duplicate key "TASKS", the same field as "tasks"`)
	ts.do("POST", "/v1/tasks", `{"id":"c","handler":"a","handler":"b"}`).
		wantError(t, 400, "invalid_json", `invalid json: duplicate key "handler"`)
	ts.do("POST", "/v1/tasks", `{"id":"c","handler":"h","labels":{"k":"1","k":"2"}}`).
		wantError(t, 400, "invalid_json", `invalid json: duplicate key "k" in labels`)
	for _, id := range []string{"a", "b", "c"} {
		ts.do("GET", "/v1/tasks/"+id, "").wantError(t, 404, "not_found", "not found")
	}
	if ts.backend.lastBatch != nil {
		t.Errorf("the backend got a batch: %+v", ts.backend.lastBatch)
	}

	const p = `{"a":1, "a":2,"A":3}`
	r := ts.do("POST", "/v1/tasks", `{"id":"p","handler":"h","payload":`+p+`}`)
	if r.status != 201 || !bytes.Equal(ts.backend.lastSpec.Payload, []byte(p)) {
		t.Fatalf("submit with a payload's keys twice: %d %s, payload %s", r.status, r.body, ts.backend.lastSpec.Payload)
	}
	if view := ts.do("GET", "/v1/tasks/p", ""); !strings.Contains(string(view.body), `"payload":`+p) {
		t.Errorf("view %s, want the payload %s as sent", view.body, p)
	}
	r = ts.do("POST", "/v1/tasks/batch", `{"tasks":[{"id":"q","handler":"h","labels":{"l":"v"},"payload":`+p+`}]}`)
	if r.status != 200 || len(ts.backend.lastBatch) != 1 || !bytes.Equal(ts.backend.lastBatch[0].Payload, []byte(p)) {
		t.Fatalf("batch with a payload's keys twice: %d %s, batch %+v", r.status, r.body, ts.backend.lastBatch)
	}

	ts.backend.setTask("p", func(t *Task) { t.State, t.Attempts = axapi.StateRunning, 1 })
	r = ts.do("POST", "/v1/tasks/p/result", `{"attempt":1,"status":"success","result":`+p+`}`)
	if r.status != 200 || string(ts.backend.lastResult.Result) != p {
		t.Fatalf("result with keys twice: %d %s, result %s", r.status, r.body, ts.backend.lastResult.Result)
	}
	ts.do("POST", "/v1/tasks/p/result", `{"attempt":1,"status":"success","result":1,"result":2}`).
		wantError(t, 400, "invalid_json", `invalid json: duplicate key "result"`)
}

// TestFoldKey: foldKey(a) == foldKey(b) exactly when strings.EqualFold(a,
// b), the rule by which encoding/json matches keys to fields, for every
// rune; keys without capitals come back as they are.
func TestFoldKey(t *testing.T) {
	first := map[string]rune{} // a folded key -> the first rune that gave it
	for r := rune(0); r <= unicode.MaxRune; r++ {
		k := foldKey(string(r))
		for g := unicode.SimpleFold(r); g != r; g = unicode.SimpleFold(g) {
			if foldKey(string(g)) != k {
				t.Fatalf("foldKey(%q) = %q, foldKey(%q) = %q: EqualFold says they match", r, k, g, foldKey(string(g)))
			}
		}
		if f, ok := first[k]; ok && !strings.EqualFold(string(f), string(r)) {
			t.Fatalf("foldKey(%q) = foldKey(%q) = %q: EqualFold says they differ", f, r, k)
		}
		first[k] = r
	}
	for _, tc := range [][2]string{
		{"tasks", "tasks"}, {"Tasks", "tasks"}, {"route_\u212aey", "route_key"}, {"\u017fhards", "shards"}, {"σας", "ΣΑΣ"}, {"é", "É"},
	} {
		if got := foldKey(tc[0]); got != tc[1] {
			t.Errorf("foldKey(%q) = %q, want %q", tc[0], got, tc[1])
		}
	}
}

// TestCheckDuplicateKeys_Bounds: a wide object costs no more than its
// keys, deep nesting does not recurse past dupKeysMaxDepth, and what is
// not valid JSON is left to the decoder's messages.
func TestCheckDuplicateKeys_Bounds(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"handler":"h","x":{`)
	for i := range 100_000 {
		fmt.Fprintf(&b, `"k%d":1,`, i)
	}
	b.WriteString(`"k0":2}}`)
	if err := checkDuplicateKeys([]byte(b.String())); err == nil || !strings.Contains(err.Error(), `duplicate key "k0" in x`) {
		t.Errorf("100 000 keys then k0 again: %v", err)
	}

	deep := `{"handler":"h","x":` + strings.Repeat(`[{"a":`, 200_000) + `1` + strings.Repeat(`}]`, 200_000) + `}`
	if _, err := DecodeSubmit([]byte(deep)); !errors.Is(err, ErrInvalidJSON) || !strings.Contains(err.Error(), "exceeded max depth") {
		t.Errorf("nesting 400 000 deep: %v, want encoding/json's invalid_json", err)
	}
	deepDup := `{"handler":"h","x":` + strings.Repeat(`{"a":`, 20) + `{"b":1,"b":2}` + strings.Repeat(`}`, 20) + `}`
	if _, err := DecodeSubmit([]byte(deepDup)); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), `unknown field "x"`) {
		t.Errorf("a duplicate 21 objects deep in an unknown field: %v, want the unknown field", err)
	}

	for _, tc := range []struct{ body, msg string }{
		{`{"handler":"h","handler"}`, "invalid json at byte"},
		{`{"handler":"h","labels":{"a":"1","a"`, "invalid json: unexpected end of input"},
		{`{"handler":"h","priority":1e999}`, "priority: must be"},
	} {
		if _, err := DecodeSubmit([]byte(tc.body)); err == nil || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: %v, want %q", tc.body, err, tc.msg)
		}
	}
}

// TestCheckDuplicateKeys_NotAnObject: a body that is not an object is the
// decoder's to refuse, whatever it holds.
func TestCheckDuplicateKeys_NotAnObject(t *testing.T) {
	if _, err := DecodeSubmit([]byte(`[{"handler":"a","handler":"b"}]`)); err == nil || !strings.Contains(err.Error(), "want a JSON object, got array") {
		t.Errorf("an array: %v", err)
	}
}

// A body of null is refused as an array is, not read as {}: every body
// decoded by decodeStrict (a submit, a flow, an executor, a purge).
func TestDecodeNullBody(t *testing.T) {
	for name, decode := range map[string]func([]byte) error{
		"submit": func(b []byte) error { _, err := DecodeSubmit(b); return err },
		"flow":   func(b []byte) error { _, err := DecodeFlow(b); return err },
		"strict": func(b []byte) error { var v struct{ A int }; return decodeStrict(b, &v) },
	} {
		for _, body := range []string{"null", " null\n"} {
			err := decode([]byte(body))
			if err == nil || !strings.Contains(err.Error(), "want a JSON object, got null") {
				t.Errorf("%s %q: %v, want invalid json: want a JSON object, got null", name, body, err)
			}
		}
	}
}
