package sidecar

// The adapters between package cluster (membership, autopilot, removal,
// discovery, health port), package peerapi (the node-to-node API) and the
// rest of the node. They call the other components by their current names.

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/hashicorp/raft"

	"github.com/axsched/ax/engine"
	"github.com/axsched/ax/raftfsm"
	"github.com/axsched/ax/sidecar/cluster"
	"github.com/axsched/ax/sidecar/delivery"
	"github.com/axsched/ax/sidecar/peerapi"
)

type memberStatus = peerapi.MemberStatus

var (
	errNoSuchMember = cluster.ErrNoSuchMember
	errLastVoter    = cluster.ErrLastVoter
	errLoseQuorum   = cluster.ErrWouldLoseQuorum
)

// newMembership builds the node's cluster membership (after Raft, the
// peer client and delivery).
func newMembership(n *Node) *cluster.Membership {
	var execs []raftfsm.Executor
	for _, e := range n.cfg.Executors {
		execs = append(execs, raftfsm.Executor{Name: "flag:" + e.Handler, Handlers: []string{e.Handler}, URL: e.URL, FromFlag: true})
	}
	return cluster.New(cluster.Config{
		NodeID: n.cfg.NodeID, Incarnation: n.store.Incarnation, RaftAdvertise: n.cfg.RaftAdvertise, PeerAdvertise: n.cfg.PeerAdvertise, PeerAddr: n.cfg.PeerAddr,
		Join: n.cfg.Join, Resolver: n.cfg.Resolver, BootstrapExpect: n.cfg.BootstrapExpect, Voters: n.cfg.Voters,
		AutopilotStabilization: n.cfg.AutopilotStabilization, AutopilotReplaceAfter: n.cfg.AutopilotReplaceAfter,
		DeadMemberCleanup: n.cfg.DeadMemberCleanup,
		Executors:         execs, Orphans: n.orphans, OrphanCurrent: n.orphanCurrent(),
	}, cluster.Deps{
		Raft: n.raft, Peers: n.peers.Client, Proposer: clusterProposer{n}, FSM: n.fsm, RaftLog: n.store, Routes: clusterRoutes{n}, Load: clusterLoad{n},
		Clock: n.clock, Log: n.log, Registered: &n.registered, Removed: &n.removed,
		LeaderChanged: n.leaders.Changed,
	})
}

// clusterProposer is the forwarding path (forward.go) for cluster.Proposer.
type clusterProposer struct{ n *Node }

func (p clusterProposer) Propose(ctx context.Context, cmds []raftfsm.Command) ([]raftfsm.Result, error) {
	return p.n.propose(ctx, cmds)
}

// clusterRoutes is peerroute.go and forward.go for cluster.Routes.
type clusterRoutes struct{ n *Node }

func (r clusterRoutes) LeaderPeerAddr() string                { return r.n.leaderPeerAddr() }
func (r clusterRoutes) RoutedPeerAddr(id, addr string) string { return r.n.routedPeerAddr(id, addr) }

// clusterLoad is delivery, drain and the leader's scheduler for
// cluster.Load.
type clusterLoad struct{ n *Node }

func (l clusterLoad) Own() peerapi.LoadReport {
	d := l.n.delivery
	return peerapi.LoadReport{InFlight: d.InFlight(), Queued: d.QueuedByHandler(), Executors: d.Capacity(), Draining: l.n.drain.self.Load(),
		StorageUnavailable: l.n.WriteAllowed() != nil, Circuits: d.OpenCircuits()}
}
func (l clusterLoad) Record(r peerapi.LoadReport)          { l.n.reportToLeader(r) }
func (l clusterLoad) ParkedShare(id string) map[string]int { return l.n.leader.ParkedShare(id) }
func (l clusterLoad) SetLeaderCommit(index uint64)         { l.n.setLeaderCommit(index) }
func (l clusterLoad) SetParked(parked map[string]int)      { l.n.delivery.SetParked(parked) }

// The node's calls into its membership.

// memberStatuses is the leader's view of every member.
func (n *Node) memberStatuses() map[string]memberStatus { return n.cluster.MemberStatuses() }

// removeMember removes node id from the configuration for an operator
// (cluster.RemoveNode: it answers no leader within a few seconds),
// with this package's ErrNoLeader.
func (n *Node) removeMember(ctx context.Context, id string) error {
	err := n.cluster.RemoveNode(ctx, id)
	if errors.Is(err, cluster.ErrNoLeader) {
		return ErrNoLeader
	}
	return err
}

// serveHealth serves the health port on Config.HealthAddr (when set)
// until ctx ends.
func (n *Node) serveHealth(ctx context.Context) error {
	if n.cfg.HealthAddr == "" {
		return nil
	}
	addr, err := cluster.ServeHealth(ctx, n.cfg.HealthAddr, n.Ready, n.log, n.goRun)
	n.healthAddr = addr
	return err
}

// HealthAddr returns the address the health port listens on (its port
// resolved when Config.HealthAddr asked for port 0), or "" without one.
func (n *Node) HealthAddr() string { return n.healthAddr }

// resolveAdvertise resolves Config.RaftAdvertise for the Raft transport,
// waiting up to wait for a host name to resolve.
func (n *Node) resolveAdvertise(wait time.Duration) (*net.TCPAddr, error) {
	clock := n.clock
	if clock == nil {
		clock = engine.RealClock()
	}
	return cluster.ResolveAdvertise(n.ctx, n.cfg.Resolver, n.cfg.RaftAdvertise, wait, clock, n.log)
}

// peerClient is the peer API client, with the calls the node makes by
// their current names; propose answers the errors the local path returns.
type peerClient struct{ *peerapi.Client }

func newPeerClient(token string, clock engine.Clock) *peerClient {
	// ctx deadlines are real time whatever the node's clock is (a fake
	// clock in sidecartest): the request's timeout is measured on it.
	_ = clock
	return &peerClient{peerapi.NewClient(token, time.Now)}
}

// propose sends cmds to the leader at addr. The leader's refusals come
// back as the errors its own propose returned: ErrNotLeader, a
// *BacklogError, a *StorageUnavailableError.
func (p *peerClient) propose(ctx context.Context, addr string, cmds []raftfsm.Command) ([]raftfsm.Result, error) {
	res, err := p.Propose(ctx, addr, cmds)
	return res, nodeError(err)
}

// leaderRefused reports whether err is the leader's definite answer to a
// forwarded proposal, returned to the caller as the local path returns it
// (not retried).
func leaderRefused(err error) bool {
	var be *BacklogError
	var se *StorageUnavailableError
	return errors.As(err, &be) || errors.As(err, &se)
}

// peerError is what the peer API answers for an error of the node: the
// errors of the local proposal path with their codes (nodeError's
// inverse); others as they are.
func peerError(err error) error {
	var be *BacklogError
	var se *StorageUnavailableError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &be):
		e := peerapi.Errorf(peerapi.ErrQueueFull, "%s", err.Error())
		e.Handler, e.Depth, e.Limit = be.Handler, be.Depth, be.Limit
		return e
	case errors.As(err, &se):
		e := peerapi.Errorf(peerapi.ErrStorageUnavailable, "%s", err.Error())
		e.Cause, e.SinceMs = se.Cause, se.Since.UnixMilli()
		return e
	case errors.Is(err, ErrNotLeader):
		return peerapi.ErrNotLeader
	}
	return err
}

// nodeError maps the leader's answer back to the error the local path
// returns (peerError's inverse).
func nodeError(err error) error {
	var pe *peerapi.Error
	if !errors.As(err, &pe) {
		return err
	}
	switch pe.Code {
	case peerapi.CodeNotLeader:
		return ErrNotLeader
	case peerapi.CodeQueueFull:
		return &BacklogError{Handler: pe.Handler, Depth: pe.Depth, Limit: pe.Limit}
	case peerapi.CodeStorageUnavailable:
		return &StorageUnavailableError{Cause: pe.Cause, Since: time.UnixMilli(pe.SinceMs)}
	}
	return err
}

// peerServer serves the peer API for the node; the backend adds routes
// (sidecar/api).
type peerServer struct {
	n   *Node
	srv *peerapi.Server
}

func newPeerServer(n *Node) *peerServer {
	p := &peerServer{n: n}
	p.srv = peerapi.NewServer(peerapi.ServerConfig{
		Node:   peerNode{n},
		Token:  n.cfg.ClusterToken,
		Routes: n.backend.PeerRoutes(), // GET /v1/handlers and waiting reasons (sidecar/api)
		// The callers' deadlines are context deadlines, which are real
		// time whatever n.clock is (a fake clock in sidecartest).
		Now:      time.Now,
		Listener: n.sec.PeerListener(),
		Hold:     n.cfg.SocketHold(),
	})
	return p
}

func (p *peerServer) listen(addr string) error { return p.srv.Listen(addr) }
func (p *peerServer) close()                   { p.srv.Close() }

// peerNode is the node for peerapi.Node.
type peerNode struct{ n *Node }

func (p peerNode) Info() peerapi.Info { return p.n.cluster.Info() }
func (p peerNode) Join(ctx context.Context, req peerapi.Info) error {
	return p.n.cluster.Join(ctx, req)
}
func (p peerNode) Propose(ctx context.Context, cmds []raftfsm.Command) ([]raftfsm.Result, error) {
	res, err := p.n.proposer.Propose(ctx, cmds)
	return res, peerError(err)
}
func (p peerNode) Report(r peerapi.LoadReport) peerapi.ReportReply {
	return p.n.cluster.HandleReport(r)
}
func (p peerNode) Task(ctx context.Context, id string, strong bool) (*raftfsm.Task, uint64, error) {
	n := p.n
	// The applied index is taken before the read, so the task read is at
	// least that fresh (a follower trusts the copy as of it: api's
	// ownWriteFromLeader).
	applied := n.fsm.AppliedIndex()
	var t *raftfsm.Task
	var err error
	if strong {
		if n.raft.State() != raft.Leader {
			return nil, 0, peerapi.ErrNotLeader
		}
		t, err = n.backend.LeaderRead(ctx, id)
	} else {
		t, err = n.fsm.Task(id)
	}
	return t, applied, err
}
func (p peerNode) Remove(ctx context.Context, id string) error {
	return p.n.cluster.RemoveMember(ctx, id)
}
func (p peerNode) Members() (map[string]peerapi.MemberStatus, error) {
	if p.n.raft.State() != raft.Leader {
		return nil, peerapi.ErrNotLeader
	}
	return p.n.memberStatuses(), nil
}

// orphanCurrent returns cluster.Config.OrphanCurrent: whether an orphan
// (findOrphans) is still the attempt its task runs on this node,
// in the same run as when the node started (n.orphanRuns).
func (n *Node) orphanCurrent() func(raftfsm.Complete) bool {
	runs := make(map[string]delivery.Orphan, len(n.orphanRuns))
	for _, o := range n.orphanRuns {
		runs[o.ID] = o
	}
	return func(c raftfsm.Complete) bool {
		o, ok := runs[c.ID]
		if !ok {
			return true // not known with its run: reported, as before
		}
		t, err := n.fsm.Task(c.ID)
		if errors.Is(err, raftfsm.ErrNotFound) {
			return false // purged: nothing to retry
		}
		if err != nil {
			return true // unreadable: reported (the FSM ignores a stale one)
		}
		return t.State == raftfsm.StateRunning && t.Node == n.cfg.NodeID &&
			t.Epoch == o.Epoch && t.Run == o.Run && t.Attempts == o.Attempt
	}
}
