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
}

// PurgeResult is what PurgeTasks deleted (axapi.PurgeResult): Purged, how
// many tasks were deleted, and More, that more may match (call again).
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
// the cluster, and says how many it deleted and whether more may match
// (call it again until More is false). Invalid filters give an error
// matching ErrInvalid.
func (c *Client) PurgeTasks(ctx context.Context, f PurgeFilter) (PurgeResult, error) {
	req := axapi.PurgeRequest{Handler: f.Handler, State: f.State, Limit: f.Limit}
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
