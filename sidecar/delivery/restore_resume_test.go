package delivery

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/axsched/ax/raftfsm"
)

// restoreEnv is an FSM in which node n1 has an executor for every
// handler (a socket that does not exist) and tasks are due in an hour,
// so that an attempt started here waits for its due time and stays
// running; the tests hand its events to a Delivery by hand.
type restoreEnv struct {
	t          *testing.T
	f          *raftfsm.FSM
	index      uint64
	now        time.Time
	due, lease int64 // ms: the tasks' due time, and a lease that has not ended
}

func newRestoreEnv(t *testing.T) *restoreEnv {
	t.Helper()
	now := time.Now()
	e := &restoreEnv{t: t, f: testFSM(t), now: now, due: now.Add(time.Hour).UnixMilli(), lease: now.Add(2 * time.Hour).UnixMilli()}
	e.apply(raftfsm.Command{Type: raftfsm.CmdNode, Node: &raftfsm.Node{ID: "n1",
		Executors: []raftfsm.Executor{{Name: "x", Handlers: []string{"*"}, URL: "unix:///nonexistent.sock"}}}})
	return e
}

// apply applies cmds as the next entry.
func (e *restoreEnv) apply(cmds ...raftfsm.Command) {
	e.t.Helper()
	e.index++
	applyEntry(e.t, e.f, e.index, cmds...)
}

// submit stores tasks ids of handler h, due at e.due, with maxAttempts.
func (e *restoreEnv) submit(maxAttempts int, ids ...string) raftfsm.Spec {
	e.t.Helper()
	spec := raftfsm.Spec{Handler: "h", Priority: 2, TimeoutNs: int64(time.Second), MaxAttempts: maxAttempts}
	for _, id := range ids {
		e.apply(raftfsm.Command{Type: raftfsm.CmdSubmit, Submit: &raftfsm.Submit{ID: id, Spec: spec, DueMs: e.due, AtMs: e.now.UnixMilli()}})
	}
	return spec
}

// task reads task id.
func (e *restoreEnv) task(id string) *raftfsm.Task {
	e.t.Helper()
	task, err := e.f.Task(id)
	if err != nil {
		e.t.Fatal(err)
	}
	return task
}

// fire is the Fire of attempt 1 of task id on node, with lease leaseMs.
func (e *restoreEnv) fire(id, node string, leaseMs int64) raftfsm.Command {
	e.t.Helper()
	return raftfsm.Command{Type: raftfsm.CmdFire, Fire: &raftfsm.Fire{ID: id, Epoch: e.task(id).Epoch, Attempt: 1, Node: node, AtMs: e.due, LeaseMs: leaseMs}}
}

// delivery returns node n1's Delivery over e's FSM, knowing orphans,
// stopped at the test's end.
func (e *restoreEnv) delivery(orphans []Orphan) *Delivery {
	ctx, cancel := context.WithCancel(context.Background())
	d := New(Deps{Config: Config{NodeID: "n1"}, Log: zerolog.Nop(), Store: e.f, Context: ctx,
		Metrics: &Metrics{StaleFires: prometheus.NewCounter(prometheus.CounterOpts{Name: "s"})}, Orphans: orphans})
	e.t.Cleanup(func() { d.Stop(); cancel() })
	return d
}

// running returns the attempt d runs for task id (nil: none).
func running(d *Delivery, id string) *attemptRun {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.running[id]
}

// After a snapshot install, the node starts the attempts the snapshot says
// run here (their Fire events were folded into it), not those of other
// nodes or with an ended lease; it aborts attempts the snapshot no longer
// has running here; and a Fire event still to come for an attempt it
// started does not start it twice.
func TestDeliveryResumesAttemptsOfAnInstalledSnapshot(t *testing.T) {
	e := newRestoreEnv(t)
	d := e.delivery(nil)
	due, lease, ended := e.due, e.lease, e.now.Add(-time.Second).UnixMilli()
	spec := e.submit(3, "mine", "other", "ended", "cancelled")
	e.apply(e.fire("mine", "n1", lease), e.fire("other", "n2", lease), e.fire("ended", "n1", ended))
	// "cancelled" ran here before the snapshot, which cancelled it.
	d.start(&raftfsm.Task{ID: "cancelled", Epoch: 99, Attempts: 1, State: raftfsm.StateRunning, Node: "n1", DueMs: due, LeaseMs: lease, Spec: spec}, 0)

	d.OnEvent(&raftfsm.Event{Restored: true})
	d.mu.Lock()
	var got []string
	for id := range d.running {
		got = append(got, id)
	}
	d.mu.Unlock()
	first := running(d, "mine")
	if len(got) != 1 || first == nil {
		t.Fatalf("running after the restore: %v, want only mine", got)
	}

	// The Fire of "mine" arrives as an event after all: not started again.
	task := e.task("mine")
	d.OnEvent(&raftfsm.Event{Type: raftfsm.CmdFire, Task: task, Prev: raftfsm.StateWaiting})
	if running(d, "mine") != first {
		t.Fatal("the Fire event of an attempt started from the snapshot started it a second time")
	}
	// A later attempt of it is started as usual.
	task.Attempts = 2
	d.OnEvent(&raftfsm.Event{Type: raftfsm.CmdFire, Task: task, Prev: raftfsm.StateRunning, PrevNode: "n1"})
	next := running(d, "mine")
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
	e := newRestoreEnv(t)
	e.submit(3, "orphan", "new")
	e.apply(e.fire("orphan", "n1", e.lease))
	e.apply(e.fire("new", "n1", e.lease))
	orphan := e.task("orphan")
	d := e.delivery([]Orphan{{ID: "orphan", Epoch: orphan.Epoch, Run: orphan.Run, Attempt: 1}})

	d.OnEvent(&raftfsm.Event{Restored: true})
	orphanRuns, newRuns := running(d, "orphan") != nil, running(d, "new") != nil
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
	e := newRestoreEnv(t)
	e.submit(1, "t")
	fire := e.fire("t", "n1", e.lease)
	// Run 1, attempt 1 runs here when the node restarts: an orphan.
	e.apply(fire)
	run1 := e.task("t")
	orphans := []Orphan{{ID: "t", Epoch: run1.Epoch, Run: run1.Run, Attempt: 1}}
	// The restart's report ends it (DEAD: one attempt), the task is re-run,
	// and run 2's attempt 1 is given to this node again.
	e.apply(raftfsm.Command{Type: raftfsm.CmdComplete, Complete: &raftfsm.Complete{ID: "t", Epoch: run1.Epoch, Attempt: 1, Outcome: raftfsm.OutcomeLost, AtMs: e.due}})
	e.apply(raftfsm.Command{Type: raftfsm.CmdRetry, Retry: &raftfsm.Retry{ID: "t", AtMs: e.due}})
	e.apply(fire)
	run2 := e.task("t")
	if run2.State != raftfsm.StateRunning || run2.Attempts != 1 || run2.Epoch != run1.Epoch || run2.Run == run1.Run {
		t.Fatalf("setup: run 2 is %+v", run2)
	}
	d := e.delivery(orphans)

	d.OnEvent(&raftfsm.Event{Restored: true}) // a snapshot with run 2's attempt running here
	if running(d, "t") == nil {
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
	e := newRestoreEnv(t)
	d := e.delivery(nil)
	e.submit(1, "t")
	epoch, due := e.task("t").Epoch, e.due
	fire := e.fire("t", "n1", e.lease)
	event := func(typ raftfsm.CommandType, prev raftfsm.State, prevNode string) {
		t.Helper()
		d.OnEvent(&raftfsm.Event{Type: typ, Task: e.task("t"), Prev: prev, PrevNode: prevNode, Index: e.index})
	}

	// Run 1's Fire is inside the snapshot this node installs: started from it.
	e.apply(fire)
	d.OnEvent(&raftfsm.Event{Restored: true})
	run1 := running(d, "t")
	if run1 == nil {
		t.Fatal("run 1's attempt was not started from the snapshot")
	}
	// It ends (DEAD: one attempt), the task is re-run, and run 2's attempt
	// 1 is given to this node: its Fire comes as an event.
	e.apply(raftfsm.Command{Type: raftfsm.CmdComplete, Complete: &raftfsm.Complete{ID: "t", Epoch: epoch, Attempt: 1, Outcome: raftfsm.OutcomeRetryable, Error: "x", AtMs: due}})
	event(raftfsm.CmdComplete, raftfsm.StateRunning, "n1")
	e.apply(raftfsm.Command{Type: raftfsm.CmdRetry, Retry: &raftfsm.Retry{ID: "t", AtMs: due}})
	event(raftfsm.CmdRetry, raftfsm.StateDead, "")
	e.apply(fire)
	event(raftfsm.CmdFire, raftfsm.StateWaiting, "n1")
	run2 := running(d, "t")
	if run2 == nil || run2 == run1 {
		t.Fatal("run 2's attempt 1 was not started: its Fire was taken for run 1's, resumed from the snapshot")
	}
}
