package peerapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
)

// Error is an error answer of the peer API: the HTTP status it is sent
// with, a stable code, a message and, for some codes, the detail the
// caller needs to rebuild the error it stands for. Errors made by Errorf
// or wrapping a sentinel below keep their code; errors.Is matches two
// *Error values when their codes are equal.
type Error struct {
	// Status is the HTTP status of the answer.
	Status int `json:"-"`
	// Code is one of the Code* constants.
	Code string `json:"code"`
	// Message is for humans (and logs).
	Message string `json:"message"`
	// Handler, Depth and Limit come with queue_full: the handler whose
	// backlog is full, its depth and its bound (due runs).
	Handler string `json:"handler,omitempty"`
	Depth   int    `json:"depth,omitempty"`
	Limit   int    `json:"limit,omitempty"`
	// Cause and SinceMs come with storage_unavailable: what failed, and
	// since when (Unix ms) the node takes no writes.
	Cause   string `json:"cause,omitempty"`
	SinceMs int64  `json:"since_ms,omitempty"`
}

// The codes of the peer API. Those the application API has too are spelled
// as there (package ipc; errors_test.go checks).
const (
	// CodeNotLeader: the node does not lead; look the leader up and try
	// there (421 Misdirected Request).
	CodeNotLeader = "not_leader"
	// CodeQueueFull: a handler's backlog is full (429; Handler, Depth,
	// Limit).
	CodeQueueFull = "queue_full"
	// CodeStorageUnavailable: the leader's storage takes no writes (503;
	// Cause, SinceMs).
	CodeStorageUnavailable = "storage_unavailable"
	// CodeNoSuchMember: a removal names a node that is not in the
	// configuration (404).
	CodeNoSuchMember = "no_such_member"
	// CodeLastVoter: a removal would leave no voter (409).
	CodeLastVoter = "last_voter"
	// CodeDuplicateID: a join names the id of a live member at another
	// address: a second node started with the same node id (409).
	CodeDuplicateID = "duplicate_node_id"
	// CodeNotFound: no such task, or no such route (404).
	CodeNotFound = "not_found"
	// CodeBadRequest: the body is not what the path wants (400).
	CodeBadRequest = "bad_request"
	// CodeUnauthorized: the cluster token is missing or wrong (401).
	CodeUnauthorized = "unauthorized"
	// CodeUnavailable: the node could not do it now (503): a Raft error,
	// the request's time ran out. The message says why.
	CodeUnavailable = "unavailable"
	// CodeInternal: anything else (500).
	CodeInternal = "internal"
)

// Sentinels for errors.Is; wrap them with fmt.Errorf("...: %w", ...) or
// copy them with Errorf.
var (
	ErrNotLeader          = &Error{Status: http.StatusMisdirectedRequest, Code: CodeNotLeader, Message: "not the leader"}
	ErrQueueFull          = &Error{Status: http.StatusTooManyRequests, Code: CodeQueueFull, Message: "queue full"}
	ErrStorageUnavailable = &Error{Status: http.StatusServiceUnavailable, Code: CodeStorageUnavailable, Message: "storage unavailable"}
	ErrNoSuchMember       = &Error{Status: http.StatusNotFound, Code: CodeNoSuchMember, Message: "no such member"}
	ErrLastVoter          = &Error{Status: http.StatusConflict, Code: CodeLastVoter, Message: "cannot remove the last voter of the cluster"}
	ErrDuplicateID        = &Error{Status: http.StatusConflict, Code: CodeDuplicateID, Message: "another live member has this node id"}
	ErrNotFound           = &Error{Status: http.StatusNotFound, Code: CodeNotFound, Message: "not found"}
	ErrBadRequest         = &Error{Status: http.StatusBadRequest, Code: CodeBadRequest, Message: "bad request"}
	ErrUnauthorized       = &Error{Status: http.StatusUnauthorized, Code: CodeUnauthorized, Message: "missing or wrong cluster token (" + TokenHeader + ")"}
	ErrUnavailable        = &Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, Message: "unavailable"}
	ErrInternal           = &Error{Status: http.StatusInternalServerError, Code: CodeInternal, Message: "internal error"}
)

// byCode finds the sentinel of a code (nil for an unknown one).
var byCode = func() map[string]*Error {
	m := map[string]*Error{}
	for _, e := range []*Error{ErrNotLeader, ErrQueueFull, ErrStorageUnavailable, ErrNoSuchMember, ErrLastVoter,
		ErrDuplicateID, ErrNotFound, ErrBadRequest, ErrUnauthorized, ErrUnavailable, ErrInternal} {
		m[e.Code] = e
	}
	return m
}()

// Error returns the message, or the code when there is none.
func (e *Error) Error() string {
	if e.Message != "" {
		return e.Message
	}
	return e.Code
}

// Is reports whether target is an *Error with the same code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// Errorf returns an error with kind's status and code and a message
// formatted as by fmt.Sprintf. It never returns nil.
func Errorf(kind *Error, format string, args ...any) *Error {
	return &Error{Status: kind.Status, Code: kind.Code, Message: fmt.Sprintf(format, args...)}
}

// ErrorOf is what a server answers for err: err's *Error (from errors.As)
// with err's full message, else an error with fallback's status and code
// and err's message.
func ErrorOf(err error, fallback *Error) *Error {
	var e *Error
	if errors.As(err, &e) {
		c := *e
		c.Message = err.Error()
		if c.Status == 0 {
			c.Status = statusOf(c.Code)
		}
		return &c
	}
	return Errorf(fallback, "%s", err.Error())
}

func statusOf(code string) int {
	if s := byCode[code]; s != nil {
		return s.Status
	}
	return http.StatusInternalServerError
}

// errorBody is the JSON of every error answer. A queue_full answer also
// has the backlog at the top level, where nodes before the codes read it.
type errorBody struct {
	Error   *Error `json:"error"`
	Handler string `json:"handler,omitempty"`
	Depth   int    `json:"depth,omitempty"`
	Limit   int    `json:"limit,omitempty"`
}

// decodeError reads an error answer. A body in the current shape gives
// its code; an older node's (a bare {"error": "text"}, or the backlog of
// a 429 at the top level) gets the code legacy names for the status, else
// one from the status alone.
func decodeError(status int, body []byte, legacy map[int]string) *Error {
	var cur struct {
		Error json.RawMessage `json:"error"`
		// An older node's 429 body.
		Handler string `json:"handler"`
		Depth   int    `json:"depth"`
		Limit   int    `json:"limit"`
	}
	_ = json.Unmarshal(body, &cur)
	var e Error
	if len(cur.Error) > 0 && cur.Error[0] == '{' && json.Unmarshal(cur.Error, &e) == nil && e.Code != "" {
		e.Status = status
		if e.Message == "" {
			e.Message = statusMessage(status)
		}
		return &e
	}
	var msg string
	if json.Unmarshal(cur.Error, &msg) != nil {
		msg = string(body)
	}
	code := legacy[status]
	switch {
	case code != "":
	case status == http.StatusMisdirectedRequest:
		code = CodeNotLeader
	case status == http.StatusServiceUnavailable:
		code = CodeUnavailable
	case status == http.StatusBadRequest:
		code = CodeBadRequest
	case status == http.StatusUnauthorized:
		code = CodeUnauthorized
	default:
		code = CodeInternal
	}
	e = Error{Status: status, Code: code, Message: msg, Handler: cur.Handler, Depth: cur.Depth, Limit: cur.Limit}
	if e.Message == "" {
		e.Message = statusMessage(status)
	}
	return &e
}

// statusMessage is the message of an error answer that came without one.
func statusMessage(status int) string {
	if t := http.StatusText(status); t != "" {
		return t
	}
	return fmt.Sprintf("HTTP status %d", status) // one net/http has no text for
}
