package ipc

import (
	"encoding/json"
	"unicode/utf8"

	"github.com/axsched/ax/clients/go/axapi"
)

// scanSubmitBatch is the fast path of DecodeSubmitBatch: one pass over a
// body of the usual shape, without encoding/json's reflection and its
// second and third scans (the batch as raw items, then each item again).
//
// It reads {"tasks":[{...},...]} whose items hold only the submit
// request's own field names, spelled exactly, once each, with values of
// the simple kinds: strings of printable ASCII without escapes, integers
// without fraction or exponent, true or false, and any JSON value for
// payload (kept byte for byte, as json.RawMessage). Everything else (an
// escape, a non-ASCII byte, null, an object for labels, backoff or shards,
// a key in another case, a duplicate key, an empty batch, a body that is
// not UTF-8, an error of any kind) makes it answer ok false, and DecodeSubmitBatch decodes the body
// with encoding/json as before: so the fast path never accepts what the
// other refuses, and fills the same submitRequests
// (FuzzScanSubmitBatchMatchesJSON); the validation after it (spec) is the
// same code. A body it reads is valid UTF-8, which JSON text must be: it
// checks that with one utf8.Valid over the body once read (about 1 ns a
// task, faster than a test of each byte of the strings as it goes); the
// other path checks it after decoding (checkUTF8), to say where.
func scanSubmitBatch(body []byte) (reqs []submitRequest, ok bool) {
	s := scanner{b: body}
	s.ws()
	if !s.lit(`{`) || !s.wsLit(`"tasks"`) || !s.wsLit(`:`) || !s.wsLit(`[`) {
		return nil, false
	}
	reqs = make([]submitRequest, 0, min(axapi.BatchMaxTasks, 1+len(body)/48))
	for {
		s.ws()
		if len(reqs) >= axapi.BatchMaxTasks {
			return nil, false // the error is the other path's
		}
		reqs = append(reqs, submitRequest{})
		if !s.item(&reqs[len(reqs)-1]) {
			return nil, false
		}
		s.ws()
		if s.lit(`,`) {
			continue
		}
		if !s.lit(`]`) || !s.wsLit(`}`) {
			return nil, false
		}
		s.ws()
		return reqs, s.p == len(s.b) && utf8.Valid(body)
	}
}

// scanSubmit is the fast path of DecodeSubmit: one submit request of the
// usual shape, read as scanSubmitBatch reads each item of a batch (the
// same rules; anything else goes through encoding/json as before).
func scanSubmit(body []byte) (r submitRequest, ok bool) {
	s := scanner{b: body}
	s.ws()
	if !s.item(&r) {
		return submitRequest{}, false
	}
	s.ws()
	return r, s.p == len(s.b) && utf8.Valid(body)
}

// scanner reads JSON from b at p.
type scanner struct {
	b []byte
	p int
	// last is, per string field, the value read last (same): the items of
	// a batch mostly repeat their handler, delay and timeout, and each
	// copy, two allocations with its pointer, was made for every task.
	last [fieldCount]*string
}

// same returns a pointer to raw as a string: the one read last for field
// f when it is equal (the requests' string fields are never written
// through), else a new copy, kept as f's last.
func (s *scanner) same(f uint, raw []byte) *string {
	if l := s.last[f]; l != nil && *l == string(raw) {
		return l
	}
	v := string(raw)
	s.last[f] = &v
	return &v
}

// ws skips JSON white space.
func (s *scanner) ws() {
	for s.p < len(s.b) {
		switch s.b[s.p] {
		case ' ', '\t', '\n', '\r':
			s.p++
		default:
			return
		}
	}
}

// lit consumes t when the input continues with it.
func (s *scanner) lit(t string) bool {
	if len(s.b)-s.p < len(t) || string(s.b[s.p:s.p+len(t)]) != t {
		return false
	}
	s.p += len(t)
	return true
}

func (s *scanner) wsLit(t string) bool {
	s.ws()
	return s.lit(t)
}

// plainString reads a string of printable ASCII without escapes and
// returns its contents (aliasing b).
func (s *scanner) plainString() ([]byte, bool) {
	if !s.lit(`"`) {
		return nil, false
	}
	start := s.p
	for s.p < len(s.b) {
		c := s.b[s.p]
		switch {
		case c == '"':
			s.p++
			return s.b[start : s.p-1], true
		case c < 0x20 || c >= 0x7f || c == '\\':
			return nil, false
		}
		s.p++
	}
	return nil, false
}

// int reads an integer in JSON's grammar without fraction or exponent,
// at most 18 digits.
func (s *scanner) int() (int, bool) {
	neg := s.lit(`-`)
	start := s.p
	n := 0
	for s.p < len(s.b) && s.b[s.p] >= '0' && s.b[s.p] <= '9' {
		n = n*10 + int(s.b[s.p]-'0')
		s.p++
	}
	digits := s.p - start
	if digits == 0 || digits > 18 || (digits > 1 && s.b[start] == '0') {
		return 0, false
	}
	if s.p < len(s.b) {
		switch s.b[s.p] {
		case '.', 'e', 'E':
			return 0, false
		}
	}
	if neg {
		n = -n
	}
	return n, true
}

// value skips one JSON value of any kind, checking its grammar as
// encoding/json's scanner does (strings are not checked for UTF-8 there
// either), and returns its bytes.
func (s *scanner) value(depth int) ([]byte, bool) {
	start := s.p
	if s.p >= len(s.b) || depth > 200 {
		return nil, false
	}
	switch c := s.b[s.p]; {
	case c == '{':
		s.p++
		if s.wsLit(`}`) {
			return s.b[start:s.p], true
		}
		for {
			s.ws()
			if !s.string() || !s.wsLit(`:`) {
				return nil, false
			}
			s.ws()
			if _, ok := s.value(depth + 1); !ok {
				return nil, false
			}
			s.ws()
			if s.lit(`}`) {
				return s.b[start:s.p], true
			}
			if !s.lit(`,`) {
				return nil, false
			}
		}
	case c == '[':
		s.p++
		if s.wsLit(`]`) {
			return s.b[start:s.p], true
		}
		for {
			s.ws()
			if _, ok := s.value(depth + 1); !ok {
				return nil, false
			}
			s.ws()
			if s.lit(`]`) {
				return s.b[start:s.p], true
			}
			if !s.lit(`,`) {
				return nil, false
			}
		}
	case c == '"':
		if !s.string() {
			return nil, false
		}
	case c == 't':
		if !s.lit(`true`) {
			return nil, false
		}
	case c == 'f':
		if !s.lit(`false`) {
			return nil, false
		}
	case c == 'n':
		if !s.lit(`null`) {
			return nil, false
		}
	default:
		if !s.number() {
			return nil, false
		}
	}
	return s.b[start:s.p], true
}

// string skips a JSON string, escapes included.
func (s *scanner) string() bool {
	if !s.lit(`"`) {
		return false
	}
	for s.p < len(s.b) {
		c := s.b[s.p]
		s.p++
		switch {
		case c == '"':
			return true
		case c < 0x20:
			return false
		case c == '\\':
			if s.p >= len(s.b) {
				return false
			}
			e := s.b[s.p]
			s.p++
			switch e {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if len(s.b)-s.p < 4 {
					return false
				}
				for _, h := range s.b[s.p : s.p+4] {
					if !('0' <= h && h <= '9' || 'a' <= h && h <= 'f' || 'A' <= h && h <= 'F') {
						return false
					}
				}
				s.p += 4
			default:
				return false
			}
		}
	}
	return false
}

// number skips a JSON number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *scanner) number() bool {
	s.lit(`-`)
	digits := func() int {
		n := 0
		for s.p < len(s.b) && s.b[s.p] >= '0' && s.b[s.p] <= '9' {
			s.p++
			n++
		}
		return n
	}
	start := s.p
	n := digits()
	if n == 0 || (n > 1 && s.b[start] == '0') {
		return false
	}
	if s.lit(`.`) && digits() == 0 {
		return false
	}
	if s.lit(`e`) || s.lit(`E`) {
		if !s.lit(`+`) {
			s.lit(`-`)
		}
		if digits() == 0 {
			return false
		}
	}
	return true
}

// item reads one submit request object into r.
func (s *scanner) item(r *submitRequest) bool {
	if !s.lit(`{`) {
		return false
	}
	if s.wsLit(`}`) {
		return true
	}
	var seen uint32
	for {
		s.ws()
		key, ok := s.plainString()
		if !ok || !s.wsLit(`:`) {
			return false
		}
		s.ws()
		f, ok := submitFields[string(key)]
		if !ok || seen&(1<<f) != 0 {
			return false
		}
		seen |= 1 << f
		if !s.field(r, f) {
			return false
		}
		s.ws()
		if s.lit(`}`) {
			return true
		}
		if !s.lit(`,`) {
			return false
		}
	}
}

// The fields of a submit request the scanner reads (its JSON names, as
// encoding/json matches them exactly).
const (
	fID = iota
	fHandler
	fPayloadBase64
	fDelay
	fRunAt
	fPriority
	fTimeout
	fMaxAttempts
	fOverwrite
	fCron
	fTimezone
	fEvery
	fRepeats
	fUntil
	fRouteKey
	fRetention
	fTraceParent
	fTraceState
	fPayload
	fieldCount // how many there are
)

var submitFields = map[string]uint{
	"id": fID, "handler": fHandler, "payload_base64": fPayloadBase64, "delay": fDelay, "run_at": fRunAt,
	"priority": fPriority, "timeout": fTimeout, "max_attempts": fMaxAttempts, "overwrite": fOverwrite,
	"cron": fCron, "timezone": fTimezone, "every": fEvery, "repeats": fRepeats, "until": fUntil,
	"route_key": fRouteKey, "retention": fRetention, "traceparent": fTraceParent, "tracestate": fTraceState,
	"payload": fPayload,
}

// field reads the value of field f into r.
func (s *scanner) field(r *submitRequest, f uint) bool {
	switch f {
	case fPriority, fMaxAttempts, fRepeats:
		n, ok := s.int()
		if !ok {
			return false
		}
		switch f {
		case fPriority:
			r.Priority = &n
		case fMaxAttempts:
			r.MaxAttempts = &n
		default:
			r.Repeats = &n
		}
		return true
	case fOverwrite:
		switch {
		case s.lit(`true`):
			r.Overwrite = true
		case s.lit(`false`):
			r.Overwrite = false
		default:
			return false
		}
		return true
	case fPayload:
		v, ok := s.value(0)
		if !ok || string(v) == "null" { // null: left to encoding/json
			return false
		}
		r.Payload = append(json.RawMessage(nil), v...)
		return true
	}
	raw, ok := s.plainString()
	if !ok {
		return false
	}
	v := s.same(f, raw)
	switch f {
	case fID:
		r.ID = wireString{s: *v}
	case fHandler:
		r.Handler = wireString{s: *v}
	case fPayloadBase64:
		r.PayloadBase64 = v
	case fDelay:
		r.Delay = v
	case fRunAt:
		r.RunAt = v
	case fTimeout:
		r.Timeout = v
	case fCron:
		r.Cron = v
	case fTimezone:
		r.Timezone = v
	case fEvery:
		r.Every = v
	case fUntil:
		r.Until = v
	case fRouteKey:
		r.RouteKey = v
	case fRetention:
		r.Retention = v
	case fTraceParent:
		r.TraceParent = *v
	case fTraceState:
		r.TraceState = *v
	default:
		return false
	}
	return true
}
