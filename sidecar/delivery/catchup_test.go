package delivery

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/axsched/ax/engine"
	"github.com/axsched/ax/raftfsm"
)

// fakeCatchUp is a follower's view of the leader's commit index over a
// real FSM. waiting is closed the first time an attempt waits for the
// node to catch up (AppliedCh is asked for only there).
type fakeCatchUp struct {
	f       *raftfsm.FSM
	mu      sync.Mutex
	commit  uint64
	ch      chan struct{}
	waiting chan struct{}
	once    sync.Once
}

func newFakeCatchUp(f *raftfsm.FSM, commit uint64) *fakeCatchUp {
	return &fakeCatchUp{f: f, commit: commit, ch: make(chan struct{}), waiting: make(chan struct{})}
}

func (c *fakeCatchUp) LeaderCommit() (uint64, <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.commit, c.ch
}

func (c *fakeCatchUp) set(commit uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.commit = commit
	close(c.ch)
	c.ch = make(chan struct{})
}

func (c *fakeCatchUp) AppliedIndex() uint64 { return c.f.AppliedIndex() }
func (c *fakeCatchUp) AppliedCh() <-chan struct{} {
	c.once.Do(func() { close(c.waiting) })
	return c.f.AppliedCh()
}
func (c *fakeCatchUp) IsLeader() bool { return false }

// A node that replays the log (here: it came back under its old id with an
// empty data dir, seconds after its earlier life ran attempts) applies the
// Fire of an attempt that earlier life already delivered and reported;
// the Complete follows a few entries later. The attempt must wait until
// the node has applied what the leader had committed (the Complete aborts
// it; were its event late, the task read after the wait ends it), and
// then not call the executor again. Before the wait, the executor was called a second
// time for every such attempt whose lease had not ended (e2e: a node
// restarted with a fresh data dir under its id re-ran the callbacks of
// its last 30 s). An attempt that the log leaves running here is still
// delivered once the node has caught up, also when the leader's commit
// index was not known yet when its Fire applied.
func TestDeliveryWaitsForCatchUpBeforeAReplayedFire(t *testing.T) {
	clock := engine.NewFakeClock(time.Now())
	f := testFSM(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	path := filepath.Join(t.TempDir(), "x.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	calls := serve(t, ln)
	cu := newFakeCatchUp(f, 0)
	p := newFakeProposer()
	d := New(Deps{Config: Config{NodeID: "n1", Concurrency: 4, MinConcurrency: 4}, Log: zerolog.Nop(), Store: f, Context: ctx,
		Clock: clock, Metrics: testMetrics(), Proposer: p, CatchUp: cu})
	defer d.Stop()
	f.SetObserver(deliveryObserver{d})
	e := &deliveryEnv{t: t, f: f, d: d}
	e.apply(raftfsm.Command{Type: raftfsm.CmdNode, Node: &raftfsm.Node{ID: "n1",
		Executors: []raftfsm.Executor{{Name: "x", Handlers: []string{"h"}, URL: "unix://" + path}}}})
	now := clock.Now()
	spec := raftfsm.Spec{Handler: "h", Priority: 2, TimeoutNs: int64(10 * time.Second), MaxAttempts: 3}
	for _, id := range []string{"done", "open"} {
		e.apply(raftfsm.Command{Type: raftfsm.CmdSubmit, Submit: &raftfsm.Submit{ID: id, Spec: spec, DueMs: now.UnixMilli(), AtMs: now.UnixMilli()}})
	}
	fire := func(id string) raftfsm.Command {
		t.Helper()
		task, err := f.Task(id)
		if err != nil {
			t.Fatal(err)
		}
		return raftfsm.Command{Type: raftfsm.CmdFire, Fire: &raftfsm.Fire{ID: id, Epoch: task.Epoch, Attempt: 1, Node: "n1",
			AtMs: now.UnixMilli(), LeaseMs: now.Add(time.Minute).UnixMilli()}}
	}
	waitIdle := func() {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for d.InFlight() != 0 {
			if time.Now().After(deadline) {
				t.Fatal("the attempt did not end")
			}
			time.Sleep(time.Millisecond)
		}
	}

	// The leader had committed up to index 8 when this node asked.
	cu.set(8)
	e.apply(fire("done"))
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Millisecond) {
		select {
		case <-cu.waiting:
		default:
			if n := calls.Load(); n != 0 || time.Now().After(deadline) {
				t.Fatalf("the replayed attempt did not wait for the node to catch up (executor calls: %d)", n)
			}
			continue
		}
		break
	}
	done, err := f.Task("done")
	if err != nil {
		t.Fatal(err)
	}
	e.apply(raftfsm.Command{Type: raftfsm.CmdComplete, Complete: &raftfsm.Complete{ID: "done", Epoch: done.Epoch, Attempt: 1, Outcome: raftfsm.OutcomeSuccess}})
	for e.index < 8 {
		e.apply(raftfsm.Command{Type: raftfsm.CmdSubmit, Submit: &raftfsm.Submit{ID: fmt.Sprint("filler-", e.index), Spec: spec, DueMs: now.Add(time.Hour).UnixMilli(), AtMs: now.UnixMilli()}})
	}
	waitIdle()
	if n := calls.Load(); n != 0 {
		t.Fatalf("the executor was called %d times for an attempt the log had already completed", n)
	}

	// Unknown commit index (the node just started): the Fire of "open"
	// waits for it; once known and applied, the attempt runs.
	cu.mu.Lock()
	cu.commit = 0
	cu.mu.Unlock()
	e.apply(fire("open"))
	if d.InFlight() != 1 {
		t.Fatalf("in flight %d, want the attempt of open waiting", d.InFlight())
	}
	cu.set(e.index)
	cmds := p.next(t)
	if len(cmds) != 1 || cmds[0].Complete == nil || cmds[0].Complete.ID != "open" || cmds[0].Complete.Outcome != raftfsm.OutcomeSuccess {
		t.Fatalf("proposed %+v, want open's success", cmds)
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("executor calls %d, want 1 (open)", n)
	}
}
