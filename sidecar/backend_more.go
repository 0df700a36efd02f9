package sidecar

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/axsched/ax/ipc"
	"github.com/axsched/ax/raftfsm"
)

func submitCommand(spec ipc.TaskSpec) raftfsm.Command {
	s := &raftfsm.Submit{ID: spec.ID, Overwrite: spec.Overwrite, Spec: raftfsm.Spec{
		Handler: spec.Handler, Payload: spec.Payload, PayloadBase64: spec.PayloadBase64,
		DelayNs: int64(spec.Delay), Priority: spec.Priority, TimeoutNs: int64(spec.Timeout), MaxAttempts: spec.MaxAttempts,
	}}
	if !spec.RunAt.IsZero() {
		s.Spec.RunAtMs = ceilMs(spec.RunAt)
	}
	s.Spec.Cron, s.Spec.Timezone, s.Spec.EveryNs, s.Spec.Repeats = spec.Cron, spec.Timezone, int64(spec.Every), spec.Repeats
	if !spec.Until.IsZero() {
		s.Spec.UntilMs = spec.Until.UnixMilli()
	}
	if b := spec.Backoff; b != nil {
		s.Spec.Backoff = &raftfsm.Backoff{InitialNs: int64(b.Initial), MaxNs: int64(b.Max), Multiplier: b.Multiplier, Jitter: b.Jitter}
	}
	s.Spec.RouteKey, s.Spec.Labels = spec.RouteKey, spec.Labels
	return raftfsm.Command{Type: raftfsm.CmdSubmit, Submit: s}
}

func conflictError(id string, t *raftfsm.Task) error {
	return ipc.Errorf(ipc.ErrConflict, "task %q exists with a different spec (state %s); set \"overwrite\": true to replace it", id, t.State)
}

// SubmitBatch implements ipc.Backend: every spec goes into one proposal,
// so the batch costs one Raft round trip.
func (n *Node) SubmitBatch(ctx context.Context, specs []ipc.TaskSpec) ([]ipc.BatchItem, error) {
	cmds := make([]raftfsm.Command, len(specs))
	for i, s := range specs {
		cmds[i] = submitCommand(s)
	}
	res, err := n.proposeAPI(ctx, cmds)
	if err != nil {
		return nil, apiError(err)
	}
	items := make([]ipc.BatchItem, len(res))
	for i, r := range res {
		switch r.Code {
		case raftfsm.CodeOK:
			v := taskView(r.Task)
			v.BacklogWarning = r.Warning
			items[i] = ipc.BatchItem{Task: v, Created: r.Created}
		case raftfsm.CodeConflict:
			items[i] = ipc.BatchItem{Err: conflictError(specs[i].ID, r.Task)}
		default:
			items[i] = ipc.BatchItem{Err: fmt.Errorf("submit %q: unexpected result %q", specs[i].ID, r.Code)}
		}
	}
	return items, nil
}

// List implements ipc.Backend: a local read in id order. The cursor is the
// last id scanned, base64url-encoded.
func (n *Node) List(_ context.Context, q ipc.ListQuery) (ipc.ListPage, error) {
	var after string
	if q.Cursor != "" {
		b, err := base64.RawURLEncoding.DecodeString(q.Cursor)
		if err != nil {
			return ipc.ListPage{}, ipc.Errorf(ipc.ErrInvalid, "cursor: not a cursor from a previous page")
		}
		after = string(b)
	}
	var state raftfsm.State
	if q.State != "" {
		if state = raftfsm.ParseState(q.State); state == 0 {
			return ipc.ListPage{}, ipc.Errorf(ipc.ErrInvalid, "state %q: unknown", q.State)
		}
	}
	limit := q.Limit
	if limit <= 0 {
		limit = ipc.ListLimitDefault
	}
	tasks, next, more, err := n.fsm.List(q.Handler, state, after, limit)
	if err != nil {
		return ipc.ListPage{}, err
	}
	page := ipc.ListPage{Tasks: make([]ipc.Task, len(tasks))}
	for i := range tasks {
		page.Tasks[i] = taskView(&tasks[i])
	}
	if more {
		page.NextCursor = base64.RawURLEncoding.EncodeToString([]byte(next))
	}
	return page, nil
}

// oneTask proposes one command about a task and maps its result.
func (n *Node) oneTask(ctx context.Context, id string, c raftfsm.Command, what string) (ipc.Task, error) {
	res, err := n.proposeAPI(ctx, []raftfsm.Command{c})
	if err != nil {
		return ipc.Task{}, apiError(err)
	}
	r := res[0]
	switch r.Code {
	case raftfsm.CodeOK:
		return taskView(r.Task), nil
	case raftfsm.CodeNotFound:
		return ipc.Task{}, ipc.Errorf(ipc.ErrNotFound, "task %q not found", id)
	case raftfsm.CodeState:
		return ipc.Task{}, ipc.Errorf(ipc.ErrConflict, "%s: task %q is %s; only DEAD or FAILED tasks can be retried", what, id, r.Task.State)
	case raftfsm.CodeStale:
		cur := "not running"
		if r.Task.State == raftfsm.StateRunning {
			cur = fmt.Sprintf("running attempt %d", r.Task.Attempts)
		}
		return ipc.Task{}, ipc.Errorf(ipc.ErrConflict, "%s: that attempt of task %q is not the current one (task is %s, %s)", what, id, r.Task.State, cur)
	}
	return ipc.Task{}, fmt.Errorf("%s %q: unexpected result %q", what, id, r.Code)
}

// Retry implements ipc.Backend.
func (n *Node) Retry(ctx context.Context, id string) (ipc.Task, error) {
	return n.oneTask(ctx, id, raftfsm.Command{Type: raftfsm.CmdRetry, Retry: &raftfsm.Retry{ID: id}}, "retry")
}

// Heartbeat implements ipc.Backend: it extends the attempt's lease to now
// plus the task's timeout and the lease grace.
func (n *Node) Heartbeat(ctx context.Context, id string, attempt int) (ipc.Task, error) {
	return n.oneTask(ctx, id, raftfsm.Command{Type: raftfsm.CmdLease, Lease: &raftfsm.Lease{ID: id, Attempt: attempt}}, "heartbeat")
}

// ReportResult implements ipc.Backend.
func (n *Node) ReportResult(ctx context.Context, id string, r ipc.AttemptResult) (ipc.Task, error) {
	c := &raftfsm.Complete{ID: id, Attempt: r.Attempt, Error: r.Error}
	switch r.Status {
	case "success":
		c.Outcome = raftfsm.OutcomeSuccess
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
	return n.oneTask(ctx, id, raftfsm.Command{Type: raftfsm.CmdComplete, Complete: c}, "result")
}

func executorRecord(e ipc.ExecutorSpec) (raftfsm.Executor, error) {
	x := raftfsm.Executor{Name: e.Name, Handlers: e.Handlers, URL: e.URL, MinConcurrency: e.MinConcurrency, MaxConcurrency: e.MaxConcurrency}
	if e.Timeout != "" {
		d, err := time.ParseDuration(e.Timeout)
		if err != nil || d <= 0 {
			return x, ipc.Errorf(ipc.ErrInvalid, "timeout %q: want a positive Go duration", e.Timeout)
		}
		x.TimeoutNs = int64(d)
	}
	return x, nil
}

func executorView(x raftfsm.Executor) ipc.ExecutorSpec {
	e := ipc.ExecutorSpec{Name: x.Name, Handlers: x.Handlers, URL: x.URL, MinConcurrency: x.MinConcurrency, MaxConcurrency: x.MaxConcurrency, FromFlag: x.FromFlag}
	if x.TimeoutNs > 0 {
		e.Timeout = time.Duration(x.TimeoutNs).String()
	}
	return e
}

// RegisterExecutor implements ipc.Backend: the executor is replicated in
// this node's record, so the leader routes its handlers here.
func (n *Node) RegisterExecutor(ctx context.Context, e ipc.ExecutorSpec) (ipc.ExecutorSpec, bool, error) {
	x, err := executorRecord(e)
	if err != nil {
		return ipc.ExecutorSpec{}, false, err
	}
	if err := n.waitRegistered(ctx); err != nil {
		return ipc.ExecutorSpec{}, false, err
	}
	res, err := n.propose(ctx, []raftfsm.Command{{Type: raftfsm.CmdExecutor, Executor: &raftfsm.ExecutorChange{Node: n.cfg.NodeID, Executor: x}}})
	if err != nil {
		return ipc.ExecutorSpec{}, false, apiError(err)
	}
	if res[0].Code != raftfsm.CodeOK {
		return ipc.ExecutorSpec{}, false, fmt.Errorf("register executor %q: result %q", e.Name, res[0].Code)
	}
	n.log.Info().Str("executor", e.Name).Strs("handlers", e.Handlers).Str("url", e.URL).Msg("executor registered")
	return executorView(x), res[0].Created, nil
}

// UnregisterExecutor implements ipc.Backend.
func (n *Node) UnregisterExecutor(ctx context.Context, name string) error {
	res, err := n.propose(ctx, []raftfsm.Command{{Type: raftfsm.CmdExecutor, Executor: &raftfsm.ExecutorChange{Node: n.cfg.NodeID, Executor: raftfsm.Executor{Name: name}, Remove: true}}})
	if err != nil {
		return apiError(err)
	}
	if res[0].Code == raftfsm.CodeNotFound {
		return ipc.Errorf(ipc.ErrNotFound, "executor %q not found on node %s", name, n.cfg.NodeID)
	}
	return nil
}

// Executors implements ipc.Backend.
func (n *Node) Executors(context.Context) ([]ipc.ExecutorSpec, error) {
	rec, err := n.fsm.Node(n.cfg.NodeID)
	if errors.Is(err, raftfsm.ErrNotFound) {
		return []ipc.ExecutorSpec{}, nil
	}
	if err != nil {
		return nil, err
	}
	out := make([]ipc.ExecutorSpec, 0, len(rec.Executors))
	for _, x := range rec.Executors {
		out = append(out, executorView(x))
	}
	return out, nil
}

// waitRegistered waits until this node's own record is committed (an API
// registration amends it).
func (n *Node) waitRegistered(ctx context.Context) error {
	for !n.registered.Load() {
		select {
		case <-ctx.Done():
			return ipc.Errorf(ipc.ErrNotReady, "node %s has not joined a cluster with a leader yet", n.cfg.NodeID)
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

// RemoveMember implements ipc.Backend.
func (n *Node) RemoveMember(ctx context.Context, id string) error {
	err := n.removeMember(ctx, id)
	switch {
	case errors.Is(err, errNoSuchMember):
		return ipc.Errorf(ipc.ErrNotFound, "member %q is not in the cluster", id)
	case errors.Is(err, errLastVoter) || (err != nil && strings.Contains(err.Error(), "last voter")):
		return ipc.Errorf(ipc.ErrConflict, "member %q is the last voter: removing it would leave no cluster", id)
	case err != nil:
		return apiError(err)
	}
	return nil
}
