package api

import (
	"context"
	"time"

	"github.com/hashicorp/raft"
	"github.com/rs/zerolog"

	"github.com/axsched/ax/engine"
	"github.com/axsched/ax/ipc"
	"github.com/axsched/ax/raftfsm"
	"github.com/axsched/ax/sidecar/peerapi"
)

// Config is what the backend needs of the node's configuration.
type Config struct {
	// NodeID is this node's id.
	NodeID string
	// Voters is the number of voters autopilot keeps (GET /v1/cluster's
	// voters_target).
	Voters int
	// FireLead is how long before a run's due time the leader fires it: a
	// run due within FireLead plus a second is shown with its waiting
	// reason.
	FireLead time.Duration
	// MaxBatchCommands bounds the tasks of one purge proposal.
	MaxBatchCommands int
}

// Proposer commits commands wherever the leader is and returns one result
// per command. Its errors are already in the API's model (an *ipc.Error
// with its code, or a plain error for a 500).
type Proposer interface {
	// Propose is for the node's own writes (executor records, pauses): it
	// proposes again after a leadership change.
	Propose(ctx context.Context, cmds []raftfsm.Command) ([]raftfsm.Result, error)
	// ProposeAPI is for the application's writes: a try that may have been
	// committed is answered no_leader with "retry (idempotent)".
	ProposeAPI(ctx context.Context, cmds []raftfsm.Command) ([]raftfsm.Result, error)
}

// Store is the reads of this node's FSM (*raftfsm.FSM implements it).
type Store interface {
	Task(id string) (*raftfsm.Task, error)
	List(handler string, state raftfsm.State, after string, limit int) ([]raftfsm.Task, string, bool, error)
	Node(id string) (*raftfsm.Node, error)
	Nodes() ([]raftfsm.Node, error)
	HandlerCounts() map[string][raftfsm.StateCancelled + 1]int64
	PausedHandlers() ([]string, error)
	Finished(q raftfsm.FinishedQuery, limit int, cur *raftfsm.PurgeCursor) ([]raftfsm.FinishedTask, bool, error)
	AppliedIndex() uint64
	Runs(id string, before, limit int) ([]raftfsm.RunRecord, bool, error)
	Run(id string, run int) (*raftfsm.RunRecord, error)
}

// Raft is this node's Raft (*raft.Raft implements it).
type Raft interface {
	State() raft.RaftState
	LeaderWithID() (raft.ServerAddress, raft.ServerID)
	Stats() map[string]string
	GetConfiguration() raft.ConfigurationFuture
	VerifyLeader() raft.Future
	CommitIndex() uint64
}

// Scheduler is the leader's views of its decisions (meaningful while this
// node leads).
type Scheduler interface {
	// Leading reports whether the leader's timers run (past this term's
	// barrier).
	Leading() bool
	// Waiting returns, for the ids among ids whose runs the leader holds
	// parked, why they wait.
	Waiting(ids []string) map[string]WaitingView
	// ParkedByReason counts the parked runs per handler and reason.
	ParkedByReason() map[string]map[string]int
	// Circuits is every handler's circuit breaker.
	Circuits() []engine.BreakerStatus
	// NodeCircuit reports whether node's last load report had handler's
	// own circuit open there, and until when.
	NodeCircuit(node, handler string) (until time.Time, open bool)
	// Depth is a handler's backlog of due, undelivered runs.
	Depth(handler string) int
}

// Purger proposes the purge of finished tasks (each named with its epoch
// and finish time, so that a task changed since is kept) and returns how
// many were purged. Its errors are in the API's model.
type Purger interface {
	Purge(ctx context.Context, fts []raftfsm.FinishedTask) (int, error)
}

// Membership is this node's standing in the cluster.
type Membership interface {
	// Registered reports whether this node's record is committed.
	Registered() bool
	// Removed reports whether the leader no longer lists this node.
	Removed() bool
	// CaughtUp reports whether this node applied everything the leader
	// had committed at its last load report, LeaderCommit.
	CaughtUp() bool
	LeaderCommit() uint64
	// MemberStatuses is the leader's view of every member (on the
	// leader).
	MemberStatuses() map[string]peerapi.MemberStatus
	// RemoveMember removes node id from the configuration; errors in the
	// API's model (not_found, conflict for the last voter).
	RemoveMember(ctx context.Context, id string) error
	// WaitApplied waits until this node applied idx, ctx ends or limit
	// passes, and reports whether it did.
	WaitApplied(ctx context.Context, idx uint64, limit time.Duration) bool
	// StateIndex is the index of the last entry at or below upTo that
	// the FSM applies (a new leader's no-op and barriers never are).
	StateIndex(upTo uint64) uint64
}

// Routes finds the peer API addresses to dial.
type Routes interface {
	// LeaderPeerAddr is the current leader's, "" when no leader or no
	// address is known.
	LeaderPeerAddr() string
	// PeerAddrOf is node id's (raft address raftAddr), "" when unknown.
	PeerAddrOf(id, raftAddr string) string
}

// Peers is the peer API client (*peerapi.Client implements it).
type Peers interface {
	Task(ctx context.Context, addr, id string) (*raftfsm.Task, error)
	// TaskAt is Task with the node's applied index when it read the task
	// (0 when it has none).
	TaskAt(ctx context.Context, addr, id string) (*raftfsm.Task, uint64, error)
	StrongTask(ctx context.Context, addr, id string) (*raftfsm.Task, error)
	Members(ctx context.Context, addr string) (map[string]peerapi.MemberStatus, error)
	Do(ctx context.Context, method, addr, path, ctype string, body []byte) (int, []byte, error)
}

// Storage is this node's storage guard: whether its disk takes writes.
type Storage interface {
	Status() *ipc.StorageStatus
}

// OwnWrites makes this node's local reads see the writes it forwarded to
// the leader (read your writes on a follower; forward.Forwarder).
type OwnWrites interface {
	// Forwarded is the highest Raft index of a write this node forwarded
	// and the leader answered (0 when none).
	Forwarded() uint64
	// Observed raises Forwarded to idx: the node answered a read with the
	// leader's state as of idx, which its later reads must not go back on.
	Observed(idx uint64)
	// WaitForwarded waits until this node has applied every write it
	// forwarded and the leader answered; false when ctx ended or limit
	// passed first (the read then answers from what the node has).
	WaitForwarded(ctx context.Context, limit time.Duration) bool
}

// Limits is this node's delivery: an executor's concurrency limit here.
type Limits interface {
	LimitOf(x *raftfsm.Executor) int
}

// Deps are the parts of the node the backend asks.
type Deps struct {
	Proposer   Proposer
	Store      Store
	Raft       Raft
	Scheduler  Scheduler
	Purger     Purger
	Membership Membership
	Routes     Routes
	Peers      Peers
	Storage    Storage
	Limits     Limits
	// OwnWrites, when set, is waited on before every read of the local
	// store (readOwnWrites); nil: reads do not wait.
	OwnWrites OwnWrites
	// Guard, when set, refuses writes while storage cannot take them
	// (ipc.FreeingWriteGuard; the ipc server asks the backend).
	Guard ipc.FreeingWriteGuard
	Clock engine.Clock
	Log   zerolog.Logger
}

// Backend is the node's ipc.Backend (and ipc.FreeingWriteGuard).
type Backend struct {
	cfg Config
	d   Deps
}

var (
	_ ipc.Backend           = (*Backend)(nil)
	_ ipc.FreeingWriteGuard = (*Backend)(nil)
)

// New returns the backend over d.
func New(cfg Config, d Deps) *Backend {
	if d.Clock == nil {
		d.Clock = engine.RealClock()
	}
	return &Backend{cfg: cfg, d: d}
}

// WriteAllowed implements ipc.WriteGuard through Deps.Guard.
func (b *Backend) WriteAllowed() error {
	if b.d.Guard == nil {
		return nil
	}
	return b.d.Guard.WriteAllowed()
}

// FreeingWriteAllowed implements ipc.FreeingWriteGuard through Deps.Guard.
func (b *Backend) FreeingWriteAllowed() error {
	if b.d.Guard == nil {
		return nil
	}
	return b.d.Guard.FreeingWriteAllowed()
}

func (b *Backend) isLeader() bool { return b.d.Raft.State() == raft.Leader }

// ReadWait bounds how long a read waits for this node to apply its own
// forwarded writes (readOwnWrites) before it answers from what it has.
const ReadWait = time.Second

// readOwnWrites is the read barrier of read your writes: every API read of
// the local store calls it first. A write forwarded by this node is
// answered as soon as the leader commits it, before this node may have
// applied it; the read waits (up to ReadWait) until it has. On the leader,
// and on a follower that forwarded nothing new, it returns at once.
func (b *Backend) readOwnWrites(ctx context.Context) {
	if b.d.OwnWrites != nil {
		b.d.OwnWrites.WaitForwarded(ctx, ReadWait)
	}
}

// ownWritesPending returns the index of this node's own forwarded writes
// when it has not applied it yet, else 0.
func (b *Backend) ownWritesPending() uint64 {
	if b.d.OwnWrites == nil {
		return 0
	}
	if idx := b.d.OwnWrites.Forwarded(); idx > b.d.Store.AppliedIndex() {
		return idx
	}
	return 0
}
