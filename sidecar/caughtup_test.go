package sidecar

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/axsched/ax/engine"
	"github.com/axsched/ax/raftfsm"
)

// gatedFSM is the node's FSM whose applies wait while the gate is shut:
// a node whose Raft log is committed past what its store has applied.
type gatedFSM struct {
	*raftfsm.FSM
	mu   sync.Mutex
	gate chan struct{} // applies wait until it is closed; nil: open
}

func (g *gatedFSM) wait() {
	g.mu.Lock()
	gate := g.gate
	g.mu.Unlock()
	if gate != nil {
		<-gate
	}
}

// shut holds every apply from now on until open.
func (g *gatedFSM) shut() {
	g.mu.Lock()
	g.gate = make(chan struct{})
	g.mu.Unlock()
}

func (g *gatedFSM) open() {
	g.mu.Lock()
	if g.gate != nil {
		close(g.gate)
		g.gate = nil
	}
	g.mu.Unlock()
}

func (g *gatedFSM) Apply(l *raft.Log) interface{} {
	g.wait()
	return g.FSM.Apply(l)
}

func (g *gatedFSM) ApplyBatch(logs []*raft.Log) []interface{} {
	g.wait()
	return g.FSM.ApplyBatch(logs)
}

// A leader whose store has not applied a recurring task's Submit yet
// (a new leader still applying the entries of earlier terms) gets the
// success of the task's first run (forwarded by the node that ran it,
// which had applied them). Prepared at once, the Complete read no task,
// decided no next run, and every node applied it to the fired task: the
// schedule ended (SUCCESS, purged at its retention; the rule for a read
// one attempt short does not cover a read of nothing). The node's
// proposer holds it until the term's barrier has returned
// (scheduler.CaughtUp), and it is prepared from the task as committed.
// A new term is begun here with Stop and Start, as watchLeadership does
// on an election, on a one-node in-memory Raft group whose FSM is held.
func TestNewLeaderPreparesACompleteFromTheCommittedTask(t *testing.T) {
	f := testFSM(t)
	g := &gatedFSM{FSM: f}
	clock := engine.NewFakeClock(time.Now().Truncate(time.Millisecond))
	n, ctx := newLeaderNode(t, f, clock)

	r := startInmemRaft(t, g)
	t.Cleanup(g.open) // first: raft's shutdown waits for its FSM goroutine
	n.raft = r
	n.proposer = newGroupCommit(n)
	go n.proposer.Run(ctx)
	n.leader.Start(ctx)
	t.Cleanup(n.leader.Stop)
	select {
	case <-n.leader.CaughtUp():
	case <-time.After(10 * time.Second):
		t.Fatal("the first term's barrier did not return within 10 s")
	}

	// From here the store applies nothing: the Submit and the Fire commit
	// (another node applies them and runs the attempt) but are not
	// applied here.
	g.shut()
	now := clock.Now()
	epoch := r.LastIndex() + 1 // the Submit's entry: nothing else is appended meanwhile
	submit := raftfsm.Command{Type: raftfsm.CmdSubmit, Submit: &raftfsm.Submit{ID: "r", Spec: raftfsm.Spec{
		Handler: "h", EveryNs: int64(time.Minute), RunAtMs: now.UnixMilli(), TimeoutNs: int64(30 * time.Second), MaxAttempts: 3}}}
	fire := raftfsm.Command{Type: raftfsm.CmdFire, Fire: &raftfsm.Fire{ID: "r", Epoch: epoch, Attempt: 1, Node: "b",
		LeaseMs: now.Add(time.Minute).UnixMilli()}}
	var futures []raft.ApplyFuture
	for _, c := range []raftfsm.Command{submit, fire} {
		n.prep.Prepare(&c, now)
		data, err := raftfsm.EncodeEntry([]raftfsm.Command{c})
		if err != nil {
			t.Fatal(err)
		}
		futures = append(futures, r.Apply(data, 10*time.Second))
	}
	// A new term: its barrier waits for the store.
	n.leader.Stop()
	n.leader.Start(ctx)

	done := make(chan error, 1)
	go func() {
		_, err := n.proposer.Propose(ctx, []raftfsm.Command{{Type: raftfsm.CmdComplete, Complete: &raftfsm.Complete{
			ID: "r", Epoch: epoch, Attempt: 1, Outcome: raftfsm.OutcomeSuccess}}})
		done <- err
	}()
	// The Complete waits for the barrier on the proposer's bound. (Without
	// the wait it is prepared at once, from a store without the task.)
	bctx, bcancel := context.WithTimeout(ctx, 2*time.Second)
	waited := clock.BlockUntilContext(bctx, 1) == nil
	bcancel()
	g.open()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Complete: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Complete not answered within 10 s of the store catching up")
	}
	for i, fu := range futures {
		if err := fu.Error(); err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
	}
	if futures[0].Index() != epoch {
		t.Fatalf("the Submit's entry is %d, the test assumed %d", futures[0].Index(), epoch)
	}
	task, err := f.Task("r")
	if err != nil {
		t.Fatal(err)
	}
	if task.State != raftfsm.StateWaiting || task.DueMs <= now.UnixMilli() {
		t.Fatalf("recurring task after its first run succeeded on a leader catching up: %s due %d (now %d; the Complete waited for the barrier: %v), want WAITING for its next slot",
			task.State, task.DueMs, now.UnixMilli(), waited)
	}
}
