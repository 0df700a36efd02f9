package sidecar

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/raft"

	"github.com/axsched/ax/raftfsm"
)

const (
	// joinRetryInterval is how often a forming or joining node retries.
	joinRetryInterval = 300 * time.Millisecond
	// reportInterval is how often a node reports its load to the leader; the
	// leader routes attempts only to nodes heard from within nodeLiveness.
	reportInterval = 300 * time.Millisecond
	nodeLiveness   = time.Second // three reports missed
)

// joinOrBootstrap runs on a node with no Raft state that was given --join.
// Each round it asks every join address for its info: if any of them knows
// a leader, it asks that node to add it (the request is forwarded to the
// leader); otherwise, once it sees BootstrapExpect nodes with no cluster
// (itself included), it bootstraps a configuration of exactly those nodes.
// Every node of the set computes the same configuration, so their
// bootstraps agree (Consul's bootstrap-expect); its first Config.Voters
// nodes by id are voters, the others non-voters (autopilot).
func (n *Node) joinOrBootstrap(ctx context.Context) {
	self := peerInfo{ID: n.cfg.NodeID, RaftAddr: n.cfg.RaftAddr, PeerAddr: n.cfg.PeerAddr}
	for {
		if n.inCluster() {
			return
		}
		seen := map[string]peerInfo{self.ID: self}
		for _, addr := range n.cfg.Join {
			if addr == n.cfg.PeerAddr {
				continue
			}
			rctx, cancel := context.WithTimeout(ctx, time.Second)
			pi, err := n.peers.info(rctx, addr)
			cancel()
			if err != nil {
				n.log.Debug().Err(err).Str("peer", addr).Msg("peer not reachable yet")
				continue
			}
			if pi.LeaderID != "" {
				rctx, cancel := context.WithTimeout(ctx, peerTimeout)
				_, err := n.peers.join(rctx, addr, self)
				cancel()
				if err == nil {
					n.log.Info().Str("via", addr).Msg("joined the cluster")
					return
				}
				n.log.Warn().Err(err).Str("via", addr).Msg("join failed; retrying")
				continue
			}
			if !pi.InCluster {
				seen[pi.ID] = pi
			}
		}
		if n.cfg.BootstrapExpect > 1 && len(seen) >= n.cfg.BootstrapExpect {
			servers := bootstrapServers(seen, n.cfg.Voters)
			err := n.raft.BootstrapCluster(raft.Configuration{Servers: servers}).Error()
			if err == nil || errors.Is(err, raft.ErrCantBootstrap) {
				n.log.Info().Int("servers", len(servers)).Msg("bootstrapped the cluster")
				return
			}
			n.log.Warn().Err(err).Msg("bootstrap failed; retrying")
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(joinRetryInterval):
		}
	}
}

// register records this node (addresses and executor handlers) in the
// replicated state once a leader is known, so the leader can route attempts
// here and every node can find every other's peer address.
func (n *Node) register(ctx context.Context) {
	var handlers []string
	var execs []raftfsm.Executor
	for _, e := range n.cfg.Executors {
		handlers = append(handlers, e.Handler)
		execs = append(execs, raftfsm.Executor{Name: "flag:" + e.Handler, Handlers: []string{e.Handler}, URL: e.URL, FromFlag: true})
	}
	cmd := raftfsm.Command{Type: raftfsm.CmdNode, Node: &raftfsm.Node{
		ID: n.cfg.NodeID, RaftAddr: n.cfg.RaftAddr, PeerAddr: n.cfg.PeerAddr, Executors: execs,
	}}
	for {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		node := *cmd.Node
		_, err := n.propose(rctx, []raftfsm.Command{{Type: raftfsm.CmdNode, Node: &node}})
		cancel()
		if err == nil {
			n.abandonOrphans(ctx)
			n.registered.Store(true)
			n.log.Info().Strs("handlers", handlers).Msg("node registered")
			return
		}
		if ctx.Err() != nil {
			return
		}
		n.log.Debug().Err(err).Msg("register: retrying")
		select {
		case <-ctx.Done():
			return
		case <-time.After(joinRetryInterval):
		}
	}
}

// reportLoop tells the leader every reportInterval that this node is alive,
// how many callbacks it has in flight, how far it has applied the log and
// its Raft state (autopilot judges its health from these).
func (n *Node) reportLoop(ctx context.Context) {
	t := time.NewTicker(reportInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		r := loadReport{ID: n.cfg.NodeID, InFlight: n.delivery.inFlight(), Queued: n.delivery.queuedByHandler(), Applied: n.fsm.AppliedIndex(),
			State: strings.ToLower(n.raft.State().String())}
		if n.raft.State() == raft.Leader {
			n.leader.report(r)
			n.leaderCommit.Store(n.raft.CommitIndex())
			continue
		}
		if addr := n.leaderPeerAddr(); addr != "" {
			rctx, cancel := context.WithTimeout(ctx, reportInterval)
			rr, err := n.peers.report(rctx, addr, r)
			cancel()
			if err != nil {
				n.log.Debug().Err(err).Msg("load report failed")
				continue
			}
			n.leaderCommit.Store(rr.CommitIndex)
		}
	}
}

// errNoSuchMember is returned when a removal names a node that is not in
// the Raft configuration.
var errNoSuchMember = errors.New("no such member")

// errLastVoter is returned when a removal would leave no voter.
var errLastVoter = errors.New("cannot remove the last voter of the cluster")

// removeMember removes node id from the Raft configuration: on the leader
// directly, else through the leader's peer API. Removing the leader itself
// makes it step down first (raft transfers nothing; an election follows).
func (n *Node) removeMember(ctx context.Context, id string) error {
	for {
		if n.raft.State() == raft.Leader {
			f := n.raft.GetConfiguration()
			if err := f.Error(); err != nil {
				return err
			}
			found, voters := false, 0
			for _, s := range f.Configuration().Servers {
				found = found || string(s.ID) == id
				if s.Suffrage == raft.Voter && string(s.ID) != id {
					voters++
				}
			}
			if !found {
				return fmt.Errorf("%w: %q", errNoSuchMember, id)
			}
			if voters == 0 {
				return fmt.Errorf("%w: %q is the last voter", errLastVoter, id)
			}
			n.log.Info().Str("member", id).Msg("removing member")
			return n.raft.RemoveServer(raft.ServerID(id), 0, peerTimeout).Error()
		}
		if addr := n.leaderPeerAddr(); addr != "" && addr != n.cfg.PeerAddr {
			return n.peers.remove(ctx, addr, id)
		}
		select {
		case <-ctx.Done():
			return ErrNoLeader
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// members keeps the nodes that are in the Raft configuration: a removed
// node's record stays in the store, but it gets no attempts.
func (n *Node) members(nodes []raftfsm.Node) []raftfsm.Node {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return nodes
	}
	in := map[string]bool{}
	for _, s := range f.Configuration().Servers {
		in[string(s.ID)] = true
	}
	kept := nodes[:0]
	for _, nd := range nodes {
		if in[nd.ID] {
			kept = append(kept, nd)
		}
	}
	return kept
}

// findOrphans lists, at start before Raft replays anything, the attempts
// the store says run on this node: the previous process was delivering
// them, and this one never will (a restart delivers only the attempts
// whose Fire it applies from now on). Those are the only ones
// abandonOrphans may report.
func (n *Node) findOrphans() {
	_ = n.fsm.Running(func(t *raftfsm.Task) bool {
		if t.Node == n.cfg.NodeID {
			n.orphans = append(n.orphans, raftfsm.Complete{
				ID: t.ID, Epoch: t.Epoch, Attempt: t.Attempts, Outcome: raftfsm.OutcomeLost,
				Error: "node " + n.cfg.NodeID + " restarted during the attempt",
			})
		}
		return true
	})
}

// abandonOrphans reports the attempts findOrphans found, once this node is
// registered: the leader retries them now instead of at their lease's end
// (timeout + grace). A report naming an attempt that is no longer current
// is ignored by the FSM.
func (n *Node) abandonOrphans(ctx context.Context) {
	if len(n.orphans) == 0 {
		return
	}
	cmds := make([]raftfsm.Command, len(n.orphans))
	for i := range n.orphans {
		cmds[i] = raftfsm.Command{Type: raftfsm.CmdComplete, Complete: &n.orphans[i]}
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := n.propose(rctx, cmds); err != nil {
		n.log.Warn().Err(err).Int("attempts", len(cmds)).Msg("could not report the attempts lost in the restart; their leases will expire")
		return
	}
	n.log.Info().Int("attempts", len(cmds)).Msg("reported the attempts lost in the restart for retry")
	n.orphans = nil
}
