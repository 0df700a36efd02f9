package sidecar

import (
	"context"
	"time"

	"github.com/hashicorp/raft"
)

// A node removed from the cluster while it was down (ax cluster remove of
// a dead node) still finds itself in the configuration of its own log when
// it starts again: it campaigns, the others ignore it (they no longer count
// it), and it waits for a leader forever. removalWatch makes that visible:
// after removalCheckAfter without a leader it asks the other nodes' peer
// APIs for the leader's member list, and if the leader does not list it,
// it logs so once and Ready says so (writes already fail: no leader).
const (
	removalCheckAfter = 20 * time.Second
	removalCheckEvery = 10 * time.Second
)

// watchRemoval runs the check until ctx ends.
func (n *Node) watchRemoval(ctx context.Context) {
	t := time.NewTicker(removalCheckEvery)
	defer t.Stop()
	var noLeaderSince time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, id := n.raft.LeaderWithID(); id != "" || n.raft.State() == raft.Leader {
			noLeaderSince = time.Time{}
			n.removed.Store(false)
			continue
		}
		if noLeaderSince.IsZero() {
			noLeaderSince = time.Now()
		}
		if time.Since(noLeaderSince) < removalCheckAfter || n.removed.Load() {
			continue
		}
		if n.removedByCluster(ctx) {
			n.removed.Store(true)
			n.log.Error().Msg("the cluster's leader does not list this node as a member: it was removed (ax cluster remove) while it was down. It will not rejoin with its old data: stop it, delete its data dir and start it with --join")
		}
	}
}

// removedByCluster asks the peer APIs of the join addresses and of the
// nodes this node knows for the leader's member list (only the leader
// answers it), and reports whether that list leaves this node out. Any
// doubt (no answer) is false.
func (n *Node) removedByCluster(ctx context.Context) bool {
	seen := map[string]bool{n.cfg.PeerAddr: true}
	var addrs []string
	add := func(a string) {
		if a != "" && !seen[a] {
			seen[a] = true
			addrs = append(addrs, a)
		}
	}
	for _, a := range n.cfg.Join {
		add(a)
	}
	if n.fsm != nil {
		if nodes, err := n.fsm.Nodes(); err == nil {
			for _, nd := range nodes {
				if nd.ID != n.cfg.NodeID {
					add(n.routedPeerAddr(nd.ID, nd.PeerAddr))
				}
			}
		}
	}
	for _, a := range addrs {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		members, err := n.peers.members(rctx, a)
		cancel()
		if err != nil || len(members) == 0 {
			continue // not the leader, or unreachable
		}
		_, listed := members[n.cfg.NodeID]
		return !listed
	}
	return false
}
