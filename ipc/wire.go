package ipc

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/axsched/ax/clients/go/axapi"
	"github.com/axsched/ax/engine"
)

// submitRequest is the JSON body of POST /v1/tasks: the contract's
// SubmitRequest, whose pointers tell "absent" (or null) from a zero value
// so that defaults can be filled, with id and handler decoded as
// wireStrings (the shallower fields win over the embedded ones). Retention:
// see ParseRetention (purge.go).
type submitRequest struct {
	axapi.SubmitRequest
	ID      wireString `json:"id"`
	Handler wireString `json:"handler"`
	// Labels is read here rather than into SubmitRequest.Labels (the outer
	// field wins): encoding/json reads a null value of a map[string]string
	// as "", so {"a":null} was stored as the label a="".
	Labels labelsField `json:"labels"`
}

// labelsField is the labels object of a submit: string values only.
type labelsField map[string]string

// UnmarshalJSON reads an object of string values; null leaves the labels
// unset, a value that is not a string (null included) is refused
// (ErrInvalid, naming the key: the first such key in byte order), and
// labels that are not an object are the decoder's *json.UnmarshalTypeError.
func (l *labelsField) UnmarshalJSON(raw []byte) error {
	if string(raw) == "null" {
		return nil
	}
	var m map[string]*string
	if err := json.Unmarshal(raw, &m); err != nil {
		var typ *json.UnmarshalTypeError
		var vals map[string]json.RawMessage
		if errors.As(err, &typ) && json.Unmarshal(raw, &vals) == nil {
			// An object with a value of another type: name that label
			// (the decoder said "labels ... got JSON number" of an object).
			for _, k := range slices.Sorted(maps.Keys(vals)) {
				if v := bytes.TrimSpace(vals[k]); len(v) > 0 && v[0] != '"' {
					return Errorf(ErrInvalid, "labels[%s]: must be a string, got %s", k, labelValueKind(v))
				}
			}
		}
		return err
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if m[k] == nil {
			return Errorf(ErrInvalid, "labels[%s]: must be a string, got null", k)
		}
	}
	out := make(labelsField, len(m))
	for k, v := range m {
		out[k] = *v
	}
	*l = out
	return nil
}

// labelValueKind names the JSON type of a label's value that is not a string.
func labelValueKind(v []byte) string {
	switch {
	case string(v) == "null":
		return "null"
	case v[0] == '{':
		return "JSON object"
	case v[0] == '[':
		return "JSON array"
	case string(v) == "true" || string(v) == "false":
		return "JSON bool"
	}
	return "JSON number"
}

// wireString is a JSON string field whose raw bytes are checked as well.
// encoding/json replaces invalid UTF-8 and unpaired UTF-16 surrogate
// escapes ("\ud800") with U+FFFD, so two different byte strings would
// decode to the same id; such a string sets bad, and the field is refused.
type wireString struct {
	s   string
	bad bool
}

func (j *wireString) UnmarshalJSON(raw []byte) error {
	if string(raw) == "null" {
		return nil // like a string field: null leaves it unset
	}
	if err := json.Unmarshal(raw, &j.s); err != nil {
		return err // a *json.UnmarshalTypeError: the decoder adds the field name
	}
	j.bad = !validJSONString(raw)
	return nil
}

// validJSONString reports whether raw, a JSON string literal the decoder
// has accepted, is valid UTF-8 and pairs every surrogate escape.
func validJSONString(raw []byte) bool {
	if !utf8.Valid(raw) {
		return false
	}
	for i := 0; i < len(raw); i++ {
		if raw[i] != '\\' {
			continue
		}
		if raw[i+1] != 'u' {
			i++ // a one-character escape
			continue
		}
		r := hexRune(raw[i+2 : i+6])
		i += 5
		switch {
		case utf16.IsSurrogate(r) && r < 0xdc00: // high: a low one must follow
			if i+6 >= len(raw) || raw[i+1] != '\\' || raw[i+2] != 'u' {
				return false
			}
			if lo := hexRune(raw[i+3 : i+7]); lo < 0xdc00 || lo > 0xdfff {
				return false
			}
			i += 6
		case utf16.IsSurrogate(r): // a low one alone
			return false
		}
	}
	return true
}

// checkUTF8 sets *err, when it is nil (the decoder took the body), to
// utf8Error's error if body is not valid UTF-8, and *v then to its zero
// value. JSON text must be UTF-8 (RFC 8259 section 8.1), but neither
// json.Valid nor the scanners check it, and encoding/json keeps a
// payload's or a result's bytes as sent (then served raw in every view of
// the task: not JSON, and one such task made a whole list page
// unreadable) and replaces them with U+FFFD in the strings it decodes (two
// label keys "\xff" and "\xfe" became one label). Every decoder of a
// request body defers it once, so the decoders' own messages come first:
// "id: not valid UTF-8" and "handler: not valid UTF-8" name their field.
// It costs one utf8.Valid over the body; the scanners (scanSubmit,
// scanSubmitBatch) make the same check and give such a body up, so their
// fast path needs no defer.
func checkUTF8[T any](body []byte, v *T, err *error, hint string) {
	if *err != nil {
		return
	}
	if *err = utf8Error(body, hint); *err != nil {
		var zero T
		*v = zero
	}
}

// utf8Error is nil for a body that is valid UTF-8, else an ErrInvalidJSON
// saying at which byte it is not; hint, if any, is the way out ("send
// bytes as payload_base64").
func utf8Error(body []byte, hint string) error {
	if utf8.Valid(body) {
		return nil
	}
	at := 0
	for at < len(body) {
		r, n := utf8.DecodeRune(body[at:])
		if r == utf8.RuneError && n <= 1 {
			break
		}
		at += n
	}
	msg := fmt.Sprintf("invalid json: not valid UTF-8 at byte %d: JSON text must be UTF-8", at)
	if hint != "" {
		msg += "; " + hint
	}
	return Errorf(ErrInvalidJSON, "%s", msg)
}

// Ways out of a body that is not valid UTF-8, for checkUTF8.
const (
	hintPayload = "send bytes as payload_base64"
	hintResult  = "a result is JSON: send bytes as a string, base64 for instance"
)

// hexRune decodes the 4 hex digits of a \u escape.
func hexRune(h []byte) rune {
	var r rune
	for _, c := range h {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		default: // 'A'-'F': the decoder accepted the literal
			r = r<<4 | rune(c-'A'+10)
		}
	}
	return r
}

// fieldTypes names the JSON type each request field expects, for messages.
var fieldTypes = map[string]string{
	"id":             "a string",
	"handler":        "a string",
	"payload_base64": "a base64 string",
	"delay":          `a Go duration string like "1.5s"`,
	"run_at":         `an RFC 3339 time string like "2026-01-02T15:04:05Z"`,
	"priority":       "an integer from 0 to 4",
	"timeout":        `a Go duration string like "30s"`,
	"max_attempts":   "an integer",
	"overwrite":      "true or false",
	"cron":           `a cron expression like "0 2 * * *"`,
	"timezone":       `an IANA time zone like "Europe/Berlin"`,
	"every":          `a Go duration string like "5m"`,
	"repeats":        "an integer >= 0",
	"until":          `an RFC 3339 time string like "2026-01-02T15:04:05Z"`,
	"backoff":        `an object {"initial", "max", "multiplier", "jitter"}`,
	"initial":        `a Go duration string like "2s"`,
	"max":            `a Go duration string like "30s"`,
	"multiplier":     "a number >= 1",
	"jitter":         "a number from 0 to 1",
	"route_key":      "a string",
	"labels":         "an object of string values",
	"retention":      `a Go duration string like "24h"`,
	"traceparent":    `a W3C traceparent like "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"`,
	"tracestate":     `a W3C tracestate like "vendor=value"`,
	"shards":         `an object {"count": N} or {"ask": true, "max": M}`,
	"shards.count":   "an integer from 1 to 1024",
	"shards.max":     "an integer from 1 to 1024",
	"shards.ask":     "a boolean",

	// The other request bodies (requests.go).
	"tasks":           "an array of submit requests",
	"attempt":         "an integer >= 1",
	"status":          `one of "success", "failed", "permanent"`,
	"error":           "a string",
	"name":            "a string",
	"handlers":        `an array of handler patterns like ["order.*"]`,
	"url":             "a string",
	"min_concurrency": "an integer from 0 to 10000",
	"max_concurrency": "an integer from 0 to 10000",
	"finished_before": `an RFC 3339 time string like "2026-01-02T15:04:05Z"`,
	"limit":           "an integer from 1 to 10000",

	// A flow's (flows.go).
	"stages":     "an array of stages (JSON objects)",
	"depends_on": "an array of stage names",
	"on_failure": `"cancel" or "continue"`,
}

// jsonTypeName names the JSON value a Go type decodes from, for a field
// fieldTypes does not name: a message says "an array", not "a []string".
func jsonTypeName(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "another JSON value"
}

// DecodeSubmit decodes and validates the JSON body of a submit request and
// returns the TaskSpec with defaults filled in:
//
//   - id: optional; a random id (NewID) when absent or empty. See ValidateID.
//     Invalid UTF-8 (or an unpaired \u surrogate escape) is refused, not
//     replaced with U+FFFD as encoding/json does.
//   - handler: required, at most axapi.HandlerMaxBytes, valid UTF-8, no control
//     characters, not blank, no white space at either end.
//   - payload (any JSON value, kept byte for byte as sent) or payload_base64
//     (standard base64 with padding), not both; at most PayloadMaxBytes once
//     decoded (413 otherwise). null counts as absent, and an empty payload
//     is stored as "no payload".
//   - delay (Go duration, >= 0) or run_at (RFC 3339, in UTC at full
//     precision; the store rounds it up to the millisecond, so a run is
//     never due before the instant asked for; after 1970-01-01T00:00:00Z),
//     not both; neither means "now".
//   - priority: 0 (highest) … axapi.PriorityMax, default axapi.PriorityDefault.
//   - timeout: Go duration, > 0 and <= axapi.TimeoutMax, default axapi.TimeoutDefault.
//   - max_attempts: 1 … axapi.MaxAttemptsMax, default axapi.MaxAttemptsDefault.
//   - overwrite: bool.
//
// Malformed JSON fails with ErrInvalidJSON, as does an object with the
// same key twice (checkDuplicateKeys; keys inside the payload are the
// user's) and a body that is not valid UTF-8 anywhere, the payload
// included (checkUTF8, after the other checks); unknown fields (one of
// backoff or shards named with its object: `backoff: unknown field "x"`)
// and invalid values with ErrInvalid (the fields of the schedule, backoff,
// routing, labels, retention, trace context and shards are checked by spec
// and its helpers); a payload over the limit with ErrTooLarge. Messages
// name the field.
func DecodeSubmit(body []byte) (TaskSpec, error) {
	if req, ok := scanSubmit(body); ok {
		return req.spec() // valid UTF-8: the scanner reads no other
	}
	return decodeSubmitJSON(body)
}

// decodeSubmitJSON is DecodeSubmit through encoding/json.
func decodeSubmitJSON(body []byte) (spec TaskSpec, err error) {
	defer checkUTF8(body, &spec, &err, hintPayload)
	return submitFrom(body, decodeStrict)
}

// decodeBatchItem is DecodeSubmit for an item of a batch that went
// through encoding/json: the batch's body had its keys and its UTF-8
// checked whole (decodeSubmitBatchJSON), so the item's are not again.
func decodeBatchItem(raw []byte) (TaskSpec, error) {
	if req, ok := scanSubmit(raw); ok {
		return req.spec()
	}
	return submitFrom(raw, decodeKeysChecked)
}

// submitFrom decodes body into a submit request with decode and
// validates it (spec).
func submitFrom(body []byte, decode func([]byte, any) error) (TaskSpec, error) {
	var req submitRequest
	if err := decode(body, &req); err != nil {
		return TaskSpec{}, err
	}
	return req.spec()
}

// decodeStrict decodes one JSON object from body into v, refusing
// duplicate keys (checkDuplicateKeys), unknown fields and trailing data.
func decodeStrict(body []byte, v any) error {
	switch t := bytes.TrimSpace(body); {
	case len(t) == 0:
		return Errorf(ErrInvalidJSON, "request body is empty; want a JSON object")
	case string(t) == "null":
		// encoding/json leaves v as it is for null: the request read as
		// {} ("handler: required") where an array is refused so.
		return Errorf(ErrInvalidJSON, "invalid json: want a JSON object, got null")
	}
	if err := checkDuplicateKeys(body); err != nil {
		return err
	}
	return decodeKeysChecked(body, v)
}

// decodeKeysChecked is decodeStrict for a body checkDuplicateKeys has
// checked already: an item of a batch, checked with the batch, or a stage
// of a flow, checked with the flow. An unknown field inside a nested
// object is named with its object (unknownFieldError).
func decodeKeysChecked(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if e, ok := unknownFieldError(err, body, v); ok {
			return e // names the object of a nested unknown field
		}
		return decodeError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return Errorf(ErrInvalidJSON, "invalid json: unexpected data after the JSON object")
	}
	return nil
}

// decodeError turns an encoding/json error into an API error.
func decodeError(err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	var api *Error
	switch {
	case errors.As(err, &api):
		return api // a field's own decoder said what is wrong (labelsField)
	case errors.As(err, &syn):
		return Errorf(ErrInvalidJSON, "invalid json at byte %d: %s", syn.Offset, strings.TrimPrefix(syn.Error(), "json: "))
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return Errorf(ErrInvalidJSON, "invalid json: unexpected end of input")
	case errors.As(err, &typ):
		// encoding/json names an embedded struct's fields through its type
		// (submitRequest embeds axapi.SubmitRequest): the API's names do not.
		// A flow stage's decoder names it submitRequest.SubmitRequest.x.
		field := typ.Field
		if i := strings.LastIndex(field, "SubmitRequest."); i >= 0 {
			field = field[i+len("SubmitRequest."):]
		}
		if field == "" {
			return Errorf(ErrInvalidJSON, "invalid json: want a JSON object, got %s", typ.Value)
		}
		want := fieldTypes[field]
		if want == "" {
			want = jsonTypeName(typ.Type)
		}
		kind := ErrInvalid
		if field == "shards" || strings.HasPrefix(field, "shards.") {
			// A shards field of the wrong type is a bad shards as a
			// count out of range is ("count": "8" was bad_request, 0
			// invalid_shards): one code for "fix the shards".
			kind = ErrInvalidShards
		}
		return Errorf(kind, "%s: must be %s, got JSON %s", field, want, typ.Value)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return Errorf(ErrInvalid, "unknown field %s", strings.TrimPrefix(err.Error(), "json: unknown field "))
	}
	return Errorf(ErrInvalidJSON, "invalid json: %s", strings.TrimPrefix(err.Error(), "json: "))
}

// isNull reports whether raw is absent or the JSON literal null.
func isNull(raw json.RawMessage) bool {
	return len(raw) == 0 || string(raw) == "null"
}

func (r *submitRequest) spec() (TaskSpec, error) {
	s := TaskSpec{
		ID:          r.ID.s,
		Handler:     r.Handler.s,
		Priority:    axapi.PriorityDefault,
		Timeout:     axapi.TimeoutDefault,
		MaxAttempts: axapi.MaxAttemptsDefault,
		Overwrite:   r.Overwrite,
	}

	if r.ID.bad {
		return TaskSpec{}, Errorf(ErrInvalid, "id: not valid UTF-8")
	}
	if s.ID == "" {
		s.ID = NewID()
	} else if err := ValidateID(s.ID); err != nil {
		return TaskSpec{}, err
	} else if err := checkIDEnds("id", s.ID); err != nil {
		return TaskSpec{}, err
	}
	if strings.HasPrefix(s.ID, FlowStagePrefix) {
		return TaskSpec{}, Errorf(ErrInvalid, "id: the prefix %q is reserved for flow stages, got %q", FlowStagePrefix, s.ID)
	}
	if strings.HasPrefix(s.ID, axapi.ShardPrefix) {
		return TaskSpec{}, Errorf(ErrInvalid, "id: the prefix %q is reserved for shard tasks, got %q", axapi.ShardPrefix, s.ID)
	}

	if r.Handler.bad {
		return TaskSpec{}, Errorf(ErrInvalid, "handler: not valid UTF-8")
	}
	if s.Handler == "" {
		return TaskSpec{}, Errorf(ErrInvalid, "handler: required")
	}
	if err := checkName("handler", s.Handler, axapi.HandlerMaxBytes); err != nil {
		return TaskSpec{}, err
	}
	switch strings.TrimSpace(s.Handler) {
	case "":
		return TaskSpec{}, Errorf(ErrInvalid, "handler: must not be blank, got %q", s.Handler)
	case s.Handler:
	default:
		return TaskSpec{}, Errorf(ErrInvalid, "handler: must not begin or end with white space, got %q", s.Handler)
	}

	hasJSON, hasB64 := !isNull(r.Payload), r.PayloadBase64 != nil
	switch {
	case hasJSON && hasB64:
		return TaskSpec{}, Errorf(ErrInvalid, "payload and payload_base64: give at most one")
	case hasJSON:
		if len(r.Payload) > PayloadMaxBytes {
			return TaskSpec{}, Errorf(ErrTooLarge, "payload: %d bytes, the limit is %d", len(r.Payload), PayloadMaxBytes)
		}
		s.Payload = r.Payload
	case hasB64:
		enc := *r.PayloadBase64
		if n := base64.StdEncoding.DecodedLen(len(enc)); n > PayloadMaxBytes+2 {
			return TaskSpec{}, Errorf(ErrTooLarge, "payload_base64: about %d bytes decoded, the limit is %d", n, PayloadMaxBytes)
		}
		p, err := base64.StdEncoding.DecodeString(enc)
		if err != nil {
			return TaskSpec{}, Errorf(ErrInvalid, "payload_base64: not standard base64: %v", err)
		}
		if len(p) > PayloadMaxBytes {
			return TaskSpec{}, Errorf(ErrTooLarge, "payload_base64: %d bytes decoded, the limit is %d", len(p), PayloadMaxBytes)
		}
		if len(p) > 0 {
			s.Payload, s.PayloadBase64 = p, true
		}
	}

	if r.Delay != nil && r.RunAt != nil {
		return TaskSpec{}, Errorf(ErrInvalid, "delay and run_at: give at most one")
	}
	if r.Delay != nil {
		d, err := time.ParseDuration(*r.Delay)
		if err != nil {
			return TaskSpec{}, durationError("delay", "1.5s", *r.Delay)
		}
		if d < 0 {
			return TaskSpec{}, Errorf(ErrInvalid, "delay: must not be negative, got %q", *r.Delay)
		}
		s.Delay = d
	}
	if r.RunAt != nil {
		t, err := time.Parse(time.RFC3339Nano, *r.RunAt)
		if err != nil {
			return TaskSpec{}, Errorf(ErrInvalid, "run_at: must be an RFC 3339 time like \"2026-01-02T15:04:05Z\", got %q", *r.RunAt)
		}
		// The store keeps Unix milliseconds with 0 for "no run_at": an
		// earlier time would silently mean "now".
		if !t.After(time.Unix(0, 0)) {
			return TaskSpec{}, Errorf(ErrInvalid, "run_at: must be after 1970-01-01T00:00:00Z, got %q", *r.RunAt)
		}
		if err := checkYear("run_at", t, *r.RunAt); err != nil {
			return TaskSpec{}, err
		}
		s.RunAt = t.UTC()
	}

	if r.Priority != nil {
		if p := *r.Priority; p < 0 || p > axapi.PriorityMax {
			return TaskSpec{}, Errorf(ErrInvalid, "priority: must be between 0 (highest) and %d (lowest), got %d", axapi.PriorityMax, p)
		}
		s.Priority = *r.Priority
	}
	if r.Timeout != nil {
		d, err := time.ParseDuration(*r.Timeout)
		if err != nil {
			return TaskSpec{}, durationError("timeout", "30s", *r.Timeout)
		}
		if d <= 0 || d > axapi.TimeoutMax {
			return TaskSpec{}, Errorf(ErrInvalid, "timeout: must be > 0 and <= %s, got %q", axapi.TimeoutMax, *r.Timeout)
		}
		s.Timeout = d
	}
	if r.MaxAttempts != nil {
		if n := *r.MaxAttempts; n < 1 || n > axapi.MaxAttemptsMax {
			return TaskSpec{}, Errorf(ErrInvalid, "max_attempts: must be between 1 and %d, got %d", axapi.MaxAttemptsMax, n)
		}
		s.MaxAttempts = *r.MaxAttempts
	}
	if err := r.recurring(&s); err != nil {
		return TaskSpec{}, err
	}
	if err := r.routing(&s); err != nil {
		return TaskSpec{}, err
	}
	if err := r.retention(&s); err != nil {
		return TaskSpec{}, err
	}
	if err := r.trace(&s); err != nil {
		return TaskSpec{}, err
	}
	if err := r.shards(&s); err != nil {
		return TaskSpec{}, err
	}
	return s, nil
}

// ShardParentIDMaxBytes bounds the id of a sharded task, so that its
// shards' task ids (shard/<id>/<run>/<index>, with a run number of up to
// 20 digits and an index of up to 4) fit in axapi.IDMaxBytes.
const ShardParentIDMaxBytes = axapi.IDMaxBytes - len(axapi.ShardPrefix) - 1 - 20 - 1 - 4

// shards decodes shards: {"count": N} or {"ask": true, "max": M}, each
// bound 1..axapi.ShardsMax; errors are ErrInvalidShards.
func (r *submitRequest) shards(s *TaskSpec) error {
	sh := r.Shards
	if sh == nil {
		return nil
	}
	switch {
	case sh.Count != nil && sh.Ask:
		return Errorf(ErrInvalidShards, `shards: give "count" or "ask", not both`)
	case sh.Count == nil && !sh.Ask:
		return Errorf(ErrInvalidShards, `shards: give {"count": N} or {"ask": true, "max": M}`)
	case sh.Count != nil && sh.Max != nil:
		return Errorf(ErrInvalidShards, `shards: "max" goes with "ask", not with "count"`)
	case sh.Count != nil && (*sh.Count < 1 || *sh.Count > axapi.ShardsMax):
		return Errorf(ErrInvalidShards, "shards.count: must be between 1 and %d, got %d", axapi.ShardsMax, *sh.Count)
	case sh.Ask && sh.Max == nil:
		return Errorf(ErrInvalidShards, `shards.max: required with "ask": true`)
	case sh.Ask && (*sh.Max < 1 || *sh.Max > axapi.ShardsMax):
		return Errorf(ErrInvalidShards, "shards.max: must be between 1 and %d, got %d", axapi.ShardsMax, *sh.Max)
	case len(s.ID) > ShardParentIDMaxBytes:
		return Errorf(ErrInvalidShards, "id: %d bytes, the limit for a task with shards is %d (its shards' task ids, shard/<id>/<run>/<index>, must fit in %d)",
			len(s.ID), ShardParentIDMaxBytes, axapi.IDMaxBytes)
	}
	if sh.Ask {
		s.Shards = &ShardsSpec{Ask: true, Max: *sh.Max}
	} else {
		s.Shards = &ShardsSpec{Count: *sh.Count}
	}
	return nil
}

// recurring decodes cron, timezone, every, repeats, until and backoff.
func (r *submitRequest) recurring(s *TaskSpec) error {
	if r.Cron != nil && r.Every != nil {
		return Errorf(ErrInvalid, "cron and every: give at most one")
	}
	var sched *engine.Schedule // for the first run, checked against until
	if r.Cron != nil {
		s.Cron = strings.TrimSpace(*r.Cron)
		if r.Timezone != nil {
			s.Timezone = *r.Timezone
			// The zone alone, with an expression that is always valid,
			// so that the message names the right field.
			if _, err := engine.ParseCron("* * * * *", s.Timezone); err != nil {
				return Errorf(ErrInvalid, "timezone: %s", scheduleText(err, ""))
			}
		}
		if s.Cron == "" {
			return Errorf(ErrInvalid, "cron: must not be empty")
		}
		var err error
		if sched, err = engine.ParseCron(s.Cron, s.Timezone); err != nil {
			return Errorf(ErrInvalid, "cron: %s, got %q", scheduleText(err, s.Cron), s.Cron)
		}
	} else if r.Timezone != nil {
		return Errorf(ErrInvalid, "timezone: only with cron")
	}
	if r.Every != nil {
		d, err := time.ParseDuration(*r.Every)
		if err != nil {
			return durationError("every", "5m", *r.Every)
		}
		if d < axapi.EveryMin {
			return Errorf(ErrInvalid, "every: must be at least %s, got %q", axapi.EveryMin, *r.Every)
		}
		if sched, err = engine.Every(d); err != nil {
			return Errorf(ErrInvalid, "every: %s, got %q", scheduleText(err, ""), *r.Every)
		}
		s.Every = d
	}
	if r.Repeats != nil {
		if !s.Recurring() {
			return Errorf(ErrInvalid, "repeats: only with cron or every")
		}
		if *r.Repeats < 0 {
			return Errorf(ErrInvalid, "repeats: must not be negative, got %d", *r.Repeats)
		}
		s.Repeats = *r.Repeats
	}
	if r.Until != nil {
		if !s.Recurring() {
			return Errorf(ErrInvalid, "until: only with cron or every")
		}
		t, err := time.Parse(time.RFC3339Nano, *r.Until)
		if err != nil {
			return Errorf(ErrInvalid, "until: must be an RFC 3339 time like \"2026-01-02T15:04:05Z\", got %q", *r.Until)
		}
		if err := checkYear("until", t, *r.Until); err != nil {
			return err
		}
		s.Until = t.UTC()
		if err := checkUntil(s, sched, time.Now()); err != nil {
			return err
		}
	}
	if b := r.Backoff; b != nil {
		d := engine.BackoffDefault
		var err error
		if b.Initial != nil {
			if d.Initial, err = time.ParseDuration(*b.Initial); err != nil {
				return Errorf(ErrInvalid, "backoff.initial: must be a Go duration like \"2s\", got %q", *b.Initial)
			}
		}
		if b.Max != nil {
			if d.Max, err = time.ParseDuration(*b.Max); err != nil {
				return Errorf(ErrInvalid, "backoff.max: must be a Go duration like \"30s\", got %q", *b.Max)
			}
		}
		if b.Multiplier != nil {
			d.Multiplier = *b.Multiplier
		}
		if b.Jitter != nil {
			d.Jitter = *b.Jitter
		}
		// engine.Backoff.Validate's rules, in the API's field names.
		switch {
		case d.Initial <= 0:
			return Errorf(ErrInvalid, "backoff.initial: must be > 0, got %q", d.Initial.String())
		case d.Max <= 0:
			return Errorf(ErrInvalid, "backoff.max: must be > 0, got %q", d.Max.String())
		case d.Max < d.Initial && b.Max == nil:
			// The max is the default: name the field that was given.
			return Errorf(ErrInvalid, "backoff.initial: must be <= backoff.max (%s, the default: give a larger \"max\"), got %q", d.Max, d.Initial.String())
		case d.Max < d.Initial && b.Initial == nil:
			return Errorf(ErrInvalid, "backoff.max: must be >= backoff.initial (%s, the default: give a smaller \"initial\"), got %q", d.Initial, d.Max.String())
		case d.Max < d.Initial:
			return Errorf(ErrInvalid, "backoff.max: must be >= backoff.initial (%s), got %q", d.Initial, d.Max.String())
		case !(d.Multiplier >= 1) || math.IsInf(d.Multiplier, 0):
			return Errorf(ErrInvalid, "backoff.multiplier: must be >= 1, got %v", d.Multiplier)
		case !(d.Jitter >= 0 && d.Jitter <= 1):
			return Errorf(ErrInvalid, "backoff.jitter: must be from 0 to 1, got %v", d.Jitter)
		}
		if err := d.Validate(); err != nil { // a rule added to the engine
			return Errorf(ErrInvalid, "backoff: %s", strings.TrimPrefix(err.Error(), engine.ErrInvalidBackoff.Error()+": "))
		}
		s.Backoff = &d
	}
	return nil
}

// checkUntil refuses an until that ends a recurring task before its first
// run, which would still fire once: the first run is at run_at, after
// delay, or else the schedule's first slot after now (as the leader
// computes it on submit).
func checkUntil(s *TaskSpec, sched *engine.Schedule, now time.Time) error {
	until := s.Until.Format(time.RFC3339Nano)
	if s.Until.Before(now) {
		return Errorf(ErrInvalid, "until: %s is in the past", until)
	}
	var first time.Time
	switch {
	case !s.RunAt.IsZero():
		first = s.RunAt
	case s.Delay > 0:
		first = now.Add(s.Delay)
	case sched != nil:
		first = sched.Next(now)
	}
	if !first.IsZero() && s.Until.Before(first) {
		return Errorf(ErrInvalid, "until: %s is before the first run at %s", until, first.UTC().Format(time.RFC3339))
	}
	return nil
}

// scheduleText is the text of an engine schedule error for an API message:
// without the engine's prefix, the expression (the message quotes it) and
// Go details such as strconv's.
func scheduleText(err error, expr string) string {
	msg := strings.TrimPrefix(err.Error(), engine.ErrInvalidSchedule.Error()+": ")
	if expr != "" {
		msg = strings.TrimPrefix(msg, fmt.Sprintf("cron %q", expr))
		msg = strings.TrimSpace(strings.TrimPrefix(msg, ":"))
	}
	// "failed to parse int from x: strconv.Atoi: parsing ...",
	// "expected 5 to 6 fields, found 3: [not a cron]"
	for _, cut := range []string{": strconv.", ": ["} {
		if i := strings.Index(msg, cut); i >= 0 {
			msg = msg[:i]
		}
	}
	return msg
}

// routing decodes route_key and labels.
func (r *submitRequest) routing(s *TaskSpec) error {
	if r.RouteKey != nil {
		if err := checkName("route_key", *r.RouteKey, axapi.RouteKeyMaxBytes); err != nil {
			return err
		}
		s.RouteKey = *r.RouteKey
	}
	if len(r.Labels) > axapi.LabelsMax {
		return Errorf(ErrInvalid, "labels: %d labels, the limit is %d", len(r.Labels), axapi.LabelsMax)
	}
	for k, v := range r.Labels {
		if k == "" {
			return Errorf(ErrInvalid, "labels: empty key")
		}
		if err := checkName("labels key", k, axapi.LabelMaxBytes); err != nil {
			return err
		}
		if err := checkName("labels["+k+"]", v, axapi.LabelMaxBytes); err != nil {
			return err
		}
	}
	if len(r.Labels) > 0 {
		s.Labels = map[string]string(r.Labels)
	}
	return nil
}

// ValidateID checks a client-given task id: non-empty, valid UTF-8, at most
// axapi.IDMaxBytes, no control characters. Everything else is allowed ("order|42",
// "a@b", "A/B", "ü日本"): ids are opaque and URL-escaped in paths. Errors
// wrap ErrInvalid.
func ValidateID(id string) error {
	if id == "" {
		return Errorf(ErrInvalid, "id: must not be empty")
	}
	return checkName("id", id, axapi.IDMaxBytes)
}

// durationSyntax matches what time.ParseDuration reads: a string that
// matches and is still refused is beyond its range.
var durationSyntax = regexp.MustCompile(`^[-+]?([0-9]*(\.[0-9]*)?(ns|us|µs|μs|ms|s|m|h))+$`)

// durationError is the error for s, a field's value time.ParseDuration
// refused: out of range (a duration is at most 2562047h47m16s, about 292
// years) when it has the syntax, else not a duration.
func durationError(field, example, s string) error {
	if durationSyntax.MatchString(s) {
		return Errorf(ErrInvalid, "%s: %q is too long: a duration is at most 2562047h47m16s (about 292 years)", field, s)
	}
	return Errorf(ErrInvalid, "%s: must be a Go duration like %q, got %q", field, example, s)
}

// checkIDEnds refuses a new id (of a task or flow) that begins or ends
// with white space: the executor gets the id in the Ax-Task-Id header,
// whose value HTTP trims, so it would see, and report to, another id.
// ValidateID still takes such ids, so that one stored before this rule
// can be read and cancelled.
func checkIDEnds(field, id string) error {
	if strings.TrimSpace(id) != id {
		return Errorf(ErrInvalid, "%s: must not begin or end with white space, got %q", field, id)
	}
	return nil
}

// lastViewableTime is the last millisecond RFC 3339 views can show.
var lastViewableTime = time.Date(9999, 12, 31, 23, 59, 59, int(999*time.Millisecond), time.UTC)

// checkYear refuses a time after year 9999 (in UTC): the task views give
// times in RFC 3339, which has four digits for the year, and a task with
// such a time could be stored but not shown (every read of it, and every
// list page with it, failed). A run_at is kept in whole milliseconds
// rounded up (never early), so a time within the last millisecond of 9999
// (9999-12-31T23:59:59.9995Z) is stored as 10000-01-01T00:00:00Z: it is
// refused too.
func checkYear(field string, t time.Time, raw string) error {
	if t.After(lastViewableTime) {
		return Errorf(ErrInvalid, "%s: must be before 10000-01-01T00:00:00Z, got %q", field, raw)
	}
	return nil
}

// checkName checks a string field: length, UTF-8, no control characters.
func checkName(field, s string, maxBytes int) error {
	if len(s) > maxBytes {
		return Errorf(ErrInvalid, "%s: %d bytes, the limit is %d", field, len(s), maxBytes)
	}
	if !utf8.ValidString(s) {
		return Errorf(ErrInvalid, "%s: not valid UTF-8", field)
	}
	for i, r := range s {
		if unicode.IsControl(r) {
			return Errorf(ErrInvalid, "%s: control character %U at byte %d", field, r, i)
		}
	}
	return nil
}

// NewID returns a random task id: 16 bytes from crypto/rand, hex encoded
// (32 characters).
func NewID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}
