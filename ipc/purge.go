package ipc

import (
	"bytes"
	"context"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/axsched/ax/clients/go/axapi"
)

// PurgeQuery selects the finished tasks POST /v1/tasks/purge deletes.
type PurgeQuery struct {
	// Handler, when not empty, is the handler the tasks must have.
	Handler string
	// State, when not empty, is one of axapi.StateSuccess, axapi.StateCancelled,
	// axapi.StateDead, axapi.StateFailed; empty: any finished state.
	State string
	// FinishedBefore: only tasks that finished before it (never zero:
	// the server fills the time of the request).
	FinishedBefore time.Time
	// Limit bounds the tasks deleted by one request: 1..PurgeLimitMax,
	// axapi.PurgeLimitDefault when the client gives none.
	Limit int
	// Cursor, when not empty, is the next_cursor of an earlier answer:
	// the purge reads on from where that one stopped (opaque; the backend
	// decodes it and refuses one it did not make with ErrInvalid).
	Cursor string
}

// purgeRequest is the JSON body of POST /v1/tasks/purge.
type purgeRequest struct {
	Handler        *string `json:"handler"`
	State          *string `json:"state"`
	FinishedBefore *string `json:"finished_before"`
	Limit          *int    `json:"limit"`
	Cursor         *string `json:"cursor"`
}

// DecodePurge decodes and validates the body of POST /v1/tasks/purge,
// {"handler", "state", "finished_before", "limit", "cursor"}, every field
// optional (an empty body is {}): state one of SUCCESS, CANCELLED, DEAD,
// FAILED; finished_before an RFC 3339 time (now when absent); limit
// 1..PurgeLimitMax (axapi.PurgeLimitDefault when absent); cursor at most
// axapi.CursorMaxBytes (its content is the backend's to check). Errors
// wrap ErrInvalidJSON or ErrInvalid
// and name the field; a body that is not valid UTF-8 is ErrInvalidJSON
// (checkUTF8).
func DecodePurge(body []byte, now time.Time) (res PurgeQuery, err error) {
	defer checkUTF8(body, &res, &err, "")
	q := PurgeQuery{FinishedBefore: now.UTC(), Limit: axapi.PurgeLimitDefault}
	var req purgeRequest
	if len(bytes.TrimSpace(body)) > 0 {
		if err := decodeStrict(body, &req); err != nil {
			return PurgeQuery{}, err
		}
	}
	if req.Handler != nil {
		if err := checkName("handler", *req.Handler, axapi.HandlerMaxBytes); err != nil {
			return PurgeQuery{}, err
		}
		q.Handler = *req.Handler
	}
	if req.State != nil {
		switch *req.State {
		case axapi.StateSuccess, axapi.StateCancelled, axapi.StateDead, axapi.StateFailed:
			q.State = *req.State
		default:
			return PurgeQuery{}, Errorf(ErrInvalid, "state: must be one of SUCCESS, CANCELLED, DEAD, FAILED (a finished state), got %q", *req.State)
		}
	}
	if req.FinishedBefore != nil {
		t, err := time.Parse(time.RFC3339Nano, *req.FinishedBefore)
		if err != nil {
			return PurgeQuery{}, Errorf(ErrInvalid, "finished_before: must be an RFC 3339 time like \"2026-01-02T15:04:05Z\", got %q", *req.FinishedBefore)
		}
		if !t.After(time.Unix(0, 0)) {
			return PurgeQuery{}, Errorf(ErrInvalid, "finished_before: must be after 1970-01-01T00:00:00Z, got %q", *req.FinishedBefore)
		}
		q.FinishedBefore = t.UTC()
	}
	if req.Limit != nil {
		if n := *req.Limit; n < 1 || n > axapi.PurgeLimitMax {
			return PurgeQuery{}, Errorf(ErrInvalid, "limit: must be between 1 and %d, got %d", axapi.PurgeLimitMax, n)
		}
		q.Limit = *req.Limit
	}
	if req.Cursor != nil && *req.Cursor != "" {
		if err := checkName("cursor", *req.Cursor, axapi.CursorMaxBytes); err != nil {
			return PurgeQuery{}, err
		}
		q.Cursor = *req.Cursor
	}
	return q, nil
}

// ParseRetention parses the "retention" field of a submit: a Go duration,
// not negative; 0 means the node's retention flags decide. Errors wrap
// ErrInvalid.
func ParseRetention(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, Errorf(ErrInvalid, "retention: must be a Go duration like \"24h\", got %q", s)
	}
	if d < 0 {
		return 0, Errorf(ErrInvalid, "retention: must not be negative, got %q", s)
	}
	return d, nil
}

// retention decodes the submit's retention field.
func (r *submitRequest) retention(s *TaskSpec) error {
	if r.Retention == nil {
		return nil
	}
	d, err := ParseRetention(*r.Retention)
	if err != nil {
		return err
	}
	s.Retention = d
	return nil
}

// purgeTasks answers POST /v1/tasks/purge: 200 {"purged": n, "more": bool,
// "next_cursor": "..."}, next_cursor present when more is.
func (s *Server) purgeTasks(rctx context.Context, ctx *fasthttp.RequestCtx, _ string) error {
	// The filters are the body's. A query string (the way GET /v1/tasks
	// takes them) is refused: ignored, ?handler=h&state=DEAD with no body
	// would purge every finished task.
	if err := noQuery(ctx, "POST /v1/tasks/purge", "send the filters (handler, state, finished_before, limit, cursor) in the JSON body"); err != nil {
		return err
	}
	q, err := DecodePurge(ctx.PostBody(), time.Now())
	if err != nil {
		return err
	}
	res, err := s.backend.PurgeTasks(rctx, q)
	if err != nil {
		return err
	}
	s.writeJSON(ctx, fasthttp.StatusOK, res)
	return nil
}

// purgeTask answers DELETE /v1/tasks/{id}?purge=true: 200 {"purged": 1}
// for a finished task, 409 conflict for one that is not finished, 404.
func (s *Server) purgeTask(rctx context.Context, ctx *fasthttp.RequestCtx, id string) error {
	n, err := s.backend.PurgeTask(rctx, id)
	if err != nil {
		return err
	}
	s.writeJSON(ctx, fasthttp.StatusOK, struct {
		Purged int `json:"purged"`
	}{n})
	return nil
}

// purgeParam reads DELETE /v1/tasks/{id}'s (and /v1/flows/{id}'s) purge
// query parameter: true deletes the finished task, false (or absent)
// cancels it. Any other parameter, or purge twice, is refused: a typo
// (?Purge=true, ?prune=true) would otherwise cancel a waiting task that
// was meant to be purged, or not, and never say so.
func purgeParam(ctx *fasthttp.RequestCtx) (bool, error) {
	v, ok, err := onlyParam(ctx, "purge")
	if err != nil || !ok {
		return false, err
	}
	switch v {
	case "true", "1":
		return true, nil
	case "false", "0":
		return false, nil
	default:
		return false, Errorf(ErrInvalid, "purge: want true or false, got %q", v)
	}
}

// onlyParam reads the one query parameter name a route takes: its value
// and whether it was given. Another parameter, name given twice, or a
// query string checkQuery refuses is 400 bad_request, as GET /v1/tasks
// refuses them.
func onlyParam(ctx *fasthttp.RequestCtx, name string) (val string, ok bool, err error) {
	args, err := queryArgs(ctx)
	if err != nil {
		return "", false, err
	}
	for k, v := range args {
		if string(k) != name {
			return "", false, Errorf(ErrInvalid, "unknown query parameter %q; known: %s", k, name)
		}
		if ok {
			return "", false, Errorf(ErrInvalid, "%s: give it at most once", name)
		}
		val, ok = string(v), true
	}
	return val, ok, nil
}
