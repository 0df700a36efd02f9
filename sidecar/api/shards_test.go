package api

import (
	"context"
	"testing"
	"time"

	"github.com/axsched/ax/ipc"
	"github.com/axsched/ax/raftfsm"
)

// startShards submits sharded task id (3 shards), runs its first attempt
// to the Complete that starts them, and has shard 0 succeed: the run
// then waits for shards 1 and 2.
func (e *env) startShards(id string) *raftfsm.Task {
	e.t.Helper()
	now := e.clock.Now().UnixMilli()
	spec := raftfsm.Spec{Handler: "h", TimeoutNs: int64(time.Minute), MaxAttempts: 3, Shards: &raftfsm.Shards{Count: 3}}
	e.apply(raftfsm.Command{Type: raftfsm.CmdSubmit, Submit: &raftfsm.Submit{ID: id, AtMs: now, DueMs: now, Spec: spec, Overwrite: true}})
	e.attempt(id, func(c *raftfsm.Complete) { c.ShardCount = 3 })
	s0 := raftfsm.ShardID(id, e.task(id).RunNumber(), 0)
	e.attempt(s0, nil)
	if p := e.task(id); !p.AwaitingShards() || p.Shards.Succeeded != 1 || p.Shards.Running() != 2 {
		e.t.Fatalf("parent %+v shards %+v", p, p.Shards)
	}
	return e.task(id)
}

// attempt fires task id's next attempt and completes it with success
// (edit changes the Complete).
func (e *env) attempt(id string, edit func(*raftfsm.Complete)) {
	e.t.Helper()
	t := e.task(id)
	now := e.clock.Now().UnixMilli()
	e.apply(raftfsm.Command{Type: raftfsm.CmdFire, Fire: &raftfsm.Fire{ID: id, Epoch: t.Epoch, Attempt: t.Attempts + 1, Node: "a", AtMs: now, LeaseMs: now + 60_000}})
	c := &raftfsm.Complete{ID: id, Epoch: t.Epoch, Attempt: t.Attempts + 1, Outcome: raftfsm.OutcomeSuccess, AtMs: now}
	if edit != nil {
		edit(c)
	}
	if r := e.apply(raftfsm.Command{Type: raftfsm.CmdComplete, Complete: c}); r[0].Code != raftfsm.CodeOK {
		e.t.Fatalf("complete %s: %q", id, r[0].Code)
	}
}

func (e *env) task(id string) *raftfsm.Task {
	e.t.Helper()
	t, err := e.fsm.Task(id)
	if err != nil {
		e.t.Fatalf("task %s: %v", id, err)
	}
	return t
}

// A run cancelled while its shards ran shows how many succeeded and how
// many failed (the cancelled ones), adding up to its shards, as the
// task's view does: its record has neither (the FSM closes it as any
// cancel), so GET /v1/tasks/{id}/runs showed "shards": 3 and no
// shards_failed. The API derives them: from the task for its last run,
// from the shard tasks for a run an overwrite replaced.
func TestCancelledShardRunCounts(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	e.startShards("x")
	now := e.clock.Now().UnixMilli()
	r := e.apply(raftfsm.Command{Type: raftfsm.CmdCancel, Cancel: &raftfsm.Cancel{ID: "x", AtMs: now}})
	// The cancel's answer is the task before its shards were counted:
	// its view shows none running all the same.
	if v := taskView(r[0].Task).Shards; v == nil || v.Total != 3 || v.Succeeded != 1 || v.Failed != 2 || v.Running != 0 {
		t.Errorf("the cancel's answer: shards %+v, want 1 succeeded, 2 failed, 0 running", v)
	}
	want := func(what string, v ipc.Run) {
		t.Helper()
		if v.State != "CANCELLED" || v.Shards != 3 || v.ShardsSucceeded != 1 || v.ShardsFailed != 2 {
			t.Errorf("%s: %s, shards %d, succeeded %d, failed %d; want CANCELLED, 3, 1, 2", what, v.State, v.Shards, v.ShardsSucceeded, v.ShardsFailed)
		}
	}
	page, err := e.b.Runs(ctx, "x", ipc.RunsQuery{Limit: 10})
	if err != nil || len(page.Runs) != 1 {
		t.Fatalf("runs: %+v %v", page, err)
	}
	want("GET /v1/tasks/x/runs", page.Runs[0])
	run, err := e.b.Run(ctx, "x", 1)
	if err != nil {
		t.Fatal(err)
	}
	want("GET /v1/tasks/x/runs/1", run)

	// An overwrite replaces the run while its shards run: the new task
	// holds no counts of it, its shard tasks do.
	e.startShards("y")
	e.apply(raftfsm.Command{Type: raftfsm.CmdSubmit, Submit: &raftfsm.Submit{ID: "y", AtMs: now, DueMs: now + 60_000,
		Spec: raftfsm.Spec{Handler: "h2", TimeoutNs: int64(time.Minute), MaxAttempts: 3}, Overwrite: true}})
	run, err = e.b.Run(ctx, "y", 1)
	if err != nil {
		t.Fatal(err)
	}
	want("GET /v1/tasks/y/runs/1 (replaced)", run)
	page, err = e.b.Runs(ctx, "y", ipc.RunsQuery{Limit: 10})
	if err != nil || len(page.Runs) != 1 {
		t.Fatalf("runs of y: %+v %v", page, err)
	}
	want("GET /v1/tasks/y/runs (replaced)", page.Runs[0])
}
