package axapi

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// W3C Trace Context (https://www.w3.org/TR/trace-context/, level 1): a
// submit may carry a traceparent and a tracestate (headers or fields); the
// sidecar keeps them with the task and sends each callback a traceparent
// with the task's trace id, a parent id of the attempt's own and the
// task's flags, and the tracestate unchanged.
const (
	// HeaderTraceState carries the vendor-specific part of the trace
	// context, as submitted, when the task has one.
	HeaderTraceState = "tracestate"

	// TraceStateMaxBytes and TraceStateMaxMembers bound a tracestate (the
	// W3C limits a receiver must keep): at most 512 bytes and 32 list
	// members.
	TraceStateMaxBytes   = 512
	TraceStateMaxMembers = 32
	// TraceParentMaxBytes bounds a traceparent of a later version than 00
	// (which may have fields after the flags); a version 00 one is 55 bytes.
	TraceParentMaxBytes = 256
)

// TraceParent is a parsed traceparent: version, trace id, parent id and
// flags. The zero value is not valid.
type TraceParent struct {
	Version  byte
	TraceID  [16]byte
	ParentID [8]byte
	Flags    byte
}

// String renders p as a version 00 traceparent:
// "00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>", lowercase.
func (p TraceParent) String() string {
	var b [55]byte
	AppendTraceParent(b[:0], p.TraceID, p.ParentID, p.Flags)
	return string(b[:])
}

// AppendTraceParent appends the version 00 traceparent of (traceID,
// parentID, flags) to dst, without allocating when dst has room for 55
// bytes.
func AppendTraceParent(dst []byte, traceID [16]byte, parentID [8]byte, flags byte) []byte {
	const digits = "0123456789abcdef"
	dst = append(dst, '0', '0', '-')
	for _, c := range traceID {
		dst = append(dst, digits[c>>4], digits[c&0x0f])
	}
	dst = append(dst, '-')
	for _, c := range parentID {
		dst = append(dst, digits[c>>4], digits[c&0x0f])
	}
	return append(dst, '-', digits[flags>>4], digits[flags&0x0f])
}

// ErrTraceContext is wrapped by the errors of ParseTraceParent and
// CheckTraceState.
var ErrTraceContext = errors.New("invalid trace context")

// ParseTraceParent parses a traceparent as W3C Trace Context level 1 asks
// a receiver to:
//
//   - version 00: exactly "00-" + 32 hex (trace id) + "-" + 16 hex (parent
//     id) + "-" + 2 hex (flags), 55 bytes, lowercase hex only;
//   - a later version (01 to fe; ff is invalid) is parsed the same way from
//     its first 55 bytes, which must be followed by nothing or by "-" (the
//     fields a later version adds are ignored); at most
//     TraceParentMaxBytes;
//   - a trace id or parent id of all zeros is invalid.
//
// Flags are kept as sent (bit 0 is "sampled"; the others are ignored, not
// refused, as the specification asks).
func ParseTraceParent(s string) (TraceParent, error) {
	var p TraceParent
	bad := func(format string, args ...any) (TraceParent, error) {
		return TraceParent{}, fmt.Errorf("%w: traceparent %q: %s", ErrTraceContext, clip(s), fmt.Sprintf(format, args...))
	}
	const want = `want "00-<32 lowercase hex trace id>-<16 lowercase hex parent id>-<2 hex flags>"`
	if len(s) < 55 {
		return bad("%d bytes, %s", len(s), want)
	}
	var v [1]byte
	if !lowerHex(s[0:2], v[:]) {
		return bad("version %q is not 2 lowercase hex digits", s[0:2])
	}
	p.Version = v[0]
	switch {
	case p.Version == 0xff:
		return bad("version ff is invalid")
	case p.Version == 0 && len(s) != 55:
		return bad("%d bytes, version 00 has 55: %s", len(s), want)
	case len(s) > TraceParentMaxBytes:
		return bad("%d bytes, the limit is %d", len(s), TraceParentMaxBytes)
	case len(s) > 55 && s[55] != '-':
		return bad("a later version's fields must follow the flags after a \"-\"")
	}
	if s[2] != '-' || s[35] != '-' || s[52] != '-' {
		return bad("fields must be separated by \"-\": %s", want)
	}
	if !lowerHex(s[3:35], p.TraceID[:]) {
		return bad("trace id %q is not 32 lowercase hex digits", s[3:35])
	}
	if !lowerHex(s[36:52], p.ParentID[:]) {
		return bad("parent id %q is not 16 lowercase hex digits", s[36:52])
	}
	var f [1]byte
	if !lowerHex(s[53:55], f[:]) {
		return bad("flags %q are not 2 lowercase hex digits", s[53:55])
	}
	p.Flags = f[0]
	if p.TraceID == [16]byte{} {
		return bad("the trace id is all zeros")
	}
	if p.ParentID == [8]byte{} {
		return bad("the parent id is all zeros")
	}
	return p, nil
}

// lowerHex decodes s, lowercase hex digits only, into dst (len(s)/2 bytes).
func lowerHex(s string, dst []byte) bool {
	if len(s) != 2*len(dst) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	_, err := hex.Decode(dst, []byte(s))
	return err == nil
}

// CheckTraceState checks a tracestate as W3C Trace Context level 1 defines
// it: at most TraceStateMaxBytes bytes and TraceStateMaxMembers list
// members, separated by "," with optional spaces or tabs around them (empty
// members are allowed and not counted); each member is key=value, with
//
//   - key: a lowercase letter, then up to 255 of [a-z0-9_*/-]; or
//     tenant@system, the tenant a lowercase letter or digit then up to 240
//     of those, the system a lowercase letter then up to 13 of them;
//   - value: up to 256 printable ASCII characters other than "," and "=",
//     not ending in a space;
//
// and no key twice. The empty string is valid (no tracestate).
func CheckTraceState(s string) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: tracestate %q: %s", ErrTraceContext, clip(s), fmt.Sprintf(format, args...))
	}
	if len(s) > TraceStateMaxBytes {
		return bad("%d bytes, the limit is %d", len(s), TraceStateMaxBytes)
	}
	var keys []string
	for member := range strings.SplitSeq(s, ",") {
		member = strings.Trim(member, " \t")
		if member == "" {
			continue
		}
		key, value, ok := strings.Cut(member, "=")
		if !ok {
			return bad("list member %q is not key=value", member)
		}
		if !traceStateKey(key) {
			return bad("key %q: want a lowercase letter then up to 255 of a-z 0-9 _ - * /, or tenant@system", key)
		}
		if !traceStateValue(value) {
			return bad("value %q of key %q: want 1 to 256 printable ASCII characters, no \",\" or \"=\", not ending in a space", value, key)
		}
		for _, k := range keys {
			if k == key {
				return bad("key %q appears twice", key)
			}
		}
		if keys = append(keys, key); len(keys) > TraceStateMaxMembers {
			return bad("more than %d list members", TraceStateMaxMembers)
		}
	}
	return nil
}

func traceStateKey(k string) bool {
	tenant, system, multi := strings.Cut(k, "@")
	if !multi {
		return len(k) >= 1 && len(k) <= 256 && isLower(k[0]) && keyChars(k[1:])
	}
	return len(tenant) >= 1 && len(tenant) <= 241 && (isLower(tenant[0]) || isDigit(tenant[0])) && keyChars(tenant[1:]) &&
		len(system) >= 1 && len(system) <= 14 && isLower(system[0]) && keyChars(system[1:])
}

func keyChars(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(isLower(c) || isDigit(c) || c == '_' || c == '-' || c == '*' || c == '/') {
			return false
		}
	}
	return true
}

func traceStateValue(v string) bool {
	if len(v) < 1 || len(v) > 256 || v[len(v)-1] == ' ' {
		return false
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 || c > 0x7e || c == ',' || c == '=' {
			return false
		}
	}
	return true
}

func isLower(c byte) bool { return c >= 'a' && c <= 'z' }
func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// clip shortens a value quoted in a message.
func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

// TaskTraceID is the trace id of a task submitted without a trace
// context: the first 16 bytes of the SHA-256 of its id, so that every run
// and attempt of a task is in one trace even then (its Task.TraceID).
func TaskTraceID(taskID string) [16]byte {
	sum := sha256.Sum256([]byte(taskID))
	id := [16]byte(sum[:16])
	if id == [16]byte{} {
		id[15] = 1 // all zeros is invalid; SHA-256 will not give it
	}
	return id
}

// AttemptParentID is the parent id of the traceparent an attempt's
// callback carries: the first 8 bytes of the SHA-256 of "ax-attempt", a
// zero byte, the task id, a zero byte, and the run and attempt numbers as
// 8-byte big-endian integers. Each attempt has its own, and a redelivery
// of the same attempt (the same task id, run and attempt) the same one.
func AttemptParentID(taskID string, run, attempt int) [8]byte {
	var buf [128]byte
	b := append(buf[:0], "ax-attempt\x00"...)
	b = append(b, taskID...)
	b = append(b, 0)
	b = binary.BigEndian.AppendUint64(b, uint64(run))
	b = binary.BigEndian.AppendUint64(b, uint64(attempt))
	sum := sha256.Sum256(b)
	id := [8]byte(sum[:8])
	if id == [8]byte{} {
		id[7] = 1
	}
	return id
}

// TraceFlagsUntraced are the flags of the traceparent of a task submitted
// without a trace context: sampled, so that an executor whose sampler
// follows its parent records its spans as it did when callbacks carried
// no traceparent.
const TraceFlagsUntraced = 0x01

// CallbackTraceParent is the traceparent of the callback of an attempt
// (task id, run, attempt) of a task submitted with traceparent submitted
// ("" for none): the version 00 traceparent with the submitted trace id
// and flags (or TaskTraceID and TraceFlagsUntraced) and the attempt's own
// parent id (AttemptParentID). It appends it to dst. submitted must have
// passed ParseTraceParent (the sidecar stores no other).
func CallbackTraceParent(dst []byte, submitted, taskID string, run, attempt int) []byte {
	traceID, flags := TraceOf(submitted, taskID)
	return AppendTraceParent(dst, traceID, AttemptParentID(taskID, run, attempt), flags)
}

// TraceOf returns the trace id and flags of a task: those of its
// submitted traceparent, else TaskTraceID(taskID) and TraceFlagsUntraced
// — of its parent's id for a shard task (ShardParent), so that a run's
// shards are in its trace.
func TraceOf(submitted, taskID string) (traceID [16]byte, flags byte) {
	if len(submitted) >= 55 {
		_, err1 := hex.Decode(traceID[:], []byte(submitted[3:35]))
		var f [1]byte
		_, err2 := hex.Decode(f[:], []byte(submitted[53:55]))
		if err1 == nil && err2 == nil && traceID != [16]byte{} {
			return traceID, f[0]
		}
	}
	if parent, _, ok := ShardParent(taskID); ok {
		taskID = parent
	}
	return TaskTraceID(taskID), TraceFlagsUntraced
}
