package axapi

import (
	"bytes"
	"encoding/json"
	"strconv"
	"time"
)

// appendTaskJSON appends to b what encoding/json writes for v (with HTML
// escaping off), field by field in declaration order, without reflection:
// a submit's answer and every item of a batch's answer is a task view, and
// the reflective encoder cost about 12 % of a node's CPU on the batch path.
// Strings of plain ASCII are written directly; any other string, and the
// nested values (labels, backoff, shards, result), go through
// encoding/json itself, so the bytes are the same (TestTaskJSONSameAsReflection).
// ok is false when a time is outside what time.Time.MarshalJSON accepts;
// the caller then uses encoding/json, which reports the error.
func appendTaskJSON(b []byte, v *taskJSON) (_ []byte, ok bool) {
	t := &v.taskAlias
	b = append(b, `{"id":`...)
	b = AppendJSONString(b, t.ID)
	b = append(b, `,"handler":`...)
	b = AppendJSONString(b, t.Handler)
	b = append(b, `,"state":`...)
	b = AppendJSONString(b, t.State)
	b = append(b, `,"priority":`...)
	b = strconv.AppendInt(b, int64(t.Priority), 10)
	b = append(b, `,"attempts":`...)
	b = strconv.AppendInt(b, int64(t.Attempts), 10)
	b = append(b, `,"max_attempts":`...)
	b = strconv.AppendInt(b, int64(t.MaxAttempts), 10)
	b = append(b, `,"timeout":`...)
	b = AppendJSONString(b, t.Timeout)
	b = appendOmitString(b, `,"delay":`, t.Delay)
	if b, ok = appendOmitTime(b, `,"run_at":`, t.RunAt); !ok {
		return b, false
	}
	if b, ok = appendOmitTime(b, `,"next_run_at":`, t.NextRunAt); !ok {
		return b, false
	}
	b = appendOmitString(b, `,"last_error":`, t.LastError)
	b = appendOmitString(b, `,"node":`, t.Node)
	b = appendOmitString(b, `,"waiting_reason":`, t.WaitingReason)
	if b, ok = appendOmitTime(b, `,"waiting_since":`, t.WaitingSince); !ok {
		return b, false
	}
	if b, ok = appendOmitTime(b, `,"waiting_until":`, t.WaitingUntil); !ok {
		return b, false
	}
	b = appendOmitString(b, `,"cron":`, t.Cron)
	b = appendOmitString(b, `,"timezone":`, t.Timezone)
	b = appendOmitString(b, `,"every":`, t.Every)
	b = appendOmitInt(b, `,"repeats":`, t.Repeats)
	if b, ok = appendOmitTime(b, `,"until":`, t.Until); !ok {
		return b, false
	}
	b = append(b, `,"run":`...)
	b = strconv.AppendInt(b, int64(t.Run), 10)
	b = append(b, `,"snoozes":`...)
	b = strconv.AppendInt(b, int64(t.Snoozes), 10)
	if t.Backoff != nil {
		if b, ok = appendReflect(b, `,"backoff":`, t.Backoff); !ok {
			return b, false
		}
	}
	b = appendOmitString(b, `,"route_key":`, t.RouteKey)
	if len(t.Labels) > 0 {
		if b, ok = appendReflect(b, `,"labels":`, t.Labels); !ok {
			return b, false
		}
	}
	if b, ok = appendTime(b, `,"created_at":`, t.CreatedAt); !ok {
		return b, false
	}
	if b, ok = appendTime(b, `,"updated_at":`, t.UpdatedAt); !ok {
		return b, false
	}
	if b, ok = appendOmitTime(b, `,"finished_at":`, t.FinishedAt); !ok {
		return b, false
	}
	b = appendOmitString(b, `,"retention":`, t.Retention)
	if t.Shards != nil {
		if b, ok = appendReflect(b, `,"shards":`, t.Shards); !ok {
			return b, false
		}
	}
	if t.ShardIndex != nil {
		b = append(b, `,"shard_index":`...)
		b = strconv.AppendInt(b, int64(*t.ShardIndex), 10)
	}
	b = appendOmitInt(b, `,"shard_total":`, t.ShardTotal)
	if t.Paused {
		b = append(b, `,"paused":true`...)
	}
	b = appendOmitInt(b, `,"last_run":`, t.LastRun)
	if len(t.Result) > 0 {
		if b, ok = appendReflect(b, `,"result":`, t.Result); !ok {
			return b, false
		}
	}
	b = appendOmitString(b, `,"result_base64":`, t.ResultBase64)
	if t.ResultTruncated {
		b = append(b, `,"result_truncated":true`...)
	}
	b = appendOmitString(b, `,"trace_id":`, t.TraceID)
	b = appendOmitString(b, `,"traceparent":`, t.TraceParent)
	b = appendOmitString(b, `,"tracestate":`, t.TraceState)
	b = appendOmitString(b, `,"payload_base64":`, v.PayloadB64)
	return append(b, '}'), true
}

func appendOmitString(b []byte, key, s string) []byte {
	if s == "" {
		return b
	}
	return AppendJSONString(append(b, key...), s)
}

func appendOmitInt(b []byte, key string, n int) []byte {
	if n == 0 {
		return b
	}
	return strconv.AppendInt(append(b, key...), int64(n), 10)
}

func appendOmitTime(b []byte, key string, t *time.Time) ([]byte, bool) {
	if t == nil {
		return b, true
	}
	return appendTime(b, key, *t)
}

// appendTime writes t as time.Time.MarshalJSON does (RFC 3339 with
// nanoseconds, quoted: the same bytes, as AppendFormat with RFC3339Nano
// writes them), without its allocation; false when MarshalJSON refuses t:
// a year outside 0–9999, or a zone offset of 24 hours or more.
func appendTime(b []byte, key string, t time.Time) ([]byte, bool) {
	if y := t.Year(); y < 0 || y > 9999 {
		return b, false
	}
	if _, off := t.Zone(); off <= -24*3600 || off >= 24*3600 {
		return b, false
	}
	b = append(append(b, key...), '"')
	return append(t.AppendFormat(b, time.RFC3339Nano), '"'), true
}

// appendReflect writes v with encoding/json (HTML escaping off, as the
// view's encoder has it); false when it fails.
func appendReflect(b []byte, key string, v any) ([]byte, bool) {
	enc, err := marshalNoHTML(v)
	if err != nil {
		return b, false
	}
	return append(append(b, key...), enc...), true
}

// AppendJSONString appends s to b as a JSON string, as encoding/json
// writes it without HTML escaping. Plain printable ASCII without '"' or
// '\\' is written as it is, with no allocation; anything else goes
// through encoding/json.
func AppendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x80 || c == '"' || c == '\\' {
			enc, _ := marshalNoHTML(s) // a string always encodes
			return append(b, enc...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// marshalNoHTML is json.Marshal without HTML escaping and without the
// trailing newline of an Encoder.
func marshalNoHTML(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
