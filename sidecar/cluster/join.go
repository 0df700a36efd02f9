package cluster

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/hashicorp/raft"

	"github.com/axsched/ax/sidecar/peerapi"
)

const (
	// JoinRetryInterval is how often a forming or joining node retries.
	JoinRetryInterval = 300 * time.Millisecond
	// forwardRetryInterval is how often a join or removal looks for a
	// leader again while none is known.
	forwardRetryInterval = 100 * time.Millisecond
)

// ErrNoLeader is returned by Join and RemoveMember when no leader was
// known before ctx ended.
var ErrNoLeader = errors.New("no leader")

// JoinOrBootstrap runs on a node with no Raft state that was given join
// addresses. Each round it asks every join address for its info: if any
// of them knows a leader, it asks that node to add it (the request is
// forwarded to the leader); otherwise, once it sees BootstrapExpect nodes
// with no cluster (itself included), it bootstraps a configuration of
// exactly those nodes. Every node of the set computes the same
// configuration, so their bootstraps agree (Consul's bootstrap-expect); its
// first Config.Voters nodes by id are voters, the others non-voters
// (autopilot). It returns once the node is in a cluster or ctx ends.
//
// A node that finds itself in a cluster without having joined or
// bootstrapped (the leader reached its Raft port first: it restarted with
// an empty data dir at its old address) still tells the leader, through
// one Join, that it started with no state, so that the leader can take
// away its vote if it lost its data (rejoinsEmpty).
func (m *Membership) JoinOrBootstrap(ctx context.Context) {
	self := peerapi.Info{ID: m.cfg.NodeID, RaftAddr: m.cfg.RaftAdvertise, PeerAddr: m.cfg.PeerAdvertise, Incarnation: m.cfg.Incarnation}
	for {
		if InCluster(m.d.Raft) {
			m.announceEmpty(ctx, self)
			return
		}
		seen := map[string]peerapi.Info{self.ID: self}
		for _, addr := range m.JoinAddrs(ctx) {
			if addr == m.cfg.PeerAdvertise || addr == m.cfg.PeerAddr {
				continue
			}
			rctx, cancel := context.WithTimeout(ctx, time.Second)
			pi, err := m.d.Peers.Info(rctx, addr)
			cancel()
			if err != nil {
				m.log.Debug().Err(err).Str("peer", addr).Msg("peer not reachable yet")
				continue
			}
			if pi.LeaderID != "" {
				rctx, cancel := context.WithTimeout(ctx, peerapi.Timeout)
				_, err := m.d.Peers.Join(rctx, addr, self)
				cancel()
				if err == nil {
					m.log.Info().Str("via", addr).Msg("joined the cluster")
					return
				}
				m.log.Warn().Err(err).Str("via", addr).Msg("join failed; retrying")
				continue
			}
			if !pi.InCluster {
				seen[pi.ID] = pi
			}
		}
		if m.cfg.BootstrapExpect > 1 && len(seen) >= m.cfg.BootstrapExpect {
			servers := bootstrapServers(seen, m.cfg.Voters)
			err := m.d.Raft.BootstrapCluster(raft.Configuration{Servers: servers}).Error()
			if err == nil || errors.Is(err, raft.ErrCantBootstrap) {
				m.log.Info().Int("servers", len(servers)).Msg("bootstrapped the cluster")
				return
			}
			m.log.Warn().Err(err).Msg("bootstrap failed; retrying")
		}
		if !sleep(ctx, m.d.Clock, JoinRetryInterval) {
			return
		}
	}
}

// Join adds node req to the cluster as a non-voter (autopilot promotes it
// once it is stable and the cluster needs a voter): on the leader
// directly, else by forwarding to the leader. A node that is already a
// voter stays one (raft's AddNonvoter only updates its address), unless it
// lost its data: see rejoinsEmpty. A member with another id at req's Raft
// address is removed first (removeStaleAtAddress). It returns raft's or
// the leader's error, or ErrNoLeader when no leader was known before ctx
// ended.
func (m *Membership) Join(ctx context.Context, req peerapi.Info) error {
	// The joiner's peer address is learnt once the leader took it: a
	// request it refuses (another live member's id) must not turn this
	// node's route to that member towards the joiner.
	learn := func(err error) error {
		if err == nil {
			m.d.Peers.Learn(req.ID, req.RaftAddr, req.PeerAddr)
		}
		return err
	}
	for {
		if m.d.Raft.State() == raft.Leader {
			if err := m.refuseLiveDuplicate(req); err != nil {
				m.log.Warn().Err(err).Str("joining", req.ID).Str("raft_addr", req.RaftAddr).Msg("join refused")
				return err
			}
			if err := m.removeStaleAtAddress(req); err != nil {
				return err
			}
			if m.rejoinsEmpty(req) {
				m.log.Warn().Str("joining", req.ID).Msg("a voter rejoins with no Raft state (its data dir was lost): removing it, then adding it back as a non-voter that must catch up")
				if err := m.d.Raft.RemoveServer(raft.ServerID(req.ID), 0, peerapi.Timeout).Error(); err != nil {
					return err
				}
			}
			m.log.Info().Str("joining", req.ID).Str("raft_addr", req.RaftAddr).Msg("adding non-voter")
			return learn(m.d.Raft.AddNonvoter(raft.ServerID(req.ID), raft.ServerAddress(req.RaftAddr), 0, peerapi.Timeout).Error())
		}
		if addr := m.d.Routes.LeaderPeerAddr(); addr != "" && addr != m.cfg.PeerAdvertise {
			_, err := m.d.Peers.Join(ctx, addr, req)
			return learn(err)
		}
		if !sleep(ctx, m.d.Clock, forwardRetryInterval) {
			return ErrNoLeader
		}
	}
}

// announceEmpty sends Join(self) for a node that started with no state
// and was brought into a cluster by the leader's replication; bounded by
// announceTimeout on the clock, a failure is only logged.
func (m *Membership) announceEmpty(ctx context.Context, self peerapi.Info) {
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	t := m.d.Clock.NewTimer(announceTimeout)
	defer t.Stop()
	go func() {
		select {
		case <-t.C():
			cancel()
		case <-actx.Done():
		}
	}()
	if err := m.Join(actx, self); err != nil {
		m.log.Warn().Err(err).Msg("could not tell the leader that this node started with an empty data dir")
	}
}

// announceTimeout bounds announceEmpty.
const announceTimeout = 10 * time.Second

// rejoinsEmpty reports whether join request req comes from a node with no
// Raft state (req.InCluster false) under the id of a voter whose node
// record (committed by Register once it was a full member) names another
// incarnation of its data dir than the request: that node lost its data
// dir (an emptyDir after its pod was recreated, a wiped disk). Kept a
// voter, it would count towards the quorum of entries it no longer has:
// were the other holder of a committed entry to fail, an election among
// nodes without it could lose that entry. A node of a bootstrap-expect
// set has no record yet, or one of its own incarnation (it may register
// before its join request arrives), and stays the voter it was
// bootstrapped as; nodes of older versions send or record no
// incarnation, and keep their vote too.
func (m *Membership) rejoinsEmpty(req peerapi.Info) bool {
	if req.InCluster || req.ID == m.cfg.NodeID || req.Incarnation == "" {
		return false
	}
	f := m.d.Raft.GetConfiguration()
	if f.Error() != nil {
		return false
	}
	voter := false
	for _, s := range f.Configuration().Servers {
		voter = voter || (string(s.ID) == req.ID && s.Suffrage == raft.Voter)
	}
	if !voter {
		return false
	}
	nodes, err := m.d.FSM.Nodes()
	if err != nil {
		return false
	}
	for _, nd := range nodes {
		if nd.ID == req.ID {
			return nd.Incarnation != "" && nd.Incarnation != req.Incarnation
		}
	}
	return false
}

// ErrDuplicateID is returned by Join (on the leader, or from it) when the
// joining node has the id of a live member at another Raft address.
var ErrDuplicateID = peerapi.ErrDuplicateID

// refuseLiveDuplicate returns ErrDuplicateID (wrapped, naming both
// addresses) for a join under the id of a member at another Raft address
// that is alive: this leader itself, or a member whose load report came
// within the autopilot's LastContact. That is a second node started with
// the same --node-id (a copied manifest, a typo), not the member come
// back: raft's AddNonvoter would move the live member's address in the
// configuration to the newcomer (the leader's own, too), and rejoinsEmpty
// would take a live voter's vote away. A member that has gone quiet may
// come back at a new address (a pod recreated with another IP): that join
// goes through once its last report is older than LastContact.
func (m *Membership) refuseLiveDuplicate(req peerapi.Info) error {
	f := m.d.Raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return err
	}
	for _, s := range f.Configuration().Servers {
		if string(s.ID) != req.ID || string(s.Address) == req.RaftAddr {
			continue
		}
		if req.ID == m.cfg.NodeID || m.autopilot.heardWithin(req.ID) {
			return fmt.Errorf("%w: %q is at %s and alive; this node (raft address %s) needs another --node-id",
				ErrDuplicateID, req.ID, s.Address, req.RaftAddr)
		}
	}
	return nil
}

// removeStaleAtAddress removes, on the leader, a member with another id
// at the Raft address req joins with: a pod that vanished without leaving
// (SIGKILL, a node crash) whose address a new pod got. raft refuses a
// configuration with one address twice, so the new pod could not join
// until the old member was removed by hand; and the old member's Raft
// traffic reached the new pod. The old node cannot be at that address any
// more (the new one answers there), so this is Consul's way: remove the
// old server first. The leader never removes itself.
func (m *Membership) removeStaleAtAddress(req peerapi.Info) error {
	f := m.d.Raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return err
	}
	for _, s := range f.Configuration().Servers {
		if string(s.Address) != req.RaftAddr || string(s.ID) == req.ID || string(s.ID) == m.cfg.NodeID {
			continue
		}
		m.log.Warn().Str("member", string(s.ID)).Str("joining", req.ID).Str("raft_addr", req.RaftAddr).
			Msg("removing the member whose address a joining node now has")
		return m.d.Raft.RemoveServer(s.ID, f.Index(), peerapi.Timeout).Error()
	}
	return nil
}

// bootstrapServers is the configuration a bootstrap-expect set starts
// with: every node sorted by id, the first voters of them voters and the
// rest non-voters (autopilot promotes them if a voter fails). Every node of
// the set computes the same.
func bootstrapServers(seen map[string]peerapi.Info, voters int) []raft.Server {
	var servers []raft.Server
	for _, pi := range seen {
		servers = append(servers, raft.Server{ID: raft.ServerID(pi.ID), Address: raft.ServerAddress(pi.RaftAddr), Suffrage: raft.Voter})
	}
	sort.Slice(servers, func(i, j int) bool { return servers[i].ID < servers[j].ID })
	for i := range servers {
		if i >= voters {
			servers[i].Suffrage = raft.Nonvoter
		}
	}
	return servers
}
