package ipc

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"

	"github.com/valyala/fasthttp"

	"github.com/axsched/ax/clients/go/axapi"
)

// listTasks answers GET /v1/tasks?handler=&state=&limit=&cursor=:
// {"tasks": [...], "next_cursor": "..."}, next_cursor absent on the last
// page.
func (s *Server) listTasks(rctx context.Context, ctx *fasthttp.RequestCtx, _ string) error {
	args, err := queryArgs(ctx)
	if err != nil {
		return err
	}
	q, err := parseListQuery(args)
	if err != nil {
		return err
	}
	page, err := s.backend.List(rctx, q)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	buf.WriteString(`{"tasks":[`)
	for i, t := range page.Tasks {
		if i > 0 {
			buf.WriteByte(',')
		}
		b, err := t.MarshalJSON()
		if err != nil {
			return fmt.Errorf("encode task view %q: %w", t.ID, err)
		}
		buf.Write(b)
	}
	buf.WriteByte(']')
	if page.NextCursor != "" {
		buf.WriteString(`,"next_cursor":`)
		buf.Write(jsonString(page.NextCursor))
	}
	buf.WriteString("}\n")
	s.writeBody(ctx, fasthttp.StatusOK, buf.Bytes())
	return nil
}

// submitBatch answers POST /v1/tasks/batch: {"results": [...]}, one result
// per submitted task, in order: {"status": 201|200, "task": {...}} or
// {"status": 409, "error": {"code", "message"}}.
func (s *Server) submitBatch(rctx context.Context, ctx *fasthttp.RequestCtx, _ string) error {
	specs, err := DecodeSubmitBatch(ctx.PostBody())
	if err != nil {
		return err
	}
	tc, err := requestTrace(ctx)
	if err != nil {
		return err
	}
	for i := range specs {
		specs[i].inheritTrace(tc)
	}
	minimal := prefersMinimal(bytes.Join(ctx.Request.Header.PeekAll(axapi.HeaderPrefer), []byte{','}))
	items, err := s.backend.SubmitBatch(rctx, specs, minimal)
	if err != nil {
		return err
	}
	if len(items) != len(specs) {
		return fmt.Errorf("backend answered a batch of %d tasks with %d results", len(specs), len(items))
	}
	var buf bytes.Buffer
	buf.WriteString(`{"results":[`)
	for i, it := range items {
		if i > 0 {
			buf.WriteByte(',')
		}
		if it.Err != nil {
			status, code, msg, _ := MapError(it.Err)
			if status == ErrInternal.Status {
				s.log.Error().Err(it.Err).Str("task_id", specs[i].ID).Msg("ipc: internal error in a batch item")
			}
			fmt.Fprintf(&buf, `{"status":%d,"error":`, status)
			buf.Write(jsonValue(errorDetail{Code: code, Message: msg}))
			buf.WriteByte('}')
			continue
		}
		status := fasthttp.StatusOK
		if it.Created {
			status = fasthttp.StatusCreated
		}
		if it.Task.BacklogWarning != "" {
			ctx.Response.Header.Set(axapi.HeaderBacklogWarning, it.Task.BacklogWarning)
		}
		if minimal {
			buf.WriteString(`{"status":`)
			buf.Write(strconv.AppendInt(buf.AvailableBuffer(), int64(status), 10))
			buf.WriteString(`,"task":{"id":`)
			buf.Write(axapi.AppendJSONString(buf.AvailableBuffer(), it.Task.ID))
			buf.WriteString(`,"state":`)
			buf.Write(axapi.AppendJSONString(buf.AvailableBuffer(), it.Task.State))
			buf.WriteString(`}}`)
			continue
		}
		b, err := it.Task.MarshalJSON()
		if err != nil {
			return fmt.Errorf("encode task view %q: %w", it.Task.ID, err)
		}
		fmt.Fprintf(&buf, `{"status":%d,"task":`, status)
		buf.Write(b)
		buf.WriteByte('}')
	}
	buf.WriteString("]}\n")
	if minimal {
		ctx.Response.Header.Set(axapi.HeaderPreferenceApplied, axapi.PreferReturnMinimal)
	}
	s.writeBody(ctx, fasthttp.StatusOK, buf.Bytes())
	return nil
}

// prefersMinimal reports whether the Prefer header value h asks for
// return=minimal. RFC 7240 §2: several Prefer lines are one value, their
// comma-separated concatenation (the caller joins them); preferences are
// comma-separated, each a token, "=" and an optional value, perhaps a
// quoted string (whose commas and semicolons separate nothing), then
// ";"-separated parameters; only the first instance of a preference
// counts. Names compare case-insensitively; the RFC compares values
// case-sensitively, and this is lenient there ("MINIMAL" is taken too).
// Unknown preferences and a malformed header are ignored, as the RFC asks.
func prefersMinimal(h []byte) bool {
	for len(h) > 0 {
		// The preference: up to the first comma outside a quoted string.
		end, quoted := len(h), false
		for i := 0; i < len(h); i++ {
			switch c := h[i]; {
			case c == '\\' && quoted:
				i++
			case c == '"':
				quoted = !quoted
			case c == ',' && !quoted:
				end = i
			}
			if end != len(h) {
				break
			}
		}
		pref := h[:end]
		if end < len(h) {
			h = h[end+1:]
		} else {
			h = nil
		}
		n := bytes.IndexAny(pref, "=;")
		if n < 0 {
			n = len(pref)
		}
		if !bytes.EqualFold(bytes.TrimSpace(pref[:n]), []byte("return")) {
			continue
		}
		if n == len(pref) || pref[n] != '=' {
			return false // return without a value
		}
		val := bytes.TrimSpace(pref[n+1:])
		if len(val) > 0 && val[0] == '"' {
			v, _, ok := bytes.Cut(val[1:], []byte{'"'})
			return ok && bytes.EqualFold(v, []byte("minimal"))
		}
		val, _, _ = bytes.Cut(val, []byte{';'})
		return bytes.EqualFold(bytes.TrimSpace(val), []byte("minimal"))
	}
	return false
}

// retryTask answers POST /v1/tasks/{id}/retry (body empty or {}).
func (s *Server) retryTask(rctx context.Context, ctx *fasthttp.RequestCtx, rawID string) error {
	id, err := pathID(rawID)
	if err != nil {
		return err
	}
	if err := decodeEmpty(ctx.PostBody()); err != nil {
		return err
	}
	task, err := s.backend.Retry(rctx, id)
	if err != nil {
		return err
	}
	s.writeTask(ctx, fasthttp.StatusOK, task)
	return nil
}

// heartbeat answers POST /v1/tasks/{id}/heartbeat {"attempt": N}.
func (s *Server) heartbeat(rctx context.Context, ctx *fasthttp.RequestCtx, rawID string) error {
	id, err := pathID(rawID)
	if err != nil {
		return err
	}
	attempt, err := DecodeHeartbeat(ctx.PostBody())
	if err != nil {
		return err
	}
	task, err := s.backend.Heartbeat(rctx, id, attempt)
	if err != nil {
		return err
	}
	s.writeTask(ctx, fasthttp.StatusOK, task)
	return nil
}

// reportResult answers POST /v1/tasks/{id}/result
// {"attempt": N, "status": "...", "error": "..."}.
func (s *Server) reportResult(rctx context.Context, ctx *fasthttp.RequestCtx, rawID string) error {
	id, err := pathID(rawID)
	if err != nil {
		return err
	}
	res, err := DecodeAttemptResult(ctx.PostBody())
	if err != nil {
		return err
	}
	task, err := s.backend.ReportResult(rctx, id, res)
	if err != nil {
		return err
	}
	s.writeTask(ctx, fasthttp.StatusOK, task)
	return nil
}

// registerExecutor answers POST /v1/executors: 201 and the executor when it
// is new, 200 when it replaced one of the same name.
func (s *Server) registerExecutor(rctx context.Context, ctx *fasthttp.RequestCtx, _ string) error {
	spec, err := DecodeExecutor(ctx.PostBody())
	if err != nil {
		return err
	}
	ex, created, err := s.backend.RegisterExecutor(rctx, spec)
	if err != nil {
		return err
	}
	status := fasthttp.StatusOK
	if created {
		status = fasthttp.StatusCreated
	}
	s.writeJSON(ctx, status, executorView(ex))
	return nil
}

// listExecutors answers GET /v1/executors: {"executors": [...]}.
func (s *Server) listExecutors(rctx context.Context, ctx *fasthttp.RequestCtx, _ string) error {
	list, err := s.backend.Executors(rctx)
	if err != nil {
		return err
	}
	out := make([]ExecutorSpec, len(list))
	for i, e := range list {
		out[i] = executorView(e)
	}
	s.writeJSON(ctx, fasthttp.StatusOK, struct {
		Executors []ExecutorSpec `json:"executors"`
	}{out})
	return nil
}

// unregisterExecutor answers DELETE /v1/executors/{name}: 204.
func (s *Server) unregisterExecutor(rctx context.Context, ctx *fasthttp.RequestCtx, rawName string) error {
	name, err := url.PathUnescape(rawName)
	if err != nil {
		return Errorf(ErrInvalid, "name: bad URL escape in %q", rawName)
	}
	if err := ValidateExecutorName(name); err != nil {
		return err
	}
	if err := s.backend.UnregisterExecutor(rctx, name); err != nil {
		return err
	}
	ctx.Response.Header.SetNoDefaultContentType(true)
	ctx.SetStatusCode(fasthttp.StatusNoContent)
	return nil
}

// executorView is e as sent: handlers never null.
func executorView(e ExecutorSpec) ExecutorSpec {
	if e.Handlers == nil {
		e.Handlers = []string{}
	}
	return e
}

// writeBody writes a JSON reply encoded by the caller.
func (s *Server) writeBody(ctx *fasthttp.RequestCtx, status int, body []byte) {
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.SetBody(body)
}

// jsonString encodes s as a JSON string, without HTML escaping.
func jsonString(s string) []byte { return jsonValue(s) }

// jsonValue encodes v without HTML escaping and without the final newline.
// It is for values that always encode (strings, plain structs).
func jsonValue(v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	return bytes.TrimRight(buf.Bytes(), "\n")
}
