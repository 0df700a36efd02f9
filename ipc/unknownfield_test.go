package ipc

import (
	"errors"
	"net/http"
	"reflect"
	"testing"

	"github.com/axsched/ax/clients/go/axapi"
)

// An unknown key inside a nested object (backoff, shards) is named with
// its object, as a field of the wrong type there is (backoff.initial:):
// encoding/json says only `unknown field "x"`. The code stays bad_request.
func TestUnknownField_NamesItsObject(t *testing.T) {
	submit := func(b []byte) error { _, err := DecodeSubmit(b); return err }
	batch := func(b []byte) error {
		_, err := DecodeSubmitBatch([]byte(`{"tasks":[{"handler":"h"},` + string(b) + `]}`))
		return err
	}
	stage := func(b []byte) error {
		_, err := DecodeFlow([]byte(`{"id":"f","stages":[{"name":"A","handler":"h"},` + string(b[:len(b)-1]) + `,"name":"B"}]}`))
		return err
	}
	for _, tc := range []struct {
		body string
		want string // of a submit; a batch item's is prefixed tasks[1]:, a stage's stages[1]:
	}{
		{`{"handler":"h","backoff":{"initial":"1s","x":1}}`, `backoff: unknown field "x"`},
		{`{"handler":"h","shards":{"count":2,"x":1}}`, `shards: unknown field "x"`},
		{`{"handler":"h","shards":{"count":2,"size":3}}`, `shards: unknown field "size"`},
		// Keys match fields without regard to case, as the decoder's do.
		{`{"handler":"h","Backoff":{"Initial":"1s","x":1}}`, `backoff: unknown field "x"`},
		// The first unknown key in the body's order, as the decoder reports.
		{`{"handler":"h","backoff":{"x":1},"x":2}`, `backoff: unknown field "x"`},
		{`{"handler":"h","x":2,"backoff":{"x":1}}`, `unknown field "x"`},
		{`{"handler":"h","shards":{"count":2},"backoff":{"y":1}}`, `backoff: unknown field "y"`},
		// Keys inside a payload or labels are not fields.
		{`{"handler":"h","payload":{"x":1},"labels":{"x":"1"},"backoff":{"x":1}}`, `backoff: unknown field "x"`},
		// One of the body itself stays as it was.
		{`{"handler":"h","colour":"red"}`, `unknown field "colour"`},
		{`{"handler":"h","backoff":{"initial":"1s"},"colour":"red"}`, `unknown field "colour"`},
	} {
		for _, d := range []struct {
			name   string
			decode func([]byte) error
			prefix string
		}{{"submit", submit, ""}, {"batch item", batch, "tasks[1]: "}, {"flow stage", stage, "stages[1]: "}} {
			err := d.decode([]byte(tc.body))
			var e *Error
			if !errors.As(err, &e) || !errors.Is(err, ErrInvalid) {
				t.Errorf("%s %s: err = %v, want bad_request", d.name, tc.body, err)
				continue
			}
			if want := d.prefix + tc.want; e.Message != want {
				t.Errorf("%s %s: message %q, want %q", d.name, tc.body, e.Message, want)
			}
		}
	}
}

// Over HTTP: 400 bad_request, as before, with the path in the message.
func TestUnknownField_NamesItsObjectHTTP(t *testing.T) {
	ts := startServer(t, ServerOptions{})
	for _, tc := range []struct{ path, body, want string }{
		{"/v1/tasks", `{"handler":"h","backoff":{"initial":"1s","x":1}}`, `backoff: unknown field "x"`},
		{"/v1/tasks", `{"handler":"h","shards":{"count":2,"x":1}}`, `shards: unknown field "x"`},
		{"/v1/tasks/batch", `{"tasks":[{"handler":"h","backoff":{"x":1}}]}`, `tasks[0]: backoff: unknown field "x"`},
		{"/v1/flows", `{"id":"f","stages":[{"name":"A","handler":"h","shards":{"ask":true,"max":2,"x":1}}]}`, `stages[0]: shards: unknown field "x"`},
	} {
		ts.on(t).do("POST", tc.path, tc.body).wantError(t, http.StatusBadRequest, axapi.CodeBadRequest, tc.want)
	}
}

// unknownFieldPath follows the decoder into slices, maps and embedded
// structs too, and answers "" when its walk finds another key first.
func TestUnknownFieldPath(t *testing.T) {
	type leaf struct {
		A int `json:"a"`
	}
	type inner struct {
		Leaves []leaf           `json:"leaves"`
		ByName map[string]*leaf `json:"by_name"`
		Skip   string           `json:"-"`
	}
	type outer struct {
		inner
		In   *inner `json:"in"`
		Any  any    `json:"any"`
		Name string
	}
	typ := reflect.TypeFor[*outer]()
	for _, tc := range []struct{ body, key, want string }{
		{`{"x":1}`, "x", ""},
		{`{"leaves":[{"a":1},{"a":2,"x":1}]}`, "x", "leaves[1]"},
		{`{"in":{"by_name":{"k":{"x":1}}}}`, "x", "in.by_name[k]"},
		{`{"any":{"x":1},"NAME":"n","in":{"leaves":[{"x":1}]}}`, "x", "in.leaves[0]"},
		{`{"in":{"Skip":"s"}}`, "Skip", "in"},
		{`{"in":{"y":1}}`, "x", ""}, // not the decoder's key: no path
		{`{"in":{"x":`, "x", "in"},
	} {
		if got := unknownFieldPath([]byte(tc.body), typ, tc.key); got != tc.want {
			t.Errorf("unknownFieldPath(%s, %q) = %q, want %q", tc.body, tc.key, got, tc.want)
		}
	}
}
