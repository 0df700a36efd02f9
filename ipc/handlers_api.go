package ipc

import (
	"context"
	"net/url"
	"strings"

	"github.com/valyala/fasthttp"

	"github.com/axsched/ax/clients/go/axapi"
)

// ValidateHandlerName checks a handler name as a submit does: required,
// at most axapi.HandlerMaxBytes, valid UTF-8, no control characters, no white
// space at either end.
func ValidateHandlerName(name string) error {
	if name == "" {
		return Errorf(ErrInvalid, "handler: required")
	}
	if err := checkName("handler", name, axapi.HandlerMaxBytes); err != nil {
		return err
	}
	if strings.TrimSpace(name) != name {
		return Errorf(ErrInvalid, "handler: must not be blank or begin or end with white space, got %q", name)
	}
	return nil
}

// pathHandler unescapes and validates the {name} of a handler route.
func pathHandler(raw string) (string, error) {
	name, err := url.PathUnescape(raw)
	if err != nil {
		return "", Errorf(ErrInvalid, "handler: bad URL escape in %q", raw)
	}
	return name, ValidateHandlerName(name)
}

// pauseTask answers POST /v1/tasks/{id}/pause (body empty or {}): 200 and
// the task; 404 not_found; 409 task_finished for a finished task.
func (s *Server) pauseTask(rctx context.Context, ctx *fasthttp.RequestCtx, rawID string) error {
	return s.setTaskPaused(rctx, ctx, rawID, true)
}

// resumeTask answers POST /v1/tasks/{id}/resume (body empty or {}).
func (s *Server) resumeTask(rctx context.Context, ctx *fasthttp.RequestCtx, rawID string) error {
	return s.setTaskPaused(rctx, ctx, rawID, false)
}

func (s *Server) setTaskPaused(rctx context.Context, ctx *fasthttp.RequestCtx, rawID string, paused bool) error {
	id, err := pathID(rawID)
	if err != nil {
		return err
	}
	if err := decodeEmpty(ctx.PostBody()); err != nil {
		return err
	}
	task, err := s.backend.PauseTask(rctx, id, paused)
	if err != nil {
		return err
	}
	s.writeTask(ctx, fasthttp.StatusOK, task)
	return nil
}

// pauseHandler answers POST /v1/handlers/{name}/pause (body empty or
// {}): 200 {"name", "paused": true}; 404 handler_not_found.
func (s *Server) pauseHandler(rctx context.Context, ctx *fasthttp.RequestCtx, raw string) error {
	return s.setHandlerPaused(rctx, ctx, raw, true)
}

// resumeHandler answers POST /v1/handlers/{name}/resume (body empty or {}).
func (s *Server) resumeHandler(rctx context.Context, ctx *fasthttp.RequestCtx, raw string) error {
	return s.setHandlerPaused(rctx, ctx, raw, false)
}

func (s *Server) setHandlerPaused(rctx context.Context, ctx *fasthttp.RequestCtx, raw string, paused bool) error {
	name, err := pathHandler(raw)
	if err != nil {
		return err
	}
	if err := decodeEmpty(ctx.PostBody()); err != nil {
		return err
	}
	hp, err := s.backend.PauseHandler(rctx, name, paused)
	if err != nil {
		return err
	}
	s.writeJSON(ctx, fasthttp.StatusOK, hp)
	return nil
}

// listHandlers answers GET /v1/handlers: {"handlers": [...]}, sorted by
// name. It takes no query parameters.
func (s *Server) listHandlers(rctx context.Context, ctx *fasthttp.RequestCtx, _ string) error {
	if err := noQuery(ctx, "GET /v1/handlers", ""); err != nil {
		return err
	}
	list, err := s.backend.Handlers(rctx)
	if err != nil {
		return err
	}
	for i := range list {
		if list[i].Parked == nil {
			list[i].Parked = map[string]int{}
		}
		if list[i].Tasks == nil {
			list[i].Tasks = map[State]int{}
		}
		if list[i].Executors == nil {
			list[i].Executors = []HandlerExecutor{}
		}
	}
	if list == nil {
		list = []HandlerInfo{}
	}
	s.writeJSON(ctx, fasthttp.StatusOK, struct {
		Handlers []HandlerInfo `json:"handlers"`
	}{list})
	return nil
}
