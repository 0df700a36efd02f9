package sidecar

import (
	"context"
	"time"

	"github.com/hashicorp/raft"

	"github.com/axsched/ax/raftfsm"
	"github.com/axsched/ax/sidecar/cluster"
	"github.com/axsched/ax/sidecar/config"
	"github.com/axsched/ax/sidecar/delivery"
	"github.com/axsched/ax/sidecar/peerapi"
	"github.com/axsched/ax/sidecar/raftstore"
	"github.com/axsched/ax/sidecar/scheduler"
)

// This file connects package scheduler (the leader's decisions) to the
// rest of the node: it fills the scheduler's Config and Deps from the
// Node, and its small interfaces with the node's components. Each adapter
// reads the Node's field when called, not when built, since the node
// builds its parts one after another (and unit tests leave some nil).

// The waiting reasons the backend and its tests use, from package
// scheduler.
const (
	ReasonExecutorBusy        = scheduler.ReasonExecutorBusy
	ReasonExecutorUnavailable = scheduler.ReasonExecutorUnavailable
	ReasonPaused              = scheduler.ReasonPaused
)

// newScheduler builds the leader's scheduler over n.
func newScheduler(n *Node) *scheduler.Scheduler {
	c := n.cfg
	deliveryMax := c.DeliveryConcurrency
	if deliveryMax <= 0 {
		deliveryMax = config.DeliveryConcurrencyDefault
	}
	return scheduler.New(scheduler.Config{
		NodeID: c.NodeID, LoadWindow: c.LoadWindow, FireLead: c.FireLead, LeaseGrace: c.LeaseGrace,
		HistoryRuns: c.HistoryRuns,
		Routing:     c.Routing, HandlerLimits: c.HandlerLimits, MaxBatchCommands: c.MaxBatchCommands,
		DeliveryConcurrency: deliveryMax, DeliveryMinConcurrency: c.DeliveryMinConcurrency,
		BreakerFailures: c.BreakerFailures, BreakerCoolDown: c.BreakerCoolDown,
		Liveness: cluster.NodeLiveness,
	}, scheduler.Deps{
		Store: n.fsm,
		// The leader's own proposals: group commit, no forwarding.
		Proposer: scheduler.ProposerFunc(func(ctx context.Context, cmds []raftfsm.Command) ([]raftfsm.Result, error) {
			return n.proposer.Propose(ctx, cmds)
		}),
		Raft:     schedRaft{n},
		Members:  schedMembers{n},
		Drain:    schedDrain{n},
		Local:    schedLocal{n},
		Pauses:   &n.pauses,
		Counters: schedCounters{n},
		Log:      n.log,
		Clock:    n.clock,
	})
}

// newPreparer builds the leader's prepare step of each proposed command
// (scheduler/prepare.go) over n's store.
func newPreparer(n *Node) *scheduler.Preparer {
	return scheduler.NewPreparer(scheduler.PrepareConfig{
		LeaseGrace: n.cfg.LeaseGrace, ProbeMin: delivery.ProbeBackoffMin, ProbeMax: delivery.ProbeBackoffMax,
		Alerts: n.cfg.OnDeadURL != "", // sidecar/alert
		Task: func(id string) *raftfsm.Task {
			t, err := n.fsm.Task(id)
			if err != nil {
				return nil
			}
			return t
		},
		OneOff: func(id string, epoch uint64, attempt int) bool {
			return n.leader != nil && n.leader.RunningOneOff(id, epoch, attempt)
		},
		Flow: func(id string) *raftfsm.Flow {
			fl, err := n.fsm.Flow(id)
			if err != nil {
				return nil
			}
			return fl
		},
		Log: n.log,
	})
}

// schedRaft is the scheduler's view of n.raft (none in unit tests).
type schedRaft struct{ n *Node }

func (a schedRaft) Barrier(timeout time.Duration) error {
	if a.n.raft == nil {
		return nil
	}
	return a.n.raft.Barrier(timeout).Error()
}

func (a schedRaft) CurrentTerm() uint64 {
	if a.n.raft == nil {
		return 0
	}
	return a.n.raft.CurrentTerm()
}

func (a schedRaft) CommitIndex() uint64 {
	if a.n.raft == nil {
		return 0
	}
	return a.n.raft.CommitIndex()
}

// schedMembers filters node records by Raft's configuration
// (membership.go); without Raft every record is a member.
type schedMembers struct{ n *Node }

func (a schedMembers) Members(nodes []raftfsm.Node) []raftfsm.Node {
	if a.n.raft == nil {
		return nodes
	}
	return cluster.Members(a.n.raft, nodes)
}

// schedDrain is the graceful stop's state (drain.go).
type schedDrain struct{ n *Node }

func (a schedDrain) IsDraining(id string) bool             { return a.n.isDraining(id) }
func (a schedDrain) NoteDraining(id string, draining bool) { a.n.drain.note(id, draining) }

// schedLocal reads this node's executors from its delivery (capacity.go).
type schedLocal struct{ n *Node }

func (a schedLocal) Capacity() []peerapi.ExecutorLoad {
	if a.n.delivery == nil {
		return nil
	}
	return a.n.delivery.Capacity()
}

// schedCounters counts in the node's metrics (package nodemetrics).
type schedCounters struct{ n *Node }

func (a schedCounters) Dead(handler string) {
	if a.n.metrics != nil {
		a.n.metrics.Dead.WithLabelValues(handler).Inc()
	}
}

func (a schedCounters) Retry(handler string) {
	if a.n.metrics != nil {
		a.n.metrics.Retries.WithLabelValues(handler).Inc()
	}
}

// reportToLeader hands a load report (peer.go) to this node's scheduler,
// which leads.
func (n *Node) reportToLeader(r peerapi.LoadReport) {
	n.leader.Report(scheduler.Report{ID: r.ID, InFlight: r.InFlight, Applied: r.Applied, Queued: r.Queued,
		Executors: r.Executors, Draining: r.Draining, StorageUnavailable: r.StorageUnavailable, Circuits: r.Circuits})
}

// newRetention builds the purge loop over n; its compaction waits for
// snapshots (snapgate.go).
func newRetention(n *Node, compactor *raftstore.Compactor) *scheduler.Retention {
	return scheduler.NewRetention(scheduler.RetentionConfig{
		Keep: n.cfg.Retention, KeepDead: n.cfg.RetentionDead, Interval: n.cfg.PurgeInterval, Batch: n.cfg.MaxBatchCommands,
		DB: n.db, FSM: n.fsm,
		Leading:  func() bool { return n.raft.State() == raft.Leader && n.leader.Leading() },
		Proposer: scheduler.ProposerFunc(n.propose), // forwards from a follower (the API's purges)
		Compact:  compactor.Compact,                 // badger Flatten, when a snapshot still fits (raftstore.Compactor)
		Log:      n.log,
		Clock:    n.clock,
	})
}
