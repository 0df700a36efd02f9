package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/raft"

	"github.com/axsched/ax/sidecar/peerapi"
)

// Errors of RemoveMember. They carry the peer API's codes, so errors.Is
// matches them as well when the leader answered them to a forward.
var (
	// ErrNoSuchMember is returned when a removal names a node that is not
	// in the Raft configuration.
	ErrNoSuchMember = peerapi.ErrNoSuchMember
	// ErrLastVoter is returned when a removal would leave no voter.
	ErrLastVoter = peerapi.ErrLastVoter
)

// RemoveMember removes node id from the Raft configuration: on the leader
// directly, else through the leader's peer API. Removing the leader itself
// makes it step down first (raft transfers nothing; an election follows).
// It returns ErrNoSuchMember, ErrLastVoter (both wrapped, naming id),
// raft's error, or ErrNoLeader when no leader was known before ctx ended.
func (m *Membership) RemoveMember(ctx context.Context, id string) error {
	return m.removeMember(ctx, id, false)
}

// RemoveNode is RemoveMember for an operator (ax cluster remove, DELETE
// /v1/cluster/members/{id}): it looks for a leader that answers for at
// most removeLeaderWait, then returns ErrNoLeader (wrapped with the last
// forward's error, if any) instead of waiting until the caller gives up;
// a leader that does not answer the forwarded request (it was just
// killed) is looked for again, as while none is known, and a removal
// whose answer was lost that way and that the next leader no longer
// finds counts as done.
func (m *Membership) RemoveNode(ctx context.Context, id string) error {
	return m.removeMember(ctx, id, true)
}

func (m *Membership) removeMember(ctx context.Context, id string, patient bool) error {
	var lastErr error // the last forward the leader did not answer
	wasMember := InConfiguration(m.d.Raft, id)
	giveUp := m.d.Clock.Now().Add(removeLeaderWait)
	for {
		if m.d.Raft.State() == raft.Leader {
			f := m.d.Raft.GetConfiguration()
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
				if lastErr != nil && wasMember {
					return nil // the unanswered forward removed it
				}
				return fmt.Errorf("%w: %q", ErrNoSuchMember, id)
			}
			if voters == 0 {
				return fmt.Errorf("%w: %q is the last voter", ErrLastVoter, id)
			}
			if patient {
				if err := quorumAfterRemoval(f.Configuration(), m.MemberStatuses(), id); err != nil {
					return err
				}
			}
			m.log.Info().Str("member", id).Msg("removing member")
			return m.d.Raft.RemoveServer(raft.ServerID(id), 0, peerapi.Timeout).Error()
		}
		if addr := m.d.Routes.LeaderPeerAddr(); addr != "" && addr != m.cfg.PeerAdvertise {
			if patient {
				// The leader's view of who is reachable, with this node's
				// configuration (the leader's, or about to be).
				f := m.d.Raft.GetConfiguration()
				if statuses, err := m.d.Peers.Members(ctx, addr); err == nil && f.Error() == nil {
					if err := quorumAfterRemoval(f.Configuration(), statuses, id); err != nil {
						return err
					}
				}
			}
			err := m.d.Peers.Remove(ctx, addr, id)
			var pe *peerapi.Error
			switch {
			case !patient || err == nil || ctx.Err() != nil:
				return err
			case errors.As(err, &pe): // the leader's answer
				if errors.Is(err, ErrNoSuchMember) && lastErr != nil && wasMember {
					return nil // the unanswered forward removed it
				}
				return err
			}
			// No answer: the leader may have just died. Look again.
			m.log.Debug().Err(err).Str("leader", addr).Msg("remove: the leader did not answer; looking for a leader again")
			lastErr = err
		}
		if patient && !m.d.Clock.Now().Before(giveUp) {
			if lastErr != nil {
				return fmt.Errorf("%w: the leader did not answer (%v)", ErrNoLeader, lastErr)
			}
			return ErrNoLeader
		}
		if !sleep(ctx, m.d.Clock, forwardRetryInterval) {
			return ErrNoLeader
		}
	}
}

// ErrWouldLoseQuorum is returned by RemoveNode when the voters that would
// remain, less those the leader has not heard from lately, are short of a
// quorum of them.
var ErrWouldLoseQuorum = errors.New("the removal would leave the cluster without a quorum")

// quorumAfterRemoval returns ErrWouldLoseQuorum (wrapped, with the counts)
// when removing id from conf would leave fewer reachable voters (by the
// leader's statuses) than a quorum of the voters that remain. Raft would
// take such a change (it needs a quorum of the new configuration, which
// it then never gets): by hand, ax cluster remove of a live voter right
// after another voter was killed left the survivors, one voter of the two
// remaining, unable to elect a leader or commit anything until the dead
// one came back. A removal that leaves no voter is ErrLastVoter's.
func quorumAfterRemoval(conf raft.Configuration, statuses map[string]peerapi.MemberStatus, id string) error {
	remaining, reachable := 0, 0
	var unreachable []string
	for _, s := range conf.Servers {
		if s.Suffrage != raft.Voter || string(s.ID) == id {
			continue
		}
		remaining++
		if statuses[string(s.ID)].Reachable {
			reachable++
		} else {
			unreachable = append(unreachable, string(s.ID))
		}
	}
	if remaining == 0 || reachable >= Quorum(remaining) {
		return nil
	}
	return fmt.Errorf("%w: removing %q would leave %d reachable of the %d remaining voters, short of a quorum of %d (not heard from: %s); bring those back first, or remove them first if they are gone for good",
		ErrWouldLoseQuorum, id, reachable, remaining, Quorum(remaining), strings.Join(unreachable, ", "))
}

// removeLeaderWait bounds how long RemoveMember looks for a leader that
// answers: several election timeouts, so that the removal of a node
// right after the leader died waits out the election, while a cluster
// with no quorum answers no_leader instead of hanging until the caller
// gives up.
const removeLeaderWait = 5 * time.Second

// A node removed from the cluster while it was down (ax cluster remove of
// a dead node) still finds itself in the configuration of its own log when
// it starts again: it campaigns, the others ignore it (they no longer count
// it), and it waits for a leader forever. A node removed while it ran is
// left without a leader too (a leader's Raft shuts down once it commits
// its own removal; a follower's keeps running and no leader sends to it
// any more), and the same check says so. WatchRemoval makes that visible:
// after removalCheckAfter without a leader it asks the other nodes' peer
// APIs for the leader's member list, and if the leader does not list it,
// it logs so once (at warn) and sets Deps.Removed (readiness says so;
// writes fail at once; raft's election lines, which a node that still
// counts itself a voter would repeat at every election timeout, are
// demoted to debug: raftstore's raftLogger).
const (
	removalCheckAfter = 20 * time.Second
	removalCheckEvery = 10 * time.Second
)

// WatchRemoval runs the check every removalCheckEvery until ctx ends.
func (m *Membership) WatchRemoval(ctx context.Context) {
	w := &removalWatch{m: m}
	every(ctx, m.d.Clock, removalCheckEvery, func() { w.check(ctx) })
}

// removalWatch is WatchRemoval's state between checks.
type removalWatch struct {
	m             *Membership
	noLeaderSince time.Time // zero while a leader is known
}

// check is one round of WatchRemoval.
func (w *removalWatch) check(ctx context.Context) {
	m := w.m
	if _, id := m.d.Raft.LeaderWithID(); id != "" || m.d.Raft.State() == raft.Leader {
		w.noLeaderSince = time.Time{}
		m.d.Removed.Store(false)
		return
	}
	now := m.d.Clock.Now()
	if w.noLeaderSince.IsZero() {
		w.noLeaderSince = now
	}
	if now.Sub(w.noLeaderSince) < removalCheckAfter || m.d.Removed.Load() {
		return
	}
	if m.removedByCluster(ctx) {
		m.d.Removed.Store(true)
		m.log.Warn().Msg("the cluster's leader does not list this node as a member: it was removed (ax cluster remove), while it was down or while it ran. It will not rejoin with its old data: stop it, delete its data dir and start it with --join (raft's election lines are debug from now on)")
	}
}

// removedByCluster asks the peer APIs of the join addresses and of the
// nodes this node knows for the leader's member list (only the leader
// answers it), and reports whether that list leaves this node out. Any
// doubt (no answer) is false.
func (m *Membership) removedByCluster(ctx context.Context) bool {
	for _, a := range m.knownPeerAddrs(ctx) {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		members, err := m.d.Peers.Members(rctx, a)
		cancel()
		if err != nil || len(members) == 0 {
			continue // not the leader, or unreachable
		}
		_, listed := members[m.cfg.NodeID]
		return !listed
	}
	return false
}

// VouchLeader reports whether a node this node knows (a join address, a
// node of its state) names id as its leader (the leader itself, when it
// is one of them, names itself): raftstore's VouchFunc, for a node that
// refused Raft RPCs from id because its configuration does not list it
// (it missed the membership change that brought id in) or is still empty
// (a new node, whose first leader is the one its join addresses know).
// The known nodes are asked one after the other until ctx ends; none that
// answers with id (a node of another cluster is asked about a stranger,
// a single node asks nobody): false.
func (m *Membership) VouchLeader(ctx context.Context, id string) bool {
	if id == "" || id == m.cfg.NodeID {
		return false
	}
	for _, a := range m.knownPeerAddrs(ctx) {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		info, err := m.d.Peers.Info(rctx, a)
		cancel()
		if err == nil && info.LeaderID == id {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
	}
	return false
}

// knownPeerAddrs returns the peer addresses of the join addresses and of
// the nodes in this node's state, this node's own left out.
func (m *Membership) knownPeerAddrs(ctx context.Context) []string {
	seen := map[string]bool{m.cfg.PeerAdvertise: true}
	var addrs []string
	add := func(a string) {
		if a != "" && !seen[a] {
			seen[a] = true
			addrs = append(addrs, a)
		}
	}
	for _, a := range m.JoinAddrs(ctx) {
		add(a)
	}
	if m.d.FSM != nil {
		if nodes, err := m.d.FSM.Nodes(); err == nil {
			for _, nd := range nodes {
				if nd.ID != m.cfg.NodeID {
					add(m.d.Routes.RoutedPeerAddr(nd.ID, nd.PeerAddr))
				}
			}
		}
	}
	return addrs
}
