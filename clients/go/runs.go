package ax

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/axsched/ax/clients/go/axapi"
)

// Run is one run of a task from its history: state, due, fired, started
// and finished times, the lateness split, every attempt (node, executor,
// outcome, HTTP status, error) and the result (axapi.Run).
type Run = axapi.Run

// RunAttempt is one attempt of a Run (axapi.RunAttempt).
type RunAttempt = axapi.RunAttempt

// Lateness splits a run's lateness into where it went (axapi.Lateness).
type Lateness = axapi.Lateness

// RunsPage is one page of Runs: runs newest first, and the cursor of the
// older ones ("" on the last page).
type RunsPage = axapi.RunsPage

// RunsOptions pages Client.Runs. A nil *RunsOptions asks for the first
// page of the default size.
type RunsOptions struct {
	// Limit is the page size, 1 to axapi.RunsLimitMax (100). Defaults to
	// axapi.RunsLimitDefault (20).
	Limit int
	// Cursor is the NextCursor of the previous page; "" for the newest
	// runs.
	Cursor string
}

// Runs returns a page of the task's run history, newest first. The
// sidecar keeps its --history-runs newest runs per task (default 100),
// and drops them with the task. Any node answers from its own state. An
// unknown id gives an error matching ErrNotFound.
func (c *Client) Runs(ctx context.Context, id string, opts *RunsOptions) (*RunsPage, error) {
	if id == "" {
		return nil, fmt.Errorf("%w: empty task id", ErrInvalid)
	}
	q := url.Values{}
	if opts != nil {
		if opts.Limit < 0 || opts.Limit > axapi.RunsLimitMax {
			return nil, fmt.Errorf("%w: RunsOptions.Limit %d: want 1 to %d", ErrInvalid, opts.Limit, axapi.RunsLimitMax)
		}
		if opts.Limit > 0 {
			q.Set("limit", strconv.Itoa(opts.Limit))
		}
		if opts.Cursor != "" {
			q.Set("cursor", opts.Cursor)
		}
	}
	path := axapi.RunsPath(id)
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var page RunsPage
	if err := c.do(ctx, http.MethodGet, path, nil, &page); err != nil {
		return nil, err
	}
	return &page, nil
}

// Run returns run number run of the task (Delivery.Run, Ax-Run), with its
// attempts and result. An unknown task, or a run without a record (it
// never fired, or is older than the sidecar keeps), gives an error
// matching ErrNotFound.
func (c *Client) Run(ctx context.Context, id string, run int) (*Run, error) {
	if id == "" || run < 1 {
		return nil, fmt.Errorf("%w: task id %q run %d", ErrInvalid, id, run)
	}
	var r Run
	if err := c.do(ctx, http.MethodGet, axapi.RunPath(id, run), nil, &r); err != nil {
		return nil, err
	}
	return &r, nil
}
