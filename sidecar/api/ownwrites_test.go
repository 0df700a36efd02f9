package api

import (
	"context"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/axsched/ax/ipc"
	"github.com/axsched/ax/raftfsm"
)

// fakeOwnWrites stands for a follower that forwarded a write the leader
// answered and has not applied it yet: WaitForwarded applies it (the
// follower catches up while the read waits).
type fakeOwnWrites struct {
	pending   func()
	waits     int
	forwarded uint64
}

func (o *fakeOwnWrites) Forwarded() uint64 { return o.forwarded }
func (o *fakeOwnWrites) Observed(idx uint64) {
	o.forwarded = max(o.forwarded, idx)
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

// GET /v1/tasks/{id} on a follower that has not applied its own forwarded
// write answers with the leader's copy when the leader has applied it,
// without waiting, and raises the node's read floor to the leader's index
// (its next reads never show an older state); when the leader is behind
// that write, or has no such task, it waits and reads locally.
func TestTaskOfOwnWriteFromTheLeader(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name          string
		leaderApplied uint64
		leaderHas     bool
		wantLeader    bool
	}{
		{"leader applied it", 12, true, true},
		{"leader behind the write", 9, true, false},
		{"leader has no such task", 12, false, false},
	} {
		e := newEnv(t)
		e.raft.state = raft.Follower
		e.route = "leader:7001"
		e.peers.leader = newEnv(t).b // answers the waiting reasons
		e.submit("other", "h")       // this node's applied index: 1
		ow := &fakeOwnWrites{forwarded: 10, pending: func() { e.submit("w", "h") }}
		e.b.d.OwnWrites = ow
		if c.leaderHas {
			e.peers.tasks = map[string]*raftfsm.Task{"w": {ID: "w", State: raftfsm.StateRunning, Spec: raftfsm.Spec{Handler: "h"}}}
		}
		e.peers.applied = c.leaderApplied
		v, err := e.b.Task(ctx, "w")
		if err != nil || v.ID != "w" {
			t.Fatalf("%s: %+v %v", c.name, v, err)
		}
		if fromLeader := v.State == "RUNNING"; fromLeader != c.wantLeader || (ow.waits == 0) != c.wantLeader {
			t.Errorf("%s: state %s after %d waits, want the leader's copy %v", c.name, v.State, ow.waits, c.wantLeader)
		}
		if c.wantLeader && ow.forwarded != c.leaderApplied {
			t.Errorf("%s: read floor %d, want the leader's index %d", c.name, ow.forwarded, c.leaderApplied)
		}
	}
}
