package ax

import (
	"context"
	"fmt"
	"net/http"
	"net/url"

	"github.com/axsched/ax/clients/go/axapi"
)

// HandlerInfo is one handler as GET /v1/handlers reports it (Client.Handlers;
// axapi.HandlerInfo). Backlog, Parked and Circuit are the leader's view: the
// local sidecar asks the leader for them; when no leader answered, Backlog
// is nil, Parked empty and Circuit "". Tasks counts the stored tasks by
// State; Executors are the executors, on every node, that run the handler.
type HandlerInfo = axapi.HandlerInfo

// HandlerExecutor is an executor of a HandlerInfo (axapi.HandlerExecutor):
// its MaxConcurrency is 0 for an executor registered without one, the
// node's default applying.
type HandlerExecutor = axapi.HandlerExecutor

// PauseHandler pauses every run of handler across the cluster: due runs
// wait (waiting reason "paused") until ResumeHandler; attempts already
// running are not interrupted, and submits are still accepted. Pausing a
// paused handler is a no-op. A handler with no task, no executor and no
// pause fails with an *APIError of code CodeHandlerNotFound (matching
// ErrNotFound).
func (c *Client) PauseHandler(ctx context.Context, handler string) error {
	return c.setHandlerPaused(ctx, handler, "pause")
}

// ResumeHandler resumes a paused handler: the runs that waited fire now,
// and a recurring task that missed slots runs once, then keeps its
// schedule. Resuming a handler that is not paused is a no-op; errors as
// for PauseHandler.
func (c *Client) ResumeHandler(ctx context.Context, handler string) error {
	return c.setHandlerPaused(ctx, handler, "resume")
}

func (c *Client) setHandlerPaused(ctx context.Context, handler, action string) error {
	if handler == "" {
		return fmt.Errorf("%w: empty handler", ErrInvalid)
	}
	var out axapi.HandlerPause
	return c.do(ctx, http.MethodPost, "/v1/handlers/"+url.PathEscape(handler)+"/"+action, []byte("{}"), &out)
}

// PauseTask pauses one task's runs (its next run, retries, a recurring
// task's slots) until ResumeTask; an attempt already running is not
// interrupted. It returns the task (Paused set). A finished task fails
// with code CodeTaskFinished (matching ErrConflict); an unknown one with
// ErrNotFound.
func (c *Client) PauseTask(ctx context.Context, id string) (*Task, error) {
	return c.setTaskPaused(ctx, id, "pause")
}

// ResumeTask resumes a paused task and returns it: a run that waited fires
// now. Resuming a task that is not paused is a no-op.
func (c *Client) ResumeTask(ctx context.Context, id string) (*Task, error) {
	return c.setTaskPaused(ctx, id, "resume")
}

func (c *Client) setTaskPaused(ctx context.Context, id, action string) (*Task, error) {
	if id == "" {
		return nil, fmt.Errorf("%w: empty task id", ErrInvalid)
	}
	var w axapi.Task
	if err := c.do(ctx, http.MethodPost, taskPath(id)+"/"+action, []byte("{}"), &w); err != nil {
		return nil, err
	}
	return taskFromWire(&w)
}

// Handlers lists every handler that has tasks, an executor named for it
// or a pause, sorted by name.
func (c *Client) Handlers(ctx context.Context) ([]HandlerInfo, error) {
	var out axapi.HandlerList
	if err := c.do(ctx, http.MethodGet, "/v1/handlers", nil, &out); err != nil {
		return nil, err
	}
	return out.Handlers, nil
}
