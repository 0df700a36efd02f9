package scheduler

import (
	"time"

	"github.com/axsched/ax/raftfsm"
)

// placeLocked chooses the node for an attempt of handler, among the live
// nodes with an executor for it that has capacity: its limit in flight
// plus a queue of its max_concurrency, less what it holds (nodeCapacity)
// and what it was given since (the leader's own node: the Fires not yet
// applied; another: the attempts assigned since its last report, less
// those that ended there since, so a completion frees its unit at once). It returns the reason when there is
// none (and for executor_unavailable and circuit_open the earliest end of
// the executors' unavailability or of the nodes' circuits). l.mu is held.
//
// A node whose load report has handler's circuit open there (its own
// breaker, sidecar/delivery: it would hand the attempt back uncalled,
// due at the circuit's end) is passed over like a node whose executor is
// down, but only while another live node runs the handler: with one
// there is no other node to route to, and the node's breaker hands back
// what it gets as it did before nodes reported their circuits (a single
// node's stays exactly as it was). When every live node's circuit is open
// the run waits as circuit_open until the earliest end (blockLocked arms
// the handler's circuit timer then; the leader's own breaker is not
// touched); when some are open and the others' executors are down, as
// executor_unavailable until the earliest of all. Once a node's end has
// passed (by Clock: nodeCircuitLocked) it is a candidate again even
// before its next report, so the node's half-open probe can go.
func (l *Scheduler) placeLocked(nodes []raftfsm.Node, handler, avoid, routeKey string, now time.Time) (node, reason string, until time.Time) {
	// Load reports are stamped with the wall clock (report), so liveness
	// is judged by it too.
	live := l.liveLocked(nodes, handler, l.wall.Now())
	if len(live) == 0 {
		return "", ReasonNoExecutor, time.Time{}
	}
	var free []raftfsm.Node
	available := false
	circuits := len(live) > 1 // the nodes' circuits route only where there is a choice
	allCircuits := true       // every node passed over was so for its circuit
	nowMs := l.wall.Now().UnixMilli()
	for _, nd := range live {
		if circuits {
			if end, open := l.nodeCircuitLocked(nd.ID, handler, now); open {
				if until.IsZero() || end.Before(until) {
					until = end
				}
				continue
			}
		}
		capH, capAll, usedH, usedAll, up, downUntil := l.nodeCapacity(&nd, handler, nowMs)
		if !up {
			allCircuits = false
			if !downUntil.IsZero() && (until.IsZero() || downUntil.Before(until)) {
				until = downUntil
			}
			continue
		}
		available = true
		if nd.ID == l.cfg.NodeID {
			// Read now: only the Fires not applied yet are missing.
			usedH += l.transit[nd.ID][handler]
			usedAll += l.transitTotal[nd.ID]
		} else {
			usedH = max(usedH+l.since[nd.ID][handler], 0)
			usedAll = max(usedAll+l.sinceTotal[nd.ID], 0)
		}
		if usedH < capH && usedAll < capAll {
			free = append(free, nd)
		}
	}
	if !available {
		if allCircuits {
			return "", ReasonCircuitOpen, until
		}
		return "", ReasonExecutorUnavailable, until
	}
	if len(free) == 0 {
		return "", ReasonExecutorBusy, time.Time{}
	}
	return l.pickLocked(free, handler, avoid, routeKey, now), "", time.Time{}
}

// nodeCapacity returns, for node nd and handler, the attempts the
// executor handler's attempts go to there can hold (capH) and holds now
// (usedH: in flight and queued for a slot), the same for all its executors (capAll,
// usedAll), whether one of handler's is available, and else when the
// first may be again. The leader's own node is read directly (at the
// start of the drain); others from their last load report (an executor
// not in it yet counts with its starting limit and nothing used). An
// attempt held on its node until its due time (FireLead), or whose
// callback ended and whose outcome is being committed, holds no slot
// and is not counted. l.mu is held.
func (l *Scheduler) nodeCapacity(nd *raftfsm.Node, handler string, nowMs int64) (capH, capAll, usedH, usedAll int, up bool, downUntil time.Time) {
	var loads []ExecutorLoad
	if nd.ID == l.cfg.NodeID {
		loads = l.selfLoads
	} else {
		loads = l.execLoads[nd.ID]
	}
	// handler's attempts go to one executor there: the best match that is
	// not down (delivery.executorsFor: an exact match before a prefix
	// before "*", in registration order; another only while that one is
	// down), so its room alone is handler's, not the sum of every
	// executor that matches: that sent a handler's runs to the node's
	// queue for its exact executor's slots, counted on its "*" one.
	bestRank := 0
	for i := range nd.Executors {
		x := &nd.Executors[i]
		var el *ExecutorLoad
		for j := range loads {
			if loads[j].Name == x.Name {
				el = &loads[j]
				break
			}
		}
		rank := x.Rank(handler)
		if el != nil && el.DownUntilMs > nowMs {
			if rank > 0 {
				if u := time.UnixMilli(el.DownUntilMs); downUntil.IsZero() || u.Before(downUntil) {
					downUntil = u
				}
			}
			continue
		}
		c, u := l.executorCapacity(x, el), 0
		if el != nil {
			u = el.InFlight + el.Queued
		}
		capAll += c
		usedAll += u
		if rank > bestRank {
			bestRank, capH, usedH, up = rank, c, u, true
		}
	}
	return capH, capAll, usedH, usedAll, up, downUntil
}

// executorCapacity is how many attempts executor x may hold on its node:
// its current limit in flight plus a queue of its max_concurrency (so the
// limiter sees the demand it needs to grow in slow start).
//
// Leases: an attempt's lease still starts at its Fire, and the node
// renews it while the attempt waits for a slot (delivery.renewLeases:
// every second, for leases ending within grace/2 + 1 s), while its
// timeout counts from the callback's start. With the node's queue bounded
// by this capacity an attempt waits at most about one callback for its
// slot, so that is equivalent to a lease that starts with the callback,
// at the cost of a renewal for the few queued attempts whose wait nears
// the grace, not for a whole backlog as when every due run was handed
// to the node at once.
func (l *Scheduler) executorCapacity(x *raftfsm.Executor, el *ExecutorLoad) int {
	maxC := l.cfg.DeliveryConcurrency
	maxC = max(maxC, 1)
	if x.MaxConcurrency > 0 {
		maxC = x.MaxConcurrency
	}
	lim := 0
	if el != nil {
		lim = el.Limit
	}
	if lim <= 0 { // no callback yet: the limiter starts at its minimum
		lim = l.cfg.DeliveryMinConcurrency
		if x.MinConcurrency > 0 {
			lim = x.MinConcurrency
		}
		lim = min(max(lim, 1), maxC)
	}
	return lim + maxC
}

// nodes returns the cluster's node records that are members. The
// records are cached until a node or executor event; membership is read
// from Raft's latest configuration at every call (an atomic load), since
// a removal or a leave changes it without any event of the state
// machine, and a node that left must not get attempts.
func (l *Scheduler) nodes() []raftfsm.Node {
	l.mu.Lock()
	ns, ok := l.nodesCache, l.nodesOK
	gen := l.nodesGen
	l.mu.Unlock()
	if !ok {
		var err error
		if ns, err = l.store.Nodes(); err != nil {
			l.log.Error().Err(err).Msg("reading nodes failed")
			return nil
		}
		l.mu.Lock()
		if l.nodesGen == gen {
			l.nodesCache, l.nodesOK = ns, true
		}
		l.mu.Unlock()
	}
	if l.members != nil {
		// members filters in place: give it a copy, not the cache.
		ns = l.members.Members(append([]raftfsm.Node(nil), ns...))
	}
	return ns
}

// nodesChanged drops the node cache (a node, executor or membership
// change) and wakes the runs that wait for an executor.
func (l *Scheduler) nodesChanged() {
	l.mu.Lock()
	l.nodesOK, l.nodesCache = false, nil
	l.nodesGen++
	l.mu.Unlock()
	l.wakeExecutorWaits(nil)
}

// Nodes returns the member node records the scheduler routes attempts
// among (cached records, filtered by Deps.Members at every call).
func (l *Scheduler) Nodes() []raftfsm.Node { return l.nodes() }
