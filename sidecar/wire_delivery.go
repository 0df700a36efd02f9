package sidecar

import (
	"context"

	"github.com/axsched/ax/raftfsm"
	"github.com/axsched/ax/sidecar/cluster"
	"github.com/axsched/ax/sidecar/delivery"
	"github.com/axsched/ax/sidecar/nodemetrics"
)

// The adapters between package delivery and the rest of the node.

// nodeDelivery is the node's delivery (n.delivery) under the names the
// rest of the node calls it by.
type nodeDelivery struct{ *delivery.Delivery }

// newDelivery builds the delivery of node n: it proposes through
// n.propose (forwarded to the leader), reads n.fsm and writes n.metrics,
// which must be set.
func newDelivery(n *Node) *nodeDelivery {
	return &nodeDelivery{delivery.New(delivery.Deps{
		Config: delivery.Config{
			NodeID: n.cfg.NodeID, Concurrency: n.cfg.DeliveryConcurrency, MinConcurrency: n.cfg.DeliveryMinConcurrency,
			LeaseGrace: n.cfg.LeaseGrace, MaxBatchCommands: n.cfg.MaxBatchCommands,
			// The node's own breakers take the leader's settings
			// (newScheduler), the probe timeout being the engine's
			// default on both.
			BreakerFailures: n.cfg.BreakerFailures, BreakerCoolDown: n.cfg.BreakerCoolDown,
		},
		Context:    n.ctx,
		Proposer:   deliveryProposer{n},
		Store:      n.fsm,
		Clock:      n.clock,
		RetryClock: n.retryClock,
		Log:        n.log,
		Metrics:    deliveryMetrics(n.metrics),
		Pauses:     &n.pauses,
		CatchUp:    deliveryCatchUp{n},
		Orphans:    n.orphanRuns,
	})}
}

// deliveryCatchUp tells delivery how far the node is behind the leader.
type deliveryCatchUp struct{ n *Node }

func (c deliveryCatchUp) LeaderCommit() (uint64, <-chan struct{}) { return c.n.leaderCommitWait() }
func (c deliveryCatchUp) AppliedIndex() uint64                    { return c.n.fsm.AppliedIndex() }
func (c deliveryCatchUp) AppliedCh() <-chan struct{}              { return c.n.fsm.AppliedCh() }

// IsLeader is true without Raft (a node under test): nothing to wait for.
func (c deliveryCatchUp) IsLeader() bool { return c.n.raft == nil || c.n.IsLeader() }

// setLeaderCommit records the leader's commit index from a load report
// and wakes those waiting for it to change (leaderCommitWait).
func (n *Node) setLeaderCommit(index uint64) {
	n.leaderCommitMu.Lock()
	defer n.leaderCommitMu.Unlock()
	if n.leaderCommit.Swap(index) != index && n.leaderCommitCh != nil {
		close(n.leaderCommitCh)
		n.leaderCommitCh = nil
	}
}

// leaderCommitWait returns the leader's commit index at the last load
// report (0: none yet) and a channel closed when it next changes.
func (n *Node) leaderCommitWait() (uint64, <-chan struct{}) {
	n.leaderCommitMu.Lock()
	defer n.leaderCommitMu.Unlock()
	if n.leaderCommitCh == nil {
		n.leaderCommitCh = make(chan struct{})
	}
	return n.leaderCommit.Load(), n.leaderCommitCh
}

// deliveryProposer proposes through the node (forwarding to the leader).
type deliveryProposer struct{ n *Node }

func (p deliveryProposer) Propose(ctx context.Context, cmds []raftfsm.Command) ([]raftfsm.Result, error) {
	return p.n.propose(ctx, cmds)
}

// deliveryMetrics picks delivery's collectors out of the node's.
func deliveryMetrics(m *nodemetrics.Metrics) *delivery.Metrics {
	if m == nil {
		return nil
	}
	return &delivery.Metrics{
		Lateness: m.Lateness, AttemptDuration: m.AttemptDuration, Attempts: m.Attempts, StaleFires: m.StaleFires,
		ExecutorLimit: m.ExecutorLimit, ExecutorFlight: m.ExecutorFlight, ExecutorQueue: m.ExecutorQueue,
	}
}

// limitOf returns executor x's concurrency limit here; 0 when d is nil
// (no delivery).
func (d *nodeDelivery) limitOf(x *raftfsm.Executor) int {
	if d == nil {
		return 0
	}
	return d.LimitOf(x)
}

// findOrphans lists, at start before Raft replays anything, the attempts
// the store says run on node id: the reports of them as lost, which
// membership sends once the node is registered (cluster.LostReport), and
// the same with their run for delivery, which never starts them
// (delivery.Orphan) but does start a later run's attempt of the same
// number.
func findOrphans(fsm *raftfsm.FSM, id string) (reports []raftfsm.Complete, runs []delivery.Orphan) {
	_ = fsm.Running(func(t *raftfsm.Task) bool {
		if t.Node == id {
			reports = append(reports, cluster.LostReport(t, id))
			runs = append(runs, delivery.Orphan{ID: t.ID, Epoch: t.Epoch, Run: t.Run, Attempt: t.Attempts})
		}
		return true
	})
	return reports, runs
}
