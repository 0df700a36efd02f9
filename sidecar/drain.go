package sidecar

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/axsched/ax/sidecar/cluster"
)

// drainState is the graceful stop's shared state: whether this node is
// draining, and which other nodes reported they are (the leader routes
// no attempts to them).
type drainState struct {
	self   atomic.Bool
	mu     sync.Mutex
	others map[string]time.Time // node id → when its last draining report came
}

// note records node id's load report: draining or not.
func (s *drainState) note(id string, draining bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !draining {
		delete(s.others, id)
		return
	}
	if s.others == nil {
		s.others = map[string]time.Time{}
	}
	s.others[id] = time.Now()
}

// isDraining reports whether node id (this node or another) is stopping:
// the leader gives it no new attempts.
func (n *Node) isDraining(id string) bool {
	if id == n.cfg.NodeID {
		return n.drain.self.Load()
	}
	n.drain.mu.Lock()
	defer n.drain.mu.Unlock()
	_, ok := n.drain.others[id]
	return ok
}

// drainDelivery is the first step of a graceful stop: the node stops
// taking attempts (it tells the leader at once, and every load report
// says so), hands the attempts assigned here but not started (waiting for
// their due time, a slot or an executor's probe) back to the leader, and
// waits until the callbacks in flight have finished and their outcomes are
// reported, at most DrainTimeout (or until ctx ends). It returns the
// attempts still running when the bound was reached.
func (n *Node) drainDelivery(ctx context.Context) int {
	n.drain.self.Store(true)
	n.delivery.BeginDrain()
	rctx, cancel := context.WithTimeout(ctx, cluster.ReportInterval)
	n.cluster.ReportOnce(rctx)
	cancel()
	dctx, cancel := context.WithTimeout(ctx, n.cfg.DrainTimeout)
	defer cancel()
	left := n.delivery.WaitIdle(dctx)
	if left > 0 {
		n.log.Warn().Int("attempts", left).Dur("drain_timeout", n.cfg.DrainTimeout).Msg("drain timeout: stopping with attempts in flight (their leases expire and the leader retries them)")
	} else {
		n.log.Info().Msg("drained: no attempt in flight")
	}
	return left
}

// handOverFireAhead is how far ahead a leader that stops gracefully fires
// the runs due soon, before it hands leadership over (Scheduler.FireAhead):
// more than a transfer and the new leader's first load take (14-220 ms
// measured on a quiet machine, up to 1.1 s at a load average of 20).
const handOverFireAhead = 2 * time.Second

// fireAheadOfHandOver, on a leader of two or more nodes that is about to
// hand leadership over, fires the runs due within handOverFireAhead to
// the nodes that stay (this one is draining), so that none of them waits
// for the transfer and the new leader's load: each is held on its node
// until its due time. Bounded by handOverFireAhead.
func (n *Node) fireAheadOfHandOver(ctx context.Context) {
	if n.raft.State() != raft.Leader || n.numServers() < 2 {
		return
	}
	fctx, cancel := context.WithTimeout(ctx, handOverFireAhead)
	defer cancel()
	start := time.Now()
	if k := n.leader.FireAhead(fctx, handOverFireAhead); k > 0 {
		n.log.Info().Int("runs", k).Dur("horizon", handOverFireAhead).Dur("took", time.Since(start)).
			Msg("fired the runs due before the hand-over")
	}
}

// drainVoters is what the cluster's HandOver and Leave need of the
// node: which voters are stopping, and the scheduler's last load reports.
type drainVoters struct{ n *Node }

func (v drainVoters) IsDraining(id string) bool { return v.n.isDraining(id) }
func (v drainVoters) LastReport(id string) (time.Time, uint64, bool) {
	return v.n.leader.LastReport(id)
}
