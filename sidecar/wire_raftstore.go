package sidecar

import (
	"github.com/hashicorp/raft"

	"github.com/axsched/ax/ipc"
	"github.com/axsched/ax/raftfsm"
	"github.com/axsched/ax/sidecar/raftstore"
)

// The adapters between sidecar/raftstore (stores, Raft, group commit,
// storage guard, peer routes) and the rest of the node.

// routedPeerAddr returns the address to dial for the peer API of node id,
// whose advertised peer address is addr: the route's when there is one.
func (n *Node) routedPeerAddr(id, addr string) string {
	return raftstore.RoutedPeerAddr(n.cfg.PeerRoutes, id, addr)
}

// StorageUnavailableError is returned for writes while this node's
// storage cannot take them (raftstore.StorageUnavailableError).
type StorageUnavailableError = raftstore.StorageUnavailableError

// storeConfig is the node's configuration for raftstore.
func (n *Node) storeConfig() raftstore.Config {
	c := n.cfg
	return raftstore.Config{
		NodeID: c.NodeID, DataDir: c.DataDir, RaftAddr: c.RaftAddr, RaftAdvertise: c.RaftAdvertise, PeerRoutes: c.PeerRoutes,
		HeartbeatTimeout: c.HeartbeatTimeout, ElectionTimeout: c.ElectionTimeout, LeaderLeaseTimeout: c.LeaderLeaseTimeout,
		SnapshotThreshold: c.SnapshotThreshold, SnapshotInterval: c.SnapshotInterval, LogSync: c.RaftLogSync, OneP: c.OnOneP, SocketHold: c.SocketHold(),
		TrailingLogs: c.TrailingLogs, TrailingLogsBytes: c.TrailingLogsBytes,
		StorageReserve: c.StorageReserve, StorageProbeInterval: c.StorageProbeInterval,
		Log: n.log, Clock: n.clock,
		Transport: c.RaftTransport, Stream: n.sec.RaftStream(),
		BackgroundWork: c.BackgroundWork, Removed: n.removed.Load, VouchEmpty: true,
	}
}

// newGroupCommit returns the proposer of n.raft: its commands are
// prepared by n.prep (scheduler.Preparer) and admitted against the
// leader's backlog; those whose Prepare reads the store wait until this
// leader's barrier of its term has returned (n.leader's CaughtUp). n.raft
// and n.prep must be set, n.leader before the first proposal (it is made
// after the proposer, which it proposes through).
func newGroupCommit(n *Node) *raftstore.Proposer {
	cfg := raftstore.ProposerConfig{
		Raft: n.raft, Guard: n.storage, Prepare: n.prep.Prepare, Weight: cmdWeight,
		Backlog: leaderBacklog{n}, Task: n.prep.Task, Flow: n.prep.Flow,
		CaughtUp:         func() <-chan struct{} { return n.leader.CaughtUp() },
		MaxBatchCommands: n.cfg.MaxBatchCommands, BacklogLimit: n.cfg.BacklogLimit, Clock: n.clock,
		Log: n.log,
	}
	if n.cfg.BootstrapExpect == 1 && len(n.cfg.Join) == 0 {
		// A single node: its entries cost little each and its rate is
		// bound by the log's sync, so raft pipelines them unbounded, as
		// before the group commit's bound (docs/perf/README.md, Group
		// commit: bound 1 cost 8 callers ~15 % there), but for entries
		// of submits: with one of those in flight, callers who submit in
		// a loop gather into one entry and one log write rather than
		// split into two groups that alternate (+25-35 % at 8 and 16
		// callers: docs/perf/README.md, Sixteenth session). Fires and
		// completions keep the pipeline. With the gather off
		// (--gather-wait below 0) nothing is bounded. The choice is made
		// from the flags: a node started this way keeps it when other
		// nodes join it later, and after restarts with the same flags.
		cfg.MaxInflightEntries = -1
		if n.cfg.GatherWait > 0 {
			cfg.MaxInflightEntries = 1
			cfg.BoundSubmitsOnly = true
			cfg.GatherWait = n.cfg.GatherWait
			cfg.GatherMinSubmits = 4
			cfg.GatherClock = n.retryClock
		}
		// Entries that arrive while the leader writes its log wait for
		// the write's end and go as one (raftstore.LogWriting): raft's
		// leader loop then takes the write's commit first.
		if n.store != nil {
			cfg.LogWrites = &n.store.LogWriting
		}
	} else {
		// With one entry in flight, callers who submit again as soon as
		// they are answered gather into one entry (ProposerConfig.GatherWait).
		cfg.GatherWait = n.cfg.GatherWait
		cfg.GatherClock = n.retryClock
	}
	if n.metrics != nil {
		cfg.Metrics = raftstore.ProposerMetrics{EntryCommands: n.metrics.EntryCommands, CommitLatency: n.metrics.CommitLatency, Gathers: n.metrics.Gathers}
	}
	return raftstore.NewProposer(cfg)
}

// leaderBacklog is raftstore.Backlog over the leader's counts.
type leaderBacklog struct{ n *Node }

func (b leaderBacklog) Depth(handler string) int { return b.n.leader.Depth(handler) }

var _ ipc.WriteGuard = (*Node)(nil)

// WriteAllowed implements ipc.WriteGuard: while this node's storage cannot
// take writes, every write request is answered 503 storage_unavailable
// (Retry-After 5 s, the message names the cause); reads are served.
func (n *Node) WriteAllowed() error {
	if e := n.storage.LiveErr(); e != nil {
		return e.APIError()
	}
	return nil
}

// FreeingWriteAllowed implements ipc.FreeingWriteGuard: a write that frees
// space (cancel, purge) is refused only when storage is unavailable for a
// reason other than low free space, or free space is below the floor.
func (n *Node) FreeingWriteAllowed() error {
	if e := n.storage.FreeingErr(); e != nil {
		return e.APIError()
	}
	return nil
}

// storageDown runs when storage becomes unavailable (and again every
// storageTransferEvery while it stays so): a leader hands leadership to a
// healthy voter, since it can neither apply (its FSM may be stuck on a
// write) nor fire timers it cannot commit.
func (n *Node) storageDown() {
	if n.raft.State() != raft.Leader || n.numServers() < 2 {
		return
	}
	n.log.Warn().Msg("storage unavailable on the leader: transferring leadership")
	if err := n.raft.LeadershipTransfer().Error(); err != nil {
		n.log.Warn().Err(err).Msg("leadership transfer failed; retrying while storage stays unavailable")
	}
}

var _ raftstore.Backlog = leaderBacklog{}

// cmdWeight is what cmds count against Config.MaxBatchCommands when the
// proposer fills an entry: one per command, and a purge one per task or
// flow it names, so that purges keep entries as small as other commands
// do.
func cmdWeight(cmds []raftfsm.Command) int {
	n := len(cmds)
	for _, c := range cmds {
		if c.Purge == nil {
			continue
		}
		if k := len(c.Purge.Tasks) + len(c.Purge.Flows); k > 1 {
			n += k - 1
		}
	}
	return n
}
