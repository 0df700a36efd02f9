package sidecar

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/hashicorp/raft"
	"github.com/valyala/fasthttp"

	"github.com/axsched/ax/raftfsm"
)

// propose gets cmds committed wherever the leader is. This is the one place
// that forwards (rqlite's proxy): on the leader it proposes locally; on a
// follower it sends the commands to the leader's peer API. While no leader
// is known (an election), or the leader changes under it, it retries until
// ctx ends and then returns ErrNoLeader. Every command type is safe to send
// twice (submits are idempotent by id and spec; fires and completions name
// their attempt; cancels of a cancelled task change nothing), which is what
// makes retrying after raft.ErrLeadershipLost correct.
//
// After a forwarded proposal it waits (briefly) until this node has applied
// the entry too, so a client that submits through a follower and then reads
// from it sees its own write.
func (n *Node) propose(ctx context.Context, cmds []raftfsm.Command) ([]raftfsm.Result, error) {
	return n.proposeRetrying(ctx, cmds, true)
}

// proposeAPI is propose for the application's writes (submit, cancel,
// retry, heartbeat, result): it proposes again only when the first try
// was surely not committed (no leader, "not the leader", a connection
// that was never made). When the try may have been committed (the leader
// died or lost leadership with it in flight) it returns
// ErrOutcomeUnknown instead: proposed again, the command would apply
// twice, and the client's history would not be linearizable.
func (n *Node) proposeAPI(ctx context.Context, cmds []raftfsm.Command) ([]raftfsm.Result, error) {
	return n.proposeRetrying(ctx, cmds, false)
}

// forwardMaybeDelivered reports whether a failed forward may have reached
// the leader, and so may be committed: anything but the leader's answer
// that it does not lead (it did not propose) or a dial that failed.
func forwardMaybeDelivered(err error) bool {
	var dial *fasthttp.ErrDialWithUpstream
	switch {
	case errors.Is(err, ErrNotLeader), errors.As(err, &dial), errors.Is(err, syscall.ECONNREFUSED),
		errors.Is(err, fasthttp.ErrDialTimeout), errors.Is(err, fasthttp.ErrNoFreeConns):
		return false
	}
	return true
}

func (n *Node) proposeRetrying(ctx context.Context, cmds []raftfsm.Command, retryUnknown bool) ([]raftfsm.Result, error) {
	backoff := 10 * time.Millisecond
	var lastErr error
	// Without a leader for noLeaderWait, give up early: an election takes
	// about one election timeout, so longer means no quorum, and the
	// client should hear 503 no_leader now rather than at its deadline.
	giveUp := time.NewTimer(n.noLeaderWait())
	defer giveUp.Stop()
	for {
		if n.raft.State() == raft.Leader {
			res, err := n.proposer.propose(ctx, cmds)
			if err == nil {
				return res, nil
			}
			if !errors.Is(err, ErrNotLeader) && !errors.Is(err, raft.ErrLeadershipLost) && !errors.Is(err, raft.ErrEnqueueTimeout) {
				return nil, err
			}
			if !retryUnknown && errors.Is(err, raft.ErrLeadershipLost) {
				return nil, fmt.Errorf("%w: %v", ErrOutcomeUnknown, err)
			}
			lastErr = err
		} else if changed, addr := n.leaders.changed(), n.leaderPeerAddr(); addr != "" {
			// Abandon the forward if the leader changes meanwhile: a
			// leader cut off by a partition would hold it until
			// peerTimeout while a new one already serves. (changed is
			// taken first, so a change after reading addr counts.)
			fctx, cancel := untilLeaderChanges(ctx, changed)
			res, err := n.peers.propose(fctx, addr, cmds)
			cancel()
			if err == nil {
				n.waitApplied(ctx, maxIndex(res), time.Second)
				return res, nil
			}
			var be *BacklogError
			if errors.As(err, &be) {
				return nil, err // the leader's answer: do not retry
			}
			if !retryUnknown && forwardMaybeDelivered(err) {
				return nil, fmt.Errorf("%w: forward to the leader at %s: %v", ErrOutcomeUnknown, addr, err)
			}
			lastErr = err
			n.log.Debug().Err(err).Str("leader", addr).Msg("forward to leader failed; retrying")
		}
		select {
		case <-ctx.Done():
			if lastErr != nil && !errors.Is(lastErr, ErrNotLeader) {
				n.log.Debug().Err(lastErr).Msg("no leader before deadline")
			}
			return nil, ErrNoLeader
		case <-giveUp.C:
			n.log.Debug().Err(lastErr).Msg("no leader: giving up")
			return nil, ErrNoLeader
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 200*time.Millisecond)
	}
}

// noLeaderWait is how long propose waits for a leader: several election
// timeouts (an election usually ends within one or two).
func (n *Node) noLeaderWait() time.Duration {
	return max(4*n.cfg.ElectionTimeout, 2*time.Second)
}

func maxIndex(rs []raftfsm.Result) uint64 {
	var m uint64
	for _, r := range rs {
		m = max(m, r.Index)
	}
	return m
}

// waitApplied waits until the FSM has applied idx, ctx ends, or limit passes.
func (n *Node) waitApplied(ctx context.Context, idx uint64, limit time.Duration) bool {
	t := time.NewTimer(limit)
	defer t.Stop()
	for {
		ch := n.fsm.AppliedCh()
		if n.fsm.AppliedIndex() >= idx {
			return true
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		case <-t.C:
			return false
		}
	}
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
		return n.cfg.PeerAddr
	}
	if a := n.peers.known(id, raftAddr); a != "" {
		return a
	}
	nodes, err := n.fsm.Nodes()
	if err != nil {
		return ""
	}
	for _, nd := range nodes {
		if nd.ID == id || nd.RaftAddr == raftAddr {
			n.peers.learn(nd.ID, nd.RaftAddr, nd.PeerAddr)
			return nd.PeerAddr
		}
	}
	return ""
}
