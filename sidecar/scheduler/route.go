package scheduler

import (
	"hash/fnv"
	"time"

	"github.com/axsched/ax/raftfsm"
)

// Routing modes (Config.Routing); a task with a route_key is always
// routed by hash.
const (
	RoutingLeastLoaded = "least_loaded"
	RoutingRoundRobin  = "round_robin"
	RoutingHash        = "hash"
)

// Pick chooses the node for an attempt of handler among the live nodes
// that have an executor for it, "" when there is none. A node is live
// when it is this node or it reported within Config.Liveness (by Wall, at
// now); right after an election the other nodes count only once their
// first report arrives, so a dead former leader never gets an attempt. A
// draining node is never live.
//
// A node whose executor is saturated for the handler (attempts waiting for
// a slot in its last report) is skipped while another is not, and a retry
// avoids the node whose attempt failed (avoid): its executor may be the
// cause. Among the rest:
//
//   - routeKey != "": rendezvous (highest random weight) hashing of the key
//     over the candidates, so one key goes to one node while membership is
//     stable, and only the keys of a node that leaves move (Thaler and
//     Ravishankar, 1998);
//   - least_loaded (default): the fewest callbacks in flight and queued by
//     the last report, plus attempts assigned since;
//   - round_robin: in turn.
func (l *Scheduler) Pick(nodes []raftfsm.Node, handler, avoid, routeKey string, now time.Time) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	live := l.liveLocked(nodes, handler, now)
	if len(live) == 0 {
		return ""
	}
	return l.pickLocked(live, handler, avoid, routeKey, now)
}

// liveLocked returns the nodes that have an executor for handler and are
// live at now: this node, or one whose last load report is younger than
// Config.Liveness; not draining, and able to write its storage. l.mu is
// held.
func (l *Scheduler) liveLocked(nodes []raftfsm.Node, handler string, now time.Time) []raftfsm.Node {
	var live []raftfsm.Node
	for i := range nodes {
		nd := &nodes[i]
		if !nd.Runs(handler) {
			continue
		}
		seen, ok := l.lastSeen[nd.ID]
		if l.drain != nil && l.drain.IsDraining(nd.ID) {
			continue // stopping
		}
		if l.unwritable[nd.ID] {
			continue // cannot apply a Fire
		}
		if nd.ID == l.cfg.NodeID || (ok && now.Sub(seen) < l.cfg.Liveness) {
			live = append(live, *nd)
		}
	}
	return live
}

// pickLocked chooses among the candidate nodes (live, with an executor
// for handler; not empty), as Pick says; l.mu is held.
func (l *Scheduler) pickLocked(nodes []raftfsm.Node, handler, avoid, routeKey string, now time.Time) string {
	live := make([]string, 0, len(nodes))
	for i := range nodes {
		live = append(live, nodes[i].ID)
	}
	drop := func(keep func(string) bool) {
		var kept []string
		for _, id := range live {
			if keep(id) {
				kept = append(kept, id)
			}
		}
		if len(kept) > 0 {
			live = kept
		}
	}
	if avoid != "" {
		drop(func(id string) bool { return id != avoid })
	}
	// A node that is still catching up (just restarted) would deliver late:
	// skip it while another can run the handler.
	if commit := l.commitIndex(); commit > 0 {
		drop(func(id string) bool {
			return id == l.cfg.NodeID || l.applied[id]+catchUpSlack >= commit
		})
	}
	drop(func(id string) bool { return l.queued[id][handler] == 0 })
	var chosen string
	switch {
	case routeKey != "" || l.cfg.Routing == RoutingHash:
		key := routeKey
		if key == "" {
			key = handler
		}
		var best uint64
		for _, id := range live {
			h := fnv.New64a()
			h.Write([]byte(key))
			h.Write([]byte{0})
			h.Write([]byte(id))
			if w := h.Sum64(); chosen == "" || w > best {
				chosen, best = id, w
			}
		}
	case l.cfg.Routing == RoutingRoundRobin:
		l.rr++
		chosen = live[l.rr%uint64(len(live))]
	default: // least loaded; ties in turn
		l.rr++
		bestLoad := -1
		for k := range live {
			id := live[(int(l.rr)+k)%len(live)]
			load := l.load[id] + l.assigned[id]
			if bestLoad < 0 || load < bestLoad {
				chosen, bestLoad = id, load
			}
		}
	}
	l.assigned[chosen]++
	return chosen
}

// commitIndex is Raft's commit index (0 without Raft, in unit tests).
func (l *Scheduler) commitIndex() uint64 {
	if l.raft == nil {
		return 0
	}
	return l.raft.CommitIndex()
}
