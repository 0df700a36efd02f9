package cluster

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/hashicorp/raft"

	"github.com/axsched/ax/sidecar/peerapi"
)

// LeaveTimeout bounds a node's leave (its removal from the configuration,
// retried while the leader is busy with another change or a transfer).
const LeaveTimeout = 5 * time.Second

// Voters is what HandOver needs to know of the other voters.
type Voters interface {
	// IsDraining reports whether node id is stopping (it takes no
	// leadership).
	IsDraining(id string) bool
	// LastReport is node id's last load report on this leader: when it
	// came and the applied index it gave; ok is false without one.
	LastReport(id string) (seen time.Time, applied uint64, ok bool)
}

// HandOver transfers leadership, if this node leads a group of two or more,
// to a voter that is not draining and was heard within NodeLiveness (the
// most caught-up by its load reports), or to any voter when there is none.
// When this node is the only voter, it first promotes the most caught-up
// non-voter that is not draining and was heard within NodeLiveness, and
// hands leadership to it. It waits for the transfer (raft bounds it by an election timeout) and
// logs its failure.
func (m *Membership) HandOver(v Voters) {
	if m.d.Raft.State() != raft.Leader {
		return
	}
	f := m.d.Raft.GetConfiguration()
	if f.Error() != nil || len(f.Configuration().Servers) < 2 {
		return
	}
	now := m.d.Clock.Now()
	var target, spare *raft.Server
	var best, bestSpare uint64
	voters, aliveVoters := 0, 0 // this node included
	for _, s := range f.Configuration().Servers {
		id := string(s.ID)
		seen, applied, ok := v.LastReport(id)
		alive := id == m.cfg.NodeID || ok && now.Sub(seen) < NodeLiveness
		if s.Suffrage == raft.Voter {
			voters++
			if alive {
				aliveVoters++
			}
		}
		if id == m.cfg.NodeID || v.IsDraining(id) || !alive {
			continue
		}
		switch {
		case s.Suffrage == raft.Voter && (target == nil || applied > best):
			s := s
			target, best = &s, applied
		case s.Suffrage == raft.Nonvoter && (spare == nil || applied > bestSpare):
			s := s
			spare, bestSpare = &s, applied
		}
	}
	// A stopping leader with no other voter that stays (none, or all of
	// them draining or unheard: a scale-down that came before autopilot
	// promoted the non-voters, two pods stopped at once) promotes a live
	// non-voter first: without, the voters would all leave or stop, and
	// the non-voters left behind would never elect a leader. (CI: of a
	// 5 -> 1 scale-down, the last two voters stopped together; one handed
	// leadership to the other, draining, and the survivor stayed a
	// non-voter.) Only when the voters alive keep a quorum with it.
	if target == nil && spare != nil && aliveVoters+1 >= Quorum(voters+1) {
		m.log.Info().Str("member", string(spare.ID)).Msg("promoting a non-voter: every other voter is stopping or unheard")
		if err := m.d.Raft.AddVoter(spare.ID, spare.Address, f.Index(), peerapi.Timeout).Error(); err != nil {
			m.log.Warn().Err(err).Str("member", string(spare.ID)).Msg("promoting the non-voter failed")
		} else {
			target = spare
		}
	}
	var err error
	if target != nil {
		m.log.Info().Str("to", string(target.ID)).Msg("handing leadership over")
		err = m.d.Raft.LeadershipTransferToServer(target.ID, target.Address).Error()
	} else {
		m.log.Info().Msg("handing leadership over (every other voter is draining or unheard)")
		err = m.d.Raft.LeadershipTransfer().Error()
	}
	if err != nil {
		m.log.Warn().Err(err).Msg("leadership transfer failed")
	}
}

// Leave removes this node from the configuration, retrying with backoff
// (50 ms doubling to 1 s) while the leader refuses (a transfer in
// progress, a leader change, no leader yet) until LeaveTimeout or ctx ends.
// Nodes stopped together thus leave one after another: raft applies one
// configuration change at a time, and a refused removal is asked again. If
// this node leads when it tries, it hands leadership over first (HandOver
// with v, which promotes a live non-voter when this node is the last
// voter). It does not leave when it is the last voter.
func (m *Membership) Leave(ctx context.Context, v Voters) {
	lctx, cancel := context.WithTimeout(ctx, LeaveTimeout)
	defer cancel()
	backoff := 50 * time.Millisecond
	for {
		m.HandOver(v)
		rctx, rcancel := context.WithTimeout(lctx, peerapi.Timeout)
		err := m.RemoveMember(rctx, m.cfg.NodeID)
		rcancel()
		switch {
		case err == nil:
			m.log.Info().Msg("left the cluster")
			return
		case errors.Is(err, ErrNoSuchMember) || strings.Contains(err.Error(), ErrNoSuchMember.Error()):
			m.log.Info().Msg("left the cluster (already removed)")
			return
		case errors.Is(err, ErrLastVoter):
			m.log.Info().Msg("not leaving: this node is the cluster's last voter")
			return
		case removedFromOwnConfiguration(m.d.Raft, m.cfg.NodeID):
			// The removal was appended, but the answer was lost (the
			// leader lost its leadership before it committed): a node
			// its configuration no longer lists hears of no leader again,
			// so asking again would only wait for LeaveTimeout.
			m.log.Info().Err(err).Msg("left the cluster (its configuration no longer lists it)")
			return
		}
		if lctx.Err() != nil {
			m.log.Warn().Err(err).Msg("leaving the cluster failed")
			return
		}
		m.log.Debug().Err(err).Dur("retry_in", backoff).Msg("leave refused; retrying")
		if !sleep(lctx, m.d.Clock, backoff) {
			m.log.Warn().Err(err).Msg("leaving the cluster failed")
			return
		}
		backoff = min(2*backoff, time.Second)
	}
}

// removedFromOwnConfiguration reports whether r's latest configuration
// (committed or not) has servers but not id.
func removedFromOwnConfiguration(r Raft, id string) bool {
	f := r.GetConfiguration()
	return f.Error() == nil && len(f.Configuration().Servers) > 0 && !InConfiguration(r, id)
}
