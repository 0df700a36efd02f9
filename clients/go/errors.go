package ax

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/axsched/ax/clients/go/axapi"
)

// Sentinel errors. Errors returned by a Client match them with errors.Is; an
// *APIError matches the sentinel of its Code (see APIError.Is).
var (
	// ErrNotFound is returned when the task (or other resource) does not
	// exist: code "not_found", HTTP 404.
	ErrNotFound = errors.New("ax: not found")

	// ErrConflict is returned by Submit (and as a SubmitBatch item's error)
	// when a task with the same id exists with a different spec and
	// SubmitRequest.Overwrite is not set; by Retry for a task that is not
	// DEAD or FAILED; and by Heartbeat and ReportResult when the attempt is
	// not the task's current running attempt (it timed out, was cancelled,
	// or was already reported): code "conflict", HTTP 409.
	ErrConflict = errors.New("ax: conflict")

	// ErrInvalid is returned when the sidecar rejects a request as malformed
	// (codes "bad_request" and "invalid_json", HTTP 400), and when the client
	// refuses to send a request that cannot be valid (an empty task id, both
	// Payload and PayloadBytes set).
	ErrInvalid = errors.New("ax: invalid request")

	// ErrQueueFull is returned when the sidecar applies backpressure: code
	// "queue_full", HTTP 429. APIError.RetryAfter says when to try again. The
	// client does not retry these by itself.
	ErrQueueFull = errors.New("ax: queue full")

	// ErrNoLeader is returned when the cluster has no Raft leader (an
	// election is running, or quorum is lost): code "no_leader", HTTP 503.
	// The client retries such answers a few times (honouring Retry-After and
	// the context) before returning this error.
	ErrNoLeader = errors.New("ax: no leader")

	// ErrNotReady is returned by Client.Ready when the sidecar is up but not
	// ready to serve (no leader known yet, or its state has not caught up):
	// code "not_ready", HTTP 503.
	ErrNotReady = errors.New("ax: not ready")

	// ErrTooLarge is returned when the request body or the payload exceeds
	// the sidecar's limit (1 MiB of payload by default): code
	// "payload_too_large", HTTP 413.
	ErrTooLarge = errors.New("ax: payload too large")

	// ErrUnavailable is returned when the client gets no answer from the
	// sidecar: the socket does not exist, nobody listens on it, or the
	// connection broke before a response arrived. The error message names the
	// socket path; the underlying network error is wrapped as well, so
	// errors.Is(err, syscall.ENOENT) works. When the connection could not be
	// opened the request was not sent; when it broke later, a Submit may or
	// may not have been applied (submitting again with the same id is safe).
	ErrUnavailable = errors.New("ax: sidecar unavailable")
)

// Error codes of the API, the "code" field of an error body: the codes of
// axapi's error table (axapi.ErrorTable), which the sidecar serves.
const (
	CodeBadRequest  = axapi.CodeBadRequest
	CodeInvalidJSON = axapi.CodeInvalidJSON
	// CodeInvalidTraceparent and CodeInvalidTracestate (HTTP 400, matching
	// ErrInvalid): a submit's trace context is not valid W3C Trace Context.
	CodeInvalidTraceparent = axapi.CodeInvalidTraceparent
	CodeInvalidTracestate  = axapi.CodeInvalidTracestate
	// CodeInvalidShards (HTTP 400, matching ErrInvalid): a submit's
	// Shards is invalid (both or neither of Count and Ask, a bound out of
	// range).
	CodeInvalidShards   = axapi.CodeInvalidShards
	CodeNotFound        = axapi.CodeNotFound
	CodeConflict        = axapi.CodeConflict
	CodePayloadTooLarge = axapi.CodePayloadTooLarge
	CodeQueueFull       = axapi.CodeQueueFull
	CodeNoLeader        = axapi.CodeNoLeader
	CodeNotReady        = axapi.CodeNotReady
	// CodeStorageUnavailable (HTTP 503, with Retry-After): the node's disk
	// cannot take writes (full, not writable); it refuses writes until it
	// recovers and still serves reads. Check APIError.Code for it.
	CodeStorageUnavailable = axapi.CodeStorageUnavailable
	CodeMethodNotAllowed   = axapi.CodeMethodNotAllowed
	CodeInternal           = axapi.CodeInternal
	// CodeHandlerNotFound (HTTP 404, matches ErrNotFound): PauseHandler or
	// ResumeHandler named a handler with no task, no executor and no pause.
	CodeHandlerNotFound = axapi.CodeHandlerNotFound
	// CodeTaskFinished (HTTP 409, matches ErrConflict): PauseTask of a
	// finished task.
	CodeTaskFinished = axapi.CodeTaskFinished
)

// codeSentinels maps an API error code to the sentinel it matches.
var codeSentinels = map[string]error{
	CodeBadRequest:         ErrInvalid,
	CodeInvalidJSON:        ErrInvalid,
	CodeInvalidTraceparent: ErrInvalid,
	CodeInvalidTracestate:  ErrInvalid,
	CodeInvalidShards:      ErrInvalid,
	CodeNotFound:           ErrNotFound,
	CodeHandlerNotFound:    ErrNotFound,
	CodeTaskFinished:       ErrConflict,
	CodeConflict:           ErrConflict,
	CodePayloadTooLarge:    ErrTooLarge,
	CodeQueueFull:          ErrQueueFull,
	CodeNoLeader:           ErrNoLeader,
	CodeNotReady:           ErrNotReady,
}

// statusSentinels is the fallback used when an error answer carries no code
// the client knows (for example a plain-text body from something in between).
var statusSentinels = map[int]error{
	http.StatusBadRequest:            ErrInvalid,
	http.StatusNotFound:              ErrNotFound,
	http.StatusConflict:              ErrConflict,
	http.StatusRequestEntityTooLarge: ErrTooLarge,
	http.StatusTooManyRequests:       ErrQueueFull,
}

// APIError is an error answer of the sidecar: an HTTP status of 400 or more
// with a body {"error": {"code": "...", "message": "..."}}.
//
// Use errors.Is with the sentinels (ErrNotFound, ErrConflict, ...) to tell
// kinds apart, and errors.As to get at the fields:
//
//	var apiErr *ax.APIError
//	if errors.As(err, &apiErr) && apiErr.RetryAfter > 0 {
//		time.Sleep(apiErr.RetryAfter)
//	}
//
// A failed item of SubmitBatch is an *APIError too (BatchResult.Err), with
// the item's status and code and no RetryAfter.
type APIError struct {
	// Status is the HTTP status code (404, 409, 429, 503, ...).
	Status int
	// Code is the machine-readable error code, one of the Code constants
	// ("not_found", "conflict", ...). It is empty when the body was not an
	// ax error body.
	Code string
	// Message is the human-readable explanation given by the sidecar.
	Message string
	// RetryAfter is the Retry-After header of the answer (sent with 429 and
	// 503), zero when absent.
	RetryAfter time.Duration
	// Depth and Limit come with "queue_full" (ErrQueueFull) when a handler's
	// backlog is full: the due runs not yet delivered, and the bound
	// (the sidecar's --backlog-limit). Zero otherwise.
	Depth, Limit int
}

// Error returns "ax: <message> (<code>, http <status>)", with ", retry
// after <duration>" before the closing parenthesis when the answer carried
// a Retry-After.
func (e *APIError) Error() string {
	msg := e.Message
	if msg == "" {
		msg = strings.ToLower(http.StatusText(e.Status))
	}
	code := e.Code
	if code == "" {
		code = "no code"
	}
	if e.RetryAfter > 0 {
		return fmt.Sprintf("ax: %s (%s, http %d, retry after %v)", msg, code, e.Status, e.RetryAfter)
	}
	return fmt.Sprintf("ax: %s (%s, http %d)", msg, code, e.Status)
}

// Is reports whether target is the sentinel that matches e's Code (for
// example ErrNotFound for "not_found"). When the code is empty or unknown,
// the HTTP status decides (404 → ErrNotFound, 409 → ErrConflict, 400 →
// ErrInvalid, 413 → ErrTooLarge, 429 → ErrQueueFull).
func (e *APIError) Is(target error) bool {
	if s, ok := codeSentinels[e.Code]; ok {
		return s == target
	}
	if s, ok := statusSentinels[e.Status]; ok {
		return s == target
	}
	return false
}

// unavailableError is the error of a request that got no answer from the
// sidecar. It matches ErrUnavailable and unwraps to the network error.
type unavailableError struct {
	socket string
	dial   bool // the connection could not be opened
	err    error
}

func (e *unavailableError) Error() string {
	cause := e.err
	var opErr *net.OpError
	if errors.As(e.err, &opErr) && opErr.Err != nil {
		cause = opErr.Err // "connect: no such file or directory", without "dial unix <path>:"
	}
	if e.dial {
		return fmt.Sprintf("ax: cannot reach sidecar at %s: %v", e.socket, cause)
	}
	return fmt.Sprintf("ax: lost connection to sidecar at %s: %v", e.socket, cause)
}

func (e *unavailableError) Unwrap() error { return e.err }

func (e *unavailableError) Is(target error) bool { return target == ErrUnavailable }
