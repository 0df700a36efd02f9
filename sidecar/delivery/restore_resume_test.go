package delivery

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/axsched/ax/raftfsm"
)

// After a snapshot install, the node starts the attempts the snapshot says
// run here (their Fire events were folded into it), not those of other
// nodes or with an ended lease; it aborts attempts the snapshot no longer
// has running here; and a Fire event still to come for an attempt it
// started does not start it twice.
func TestDeliveryResumesAttemptsOfAnInstalledSnapshot(t *testing.T) {
	f := testFSM(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d := New(Deps{Config: Config{NodeID: "n1"}, Log: zerolog.Nop(), Store: f, Context: ctx,
		Metrics: &Metrics{StaleFires: prometheus.NewCounter(prometheus.CounterOpts{Name: "s"})}})
	defer d.Stop()
	now := time.Now()
	due, lease, ended := now.Add(time.Hour).UnixMilli(), now.Add(2*time.Hour).UnixMilli(), now.Add(-time.Second).UnixMilli()
	var index uint64
	apply := func(cmds ...raftfsm.Command) {
		t.Helper()
		index++
		applyEntry(t, f, index, cmds...)
	}
	// This node has an executor for every handler; tasks are due in an
	// hour, so a started attempt waits for its due time and stays running.
	apply(raftfsm.Command{Type: raftfsm.CmdNode, Node: &raftfsm.Node{ID: "n1",
		Executors: []raftfsm.Executor{{Name: "x", Handlers: []string{"*"}, URL: "unix:///nonexistent.sock"}}}})
	spec := raftfsm.Spec{Handler: "h", Priority: 2, TimeoutNs: int64(time.Second), MaxAttempts: 3}
	for _, id := range []string{"mine", "other", "ended", "cancelled"} {
		apply(raftfsm.Command{Type: raftfsm.CmdSubmit, Submit: &raftfsm.Submit{ID: id, Spec: spec, DueMs: due, AtMs: now.UnixMilli()}})
	}
	fire := func(id, node string, leaseMs int64) raftfsm.Command {
		t.Helper()
		task, err := f.Task(id)
		if err != nil {
			t.Fatal(err)
		}
		return raftfsm.Command{Type: raftfsm.CmdFire, Fire: &raftfsm.Fire{ID: id, Epoch: task.Epoch, Attempt: 1, Node: node, AtMs: due, LeaseMs: leaseMs}}
	}
	apply(fire("mine", "n1", lease), fire("other", "n2", lease), fire("ended", "n1", ended))
	// "cancelled" ran here before the snapshot, which cancelled it.
	d.start(&raftfsm.Task{ID: "cancelled", Epoch: 99, Attempts: 1, State: raftfsm.StateRunning, Node: "n1", DueMs: due, LeaseMs: lease, Spec: spec}, 0)

	d.OnEvent(&raftfsm.Event{Restored: true})
	d.mu.Lock()
	var got []string
	for id := range d.running {
		got = append(got, id)
	}
	first := d.running["mine"]
	d.mu.Unlock()
	if len(got) != 1 || first == nil {
		t.Fatalf("running after the restore: %v, want only mine", got)
	}

	// The Fire of "mine" arrives as an event after all: not started again.
	task, err := f.Task("mine")
	if err != nil {
		t.Fatal(err)
	}
	d.OnEvent(&raftfsm.Event{Type: raftfsm.CmdFire, Task: task, Prev: raftfsm.StateWaiting})
	d.mu.Lock()
	again := d.running["mine"]
	d.mu.Unlock()
	if again != first {
		t.Fatal("the Fire event of an attempt started from the snapshot started it a second time")
	}
	// A later attempt of it is started as usual.
	task.Attempts = 2
	d.OnEvent(&raftfsm.Event{Type: raftfsm.CmdFire, Task: task, Prev: raftfsm.StateRunning, PrevNode: "n1"})
	d.mu.Lock()
	next := d.running["mine"]
	d.mu.Unlock()
	if next == nil || next == first || next.attempt != 2 {
		t.Fatalf("attempt 2 was not started (running %+v)", next)
	}
}

// A node restarted during an attempt (the node listed it at start, and
// Register reports it lost so the leader retries it elsewhere) and then
// sent a snapshot that still has the attempt running here must not start
// it: the previous process may have called the executor already, and the
// leader's retry calls it again. By hand: a node killed and restarted with
// its data while it lagged got a snapshot at once, started its three
// orphans from it, and one callback was made twice (here and on the
// retry).
func TestDeliveryDoesNotResumeAnOrphanFromASnapshot(t *testing.T) {
	f := testFSM(t)
	now := time.Now()
	due, lease := now.Add(time.Hour).UnixMilli(), now.Add(2*time.Hour).UnixMilli()
	var index uint64
	apply := func(cmds ...raftfsm.Command) {
		t.Helper()
		index++
		applyEntry(t, f, index, cmds...)
	}
	apply(raftfsm.Command{Type: raftfsm.CmdNode, Node: &raftfsm.Node{ID: "n1",
		Executors: []raftfsm.Executor{{Name: "x", Handlers: []string{"*"}, URL: "unix:///nonexistent.sock"}}}})
	spec := raftfsm.Spec{Handler: "h", Priority: 2, TimeoutNs: int64(time.Second), MaxAttempts: 3}
	for _, id := range []string{"orphan", "new"} {
		apply(raftfsm.Command{Type: raftfsm.CmdSubmit, Submit: &raftfsm.Submit{ID: id, Spec: spec, DueMs: due, AtMs: now.UnixMilli()}})
		task, err := f.Task(id)
		if err != nil {
			t.Fatal(err)
		}
		apply(raftfsm.Command{Type: raftfsm.CmdFire, Fire: &raftfsm.Fire{ID: id, Epoch: task.Epoch, Attempt: 1, Node: "n1", AtMs: due, LeaseMs: lease}})
	}
	orphan, err := f.Task("orphan")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d := New(Deps{Config: Config{NodeID: "n1"}, Log: zerolog.Nop(), Store: f, Context: ctx,
		Metrics: &Metrics{StaleFires: prometheus.NewCounter(prometheus.CounterOpts{Name: "s"})},
		Orphans: []Orphan{{ID: "orphan", Epoch: orphan.Epoch, Run: orphan.Run, Attempt: 1}}})
	defer d.Stop()

	d.OnEvent(&raftfsm.Event{Restored: true})
	d.mu.Lock()
	_, orphanRuns := d.running["orphan"]
	_, newRuns := d.running["new"]
	d.mu.Unlock()
	if orphanRuns || !newRuns {
		t.Fatalf("after the restore: orphan running %v (want false), new running %v (want true)", orphanRuns, newRuns)
	}
}

// An orphan is one attempt of one run: the same attempt number of a later
// run of the task (a re-run after DEAD, or a recurring task's next run)
// has the same id, epoch and attempt, and is not the previous process's
// to have called. Skipped as an orphan when it came with a snapshot, it
// was delivered by no one until its lease ended (timeout + grace), and
// then counted as a timed-out attempt: a task with max_attempts 1 went
// DEAD without a callback.
func TestDeliveryResumesALaterRunOfAnOrphanedTask(t *testing.T) {
	f := testFSM(t)
	now := time.Now()
	due, lease := now.Add(time.Hour).UnixMilli(), now.Add(2*time.Hour).UnixMilli()
	var index uint64
	apply := func(cmds ...raftfsm.Command) {
		t.Helper()
		index++
		applyEntry(t, f, index, cmds...)
	}
	apply(raftfsm.Command{Type: raftfsm.CmdNode, Node: &raftfsm.Node{ID: "n1",
		Executors: []raftfsm.Executor{{Name: "x", Handlers: []string{"*"}, URL: "unix:///nonexistent.sock"}}}})
	spec := raftfsm.Spec{Handler: "h", Priority: 2, TimeoutNs: int64(time.Second), MaxAttempts: 1}
	apply(raftfsm.Command{Type: raftfsm.CmdSubmit, Submit: &raftfsm.Submit{ID: "t", Spec: spec, DueMs: due, AtMs: now.UnixMilli()}})
	task, err := f.Task("t")
	if err != nil {
		t.Fatal(err)
	}
	fire := func() {
		t.Helper()
		apply(raftfsm.Command{Type: raftfsm.CmdFire, Fire: &raftfsm.Fire{ID: "t", Epoch: task.Epoch, Attempt: 1, Node: "n1", AtMs: due, LeaseMs: lease}})
	}
	// Run 1, attempt 1 runs here when the node restarts: an orphan.
	fire()
	run1, err := f.Task("t")
	if err != nil {
		t.Fatal(err)
	}
	orphans := []Orphan{{ID: "t", Epoch: run1.Epoch, Run: run1.Run, Attempt: 1}}
	// The restart's report ends it (DEAD: one attempt), the task is re-run,
	// and run 2's attempt 1 is given to this node again.
	apply(raftfsm.Command{Type: raftfsm.CmdComplete, Complete: &raftfsm.Complete{ID: "t", Epoch: run1.Epoch, Attempt: 1, Outcome: raftfsm.OutcomeLost, AtMs: due}})
	apply(raftfsm.Command{Type: raftfsm.CmdRetry, Retry: &raftfsm.Retry{ID: "t", AtMs: due}})
	fire()
	run2, err := f.Task("t")
	if err != nil {
		t.Fatal(err)
	}
	if run2.State != raftfsm.StateRunning || run2.Attempts != 1 || run2.Epoch != run1.Epoch || run2.Run == run1.Run {
		t.Fatalf("setup: run 2 is %+v", run2)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d := New(Deps{Config: Config{NodeID: "n1"}, Log: zerolog.Nop(), Store: f, Context: ctx,
		Metrics: &Metrics{StaleFires: prometheus.NewCounter(prometheus.CounterOpts{Name: "s"})},
		Orphans: orphans})
	defer d.Stop()

	d.OnEvent(&raftfsm.Event{Restored: true}) // a snapshot with run 2's attempt running here
	d.mu.Lock()
	_, runs := d.running["t"]
	d.mu.Unlock()
	if !runs {
		t.Fatal("run 2's attempt 1, from the snapshot, was not started: skipped as the orphan of run 1")
	}
}

// An attempt started from an installed snapshot that held its Fire (no
// Fire event will come for it) leaves its key in resumed, to skip that
// Fire's event should it still come. Keyed by id, epoch and attempt only,
// the key outlived the attempt and matched the Fire of the same attempt
// number of the task's next run (a recurring task's, or a re-run's) given
// to this node: that attempt was skipped as already started, and nobody
// delivered it until its lease ended (then a timed-out attempt).
func TestDeliveryStartsTheNextRunAfterAnAttemptResumedFromASnapshot(t *testing.T) {
	f := testFSM(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d := New(Deps{Config: Config{NodeID: "n1"}, Log: zerolog.Nop(), Store: f, Context: ctx,
		Metrics: &Metrics{StaleFires: prometheus.NewCounter(prometheus.CounterOpts{Name: "s"})}})
	defer d.Stop()
	now := time.Now()
	due, lease := now.Add(time.Hour).UnixMilli(), now.Add(2*time.Hour).UnixMilli()
	var index uint64
	apply := func(cmds ...raftfsm.Command) {
		t.Helper()
		index++
		applyEntry(t, f, index, cmds...)
	}
	apply(raftfsm.Command{Type: raftfsm.CmdNode, Node: &raftfsm.Node{ID: "n1",
		Executors: []raftfsm.Executor{{Name: "x", Handlers: []string{"*"}, URL: "unix:///nonexistent.sock"}}}})
	spec := raftfsm.Spec{Handler: "h", Priority: 2, TimeoutNs: int64(time.Second), MaxAttempts: 1}
	apply(raftfsm.Command{Type: raftfsm.CmdSubmit, Submit: &raftfsm.Submit{ID: "t", Spec: spec, DueMs: due, AtMs: now.UnixMilli()}})
	task, err := f.Task("t")
	if err != nil {
		t.Fatal(err)
	}
	epoch := task.Epoch
	fire := raftfsm.Command{Type: raftfsm.CmdFire, Fire: &raftfsm.Fire{ID: "t", Epoch: epoch, Attempt: 1, Node: "n1", AtMs: due, LeaseMs: lease}}
	event := func(typ raftfsm.CommandType, prev raftfsm.State, prevNode string) {
		t.Helper()
		cur, err := f.Task("t")
		if err != nil {
			t.Fatal(err)
		}
		d.OnEvent(&raftfsm.Event{Type: typ, Task: cur, Prev: prev, PrevNode: prevNode, Index: index})
	}

	// Run 1's Fire is inside the snapshot this node installs: started from it.
	apply(fire)
	d.OnEvent(&raftfsm.Event{Restored: true})
	d.mu.Lock()
	run1 := d.running["t"]
	d.mu.Unlock()
	if run1 == nil {
		t.Fatal("run 1's attempt was not started from the snapshot")
	}
	// It ends (DEAD: one attempt), the task is re-run, and run 2's attempt
	// 1 is given to this node: its Fire comes as an event.
	apply(raftfsm.Command{Type: raftfsm.CmdComplete, Complete: &raftfsm.Complete{ID: "t", Epoch: epoch, Attempt: 1, Outcome: raftfsm.OutcomeRetryable, Error: "x", AtMs: due}})
	event(raftfsm.CmdComplete, raftfsm.StateRunning, "n1")
	apply(raftfsm.Command{Type: raftfsm.CmdRetry, Retry: &raftfsm.Retry{ID: "t", AtMs: due}})
	event(raftfsm.CmdRetry, raftfsm.StateDead, "")
	apply(fire)
	event(raftfsm.CmdFire, raftfsm.StateWaiting, "n1")
	d.mu.Lock()
	run2 := d.running["t"]
	d.mu.Unlock()
	if run2 == nil || run2 == run1 {
		t.Fatal("run 2's attempt 1 was not started: its Fire was taken for run 1's, resumed from the snapshot")
	}
}
