package api

import (
	"context"
	"fmt"

	"github.com/axsched/ax/ipc"
	"github.com/axsched/ax/raftfsm"
)

// The application's writes about one task: cancel, retry, an attempt's
// heartbeat and its result.

// Cancel implements ipc.Backend.
func (b *Backend) Cancel(ctx context.Context, id string) (ipc.Task, error) {
	return b.oneTask(ctx, id, raftfsm.Command{Type: raftfsm.CmdCancel, Cancel: &raftfsm.Cancel{ID: id}}, "cancel")
}

// Retry implements ipc.Backend.
func (b *Backend) Retry(ctx context.Context, id string) (ipc.Task, error) {
	return b.oneTask(ctx, id, raftfsm.Command{Type: raftfsm.CmdRetry, Retry: &raftfsm.Retry{ID: id}}, "retry")
}

// Heartbeat implements ipc.Backend: it extends the attempt's lease to now
// plus the task's timeout and the lease grace.
func (b *Backend) Heartbeat(ctx context.Context, id string, attempt int) (ipc.Task, error) {
	return b.oneTask(ctx, id, raftfsm.Command{Type: raftfsm.CmdLease, Lease: &raftfsm.Lease{ID: id, Attempt: attempt}}, "heartbeat")
}

// ReportResult implements ipc.Backend.
func (b *Backend) ReportResult(ctx context.Context, id string, r ipc.AttemptResult) (ipc.Task, error) {
	c := &raftfsm.Complete{ID: id, Attempt: r.Attempt, Error: r.Error}
	switch r.Status {
	case "success":
		c.Outcome = raftfsm.OutcomeSuccess
		c.Result = r.Result // JSON, checked by ipc
	case "failed":
		c.Outcome = raftfsm.OutcomeRetryable
		if c.Error == "" {
			c.Error = "failed (reported by the executor)"
		}
	case "permanent":
		c.Outcome = raftfsm.OutcomePermanent
		if c.Error == "" {
			c.Error = "permanent failure (reported by the executor)"
		}
	default:
		return ipc.Task{}, ipc.Errorf(ipc.ErrInvalid, "status %q: want success, failed or permanent", r.Status)
	}
	return b.oneTask(ctx, id, raftfsm.Command{Type: raftfsm.CmdComplete, Complete: c}, "result")
}

// oneTask proposes one command about a task and maps its result.
func (b *Backend) oneTask(ctx context.Context, id string, c raftfsm.Command, what string) (ipc.Task, error) {
	res, err := b.d.Proposer.ProposeAPI(ctx, []raftfsm.Command{c})
	if err != nil {
		return ipc.Task{}, err
	}
	r := res[0]
	switch r.Code {
	case raftfsm.CodeOK:
		return taskView(r.Task), nil
	case raftfsm.CodeNotFound:
		return ipc.Task{}, ipc.Errorf(ipc.ErrNotFound, "task %q not found", id)
	case raftfsm.CodeState:
		return ipc.Task{}, ipc.Errorf(ipc.ErrConflict, "%s: task %q is %s; only DEAD or FAILED tasks can be retried", what, id, r.Task.State)
	case raftfsm.CodeShard:
		parent, run, index, _ := raftfsm.ParseShardID(id)
		return ipc.Task{}, ipc.Errorf(ipc.ErrConflict, "%s: task %q is shard %d of run %d of task %q, which counted how it ended: a retried shard would not change that run; retry task %q once its run has ended DEAD", what, id, index, run, parent, parent)
	case raftfsm.CodeFlowStage:
		flowID, _, _, _ := raftfsm.ParseFlowStageID(id)
		return ipc.Task{}, ipc.Errorf(ipc.ErrConflict, "%s: task %q is a stage of flow %q, which recorded how it ended: a retried stage would not move the flow; submit the flow again under another id", what, id, flowID)
	case raftfsm.CodeStale:
		cur := "not running"
		if r.Task.State == raftfsm.StateRunning {
			cur = fmt.Sprintf("running attempt %d", r.Task.Attempts)
		}
		return ipc.Task{}, ipc.Errorf(ipc.ErrConflict, "%s: that attempt of task %q is not the current one (task is %s, %s)", what, id, r.Task.State, cur)
	}
	return ipc.Task{}, fmt.Errorf("%s %q: unexpected result %q", what, id, r.Code)
}
