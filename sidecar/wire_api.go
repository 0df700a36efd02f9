package sidecar

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/hashicorp/raft"

	"github.com/axsched/ax/engine"
	"github.com/axsched/ax/ipc"
	"github.com/axsched/ax/raftfsm"
	"github.com/axsched/ax/sidecar/api"
	"github.com/axsched/ax/sidecar/peerapi"
	"github.com/axsched/ax/sidecar/scheduler"
)

// The adapters between package api (the application API's backend) and
// the rest of the node: the forwarding proposer, the scheduler's views,
// the purge, the membership, the peer routes, delivery's limits. Each
// reads the Node's field when called, not when built. The errors of the
// node's proposal path are mapped to the API's model here (apiError).

// newBackend builds the application API's backend over n; n.fsm, n.raft
// and n.clock must be set, the other parts by the time a request comes.
func newBackend(n *Node) *api.Backend {
	var peers api.Peers
	if n.peers != nil {
		peers = n.peers.Client
	}
	return api.New(api.Config{
		NodeID: n.cfg.NodeID, Voters: n.cfg.Voters, FireLead: n.cfg.FireLead, MaxBatchCommands: n.cfg.MaxBatchCommands,
	}, api.Deps{
		Proposer: apiProposer{n}, Store: n.fsm, Raft: n.raft, Scheduler: apiScheduler{n}, Purger: apiPurger{n},
		Membership: apiMembership{n}, Routes: apiRoutes{n}, Peers: peers, Storage: n.storage, Limits: apiLimits{n},
		OwnWrites: apiOwnWrites{n}, Guard: n, Clock: n.clock, Log: n.log,
	})
}

// Ready reports whether this node is ready (api.Backend.Ready): a leader
// is known, this node is registered and caught up.
func (n *Node) Ready(ctx context.Context) error { return n.backend.Ready(ctx) }

// Submit stores a task through this node (api.Backend.Submit).
func (n *Node) Submit(ctx context.Context, spec ipc.TaskSpec) (ipc.Task, bool, error) {
	return n.backend.Submit(ctx, spec)
}

// apiProposer is the forwarding path (wire_forward.go) with the API's
// errors.
type apiProposer struct{ n *Node }

func (p apiProposer) Propose(ctx context.Context, cmds []raftfsm.Command) ([]raftfsm.Result, error) {
	if err := p.n.removedError(); err != nil {
		return nil, err
	}
	res, err := p.n.propose(ctx, cmds)
	return res, apiError(err)
}

func (p apiProposer) ProposeAPI(ctx context.Context, cmds []raftfsm.Command) ([]raftfsm.Result, error) {
	if err := p.n.removedError(); err != nil {
		return nil, err
	}
	res, err := p.n.proposeAPI(ctx, cmds)
	return res, apiError(err)
}

// removedError is the answer to a write on a node that knows it was
// removed from the cluster (cluster.WatchRemoval): at once, and saying
// so, instead of waiting for a leader it will never hear of and asking
// the app to retry (no_leader, as before, so clients treat it alike).
func (n *Node) removedError() error {
	if !n.removed.Load() {
		return nil
	}
	return ipc.Errorf(ipc.ErrNoLeader, "this node was removed from the cluster (ax cluster remove) and takes no writes: to bring it back, stop it, delete its data dir and start it with --join").WithRetryAfter(5 * time.Second)
}

// apiOwnWrites is the forwarder's read barrier (read your writes).
type apiOwnWrites struct{ n *Node }

func (o apiOwnWrites) Forwarded() uint64   { return o.n.forward.Forwarded() }
func (o apiOwnWrites) Observed(idx uint64) { o.n.forward.Observed(idx) }

func (o apiOwnWrites) WaitForwarded(ctx context.Context, limit time.Duration) bool {
	return o.n.forward.WaitForwarded(ctx, limit)
}

// apiScheduler is the leader's scheduler's views.
type apiScheduler struct{ n *Node }

func (s apiScheduler) Leading() bool                             { return s.n.leader.Leading() }
func (s apiScheduler) ParkedByReason() map[string]map[string]int { return s.n.leader.ParkedByReason() }
func (s apiScheduler) Circuits() []engine.BreakerStatus          { return s.n.leader.Circuits() }
func (s apiScheduler) NodeCircuit(node, handler string) (time.Time, bool) {
	return s.n.leader.NodeCircuit(node, handler)
}
func (s apiScheduler) Depth(handler string) int { return s.n.leader.Depth(handler) }
func (s apiScheduler) Waiting(ids []string) map[string]api.WaitingView {
	got := s.n.leader.Waiting(ids)
	if got == nil {
		return nil
	}
	out := make(map[string]api.WaitingView, len(got))
	for id, w := range got {
		out[id] = api.WaitingView(w)
	}
	return out
}

// apiPurger is the retention's purge, for the API's reason.
type apiPurger struct{ n *Node }

func (p apiPurger) Purge(ctx context.Context, fts []raftfsm.FinishedTask) (int, error) {
	k, err := p.n.retention.Purge(ctx, fts, scheduler.PurgeReasonAPI)
	return k, apiError(err)
}

// apiMembership is this node's standing (node.go, wire_cluster.go,
// wire_forward.go).
type apiMembership struct{ n *Node }

func (m apiMembership) Registered() bool     { return m.n.registered.Load() }
func (m apiMembership) Removed() bool        { return m.n.removed.Load() }
func (m apiMembership) CaughtUp() bool       { return m.n.caughtUp() }
func (m apiMembership) LeaderCommit() uint64 { return m.n.leaderCommit.Load() }
func (m apiMembership) MemberStatuses() map[string]peerapi.MemberStatus {
	return m.n.memberStatuses()
}
func (m apiMembership) WaitApplied(ctx context.Context, idx uint64, limit time.Duration) bool {
	return m.n.waitApplied(ctx, idx, limit)
}

func (m apiMembership) StateIndex(upTo uint64) uint64 { return m.n.store.StateIndex(upTo) }

func (m apiMembership) RemoveMember(ctx context.Context, id string) error {
	err := m.n.removeMember(ctx, id)
	switch {
	case errors.Is(err, errNoSuchMember):
		return ipc.Errorf(ipc.ErrNotFound, "member %q is not in the cluster", id)
	case errors.Is(err, errLastVoter) || (err != nil && strings.Contains(err.Error(), "last voter")):
		return ipc.Errorf(ipc.ErrConflict, "member %q is the last voter: removing it would leave no cluster", id)
	case errors.Is(err, errLoseQuorum):
		return ipc.Errorf(ipc.ErrConflict, "%v", err)
	case errors.Is(err, peerapi.ErrUnavailable), errors.Is(err, raft.ErrLeadershipLost), errors.Is(err, raft.ErrNotLeader):
		// The leader took the request but did not see it committed (it
		// lost its leadership meanwhile): it may or may not be done.
		return ipc.Errorf(ipc.ErrNoLeader, "the removal of %q was not confirmed (%v): see ax cluster status, and ask again if it is still listed", id, err).WithRetryAfter(time.Second)
	case err != nil:
		return apiError(err)
	}
	return nil
}

// apiRoutes finds peer addresses (wire_forward.go).
type apiRoutes struct{ n *Node }

func (r apiRoutes) LeaderPeerAddr() string                { return r.n.leaderPeerAddr() }
func (r apiRoutes) PeerAddrOf(id, raftAddr string) string { return r.n.peerAddrOf(id, raftAddr) }

// apiLimits is delivery's executor limits (none without delivery).
type apiLimits struct{ n *Node }

func (l apiLimits) LimitOf(x *raftfsm.Executor) int { return l.n.delivery.limitOf(x) }

// apiError maps an error of the node's proposal path to the API's error
// model; nil stays nil.
func apiError(err error) error {
	if err == nil {
		return nil
	}
	var se *StorageUnavailableError
	if errors.As(err, &se) {
		return se.APIError()
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
