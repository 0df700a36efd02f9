package ipc

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/axsched/ax/clients/go/axapi"
)

func TestDecodeSubmit_Defaults(t *testing.T) {
	s, err := DecodeSubmit([]byte(`{"handler":"order.timeout"}`))
	if err != nil {
		t.Fatal(err)
	}
	if len(s.ID) != 32 || strings.Trim(s.ID, "0123456789abcdef") != "" {
		t.Errorf("generated id = %q, want 32 hex characters", s.ID)
	}
	want := TaskSpec{ID: s.ID, Handler: "order.timeout", Priority: axapi.PriorityDefault, Timeout: axapi.TimeoutDefault, MaxAttempts: axapi.MaxAttemptsDefault}
	if !SameSpec(s, want) || s.Overwrite || s.Payload != nil {
		t.Errorf("spec = %+v, want %+v", s, want)
	}
	if other, _ := DecodeSubmit([]byte(`{"handler":"h","id":""}`)); other.ID == "" || other.ID == s.ID {
		t.Errorf("empty id should get a fresh random id, got %q", other.ID)
	}
}

func TestDecodeSubmit_AllFields(t *testing.T) {
	body := `{
		"id": "order|42",
		"handler": "order.timeout",
		"payload": {"order": 42},
		"run_at": "2026-12-01T10:00:00.123456+01:00",
		"priority": 0,
		"timeout": "1.5s",
		"max_attempts": 10,
		"overwrite": true,
		"cron": null
	}`
	s, err := DecodeSubmit([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	runAt := time.Date(2026, 12, 1, 9, 0, 0, 123456e3, time.UTC) // full precision: the store rounds up, never down
	want := TaskSpec{ID: "order|42", Handler: "order.timeout", Payload: []byte(`{"order": 42}`), RunAt: runAt,
		Priority: 0, Timeout: 1500 * time.Millisecond, MaxAttempts: 10, Overwrite: true}
	if !SameSpec(s, want) || !s.Overwrite || s.RunAt.Location() != time.UTC {
		t.Errorf("spec = %+v\nwant   %+v", s, want)
	}

	s, err = DecodeSubmit([]byte(`{"handler":"h","delay":"0s","payload_base64":"AP8=","max_attempts":1000,"timeout":"24h"}`))
	if err != nil {
		t.Fatal(err)
	}
	if string(s.Payload) != "\x00\xff" || !s.PayloadBase64 || s.Delay != 0 || s.MaxAttempts != 1000 || s.Timeout != axapi.TimeoutMax {
		t.Errorf("spec = %+v", s)
	}
}

func TestDecodeSubmit_Invalid(t *testing.T) {
	tests := []struct {
		body string
		kind *Error
		msg  string
	}{
		{`{"handler":"` + strings.Repeat("h", axapi.HandlerMaxBytes+1) + `"}`, ErrInvalid, "handler: 257 bytes, the limit is 256"},
		{`{"handler":"a\u0007b"}`, ErrInvalid, "handler: control character U+0007"},
		{`{"handler":"h","id":"` + strings.Repeat("i", axapi.IDMaxBytes+1) + `"}`, ErrInvalid, "id: 513 bytes, the limit is 512"},
		{`{"handler":"h","id":"a\u0085b"}`, ErrInvalid, "id: control character U+0085"},
		{`{"handler":"h","timeout":"25h"}`, ErrInvalid, "timeout: must be > 0 and <= 24h0m0s"},
		{`{"handler":"h","max_attempts":1001}`, ErrInvalid, "max_attempts: must be between 1 and 1000, got 1001"},
		{`{"handler":"h","overwrite":"yes"}`, ErrInvalid, "overwrite: must be true or false"},
		{`{"handler":"h","every":"500ms"}`, ErrInvalid, "every: must be at least 1s"},
		{`{"handler":"h","every":"soon"}`, ErrInvalid, "every: must be a Go duration"},
		{`{"handler":"h","cron":"0 2 * * *","every":"5s"}`, ErrInvalid, "cron and every: give at most one"},
		{`{"handler":"h","cron":"0 2 * * *","timezone":"Mars/Olympus"}`, ErrInvalid, `timezone: unknown time zone "Mars/Olympus"`},
		{`{"handler":"h","cron":"not a cron"}`, ErrInvalid, `cron: expected 5 to 6 fields, found 3, got "not a cron"`},
		{`{"handler":"h","timezone":"UTC"}`, ErrInvalid, "timezone: only with cron"},
		{`{"handler":"h","repeats":3}`, ErrInvalid, "repeats: only with cron or every"},
		{`{"handler":"h","every":"5s","repeats":-1}`, ErrInvalid, "repeats: must not be negative"},
		{`{"handler":"h","until":"2027-01-01T00:00:00Z"}`, ErrInvalid, "until: only with cron or every"},
		{`{"handler":"h","every":"5s","until":"tomorrow"}`, ErrInvalid, "until: must be an RFC 3339 time"},
		{`{"handler":"h","backoff":{"initial":"soon"}}`, ErrInvalid, "backoff.initial: must be a Go duration"},
		{`{"handler":"h","backoff":{"multiplier":0.5}}`, ErrInvalid, "backoff.multiplier: must be >= 1, got 0.5"},
		{`{"handler":"h","backoff":{"jitter":2}}`, ErrInvalid, "backoff.jitter: must be from 0 to 1, got 2"},
		{`{"handler":"h","backoff":{"initial":"1s","delay":"2s"}}`, ErrInvalid, `backoff: unknown field "delay"`},
		{`{"handler":"h","labels":{"":"x"}}`, ErrInvalid, "labels: empty key"},
		{`{"handler":"h","labels":{"a":null}}`, ErrInvalid, "labels[a]: must be a string, got null"},             // was stored as a=""
		{`{"handler":"h","labels":{"a":"x","b":2}}`, ErrInvalid, "labels[b]: must be a string, got JSON number"}, // said "labels: must be an object of string values, got JSON number" of an object
		{`{"handler":"h","labels":{"a":{"x":"y"}}}`, ErrInvalid, "labels[a]: must be a string, got JSON object"},
		{`{"handler":"h","labels":{"a":["x"]}}`, ErrInvalid, "labels[a]: must be a string, got JSON array"},
		{`{"handler":"h","labels":{"a":true}}`, ErrInvalid, "labels[a]: must be a string, got JSON bool"},
		{`{"handler":"h","labels":{"b":null,"a":1}}`, ErrInvalid, "labels[a]: must be a string, got JSON number"}, // the first key in byte order, every time
		{`{"handler":"h","labels":{"b":null,"a":null}}`, ErrInvalid, "labels[a]: must be a string, got null"},
		{`{"handler":"h","labels":5}`, ErrInvalid, "labels: must be an object of string values, got JSON number"},
		{`{"handler":"h","labels":["a"]}`, ErrInvalid, "labels: must be an object of string values, got JSON array"},
		{`{"handler":"h","route_key":"a\u0000b"}`, ErrInvalid, "route_key: control character"},
		{`{"handler":"h","payload_base64":"` + strings.Repeat("A", (PayloadMaxBytes+3)/3*4+8) + `"}`, ErrTooLarge, "payload_base64: about"},
		{`{"handler":"h","payload":"` + strings.Repeat("x", PayloadMaxBytes-1) + `"}`, ErrTooLarge, "payload: 1048577 bytes, the limit is 1048576"},
		{`{"handler":"h"`, ErrInvalidJSON, "unexpected end of input"},
		{`  `, ErrInvalidJSON, "request body is empty"},
		{`null`, ErrInvalidJSON, "want a JSON object, got null"}, // as an array is; it read as {} ("handler: required")
	}
	for _, tc := range tests {
		name := tc.body
		if len(name) > 60 {
			name = name[:60]
		}
		t.Run(name, func(t *testing.T) {
			_, err := DecodeSubmit([]byte(tc.body))
			if !errors.Is(err, tc.kind) {
				t.Fatalf("err = %v, want %s", err, tc.kind.Code)
			}
			if !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("err = %q, want it to contain %q", err, tc.msg)
			}
		})
	}
	// The largest payloads pass.
	if _, err := DecodeSubmit([]byte(`{"handler":"h","payload":"` + strings.Repeat("x", PayloadMaxBytes-2) + `"}`)); err != nil {
		t.Errorf("payload of exactly PayloadMaxBytes: %v", err)
	}
}

// Values the decoder used to accept and then store as something else, or
// refuse with a message in Go's terms rather than the API's.
func TestDecodeSubmit_RefusesWhatItWouldMisread(t *testing.T) {
	past := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	soon := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	later := time.Now().Add(3 * time.Hour).UTC().Format(time.RFC3339)
	for _, tc := range []struct {
		name, body, msg string
	}{
		{"until in the past", `{"handler":"h","every":"1m","until":"` + past + `"}`, "until: " + past + " is in the past"},
		{"until in the past, cron", `{"handler":"h","cron":"* * * * *","until":"2001-01-01T00:00:00Z"}`, "until: 2001-01-01T00:00:00Z is in the past"},
		{"until before run_at", `{"handler":"h","every":"1m","run_at":"` + later + `","until":"` + soon + `"}`, "until: " + soon + " is before the first run at " + later},
		{"until before delay", `{"handler":"h","every":"1m","delay":"3h","until":"` + soon + `"}`, "until: " + soon + " is before the first run at "},
		{"until before the first slot", `{"handler":"h","every":"2h","until":"` + soon + `"}`, "until: " + soon + " is before the first run at "},
		{"zero run_at", `{"handler":"h","run_at":"0001-01-01T00:00:00Z"}`, `run_at: must be after 1970-01-01T00:00:00Z, got "0001-01-01T00:00:00Z"`},
		{"epoch run_at", `{"handler":"h","run_at":"1970-01-01T00:00:00Z"}`, "run_at: must be after 1970-01-01T00:00:00Z"},
		{"pre-1970 run_at", `{"handler":"h","run_at":"1969-12-31T23:59:59Z"}`, "run_at: must be after 1970-01-01T00:00:00Z"},
		{"delay too long", `{"handler":"h","delay":"277777777h46m40s"}`, `delay: "277777777h46m40s" is too long: a duration is at most 2562047h47m16s`},
		{"every too long", `{"handler":"h","every":"9999999h"}`, `every: "9999999h" is too long`},
		{"run_at after 9999", `{"handler":"h","run_at":"9999-12-31T23:59:59-23:59"}`, `run_at: must be before 10000-01-01T00:00:00Z, got "9999-12-31T23:59:59-23:59"`},
		{"until after 9999", `{"handler":"h","every":"1h","until":"9999-12-31T23:00:00-02:00"}`, `until: must be before 10000-01-01T00:00:00Z`},
		// Kept in milliseconds rounded up, these were stored as year 10000:
		// the submit answered 500 and every list page holding the task too.
		{"run_at in the last millisecond of 9999", `{"handler":"h","run_at":"9999-12-31T23:59:59.999999999Z"}`, `run_at: must be before 10000-01-01T00:00:00Z, got "9999-12-31T23:59:59.999999999Z"`},
		{"run_at a nanosecond after the last millisecond", `{"handler":"h","run_at":"9999-12-31T23:59:59.999000001Z"}`, `run_at: must be before 10000-01-01T00:00:00Z`},
		{"id with a leading space", `{"handler":"h","id":" pad"}`, `id: must not begin or end with white space, got " pad"`},
		{"id with a trailing space", `{"handler":"h","id":"pad "}`, `id: must not begin or end with white space`},
		{"blank handler", `{"handler":"   "}`, `handler: must not be blank, got "   "`},
		{"handler with a leading space", `{"handler":" q"}`, `handler: must not begin or end with white space, got " q"`},
		{"handler with a trailing nbsp", `{"handler":"q\u00a0"}`, "handler: must not begin or end with white space"},
		{"id with a raw 0xff", "{\"handler\":\"h\",\"id\":\"a\xffb\"}", "id: not valid UTF-8"},
		{"id with a lone high surrogate", `{"handler":"h","id":"a\ud800b"}`, "id: not valid UTF-8"},
		{"id with a lone low surrogate", `{"handler":"h","id":"\udc00"}`, "id: not valid UTF-8"},
		{"id with a high surrogate at the end", `{"handler":"h","id":"a\uD83D"}`, "id: not valid UTF-8"},
		{"handler with a raw 0xfe", "{\"handler\":\"h\xfe\"}", "handler: not valid UTF-8"},
		{"id of another type", `{"handler":"h","id":42}`, "id: must be a string, got JSON number"},
		{"handler of another type", `{"handler":true}`, "handler: must be a string, got JSON bool"},
		{"cron with a bad field", `{"handler":"h","cron":"x * * * *"}`, `cron: failed to parse int from x, got "x * * * *"`},
		{"empty cron", `{"handler":"h","cron":" "}`, "cron: must not be empty"},
		{"timezone Local", `{"handler":"h","cron":"0 2 * * *","timezone":"Local"}`, `timezone: time zone "Local" depends on the host`},
		{"negative backoff.initial", `{"handler":"h","backoff":{"initial":"-1s"}}`, `backoff.initial: must be > 0, got "-1s"`},
		{"backoff.max below initial", `{"handler":"h","backoff":{"initial":"10s","max":"5s"}}`, `backoff.max: must be >= backoff.initial (10s), got "5s"`},
		// Only one of the two given: the other is the default, and the
		// message names the field that was given (it named "max", "30s",
		// to a submit without a max).
		{"backoff.initial above the default max", `{"handler":"h","backoff":{"initial":"45s"}}`, `backoff.initial: must be <= backoff.max (30s, the default: give a larger "max"), got "45s"`},
		{"backoff.max below the default initial", `{"handler":"h","backoff":{"max":"1s"}}`, `backoff.max: must be >= backoff.initial (2s, the default: give a smaller "initial"), got "1s"`},
		{"zero backoff.max", `{"handler":"h","backoff":{"max":"0s"}}`, `backoff.max: must be > 0, got "0s"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeSubmit([]byte(tc.body))
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("err = %v, want bad_request containing %q", err, tc.msg)
			}
			if m := err.Error(); strings.Contains(m, "engine:") || strings.Contains(m, "strconv") || strings.Contains(m, "Initial") {
				t.Errorf("message %q leaks Go internals", m)
			}
		})
	}

	// Still accepted: a paired surrogate escape, U+FFFD itself, an until
	// exactly at run_at, inner spaces in a handler, a run_at just after 1970.
	for _, body := range []string{
		`{"handler":"h","id":"\ud83d\ude00"}`,
		`{"handler":"h","id":"\ufffd"}`,
		"{\"handler\":\"h\",\"id\":\"\uFFFD\"}",
		`{"handler":"h","id":"a\\ud800"}`,
		`{"handler":"q r","id":null}`,
		`{"handler":"h","every":"1m","run_at":"` + soon + `","until":"` + soon + `"}`,
		`{"handler":"h","cron":"0 2 * * *","until":"2099-01-01T00:00:00Z"}`,
		`{"handler":"h","run_at":"1970-01-01T00:00:00.001Z"}`,
		`{"handler":"h","run_at":"9999-12-31T23:59:59.999Z"}`,
		`{"handler":"h","id":"inner space"}`,
	} {
		if _, err := DecodeSubmit([]byte(body)); err != nil {
			t.Errorf("%s: %v", body, err)
		}
	}
	// Two ids that differ only in their invalid bytes were the same id.
	a, errA := DecodeSubmit([]byte("{\"handler\":\"h\",\"id\":\"x\xff\"}"))
	b, errB := DecodeSubmit([]byte("{\"handler\":\"h\",\"id\":\"x\xfe\"}"))
	if errA == nil && errB == nil && a.ID == b.ID {
		t.Errorf("ids x\\xff and x\\xfe both decoded as %q", a.ID)
	}
}

// ValidateID checks ids of lookups too: " spaced " (refused for a new
// task or flow, checkIDEnds) stays valid there, for one stored before.
func TestValidateID(t *testing.T) {
	for _, id := range []string{"order|42", "a@b", "A/B", "ü日本", " spaced ", "%2F", strings.Repeat("x", axapi.IDMaxBytes)} {
		if err := ValidateID(id); err != nil {
			t.Errorf("ValidateID(%q) = %v", id, err)
		}
	}
	for _, id := range []string{"", "a\x00b", "a\tb", "\x7f", "\xff\xfe", strings.Repeat("x", axapi.IDMaxBytes+1)} {
		if err := ValidateID(id); !errors.Is(err, ErrInvalid) {
			t.Errorf("ValidateID(%q) = %v, want ErrInvalid", id, err)
		}
	}
}

func TestTaskJSON(t *testing.T) {
	created := time.Date(2026, 11, 30, 11, 25, 0, 0, time.UTC)
	base := Task{ID: "a/b", Handler: "h", State: axapi.StateWaiting, Priority: 2, MaxAttempts: 4, Timeout: "30s", CreatedAt: created, UpdatedAt: created}

	withJSON := base
	withJSON.Payload = []byte(`{"a": 1, "s": "<&>"}`)
	b, err := withJSON.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(string(b), `,"payload":{"a": 1, "s": "<&>"}}`) || strings.Contains(string(b), "payload_base64") {
		t.Errorf("json payload view = %s", b)
	}
	var back Task
	if err := json.Unmarshal(b, &back); err != nil || string(back.Payload) != string(withJSON.Payload) || back.PayloadBase64 || back.ID != "a/b" {
		t.Errorf("round trip = %+v (%v)", back, err)
	}
	// Nested in json.Marshal the payload is the same value (compacted).
	nested, err := json.Marshal(map[string]Task{"task": withJSON})
	if err != nil || !strings.Contains(string(nested), `"payload":{"a":1,"s":"\u003c\u0026\u003e"}`) {
		t.Errorf("nested = %s (%v)", nested, err)
	}

	withB64 := base
	withB64.Payload, withB64.PayloadBase64 = []byte{0, 1, 0xff}, true
	b, _ = withB64.MarshalJSON()
	if !strings.Contains(string(b), `"payload_base64":"AAH/"`) || strings.Contains(string(b), `"payload":`) {
		t.Errorf("base64 view = %s", b)
	}
	back = Task{Payload: []byte("stale")}
	if err := json.Unmarshal(b, &back); err != nil || string(back.Payload) != "\x00\x01\xff" || !back.PayloadBase64 {
		t.Errorf("round trip = %+v (%v)", back, err)
	}

	// Bytes that are not JSON are never emitted raw.
	broken := base
	broken.Payload = []byte("not json")
	b, _ = broken.MarshalJSON()
	if !json.Valid(b) || !strings.Contains(string(b), `"payload_base64"`) {
		t.Errorf("invalid JSON payload view = %s", b)
	}

	b, _ = base.MarshalJSON()
	if strings.Contains(string(b), "payload") {
		t.Errorf("empty payload view = %s", b)
	}
	back = Task{Payload: []byte("stale"), PayloadBase64: true}
	if err := json.Unmarshal(b, &back); err != nil || back.Payload != nil || back.PayloadBase64 {
		t.Errorf("round trip of empty payload = %+v (%v)", back, err)
	}
}

// Recurring and routing fields decode into the spec, and take part in
// "the same spec".
func TestDecodeSubmit_RecurringFields(t *testing.T) {
	s, err := DecodeSubmit([]byte(`{"id":"r","handler":"h","cron":" 0 2 * * * ","timezone":"Europe/Berlin","repeats":3,
		"until":"2099-01-01T00:00:00Z","backoff":{"initial":"1s","max":"10s","multiplier":3,"jitter":0},
		"route_key":"customer-7","labels":{"team":"orders"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if s.Cron != "0 2 * * *" || s.Timezone != "Europe/Berlin" || s.Repeats != 3 || !s.Until.Equal(time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC)) ||
		s.Backoff == nil || *s.Backoff != (BackoffSpec{Initial: time.Second, Max: 10 * time.Second, Multiplier: 3, Jitter: 0}) ||
		s.RouteKey != "customer-7" || s.Labels["team"] != "orders" || !s.Recurring() {
		t.Fatalf("spec %+v", s)
	}
	e, err := DecodeSubmit([]byte(`{"id":"r","handler":"h","every":"90s","backoff":{"initial":"5s"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if e.Every != 90*time.Second || e.Backoff.Initial != 5*time.Second || e.Backoff.Max != 30*time.Second || e.Backoff.Multiplier != 2 {
		t.Fatalf("every spec %+v backoff %+v", e, e.Backoff)
	}
	other := s
	other.Labels = map[string]string{"team": "billing"}
	if SameSpec(s, other) {
		t.Fatal("labels must take part in the spec")
	}
	other = s
	other.Backoff = nil
	if SameSpec(s, other) {
		t.Fatal("backoff must take part in the spec")
	}
	if !SameSpec(s, s) {
		t.Fatal("a spec must equal itself")
	}
}

// A label whose value is null is refused wherever labels are read (a
// submit, a batch item, a flow stage): encoding/json read it into the
// map as "", so the task was stored with the label a="".
func TestLabelsNullValueRefused(t *testing.T) {
	const labels = `"labels":{"ok":"x","a":null}`
	decoders := map[string]func() error{
		"submit": func() error { _, err := DecodeSubmit([]byte(`{"handler":"h",` + labels + `}`)); return err },
		"batch": func() error {
			_, err := DecodeSubmitBatch([]byte(`{"tasks":[{"handler":"h"},{"handler":"h",` + labels + `}]}`))
			return err
		},
		"flow stage": func() error {
			_, err := DecodeFlow([]byte(`{"id":"f","stages":[{"name":"A","handler":"h",` + labels + `}]}`))
			return err
		},
	}
	for name, decode := range decoders {
		err := decode()
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "labels[a]: must be a string, got null") {
			t.Errorf("%s: err = %v, want invalid labels[a]", name, err)
		}
	}
	// A null labels object is still no labels, and string values are kept.
	for body, want := range map[string]int{`{"handler":"h","labels":null}`: 0, `{"handler":"h","labels":{"a":"","b":"y"}}`: 2} {
		s, err := DecodeSubmit([]byte(body))
		if err != nil || len(s.Labels) != want {
			t.Errorf("%s: labels %v, err %v; want %d labels", body, s.Labels, err, want)
		}
	}
}
