package scheduler

import (
	"math"
	"time"

	"github.com/axsched/ax/sidecar/load"
)

// Report is what the scheduler reads of a node's load report (sent every
// report interval to the leader; the leader reports its own too).
type Report struct {
	// ID is the reporting node.
	ID string
	// InFlight is its callbacks in flight.
	InFlight int
	// Applied is its applied index.
	Applied uint64
	// Queued counts, per handler, the attempts waiting for an executor
	// slot on the node (part of the handler's backlog).
	Queued map[string]int
	// Executors are the node's executors with their load.
	Executors []ExecutorLoad
	// Draining: the node is stopping; it gets no new attempts.
	Draining bool
	// StorageUnavailable: the node cannot write its storage, so it cannot
	// apply the Fire of an attempt; it gets no new attempts.
	StorageUnavailable bool
	// Circuits are the handlers whose circuit is open on the node (its
	// own breaker), each until the node takes their attempts again; none
	// from a node of an older version. Where another live node runs the
	// handler, placeLocked gives the node none of its runs until then.
	Circuits []Circuit
}

// ExecutorLoad is one executor of a node in its load report (load.ExecutorLoad).
type ExecutorLoad = load.ExecutorLoad

// Circuit is one handler whose circuit is open on a node, in its load
// report (load.Circuit).
type Circuit = load.Circuit

// Report records a node's load report, stamped with Wall, and wakes the
// runs waiting for an executor that the node now has.
func (l *Scheduler) Report(r Report) {
	l.mu.Lock()
	l.lastSeen[r.ID] = l.wall.Now()
	if l.drain != nil {
		l.drain.NoteDraining(r.ID, r.Draining)
	}
	l.queued[r.ID] = r.Queued
	q := 0
	for _, n := range r.Queued {
		q += n
	}
	l.load[r.ID], l.assigned[r.ID] = r.InFlight+q, 0
	l.applied[r.ID] = r.Applied
	if r.StorageUnavailable {
		l.unwritable[r.ID] = true
	} else {
		delete(l.unwritable, r.ID)
	}
	if r.ID != l.cfg.NodeID { // the leader reads its own directly
		l.execLoads[r.ID] = r.Executors
		delete(l.since, r.ID)
		delete(l.sinceTotal, r.ID)
	}
	// The node's circuits, its own included (its delivery's breaker is
	// not the leader's): each report replaces the last.
	if len(r.Circuits) == 0 {
		delete(l.nodeCircuits, r.ID)
	} else {
		m := make(map[string]int64, len(r.Circuits))
		for _, c := range r.Circuits {
			m[c.Handler] = max(m[c.Handler], c.UntilMs)
		}
		l.nodeCircuits[r.ID] = m
	}
	l.mu.Unlock()
	// Runs waiting for an executor, or for the nodes' circuits, look again
	// when the node has an executor for their handler that is not down and
	// its circuit of the handler is not open (the drain checks its
	// capacity).
	nowMs := l.wall.Now().UnixMilli()
	var clockMs int64
	if len(r.Circuits) > 0 {
		clockMs = l.clock.Now().UnixMilli()
	}
	l.wakeExecutorWaits(func(h string) bool {
		for _, c := range r.Circuits {
			if c.Handler == h && c.UntilMs > clockMs {
				return false
			}
		}
		for _, x := range r.Executors {
			if x.DownUntilMs <= nowMs && x.Runs(h) {
				return true
			}
		}
		return false
	})
}

// NodeCircuit reports whether node id's last load report had handler's
// own circuit open there (its delivery's breaker), now by Clock, and
// until when (the node's clock, to the millisecond), for the leader's
// handler view (load reports go to the leader).
func (l *Scheduler) NodeCircuit(id, handler string) (until time.Time, open bool) {
	now := l.clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.nodeCircuitLocked(id, handler, now)
}

// nodeCircuitLocked reports whether node id's last load report had
// handler's circuit open there at now (by Clock), and until when. l.mu
// is held.
//
// The end is judged by Clock, not Wall: it is a due instant of the
// node's breaker, like a run's due time, and the parked queue's wake-up
// (blockLocked's timer) runs on Clock; judged on another clock, a wake-up
// at the end could find the circuit still open and re-arm in the past
// over and over. Both are the real clock in a node; a node's report
// stops listing the circuit once its cool-down is over in any case.
func (l *Scheduler) nodeCircuitLocked(id, handler string, now time.Time) (time.Time, bool) {
	u, ok := l.nodeCircuits[id][handler]
	if !ok || u <= now.UnixMilli() {
		return time.Time{}, false
	}
	return time.UnixMilli(u), true
}

// LastReport returns when node id's last load report came (by Wall) and
// the applied index it gave; ok is false when none came this term or
// before.
func (l *Scheduler) LastReport(id string) (seen time.Time, applied uint64, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	seen, ok = l.lastSeen[id]
	return seen, l.applied[id], ok
}

// ParkedShare returns node's share of the runs parked as executor_busy,
// per handler: each handler's count divided among the live nodes that run
// it (for the answer to node's load report; its limiters count them as
// backlog).
func (l *Scheduler) ParkedShare(node string) map[string]int {
	nodes := l.nodes()
	now := l.wall.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out map[string]int
	for h, q := range l.queues {
		if q.reason != ReasonExecutorBusy {
			continue
		}
		n := q.rq.Len()
		runs, k := false, 0
		for i := range nodes {
			nd := &nodes[i]
			if !nd.Runs(h) {
				continue
			}
			if seen, ok := l.lastSeen[nd.ID]; nd.ID == l.cfg.NodeID || (ok && now.Sub(seen) < l.cfg.Liveness) {
				k++
				runs = runs || nd.ID == node
			}
		}
		if !runs || n == 0 {
			continue
		}
		if out == nil {
			out = map[string]int{}
		}
		out[h] = int(math.Ceil(float64(n) / float64(k)))
	}
	return out
}
