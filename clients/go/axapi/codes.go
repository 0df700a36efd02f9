package axapi

import (
	"errors"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Error codes: the "code" of an error body. Clients branch on them.
const (
	// CodeBadRequest: well-formed JSON asking for something invalid (a
	// missing handler, a negative delay, an unknown field). HTTP 400.
	CodeBadRequest = "bad_request"
	// CodeInvalidJSON: the body is not valid JSON, or not a JSON object,
	// or one of its objects has the same key twice (outside a payload or
	// a result), or it is not valid UTF-8 (anywhere). HTTP 400.
	CodeInvalidJSON = "invalid_json"
	// CodeInvalidTraceparent: a submit's traceparent (header or field) is
	// not a valid W3C traceparent (ParseTraceParent). HTTP 400.
	CodeInvalidTraceparent = "invalid_traceparent"
	// CodeInvalidTracestate: a submit's tracestate (header or field) is
	// not a valid W3C tracestate (CheckTraceState), or a tracestate field
	// came without a traceparent. HTTP 400.
	CodeInvalidTracestate = "invalid_tracestate"
	// CodeInvalidShards: a submit's "shards" is invalid: not an object, a
	// field of the wrong type ("count": "8"), both or neither of count
	// and ask, a count or max outside 1..ShardsMax, ask without max, or
	// shards on a task whose id is too long for its shards' ids. HTTP 400.
	CodeInvalidShards = "invalid_shards"
	// CodeNotFound: the task (or route, or executor) does not exist. HTTP
	// 404.
	CodeNotFound = "not_found"
	// CodeHandlerNotFound: a handler named in the path has no task, no
	// executor and no pause (a typo, most likely). HTTP 404.
	CodeHandlerNotFound = "handler_not_found"
	// CodeMethodNotAllowed: the route exists, not for this method; the
	// answer carries an Allow header. HTTP 405.
	CodeMethodNotAllowed = "method_not_allowed"
	// CodeConflict: a task with the same id exists with a different spec
	// (and overwrite is not set), or an attempt is not the current one.
	// HTTP 409.
	CodeConflict = "conflict"
	// CodeTaskFinished: the command needs a task that is not finished (a
	// pause of a SUCCESS, DEAD, FAILED or CANCELLED task). HTTP 409.
	CodeTaskFinished = "task_finished"
	// CodePayloadTooLarge: a payload or request body is over its limit
	// (PayloadMaxBytes for a payload). HTTP 413.
	CodePayloadTooLarge = "payload_too_large"
	// CodeQueueFull: a bound is hit; try again after Retry-After. The body
	// may carry the backlog's depth and limit. HTTP 429.
	CodeQueueFull = "queue_full"
	// CodeNoLeader: no Raft leader is known, so a write cannot be committed
	// now. HTTP 503, Retry-After 1.
	CodeNoLeader = "no_leader"
	// CodeNotReady: the node cannot serve yet (catching up, starting,
	// shutting down), or the request ran out of time. HTTP 503.
	CodeNotReady = "not_ready"
	// CodeStorageUnavailable: the node's own storage cannot take writes
	// (disk full or below its reserve, not writable, a write failed); reads
	// still work. HTTP 503, Retry-After 5.
	CodeStorageUnavailable = "storage_unavailable"
	// CodeInternal: an unexpected failure; the detail is in the server's
	// log. HTTP 500.
	CodeInternal = "internal"
)

// ErrorCode is one row of the error table: a code, the HTTP status it is
// sent with, the message of an error without one of its own, and the
// Retry-After the server sends by default (0: none).
type ErrorCode struct {
	Code       string
	Status     int
	Message    string
	RetryAfter time.Duration
}

// errorTable is every error code of the API, in the order of the
// documentation (openapi.yaml's ErrorDetail.code enum, the Python client's
// ERROR_CODES).
var errorTable = []ErrorCode{
	{Code: CodeBadRequest, Status: http.StatusBadRequest, Message: "bad request"},
	{Code: CodeInvalidJSON, Status: http.StatusBadRequest, Message: "invalid json"},
	{Code: CodeInvalidTraceparent, Status: http.StatusBadRequest, Message: "invalid traceparent"},
	{Code: CodeInvalidTracestate, Status: http.StatusBadRequest, Message: "invalid tracestate"},
	{Code: CodeInvalidShards, Status: http.StatusBadRequest, Message: "invalid shards"},
	{Code: CodeNotFound, Status: http.StatusNotFound, Message: "not found"},
	{Code: CodeHandlerNotFound, Status: http.StatusNotFound, Message: "handler not found"},
	{Code: CodeMethodNotAllowed, Status: http.StatusMethodNotAllowed, Message: "method not allowed"},
	{Code: CodeConflict, Status: http.StatusConflict, Message: "conflict"},
	{Code: CodeTaskFinished, Status: http.StatusConflict, Message: "task finished"},
	{Code: CodePayloadTooLarge, Status: http.StatusRequestEntityTooLarge, Message: "payload too large"},
	{Code: CodeQueueFull, Status: http.StatusTooManyRequests, Message: "queue full", RetryAfter: time.Second},
	{Code: CodeNoLeader, Status: http.StatusServiceUnavailable, Message: "no leader", RetryAfter: time.Second},
	{Code: CodeNotReady, Status: http.StatusServiceUnavailable, Message: "not ready"},
	{Code: CodeStorageUnavailable, Status: http.StatusServiceUnavailable, Message: "storage unavailable", RetryAfter: 5 * time.Second},
	{Code: CodeInternal, Status: http.StatusInternalServerError, Message: "internal error"},
}

// ErrorTable returns every error code of the API with its status, default
// message and default Retry-After, in a stable order (a copy: changing it
// changes nothing).
func ErrorTable() []ErrorCode {
	return append([]ErrorCode(nil), errorTable...)
}

// Codes returns the code of every row of ErrorTable, in its order.
func Codes() []string {
	codes := make([]string, len(errorTable))
	for i, e := range errorTable {
		codes[i] = e.Code
	}
	return codes
}

// LookupCode returns the row of code; ok is false for a code the table does
// not have.
func LookupCode(code string) (ErrorCode, bool) {
	for _, e := range errorTable {
		if e.Code == code {
			return e, true
		}
	}
	return ErrorCode{}, false
}

// ErrorBody is the JSON body of every error answer:
// {"error": {"code": "...", "message": "..."}}.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is the "error" object of an error answer and of a failed
// batch item.
type ErrorDetail struct {
	// Code is one of the Code constants.
	Code    string `json:"code"`
	Message string `json:"message"`
	// Depth and Limit come with queue_full: the backlog and its bound.
	Depth int `json:"depth,omitempty"`
	Limit int `json:"limit,omitempty"`
}

// ParseRetryAfter reads a Retry-After header: delay seconds ("5"), or an
// HTTP date, counted from now. It returns 0 when the header is absent,
// malformed or in the past; seconds too many for a time.Duration are
// capped.
func ParseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseUint(v, 10, 63); err == nil || errors.Is(err, strconv.ErrRange) {
		const maxSecs = uint64(math.MaxInt64 / int64(time.Second))
		return time.Duration(min(secs, maxSecs)) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(now); d > 0 {
			return d
		}
	}
	return 0
}
