package api

import (
	"context"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/axsched/ax/ipc"
)

// fakeOwnWrites stands for a follower that forwarded a write the leader
// answered and has not applied it yet: WaitForwarded applies it (the
// follower catches up while the read waits).
type fakeOwnWrites struct {
	pending func()
	waits   int
}

func (o *fakeOwnWrites) WaitForwarded(context.Context, time.Duration) bool {
	o.waits++
	if o.pending != nil {
		o.pending()
		o.pending = nil
	}
	return true
}

// Every read of the local store waits for this node's own forwarded
// writes first (read your writes on a follower), and so sees them.
func TestReadsWaitForOwnForwardedWrites(t *testing.T) {
	ctx := context.Background()
	reads := map[string]func(e *env) (bool, error){
		"Task": func(e *env) (bool, error) {
			v, err := e.b.Task(ctx, "w")
			return v.ID == "w", err
		},
		"List": func(e *env) (bool, error) {
			p, err := e.b.List(ctx, ipc.ListQuery{})
			return len(p.Tasks) == 1 && p.Tasks[0].ID == "w", err
		},
		"Runs": func(e *env) (bool, error) {
			_, err := e.b.Runs(ctx, "w", ipc.RunsQuery{Limit: 10})
			return err == nil, err
		},
		"Run": func(e *env) (bool, error) {
			_, err := e.b.Run(ctx, "w", 1)
			return codeOf(err) == "not_found", nil // no run yet: checks the wait only
		},
		"Handlers": func(e *env) (bool, error) {
			hs, err := e.b.Handlers(ctx)
			return len(hs) == 1 && hs[0].Name == "h", err
		},
		"Executors": func(e *env) (bool, error) {
			_, err := e.b.Executors(ctx)
			return true, err
		},
		"Flow": func(e *env) (bool, error) {
			_, err := e.b.Flow(ctx, "f")
			return codeOf(err) == "not_found", nil
		},
		"Flows": func(e *env) (bool, error) {
			_, err := e.b.Flows(ctx, "", 10)
			return true, err
		},
		"PurgeTask": func(e *env) (bool, error) {
			e.b.PurgeTask(ctx, "w") // not finished: asks the leader (none here)
			return true, nil
		},
		"PurgeTasks": func(e *env) (bool, error) {
			_, err := e.b.PurgeTasks(ctx, ipc.PurgeQuery{Limit: 10, FinishedBefore: e.clock.Now()})
			return true, err
		},
		"PurgeFlow": func(e *env) (bool, error) {
			_, err := e.b.PurgeFlow(ctx, "f")
			return codeOf(err) == "not_found", nil
		},
	}
	for name, read := range reads {
		e := newEnv(t)
		e.raft.state = raft.Follower
		ow := &fakeOwnWrites{pending: func() { e.submit("w", "h") }}
		e.b.d.OwnWrites = ow
		ok, err := read(e)
		if ow.waits != 1 {
			t.Errorf("%s: waited %d times for the node's own writes, want 1", name, ow.waits)
		}
		if err != nil || !ok {
			t.Errorf("%s: did not see the forwarded write: ok %v err %v", name, ok, err)
		}
	}
}
