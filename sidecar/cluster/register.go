package cluster

import (
	"context"
	"time"

	"github.com/axsched/ax/raftfsm"
)

// Register records this node (addresses and executors given by flag) in
// the replicated state once a leader is known, so the leader can route
// attempts here and every node can find every other's peer address. It
// retries every JoinRetryInterval until the record is committed (then it
// reports the orphans and sets Deps.Registered) or ctx ends.
func (m *Membership) Register(ctx context.Context) {
	var handlers []string
	for _, e := range m.cfg.Executors {
		handlers = append(handlers, e.Handlers...)
	}
	rec := raftfsm.Node{ID: m.cfg.NodeID, RaftAddr: m.cfg.RaftAdvertise, PeerAddr: m.cfg.PeerAdvertise, Executors: m.cfg.Executors, Incarnation: m.cfg.Incarnation}
	for {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		node := rec
		_, err := m.d.Proposer.Propose(rctx, []raftfsm.Command{{Type: raftfsm.CmdNode, Node: &node}})
		cancel()
		if err == nil {
			m.abandonOrphans(ctx)
			m.d.Registered.Store(true)
			m.log.Info().Strs("handlers", handlers).Msg("node registered")
			return
		}
		if ctx.Err() != nil {
			return
		}
		m.log.Debug().Err(err).Msg("register: retrying")
		if !sleep(ctx, m.d.Clock, JoinRetryInterval) {
			return
		}
	}
}

// LostReport is the report of running task t's attempt as lost by node
// id, which restarted during it: one of Config.Orphans. The node lists
// them at start, before Raft replays anything, from the attempts the
// store says run on it: the previous process was delivering them, and
// this one never will (a restart delivers only the attempts whose Fire it
// applies from now on). Those are the only ones Register may report lost.
func LostReport(t *raftfsm.Task, id string) raftfsm.Complete {
	return raftfsm.Complete{
		ID: t.ID, Epoch: t.Epoch, Attempt: t.Attempts, Outcome: raftfsm.OutcomeLost,
		Error: "node " + id + " restarted during the attempt",
	}
}

// abandonOrphans reports the attempts of Config.Orphans, once this node is
// registered: the leader retries them now instead of at their lease's end
// (timeout + grace). A report naming an attempt that is no longer current
// is ignored by the FSM.
//
// Only those still current are reported (Config.OrphanCurrent): a
// Complete names an attempt by task, epoch and number, and a task's next
// run numbers its attempts from 1 again, so a report of an attempt that
// had ended (its success committed just before the previous process
// died) would end the next run's attempt of the same number, which may
// be running elsewhere: that callback would be aborted and made again.
func (m *Membership) abandonOrphans(ctx context.Context) {
	if len(m.orphans) == 0 {
		return
	}
	cmds := make([]raftfsm.Command, 0, len(m.orphans))
	for i := range m.orphans {
		if m.cfg.OrphanCurrent != nil && !m.cfg.OrphanCurrent(m.orphans[i]) {
			continue
		}
		cmds = append(cmds, raftfsm.Command{Type: raftfsm.CmdComplete, Complete: &m.orphans[i]})
	}
	if ended := len(m.orphans) - len(cmds); ended > 0 {
		m.log.Info().Int("attempts", ended).Msg("attempts of the previous process that ended before the restart: not reported")
	}
	if len(cmds) == 0 {
		m.orphans = nil
		return
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := m.d.Proposer.Propose(rctx, cmds); err != nil {
		m.log.Warn().Err(err).Int("attempts", len(cmds)).Msg("could not report the attempts lost in the restart; their leases will expire")
		return
	}
	m.log.Info().Int("attempts", len(cmds)).Msg("reported the attempts lost in the restart for retry")
	m.orphans = nil
}
