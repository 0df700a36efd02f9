package cluster

import (
	"context"
	"strings"
	"time"

	"github.com/hashicorp/raft"

	"github.com/axsched/ax/sidecar/peerapi"
)

const (
	// ReportInterval is how often a node reports its load to the leader;
	// the leader routes attempts only to nodes heard from within
	// NodeLiveness.
	ReportInterval = 300 * time.Millisecond
	// NodeLiveness is how recent a node's last report must be for the
	// leader to give it attempts: three reports missed.
	NodeLiveness = time.Second
)

// ReportLoop tells the leader every ReportInterval that this node is
// alive, how many callbacks it has in flight, how far it has applied the
// log and its Raft state (autopilot judges its health from these), until
// ctx ends. It also reports at once when the leader changes
// (Deps.LeaderChanged): a new leader routes attempts only to the nodes it
// has heard from, so without it the nodes but the leader got no attempt
// for up to ReportInterval after every election or hand-over.
func (m *Membership) ReportLoop(ctx context.Context) {
	leaderChanged := func() <-chan struct{} {
		if m.d.LeaderChanged == nil {
			return nil
		}
		return m.d.LeaderChanged()
	}
	t := m.d.Clock.NewTimer(ReportInterval)
	defer t.Stop()
	changed := leaderChanged()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			t.Reset(ReportInterval)
		case <-changed:
		}
		// Taken before the report, so that a change during it is not missed.
		changed = leaderChanged()
		rctx, cancel := context.WithTimeout(ctx, ReportInterval)
		m.ReportOnce(rctx)
		cancel()
	}
}

// ReportOnce sends one load report to the leader (records it, on the
// leader) and takes in the answer; ctx bounds the call.
func (m *Membership) ReportOnce(ctx context.Context) {
	r := m.d.Load.Own()
	r.ID, r.Applied, r.State = m.cfg.NodeID, m.d.FSM.AppliedIndex(), strings.ToLower(m.d.Raft.State().String())
	if m.d.Raft.State() == raft.Leader {
		m.d.Load.Record(r)
		m.d.Load.SetLeaderCommit(m.d.RaftLog.StateIndex(m.d.Raft.CommitIndex()))
		m.d.Load.SetParked(m.d.Load.ParkedShare(m.cfg.NodeID))
		return
	}
	if addr := m.d.Routes.LeaderPeerAddr(); addr != "" {
		rr, err := m.d.Peers.Report(ctx, addr, r)
		if err != nil {
			m.log.Debug().Err(err).Msg("load report failed")
			m.d.Load.SetParked(nil) // no word of the leader's backlog
			return
		}
		target := rr.StateIndex
		if target == 0 {
			target = rr.CommitIndex // a leader of an older version
		}
		m.d.Load.SetLeaderCommit(target)
		m.d.Load.SetParked(rr.Parked)
	}
}

// HandleReport takes another node's load report on the leader: the
// scheduler and autopilot record it, and the answer tells the node how far
// the leader has committed (so it knows whether it has caught up) and its
// share of the parked runs.
func (m *Membership) HandleReport(r peerapi.LoadReport) peerapi.ReportReply {
	m.d.Load.Record(r)
	commit := m.d.Raft.CommitIndex()
	m.autopilot.observe(r, commit)
	return peerapi.ReportReply{CommitIndex: commit, StateIndex: m.d.RaftLog.StateIndex(commit), Parked: m.d.Load.ParkedShare(r.ID)}
}
