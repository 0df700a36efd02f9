package sidecar

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/hashicorp/raft"

	"github.com/axsched/ax/ipc"
	"github.com/axsched/ax/raftfsm"
)

var _ ipc.Backend = (*Node)(nil)

// Submit implements ipc.Backend.
func (n *Node) Submit(ctx context.Context, spec ipc.TaskSpec) (ipc.Task, bool, error) {
	res, err := n.proposeAPI(ctx, []raftfsm.Command{submitCommand(spec)})
	if err != nil {
		return ipc.Task{}, false, apiError(err)
	}
	r := res[0]
	switch r.Code {
	case raftfsm.CodeOK:
		v := taskView(r.Task)
		v.BacklogWarning = r.Warning
		return v, r.Created, nil
	case raftfsm.CodeConflict:
		return ipc.Task{}, false, conflictError(spec.ID, r.Task)
	default:
		return ipc.Task{}, false, fmt.Errorf("submit %q: unexpected result %q", spec.ID, r.Code)
	}
}

// Task implements ipc.Backend: a local read, unless this node is catching
// up with the leader (just restarted, or partitioned) or does not have the
// task: then the leader's copy is read, so that a lagging node never
// answers "not found" for a task that exists, nor an old state.
func (n *Node) Task(ctx context.Context, id string) (ipc.Task, error) {
	if ipc.StrongRead(ctx) {
		t, err := n.strongTask(ctx, id)
		if err != nil {
			return ipc.Task{}, err
		}
		return taskView(t), nil
	}
	t, err := n.fsm.Task(id)
	if err != nil && !errors.Is(err, raftfsm.ErrNotFound) {
		return ipc.Task{}, err
	}
	if (err != nil || !n.caughtUp()) && n.raft.State() != raft.Leader {
		if addr := n.leaderPeerAddr(); addr != "" {
			rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			lt, lerr := n.peers.task(rctx, addr, id)
			cancel()
			if lerr == nil {
				t, err = lt, nil
				if lt == nil {
					err = raftfsm.ErrNotFound
				}
			}
		}
	}
	if errors.Is(err, raftfsm.ErrNotFound) {
		return ipc.Task{}, ipc.Errorf(ipc.ErrNotFound, "task %q not found", id)
	}
	if err != nil {
		return ipc.Task{}, err
	}
	return taskView(t), nil
}

// strongTask is a linearizable read (rqlite's recipe): on the leader, after
// this term's barrier (the leader's timers run only once it passed), take
// the commit index, verify leadership with a quorum round, wait until the
// FSM has applied that index, then read. A follower asks the leader.
func (n *Node) strongTask(ctx context.Context, id string) (*raftfsm.Task, error) {
	notFound := ipc.Errorf(ipc.ErrNotFound, "task %q not found", id)
	if n.raft.State() != raft.Leader {
		addr := n.leaderPeerAddr()
		if addr == "" {
			return nil, ipc.Errorf(ipc.ErrNoLeader, "strong read: no leader known")
		}
		t, err := n.peers.strongTask(ctx, addr, id)
		if err != nil {
			return nil, ipc.Errorf(ipc.ErrNoLeader, "strong read through the leader failed: %v", err)
		}
		if t == nil {
			return nil, notFound
		}
		return t, nil
	}
	t, err := n.leaderRead(ctx, id)
	if errors.Is(err, raftfsm.ErrNotFound) {
		return nil, notFound
	}
	return t, err
}

// leaderRead is the leader's side of a strong read.
func (n *Node) leaderRead(ctx context.Context, id string) (*raftfsm.Task, error) {
	if n.leader.currentTimers() == nil {
		return nil, ipc.Errorf(ipc.ErrNoLeader, "strong read: the leader is still starting (barrier)")
	}
	commit := n.raft.CommitIndex()
	if err := n.raft.VerifyLeader().Error(); err != nil {
		return nil, ipc.Errorf(ipc.ErrNoLeader, "strong read: not the leader any more: %v", err)
	}
	if !n.waitApplied(ctx, commit, 5*time.Second) {
		return nil, ipc.Errorf(ipc.ErrNotReady, "strong read: applying up to %d took too long", commit)
	}
	return n.fsm.Task(id)
}

// Cancel implements ipc.Backend.
func (n *Node) Cancel(ctx context.Context, id string) (ipc.Task, error) {
	return n.oneTask(ctx, id, raftfsm.Command{Type: raftfsm.CmdCancel, Cancel: &raftfsm.Cancel{ID: id}}, "cancel")
}

// Cluster implements ipc.Backend.
func (n *Node) Cluster(ctx context.Context) (ipc.ClusterInfo, error) {
	leaderAddr, leaderID := n.raft.LeaderWithID()
	stats := n.raft.Stats()
	info := ipc.ClusterInfo{
		NodeID: n.cfg.NodeID, State: n.raft.State().String(), Leader: string(leaderID),
		Term: parseUint(stats["term"]), AppliedIndex: n.fsm.AppliedIndex(), CommitIndex: parseUint(stats["commit_index"]),
		Storage: n.storage.status(),
	}
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return info, err
	}
	info.VotersTarget = n.cfg.Voters
	// The leader's view of the members (contact, health, autopilot
	// status): its own, or asked from it.
	var views map[string]memberStatus
	if n.raft.State() == raft.Leader {
		views = n.memberStatuses()
	} else if addr := n.leaderPeerAddr(); addr != "" {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		views, _ = n.peers.members(rctx, addr)
		cancel()
	}
	voters, reachableVoters := 0, 0
	for _, s := range f.Configuration().Servers {
		m := ipc.Member{
			ID: string(s.ID), RaftAddr: string(s.Address),
			PeerAddr: n.peerAddrOf(string(s.ID), string(s.Address)),
			Suffrage: s.Suffrage.String(), Leader: s.Address == leaderAddr && leaderID != "",
		}
		if views != nil {
			v, ok := views[m.ID]
			reach, last, healthy := v.Reachable, v.LastContactMs, v.Healthy
			if !ok {
				last = -1
			}
			m.Reachable, m.LastContactMs, m.AppliedIndex, m.Healthy = &reach, &last, v.AppliedIndex, &healthy
			m.Role, m.Status, m.StableSince = v.Role, v.Status, msTime(v.StableSinceMs)
			if s.Suffrage == raft.Voter && reach {
				reachableVoters++
			}
		}
		if s.Suffrage == raft.Voter {
			voters++
		}
		info.Members = append(info.Members, m)
	}
	if views != nil && voters > 0 {
		ft := max(reachableVoters-quorum(voters), 0)
		info.FailureTolerance = &ft
	}
	return info, nil
}

// Ready implements ipc.Backend: a leader is known, this node's record is
// committed, and this node has applied everything the leader had committed
// at its last load report (a follower's own commit index may still be 0
// right after a restart, before the first append from the leader; rqlite's
// "Committed" does the same).
func (n *Node) Ready(ctx context.Context) error {
	_, id := n.raft.LeaderWithID()
	if id == "" && n.removed.Load() {
		return ipc.Errorf(ipc.ErrNotReady, "this node was removed from the cluster while it was down: delete its data dir and start it with --join")
	}
	if id == "" {
		return ipc.Errorf(ipc.ErrNotReady, "no leader known yet").WithRetryAfter(time.Second)
	}
	if !n.registered.Load() {
		return ipc.Errorf(ipc.ErrNotReady, "node not registered with the leader yet").WithRetryAfter(time.Second)
	}
	if n.raft.State() == raft.Leader {
		if n.leader.currentTimers() == nil {
			return ipc.Errorf(ipc.ErrNotReady, "leader is starting").WithRetryAfter(time.Second)
		}
		return nil
	}
	if !n.caughtUp() {
		return ipc.Errorf(ipc.ErrNotReady, "catching up: applied %d of the leader's %d", n.fsm.AppliedIndex(), n.leaderCommit.Load()).WithRetryAfter(time.Second)
	}
	return nil
}

func parseUint(s string) uint64 {
	v, _ := strconv.ParseUint(s, 10, 64)
	return v
}

// apiError maps a proposal error to the API's error model.
func apiError(err error) error {
	var se *StorageUnavailableError
	if errors.As(err, &se) {
		return se.apiError()
	}
	var be *BacklogError
	if errors.As(err, &be) {
		return ipc.Errorf(ipc.ErrQueueFull, "%s; retry later", be.Error()).WithRetryAfter(time.Second).WithBacklog(be.Depth, be.Limit)
	}
	switch {
	case errors.Is(err, ErrOutcomeUnknown):
		return ipc.Errorf(ipc.ErrNoLeader, "%v; retry (submits are idempotent by id)", err).WithRetryAfter(time.Second)
	case errors.Is(err, ErrNoLeader), errors.Is(err, raft.ErrLeadershipLost), errors.Is(err, ErrNotLeader):
		return ipc.Errorf(ipc.ErrNoLeader, "no leader: the cluster is electing one or has no quorum; retry")
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return ipc.Errorf(ipc.ErrNoLeader, "the write was not committed before the request deadline; retry (it is idempotent by id)")
	}
	return err
}

func msTime(ms int64) *time.Time {
	if ms == 0 {
		return nil
	}
	t := time.UnixMilli(ms).UTC()
	return &t
}

// taskView converts a stored task to the API's view.
func taskView(t *raftfsm.Task) ipc.Task {
	v := ipc.Task{
		ID: t.ID, Handler: t.Spec.Handler, State: t.State.String(), Priority: t.Spec.Priority,
		Attempts: t.Attempts, MaxAttempts: t.Spec.MaxAttempts, Timeout: time.Duration(t.Spec.TimeoutNs).String(),
		RunAt: msTime(t.Spec.RunAtMs), LastError: t.LastError,
		CreatedAt: time.UnixMilli(t.CreatedMs).UTC(), UpdatedAt: time.UnixMilli(t.UpdatedMs).UTC(),
		FinishedAt: msTime(t.FinishedMs), Payload: t.Spec.Payload, PayloadBase64: t.Spec.PayloadBase64,
	}
	if t.Spec.RunAtMs == 0 && (t.Spec.DelayNs != 0 || !t.Spec.Recurring()) {
		v.Delay = time.Duration(t.Spec.DelayNs).String()
	}
	v.Run, v.Snoozes = t.RunNumber(), t.Snoozes
	v.Cron, v.Timezone, v.Repeats, v.RouteKey, v.Labels = t.Spec.Cron, t.Spec.Timezone, t.Spec.Repeats, t.Spec.RouteKey, t.Spec.Labels
	if t.Spec.EveryNs > 0 {
		v.Every = time.Duration(t.Spec.EveryNs).String()
	}
	v.Until = msTime(t.Spec.UntilMs)
	if b := t.Spec.Backoff; b != nil {
		v.Backoff = &ipc.BackoffView{Initial: time.Duration(b.InitialNs).String(), Max: time.Duration(b.MaxNs).String(), Multiplier: b.Multiplier, Jitter: b.Jitter}
	}
	switch t.State {
	case raftfsm.StateWaiting:
		v.NextRunAt = msTime(t.DueMs)
	case raftfsm.StateRunning:
		v.Node = t.Node
	}
	return v
}
