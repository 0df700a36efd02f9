package ipc

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/axsched/ax/clients/go/axapi"
)

// Error is an API error: a stable code, the HTTP status it is sent with, a
// message for humans and, for 429 and 503, how long the client should wait
// before trying again.
//
// The sentinels below (ErrInvalid, ErrNotFound, ...) are *Error values. An
// *Error matches a sentinel with errors.Is when their codes are equal, so an
// error made with Errorf(ErrNotFound, ...) or wrapped with
// fmt.Errorf("task %q: %w", id, ErrNotFound) both satisfy
// errors.Is(err, ErrNotFound).
type Error struct {
	// Code is the stable, machine-readable code sent as error.code
	// ("not_found"). Clients branch on it.
	Code string
	// Status is the HTTP status code the error is sent with.
	Status int
	// Message is the human-readable text sent as error.message.
	Message string
	// RetryAfter is sent as the Retry-After header, in whole seconds
	// (rounded up), when positive.
	RetryAfter time.Duration
	// Depth and Limit, for queue_full, are the backlog that was full and
	// its bound (sent as error.depth and error.limit: hints for the client's backoff).
	Depth, Limit int

	cause error // the error wrapped by Errorf's %w, if any
}

// The sentinels of the application API, one per row of the error table
// (axapi.ErrorTable: code, status, default message and Retry-After, shared
// with the clients). Every error the server sends has one of these codes.
var (
	// ErrInvalid is returned when a request is well-formed JSON but asks for
	// something invalid: a missing handler, a negative delay, an unknown field.
	ErrInvalid = tableError(axapi.CodeBadRequest)
	// ErrInvalidJSON is returned when a request body is not valid JSON (or not
	// a JSON object).
	ErrInvalidJSON = tableError(axapi.CodeInvalidJSON)
	// ErrInvalidTraceparent is returned when a submit's traceparent
	// (header or field) is not a valid W3C traceparent.
	ErrInvalidTraceparent = tableError(axapi.CodeInvalidTraceparent)
	// ErrInvalidTracestate is returned when a submit's tracestate (header
	// or field) is not a valid W3C tracestate, or comes without a
	// traceparent.
	ErrInvalidTracestate = tableError(axapi.CodeInvalidTracestate)
	// ErrInvalidShards is returned when a submit's shards field is
	// invalid (of the wrong type, or a field of it is; both or neither of
	// count and ask, a bound out of range).
	ErrInvalidShards = tableError(axapi.CodeInvalidShards)
	// ErrNotFound is returned when a task (or route) does not exist.
	ErrNotFound = tableError(axapi.CodeNotFound)
	// ErrHandlerNotFound is returned when a handler named in the path has
	// no task, no executor and no pause: probably a typo.
	ErrHandlerNotFound = tableError(axapi.CodeHandlerNotFound)
	// ErrMethodNotAllowed is returned when a route exists but not for the
	// request's method. The response carries an Allow header.
	ErrMethodNotAllowed = tableError(axapi.CodeMethodNotAllowed)
	// ErrConflict is returned when a task with the same id exists with a
	// different spec and overwrite is not set.
	ErrConflict = tableError(axapi.CodeConflict)
	// ErrTaskFinished is returned when a command needs a task that is
	// not finished (a pause of a SUCCESS, DEAD, FAILED or CANCELLED task).
	ErrTaskFinished = tableError(axapi.CodeTaskFinished)
	// ErrTooLarge is returned when a payload or request body is over its
	// limit (PayloadMaxBytes for a payload).
	ErrTooLarge = tableError(axapi.CodePayloadTooLarge)
	// ErrQueueFull is returned when a bound is hit (DESIGN.md section 9): the
	// client should try again after Retry-After. Use WithRetryAfter to give a
	// better hint than the default of one second.
	ErrQueueFull = tableError(axapi.CodeQueueFull)
	// ErrNoLeader is returned when no Raft leader is known, so a write cannot
	// be committed now. Retry-After: 1.
	ErrNoLeader = tableError(axapi.CodeNoLeader)
	// ErrNotReady is returned when the node cannot serve the request yet (it
	// is catching up with the leader, starting or shutting down), and by
	// GET /readyz when the node is not ready.
	ErrNotReady = tableError(axapi.CodeNotReady)
	// ErrStorageUnavailable is returned for every write while the node's
	// own storage cannot take writes: its data dir is full or below the
	// free-space reserve, not writable, or a badger or Raft log write
	// failed. The message names the cause. Reads keep working. Retry-After:
	// 5 (the node recovers by itself once the disk takes writes again).
	ErrStorageUnavailable = tableError(axapi.CodeStorageUnavailable)
	// ErrInternal is what every error without an API code becomes. Its
	// message is generic; the detail is logged by the server, never sent.
	ErrInternal = tableError(axapi.CodeInternal)
)

// tableError returns the sentinel of a code of axapi's error table. It
// panics (at init) for a code the table does not have.
func tableError(code string) *Error {
	row, ok := axapi.LookupCode(code)
	if !ok {
		panic("ipc: error code " + code + " is not in axapi's error table")
	}
	return &Error{Code: row.Code, Status: row.Status, Message: row.Message, RetryAfter: row.RetryAfter}
}

// errorTable lists the sentinel of every code, in the order of axapi's
// table (the order of the documentation).
var errorTable = func() []*Error {
	sentinels := []*Error{
		ErrInvalid, ErrInvalidJSON, ErrInvalidTraceparent, ErrInvalidTracestate, ErrInvalidShards, ErrNotFound, ErrHandlerNotFound, ErrMethodNotAllowed, ErrConflict,
		ErrTaskFinished, ErrTooLarge, ErrQueueFull, ErrNoLeader, ErrNotReady, ErrStorageUnavailable, ErrInternal,
	}
	table := make([]*Error, 0, len(sentinels))
	for _, code := range axapi.Codes() {
		for _, e := range sentinels {
			if e.Code == code {
				table = append(table, e)
			}
		}
	}
	if len(table) != len(sentinels) {
		panic("ipc: the sentinels and axapi's error table differ")
	}
	return table
}()

// ErrorCodes returns the code of every API error, in a stable order. Client
// libraries test that they know the same list.
func ErrorCodes() []string {
	codes := make([]string, len(errorTable))
	for i, e := range errorTable {
		codes[i] = e.Code
	}
	return codes
}

// Error returns the message, or the code when the message is empty.
func (e *Error) Error() string {
	if e.Message != "" {
		return e.Message
	}
	return e.Code
}

// Is reports whether target is an *Error with the same code, so that
// errors.Is(err, ErrNotFound) holds for any not_found error.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// Unwrap returns the error wrapped with %w in Errorf's format, if any.
func (e *Error) Unwrap() error { return e.cause }

// WithRetryAfter returns a copy of e that asks the client to wait d before
// trying again.
func (e *Error) WithRetryAfter(d time.Duration) *Error {
	c := *e
	c.RetryAfter = d
	return &c
}

// WithBacklog returns a copy of e carrying a backlog's depth and limit.
func (e *Error) WithBacklog(depth, limit int) *Error {
	c := *e
	c.Depth, c.Limit = depth, limit
	return &c
}

// Errorf returns an error with kind's code, status and Retry-After and a
// message formatted as by fmt.Errorf; a %w verb in format is unwrapped by
// errors.Is and errors.As.
//
//	return ipc.Errorf(ipc.ErrInvalid, "handler %q: not registered on this node", h)
//	return ipc.Errorf(ipc.ErrQueueFull, "backlog of %q is full (depth %d)", h, n).WithRetryAfter(2 * time.Second)
//
// It never returns nil.
func Errorf(kind *Error, format string, args ...any) *Error {
	err := fmt.Errorf(format, args...)
	e := &Error{Code: kind.Code, Status: kind.Status, Message: err.Error(), RetryAfter: kind.RetryAfter}
	switch err.(type) {
	case interface{ Unwrap() error }, interface{ Unwrap() []error }:
		e.cause = err // format had %w
	}
	return e
}

// MapError maps any error to what the server sends: HTTP status, code,
// message and Retry-After (zero for none).
//
//   - An error that is or wraps an *Error (see errors.As) takes that error's
//     status, code and Retry-After; the message is err.Error(), so context
//     added by wrapping ("task \"x\": not found") is kept.
//   - context.DeadlineExceeded (the request ran out of time, typically
//     because the cluster could not commit) maps to 503 not_ready with
//     Retry-After 1s; the message says a submit may still take effect.
//   - context.Canceled maps to 503 not_ready (the server is shutting down or
//     the client left).
//   - Anything else maps to 500 internal with a generic message; the caller
//     logs err.
//
// MapError(nil) returns 200 and empty strings.
func MapError(err error) (status int, code, message string, retryAfter time.Duration) {
	if err == nil {
		return http.StatusOK, "", "", 0
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Status, e.Code, err.Error(), e.RetryAfter
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return ErrNotReady.Status, ErrNotReady.Code,
			"request timed out before the cluster answered; a submit may still take effect, retry with the same id",
			time.Second
	case errors.Is(err, context.Canceled):
		return ErrNotReady.Status, ErrNotReady.Code, "request cancelled", time.Second
	}
	return ErrInternal.Status, ErrInternal.Code, ErrInternal.Message, 0
}

// errorBody is the JSON body of every error response:
// {"error": {"code": "...", "message": "..."}}.
type errorBody = axapi.ErrorBody

type errorDetail = axapi.ErrorDetail

// retryAfterSeconds renders d for the Retry-After header: whole seconds,
// rounded up, at least 1.
func retryAfterSeconds(d time.Duration) int64 {
	s := int64((d + time.Second - 1) / time.Second)
	if s < 1 {
		s = 1
	}
	return s
}
