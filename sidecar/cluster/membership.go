package cluster

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"github.com/rs/zerolog"

	"github.com/axsched/ax/engine"
	"github.com/axsched/ax/raftfsm"
	"github.com/axsched/ax/sidecar/peerapi"
)

// Raft is the part of *raft.Raft the cluster uses.
type Raft interface {
	State() raft.RaftState
	LeaderWithID() (raft.ServerAddress, raft.ServerID)
	GetConfiguration() raft.ConfigurationFuture
	CommitIndex() uint64
	CurrentTerm() uint64
	BootstrapCluster(configuration raft.Configuration) raft.Future
	AddNonvoter(id raft.ServerID, address raft.ServerAddress, prevIndex uint64, timeout time.Duration) raft.IndexFuture
	AddVoter(id raft.ServerID, address raft.ServerAddress, prevIndex uint64, timeout time.Duration) raft.IndexFuture
	DemoteVoter(id raft.ServerID, prevIndex uint64, timeout time.Duration) raft.IndexFuture
	RemoveServer(id raft.ServerID, prevIndex uint64, timeout time.Duration) raft.IndexFuture
	LeadershipTransfer() raft.Future
	LeadershipTransferToServer(id raft.ServerID, address raft.ServerAddress) raft.Future
}

// Peers calls other nodes' peer APIs (*peerapi.Client).
type Peers interface {
	Learn(id, raftAddr, peerAddr string)
	Info(ctx context.Context, addr string) (peerapi.Info, error)
	Join(ctx context.Context, addr string, req peerapi.Info) (peerapi.Info, error)
	Report(ctx context.Context, addr string, r peerapi.LoadReport) (peerapi.ReportReply, error)
	Members(ctx context.Context, addr string) (map[string]peerapi.MemberStatus, error)
	Remove(ctx context.Context, addr, id string) error
}

// Proposer gets commands committed wherever the leader is (the node's
// forwarding path) and returns one result per command.
type Proposer interface {
	Propose(ctx context.Context, cmds []raftfsm.Command) ([]raftfsm.Result, error)
}

// FSM is the part of the node's state the cluster reads (*raftfsm.FSM).
type FSM interface {
	AppliedIndex() uint64
	Nodes() ([]raftfsm.Node, error)
}

// RaftLog reads the Raft log (*raftstore.Store).
type RaftLog interface {
	// StateIndex is the index of the last entry at or below upTo that the
	// FSM applies (no-ops and barriers are never applied).
	StateIndex(upTo uint64) uint64
}

// Routes finds the peer API address to dial for a node.
type Routes interface {
	// LeaderPeerAddr is the current leader's, "" when no leader or its
	// address is known.
	LeaderPeerAddr() string
	// RoutedPeerAddr is node id's, whose advertised peer address is addr
	// (a configured route's instead, when there is one).
	RoutedPeerAddr(id, addr string) string
}

// Load is this node's load, and the leader's use of the reports.
type Load interface {
	// Own is this node's load: callbacks in flight, queued attempts,
	// executors and draining (the cluster fills in ID, Applied and
	// State).
	Own() peerapi.LoadReport
	// Record gives a report to the leader's scheduler (on the leader).
	Record(r peerapi.LoadReport)
	// ParkedShare is node id's share of the runs the leader holds back,
	// per handler (on the leader).
	ParkedShare(id string) map[string]int
	// SetLeaderCommit records the index this node must have applied to
	// have caught up, from its last report: the leader's last committed
	// entry the FSM applies (readiness).
	SetLeaderCommit(index uint64)
	// SetParked gives this node's delivery its share of the leader's
	// parked runs; nil when the leader could not be asked.
	SetParked(parked map[string]int)
}

// Config is what the cluster needs of the node's configuration.
type Config struct {
	NodeID        string
	RaftAdvertise string
	PeerAdvertise string
	// Incarnation is the random id of this node's data dir
	// (raftstore.Store.Incarnation): it goes into the node record and the
	// join request.
	Incarnation string
	// PeerAddr is the peer API's bind address (a join entry naming it
	// is this node).
	PeerAddr string
	// Join are the peer API addresses (HOST:PORT or dns:NAME:PORT) to
	// join or form a cluster with.
	Join     []string
	Resolver Resolver
	// BootstrapExpect is how many new nodes form the cluster.
	BootstrapExpect int
	// Voters is autopilot's target number of voters.
	Voters int
	// AutopilotStabilization is how long a non-voter stays healthy
	// before autopilot promotes it.
	AutopilotStabilization time.Duration
	// AutopilotReplaceAfter is how long a voter goes unheard before
	// autopilot replaces it.
	AutopilotReplaceAfter time.Duration
	// DeadMemberCleanup is how long a member goes unheard before autopilot
	// removes it from the configuration; 0 or less: never.
	DeadMemberCleanup time.Duration
	// Executors are the executors given by flag, in this node's record.
	Executors []raftfsm.Executor
	// Orphans are the attempts the store said ran on this node when it
	// started (LostReport): reported lost once it is registered.
	Orphans []raftfsm.Complete
	// OrphanCurrent, when set, reports whether an orphan is still the
	// attempt its task runs on this node, in the run it was in at start.
	// It is asked once the node's record has committed and applied here,
	// so the store has caught up with the log up to it: an orphan whose
	// attempt ended meanwhile (its report was committed just before the
	// previous process died, and applied only in the replay) is not
	// reported, since a Complete names only the attempt's number, which
	// the task's next run starts again from 1. nil: every orphan is.
	OrphanCurrent func(raftfsm.Complete) bool
}

// Deps are the parts of the node the cluster works with.
type Deps struct {
	Raft     Raft
	Peers    Peers
	Proposer Proposer
	FSM      FSM
	RaftLog  RaftLog
	Routes   Routes
	Load     Load
	Clock    engine.Clock
	Log      zerolog.Logger
	// Registered is set once this node's record is committed.
	Registered *atomic.Bool
	// Removed is set while the leader does not list this node.
	Removed *atomic.Bool
	// LeaderChanged, when set, returns a channel closed at the next
	// change of the leader this node knows of (raftstore.LeaderWatch):
	// ReportLoop then reports at once.
	LeaderChanged func() <-chan struct{}
}

// Membership keeps this node in its cluster.
type Membership struct {
	cfg       Config
	d         Deps
	log       zerolog.Logger
	autopilot *autopilot
	orphans   []raftfsm.Complete
}

// New returns the Membership of a node; its loops start with the node
// (JoinOrBootstrap, Register, ReportLoop, WatchRemoval, RunAutopilot).
func New(cfg Config, d Deps) *Membership {
	if d.Registered == nil {
		d.Registered = new(atomic.Bool)
	}
	if d.Removed == nil {
		d.Removed = new(atomic.Bool)
	}
	if d.Clock == nil {
		d.Clock = engine.RealClock()
	}
	m := &Membership{cfg: cfg, d: d, log: d.Log, orphans: cfg.Orphans}
	m.autopilot = newAutopilot(autopilotConfig{
		Voters: cfg.Voters, Stabilization: cfg.AutopilotStabilization,
		LastContact: AutopilotLastContact, ReplaceAfter: cfg.AutopilotReplaceAfter, MaxLag: AutopilotMaxLag,
		DeadAfter: max(cfg.DeadMemberCleanup, 0),
	}, cfg.NodeID, d)
	return m
}

// Info describes this node for the peer API.
func (m *Membership) Info() peerapi.Info {
	_, leader := m.d.Raft.LeaderWithID()
	return peerapi.Info{
		ID: m.cfg.NodeID, RaftAddr: m.cfg.RaftAdvertise, PeerAddr: m.cfg.PeerAdvertise,
		LeaderID: string(leader), InCluster: InCluster(m.d.Raft), CommitIndex: m.d.Raft.CommitIndex(),
	}
}

// InConfiguration reports whether node id is a server of the latest Raft
// configuration r knows.
func InConfiguration(r Raft, id string) bool {
	f := r.GetConfiguration()
	if f.Error() != nil {
		return false
	}
	for _, s := range f.Configuration().Servers {
		if string(s.ID) == id {
			return true
		}
	}
	return false
}

// InCluster reports whether r has a configuration (it bootstrapped or
// joined).
func InCluster(r Raft) bool {
	f := r.GetConfiguration()
	return f.Error() == nil && len(f.Configuration().Servers) > 0
}

// Members keeps the nodes that are in r's Raft configuration: a removed
// node's record stays in the store, but it gets no attempts. nodes is
// filtered in place.
func Members(r Raft, nodes []raftfsm.Node) []raftfsm.Node {
	f := r.GetConfiguration()
	if f.Error() != nil {
		return nodes
	}
	in := map[string]bool{}
	for _, s := range f.Configuration().Servers {
		in[string(s.ID)] = true
	}
	kept := nodes[:0]
	for _, nd := range nodes {
		if in[nd.ID] {
			kept = append(kept, nd)
		}
	}
	return kept
}

// sleep waits d on the clock; false when ctx ended first.
func sleep(ctx context.Context, c engine.Clock, d time.Duration) bool {
	t := c.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C():
		return true
	}
}

// every calls fn every d on the clock until ctx ends, the first call
// after d; like a time.Ticker, a call that takes longer than d is followed
// by the next at once.
func every(ctx context.Context, c engine.Clock, d time.Duration, fn func()) {
	t := c.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		t.Reset(d)
		fn()
	}
}
