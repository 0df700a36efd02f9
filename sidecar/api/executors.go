package api

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/axsched/ax/ipc"
	"github.com/axsched/ax/raftfsm"
)

// registeredPoll is how often RegisterExecutor looks whether this node's
// record is committed yet.
const registeredPoll = 20 * time.Millisecond

// RegisterExecutor implements ipc.Backend: the executor is replicated in
// this node's record, so the leader routes its handlers here.
func (b *Backend) RegisterExecutor(ctx context.Context, e ipc.ExecutorSpec) (ipc.ExecutorSpec, bool, error) {
	x, err := executorRecord(e)
	if err != nil {
		return ipc.ExecutorSpec{}, false, err
	}
	if err := b.waitRegistered(ctx); err != nil {
		return ipc.ExecutorSpec{}, false, err
	}
	res, err := b.d.Proposer.Propose(ctx, []raftfsm.Command{{Type: raftfsm.CmdExecutor, Executor: &raftfsm.ExecutorChange{Node: b.cfg.NodeID, Executor: x}}})
	if err != nil {
		return ipc.ExecutorSpec{}, false, err
	}
	if res[0].Code != raftfsm.CodeOK {
		return ipc.ExecutorSpec{}, false, fmt.Errorf("register executor %q: result %q", e.Name, res[0].Code)
	}
	b.d.Log.Info().Str("executor", e.Name).Strs("handlers", e.Handlers).Str("url", e.URL).Msg("executor registered")
	return executorView(x), res[0].Created, nil
}

// UnregisterExecutor implements ipc.Backend.
func (b *Backend) UnregisterExecutor(ctx context.Context, name string) error {
	res, err := b.d.Proposer.Propose(ctx, []raftfsm.Command{{Type: raftfsm.CmdExecutor, Executor: &raftfsm.ExecutorChange{Node: b.cfg.NodeID, Executor: raftfsm.Executor{Name: name}, Remove: true}}})
	if err != nil {
		return err
	}
	if res[0].Code == raftfsm.CodeNotFound {
		return ipc.Errorf(ipc.ErrNotFound, "executor %q not found on node %s", name, b.cfg.NodeID)
	}
	return nil
}

// Executors implements ipc.Backend: a local read (readOwnWrites first).
func (b *Backend) Executors(ctx context.Context) ([]ipc.ExecutorSpec, error) {
	b.readOwnWrites(ctx)
	rec, err := b.d.Store.Node(b.cfg.NodeID)
	if errors.Is(err, raftfsm.ErrNotFound) {
		return []ipc.ExecutorSpec{}, nil
	}
	if err != nil {
		return nil, err
	}
	out := make([]ipc.ExecutorSpec, 0, len(rec.Executors))
	for _, x := range rec.Executors {
		out = append(out, executorView(x))
	}
	return out, nil
}

func executorRecord(e ipc.ExecutorSpec) (raftfsm.Executor, error) {
	x := raftfsm.Executor{Name: e.Name, Handlers: e.Handlers, URL: e.URL, MinConcurrency: e.MinConcurrency, MaxConcurrency: e.MaxConcurrency}
	if e.Timeout != "" {
		d, err := time.ParseDuration(e.Timeout)
		if err != nil || d <= 0 {
			return x, ipc.Errorf(ipc.ErrInvalid, "timeout %q: want a positive Go duration", e.Timeout)
		}
		x.TimeoutNs = int64(d)
	}
	return x, nil
}

// waitRegistered waits until this node's own record is committed (an API
// registration amends it).
func (b *Backend) waitRegistered(ctx context.Context) error {
	for !b.d.Membership.Registered() {
		t := b.d.Clock.NewTimer(registeredPoll)
		select {
		case <-ctx.Done():
			t.Stop()
			return ipc.Errorf(ipc.ErrNotReady, "node %s has not joined a cluster with a leader yet", b.cfg.NodeID)
		case <-t.C():
		}
	}
	return nil
}
