package sidecar

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"

	"github.com/axsched/ax/raftfsm"
	"github.com/axsched/ax/sidecar/forward"
)

// The adapters between sidecar/forward (try locally, else send to the
// leader) and the rest of the node: the local group commit
// (raftstore.Proposer), the peer client (peer.go) and the leader watch.

// newForwarder returns the forwarder of n; n.raft, n.proposer, n.peers,
// n.leaders and n.fsm must be set.
func newForwarder(n *Node) *forward.Forwarder {
	return forward.New(forward.Config{
		Local:        forwardLocal{n},
		Leader:       forwardLeader{n},
		Leaders:      forwardLeaders{n},
		Applied:      n.fsm,
		Final:        leaderRefused, // the leader's own refusal (backlog, storage): not retried
		NoLeaderWait: n.noLeaderWait(),
		Clock:        n.retryClock,
		Log:          n.log,
	})
}

// notLeaderForForward marks this node's ErrNotLeader (raftstore's and the
// peer client's) as forward.ErrNotLeader too.
func notLeaderForForward(err error) error {
	if errors.Is(err, ErrNotLeader) && !errors.Is(err, forward.ErrNotLeader) {
		return fmt.Errorf("%w (%w)", forward.ErrNotLeader, err)
	}
	return err
}

// forwardLocal is forward.Local over this node's Raft and group commit.
type forwardLocal struct{ n *Node }

func (l forwardLocal) IsLeader() bool { return l.n.raft.State() == raft.Leader }

func (l forwardLocal) Propose(ctx context.Context, cmds []raftfsm.Command) ([]raftfsm.Result, error) {
	res, err := l.n.proposer.Propose(ctx, cmds)
	return res, notLeaderForForward(err)
}

// forwardLeader is forward.Leader over the peer client.
type forwardLeader struct{ n *Node }

func (l forwardLeader) Propose(ctx context.Context, addr string, cmds []raftfsm.Command) ([]raftfsm.Result, error) {
	res, err := l.n.peers.propose(ctx, addr, cmds)
	return res, notLeaderForForward(err)
}

// forwardLeaders is forward.Leaders over the leader watch and the node
// records.
type forwardLeaders struct{ n *Node }

func (l forwardLeaders) Changed() <-chan struct{} { return l.n.leaders.Changed() }
func (l forwardLeaders) PeerAddr() string         { return l.n.leaderPeerAddr() }

// propose gets cmds committed wherever the leader is, proposing them again
// after a leadership change (forward.Forwarder.Propose): for the node's
// own writes.
func (n *Node) propose(ctx context.Context, cmds []raftfsm.Command) ([]raftfsm.Result, error) {
	return n.forward.Propose(ctx, cmds)
}

// proposeAPI is propose for the application's writes: a try that may have
// been committed is answered ErrOutcomeUnknown (forward.Forwarder.ProposeAPI).
func (n *Node) proposeAPI(ctx context.Context, cmds []raftfsm.Command) ([]raftfsm.Result, error) {
	return n.forward.ProposeAPI(ctx, cmds)
}

// noLeaderWait is how long propose waits for a leader: several election
// timeouts (an election usually ends within one or two).
func (n *Node) noLeaderWait() time.Duration {
	return max(4*n.cfg.ElectionTimeout, 2*time.Second)
}

// waitApplied waits until the FSM has applied idx, ctx ends, or limit passes.
func (n *Node) waitApplied(ctx context.Context, idx uint64, limit time.Duration) bool {
	return forward.WaitApplied(ctx, n.fsm, n.retryClock, idx, limit)
}

// leaderPeerAddr returns the peer API address to dial for the current
// leader (its route's, with Config.PeerRoutes), or "" when no leader is
// known or its peer address is not known yet.
func (n *Node) leaderPeerAddr() string {
	raftAddr, id := n.raft.LeaderWithID()
	if id == "" {
		return ""
	}
	return n.routedPeerAddr(string(id), n.peerAddrOf(string(id), string(raftAddr)))
}

// peerAddrOf finds the peer address of a node: from the replicated node
// records, else from what the join handshake told us.
func (n *Node) peerAddrOf(id, raftAddr string) string {
	if id == n.cfg.NodeID {
		return n.cfg.PeerAdvertise
	}
	if a := n.peers.Known(id, raftAddr); a != "" {
		return a
	}
	nodes, err := n.fsm.Nodes()
	if err != nil {
		return ""
	}
	for _, nd := range nodes {
		if nd.ID == id || nd.RaftAddr == raftAddr {
			n.peers.Learn(nd.ID, nd.RaftAddr, nd.PeerAddr)
			return nd.PeerAddr
		}
	}
	return ""
}
