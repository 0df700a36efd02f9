package ax

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
)

// attemptKey is the context key of the attempt a handler runs.
type attemptKey struct{}

// attemptInfo is what a handler's context carries.
type attemptInfo struct {
	d      *Delivery
	client *Client // the Executor's (WithClient), nil without one

	mu     sync.Mutex
	result []byte // JSON set by SetResult, nil when none
}

// DeliveryFromContext returns the attempt a handler is running: task id,
// handler name, attempt, run, deadline and payload. It works with the
// context the Executor gives to middleware and handlers, and with contexts
// derived from it (including context.WithoutCancel). ok is false for any
// other context.
//
// The Delivery is shared with the handler; do not modify it.
func DeliveryFromContext(ctx context.Context) (d *Delivery, ok bool) {
	a, ok := ctx.Value(attemptKey{}).(*attemptInfo)
	if !ok {
		return nil, false
	}
	return a.d, true
}

// attemptFromContext returns the attempt of ctx and the Executor's Client.
func attemptFromContext(ctx context.Context, fn string) (*attemptInfo, error) {
	a, ok := ctx.Value(attemptKey{}).(*attemptInfo)
	if !ok {
		return nil, fmt.Errorf("%w: ax.%s: ctx is not the context of a handler run by an ax.Executor (nor derived from one)", ErrInvalid, fn)
	}
	if a.client == nil {
		return nil, fmt.Errorf("%w: ax.%s: the Executor has no Client to reach the sidecar; create it with ax.NewExecutor(ax.WithClient(client))", ErrInvalid, fn)
	}
	return a, nil
}

// Heartbeat extends the lease of the attempt that ctx belongs to, through
// the sidecar: see Client.Heartbeat, which it calls with the Delivery's
// TaskID and Attempt. ctx is a handler's context, or one derived from it
// (context.WithoutCancel(ctx) for work continued after Async).
//
// It fails with an error matching ErrInvalid when ctx is not a handler's
// context or when the Executor was made without WithClient, and with one
// matching ErrConflict when the attempt is no longer running (timed out,
// cancelled, reported): stop working on it then.
func Heartbeat(ctx context.Context) error {
	a, err := attemptFromContext(ctx, "Heartbeat")
	if err != nil {
		return err
	}
	_, err = a.client.Heartbeat(ctx, a.d.TaskID, a.d.Attempt)
	return err
}

// Report reports the outcome of the attempt that ctx belongs to, answered
// with Async, through the sidecar: see Client.ReportResult. result maps as a
// handler's result does: nil is ResultSuccess, an error made by Permanent is
// ResultPermanent, any other error is ResultFailed (retried), with the
// error's message as the task's LastError. ctx is derived from the
// handler's, typically context.WithoutCancel(ctx).
//
// It fails with an error matching ErrInvalid when ctx is not derived from a
// handler's context or when the Executor was made without WithClient, and
// with one matching ErrConflict when the attempt is no longer running.
func Report(ctx context.Context, result error) error {
	a, err := attemptFromContext(ctx, "Report")
	if err != nil {
		return err
	}
	status, text := ResultSuccess, ""
	var perm *permanentError
	switch {
	case result == nil:
	case errors.As(result, &perm):
		status, text = ResultPermanent, result.Error()
	default:
		status, text = ResultFailed, result.Error()
	}
	_, err = a.client.ReportResult(ctx, a.d.TaskID, a.d.Attempt, status, text)
	return err
}

// SetResult sets the result of the attempt that ctx belongs to: v encoded
// as JSON (a json.RawMessage is sent as it is) becomes the body of the
// executor's 200 answer when the handler succeeds, and the sidecar stores
// it as the run's result (GET /v1/tasks/{id}/runs/{run}, and "result" in
// GET /v1/tasks/{id}). A later call replaces it; a handler that fails
// sends no result. The sidecar keeps at most ResultMaxBytes (64 KiB) and
// flags a longer result as truncated. Executor.HandleResult calls it with
// the handler's returned value.
//
// It fails with an error matching ErrInvalid when ctx is not a handler's
// context (nor derived from one) or v cannot be encoded.
func SetResult(ctx context.Context, v any) error {
	a, ok := ctx.Value(attemptKey{}).(*attemptInfo)
	if !ok {
		return fmt.Errorf("%w: ax.SetResult: ctx is not the context of a handler run by an ax.Executor (nor derived from one)", ErrInvalid)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("%w: ax.SetResult: %v", ErrInvalid, err)
	}
	a.mu.Lock()
	a.result = b
	a.mu.Unlock()
	return nil
}

// takeResult returns the result SetResult set, nil when none.
func (a *attemptInfo) takeResult() []byte {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.result
}
