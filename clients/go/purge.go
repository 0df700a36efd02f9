package ax

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/axsched/ax/clients/go/axapi"
)

// PurgeFilter selects the finished tasks PurgeTasks deletes. Zero fields
// do not filter.
type PurgeFilter struct {
	// Handler: only tasks of this handler.
	Handler string
	// State: only tasks in this finished state (StateSuccess,
	// StateCancelled, StateDead, StateFailed); empty: any finished state.
	State State
	// FinishedBefore: only tasks that finished before this time; zero
	// means now (the sidecar's clock).
	FinishedBefore time.Time
	// Limit bounds the tasks deleted by one call (1 to 10000); 0 means
	// the sidecar's default, 1000.
	Limit int
	// Cursor is the NextCursor of the previous call's result, to read on
	// from where it stopped (with the same Handler and State); empty: from
	// the oldest finished task.
	Cursor string
}

// PurgeResult is what PurgeTasks deleted (axapi.PurgeResult): Purged, how
// many tasks were deleted; More, that more may match (call again); and
// NextCursor, set with More, the Cursor of that next call.
type PurgeResult = axapi.PurgeResult

// Purge deletes a finished task (SUCCESS, CANCELLED, DEAD or FAILED) now,
// instead of waiting for its retention to end. A task that is not finished
// gives an error matching ErrConflict (cancel it first); an unknown id,
// ErrNotFound.
func (c *Client) Purge(ctx context.Context, id string) error {
	if id == "" {
		return fmt.Errorf("%w: empty task id", ErrInvalid)
	}
	var out PurgeResult
	return c.do(ctx, http.MethodDelete, taskPath(id)+"?purge=true", nil, &out)
}

// PurgeTasks deletes up to f.Limit finished tasks that match f, through
// the cluster, and says how many it deleted and whether more may match:
// call it again, with f.Cursor set to the result's NextCursor, until More
// is false (a call may purge nothing and still say More: it read its
// bound of tasks the filter left). Invalid filters, and a cursor the
// sidecar did not make or made for another Handler or State, give an
// error matching ErrInvalid.
//
//	f := ax.PurgeFilter{State: ax.StateCancelled}
//	for {
//		res, err := c.PurgeTasks(ctx, f)
//		if err != nil || !res.More {
//			return err
//		}
//		f.Cursor = res.NextCursor
//	}
func (c *Client) PurgeTasks(ctx context.Context, f PurgeFilter) (PurgeResult, error) {
	req := axapi.PurgeRequest{Handler: f.Handler, State: f.State, Limit: f.Limit, Cursor: f.Cursor}
	if !f.FinishedBefore.IsZero() {
		req.FinishedBefore = f.FinishedBefore.UTC().Format(time.RFC3339Nano)
	}
	body, err := json.Marshal(req)
	if err != nil {
		return PurgeResult{}, fmt.Errorf("ax: encode purge: %w", err)
	}
	var out PurgeResult
	err = c.do(ctx, http.MethodPost, "/v1/tasks/purge", body, &out)
	return out, err
}
