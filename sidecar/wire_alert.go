package sidecar

import (
	"context"

	"github.com/axsched/ax/raftfsm"
	"github.com/axsched/ax/sidecar/alert"
	"github.com/axsched/ax/sidecar/api"
	"github.com/axsched/ax/sidecar/delivery/callback"
)

// This file connects package alert (the leader's dead-run webhook sender)
// to the node: the FSM's reads, the leader's own proposals, a callback
// Caller of its own (the executors' transport) and the API's views.

// newAlerts builds the dead-run webhook sender of n (off without
// Config.OnDeadURL).
func newAlerts(n *Node) *alert.Sender {
	return alert.New(alert.Config{URL: n.cfg.OnDeadURL}, alert.Deps{
		Store: n.fsm,
		// The leader's own proposals: group commit, no forwarding.
		Proposer: alertProposer{n},
		Poster:   callback.NewCaller(callback.CallerOptions{MaxIdleConnsPerExecutor: 2}),
		TaskView: api.TaskView, // ipc.Task and ipc.Run are axapi's types (aliases)
		RunView:  api.RunView,
		Clock:    n.clock,
		Log:      n.log.With().Str("part", "alert").Logger(),
	})
}

type alertProposer struct{ n *Node }

func (p alertProposer) Propose(ctx context.Context, cmds []raftfsm.Command) ([]raftfsm.Result, error) {
	return p.n.proposer.Propose(ctx, cmds)
}
