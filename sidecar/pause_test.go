package sidecar

import (
	"context"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/rs/zerolog"

	"github.com/axsched/ax/engine"
	"github.com/axsched/ax/ipc"
	"github.com/axsched/ax/raftfsm"
	"github.com/axsched/ax/sidecar/nodemetrics"
	"github.com/axsched/ax/sidecar/scheduler"
)

// pauseEnv is a leader over a one-node in-memory Raft group and a real
// FSM, with a fake clock: its timers are not run; the test calls fire
// itself and reads what is armed. Every write goes through Raft (the
// proposer), as on a node.
type pauseEnv struct {
	t     *testing.T
	ctx   context.Context
	clock *engine.FakeClock
	n     *Node
	l     *scheduler.Scheduler
}

// pauseObserver hands the FSM's events to the node as dispatchEvents does.
type pauseObserver struct{ n *Node }

func (o pauseObserver) Applied(_ uint64, events []raftfsm.Event) {
	for i := range events {
		o.n.leader.OnPauseEvent(&events[i])
		o.n.leader.OnEvent(&events[i])
	}
}

func newPauseEnv(t *testing.T) *pauseEnv {
	t.Helper()
	f := testFSM(t)
	clock := engine.NewFakeClock(time.Now().Truncate(time.Millisecond))
	n, ctx := newLeaderNode(t, f, clock)
	if err := n.pauses.Load(f); err != nil {
		t.Fatal(err)
	}
	f.SetObserver(pauseObserver{n})

	n.raft = startInmemRaft(t, f)
	n.proposer = newGroupCommit(n)
	n.forward = newForwarder(n)
	n.backend = newBackend(n)
	go n.proposer.Run(ctx)

	l := n.leader
	l.LeadManually(engine.NewTimers(clock, engine.TimersOptions{})) // every WAITING task is inside the window
	e := &pauseEnv{t: t, ctx: ctx, clock: clock, n: n, l: l}
	// Node a runs handlers h and other.
	e.propose(raftfsm.Command{Type: raftfsm.CmdNode, Node: &raftfsm.Node{ID: "a",
		Executors: []raftfsm.Executor{{Name: "x", Handlers: []string{"h", "other"}, URL: "unix:///nonexistent.sock"}}}})
	return e
}

func (e *pauseEnv) propose(c raftfsm.Command) raftfsm.Result {
	e.t.Helper()
	res, err := e.n.proposer.Propose(e.ctx, []raftfsm.Command{c})
	if err != nil {
		e.t.Fatalf("propose %v: %v", c.Type, err)
	}
	return res[0]
}

// submit stores a task of handler h due now.
func (e *pauseEnv) submit(id, h string, s raftfsm.Spec) {
	e.t.Helper()
	s.Handler = h
	if r := e.propose(raftfsm.Command{Type: raftfsm.CmdSubmit, Submit: &raftfsm.Submit{ID: id, Spec: s}}); r.Code != raftfsm.CodeOK {
		e.t.Fatalf("submit %s: %+v", id, r)
	}
}

func (e *pauseEnv) pause(handler, id string, paused bool) raftfsm.Result {
	e.t.Helper()
	return e.propose(raftfsm.Command{Type: raftfsm.CmdPause, Pause: &raftfsm.Pause{Handler: handler, ID: id, Paused: paused}})
}

func (e *pauseEnv) task(id string) *raftfsm.Task {
	e.t.Helper()
	t, err := e.n.fsm.Task(id)
	if err != nil {
		e.t.Fatal(err)
	}
	return t
}

// dueAt returns when task id's due timer is armed, and whether it is.
func (e *pauseEnv) dueAt(id string) (time.Time, bool) {
	return e.l.DueTimer(id)
}

// fireDue does what the timers do when task id's due timer expires: it
// takes the timer and calls fire.
func (e *pauseEnv) fireDue(id string) {
	e.t.Helper()
	e.l.FireDue(e.ctx, id)
}

func oneOff() raftfsm.Spec {
	return raftfsm.Spec{Priority: 2, TimeoutNs: int64(time.Minute), MaxAttempts: 3}
}

func (e *pauseEnv) wantParked(handler string, want int) {
	e.t.Helper()
	if got := e.l.ParkedByReason()[handler][ReasonPaused]; got != want {
		e.t.Fatalf("parked paused runs of %s: %d, want %d (%v)", handler, got, want, e.l.ParkedByReason())
	}
}

// A paused handler's due run is not fired, no timer polls it, it counts in
// the backlog; a resume re-arms it at once and it fires. Another
// handler's run is not held back.
func TestPausedHandlerRunWaitsAndFiresOnResume(t *testing.T) {
	e := newPauseEnv(t)
	e.submit("a", "h", oneOff())
	e.submit("b", "other", oneOff())
	if r := e.pause("h", "", true); r.Code != raftfsm.CodeOK {
		t.Fatalf("pause: %+v", r)
	}
	e.fireDue("a")
	e.fireDue("b")
	if st := e.task("a").State; st != raftfsm.StateWaiting {
		t.Fatalf("paused handler's run: %s, want WAITING", st)
	}
	if st := e.task("b").State; st != raftfsm.StateRunning {
		t.Fatalf("other handler's run: %s, want RUNNING", st)
	}
	if at, ok := e.dueAt("a"); ok {
		t.Fatalf("paused run re-armed for %v: it must wait for the resume, not poll", at)
	}
	e.wantParked("h", 1)
	if d := e.l.Depth("h"); d != 1 {
		t.Fatalf("backlog of h: %d, want 1", d)
	}
	// Time passes: nothing changes while paused.
	e.clock.Advance(time.Hour)
	if _, ok := e.dueAt("a"); ok || e.task("a").State != raftfsm.StateWaiting {
		t.Fatal("paused run woke up without a resume")
	}

	if r := e.pause("h", "", false); r.Code != raftfsm.CodeOK {
		t.Fatalf("resume: %+v", r)
	}
	// The resume put the run back in its handler's queue; the next
	// dispatch (the leader's loop, woken by the resume) fires it.
	e.wantParked("h", 0)
	e.l.Dispatch(e.ctx)
	if got := e.task("a"); got.State != raftfsm.StateRunning || got.Attempts != 1 {
		t.Fatalf("resumed run: %+v, want RUNNING attempt 1", got)
	}
}

// A paused task waits while the rest of its handler runs; its resume
// fires it. Pausing it while it runs does not end the attempt.
func TestPausedTaskWaitsAndFiresOnResume(t *testing.T) {
	e := newPauseEnv(t)
	e.submit("a", "h", oneOff())
	e.submit("b", "h", oneOff())
	if r := e.pause("", "a", true); r.Code != raftfsm.CodeOK || !r.Task.Paused {
		t.Fatalf("pause: %+v", r)
	}
	e.fireDue("a")
	e.fireDue("b")
	if st := e.task("a").State; st != raftfsm.StateWaiting {
		t.Fatalf("paused task: %s, want WAITING", st)
	}
	if st := e.task("b").State; st != raftfsm.StateRunning {
		t.Fatalf("its handler's other task: %s, want RUNNING", st)
	}
	e.wantParked("h", 1)

	if r := e.pause("", "a", false); r.Code != raftfsm.CodeOK || r.Task.Paused {
		t.Fatalf("resume: %+v", r)
	}
	if at, ok := e.dueAt("a"); !ok || at.After(e.clock.Now()) {
		t.Fatalf("after the resume the task is armed at %v (%v), want now", at, ok)
	}
	e.fireDue("a")
	if st := e.task("a").State; st != raftfsm.StateRunning {
		t.Fatalf("resumed task: %s, want RUNNING", st)
	}

	// b runs; a pause leaves its attempt running (its lease timer stays).
	if r := e.pause("", "b", true); r.Code != raftfsm.CodeOK {
		t.Fatalf("pause of a running task: %+v", r)
	}
	if got := e.task("b"); got.State != raftfsm.StateRunning || got.Attempts != 1 || !got.Paused {
		t.Fatalf("paused running task: %+v", got)
	}
	if _, ok := e.l.LeaseTimer("b"); !ok {
		t.Fatal("the running attempt's lease timer is gone")
	}
}

// A paused run that is cancelled leaves the parked set; the handler's
// other runs are unaffected.
func TestPausedRunCancelledLeavesTheParkedSet(t *testing.T) {
	e := newPauseEnv(t)
	e.submit("a", "h", oneOff())
	e.pause("h", "", true)
	e.fireDue("a")
	e.wantParked("h", 1)
	e.propose(raftfsm.Command{Type: raftfsm.CmdCancel, Cancel: &raftfsm.Cancel{ID: "a"}})
	e.wantParked("h", 0)
}

// A recurring task (every 1 s) paused for 5 s keeps its schedule: on
// resume the run that waited fires once (the catch-up of every missed
// slot), and the next run is the next slot after it, not one per missed
// slot.
func TestPausedRecurringTaskCatchesUpOnce(t *testing.T) {
	e := newPauseEnv(t)
	s := oneOff()
	s.EveryNs = int64(time.Second)
	e.submit("r", "h", s)
	first := e.task("r")
	slot0 := first.SlotMs
	e.clock.Set(time.UnixMilli(slot0))
	e.pause("", "r", true)
	e.fireDue("r")
	if st := e.task("r").State; st != raftfsm.StateWaiting {
		t.Fatalf("paused recurring task: %s", st)
	}
	// Paused for 5.2 s: five slots go by.
	e.clock.Advance(5200 * time.Millisecond)
	e.pause("", "r", false)
	e.fireDue("r")
	run := e.task("r")
	if run.State != raftfsm.StateRunning || run.Run != 1 || run.SlotMs != slot0 {
		t.Fatalf("after the resume: %+v, want run 1 (the one that waited) RUNNING", run)
	}
	e.clock.Advance(10 * time.Millisecond)
	r := e.propose(raftfsm.Command{Type: raftfsm.CmdComplete, Complete: &raftfsm.Complete{
		ID: "r", Epoch: run.Epoch, Attempt: run.Attempts, Outcome: raftfsm.OutcomeSuccess}})
	next := r.Task
	// The next run is the next slot after the resume, on the schedule:
	// slot0 + 6 s, not slot0 + 1 s (due at once, then +2 s, ...).
	if next.State != raftfsm.StateWaiting || next.Run != 2 || next.SlotMs != slot0+6000 || next.DueMs != next.SlotMs {
		t.Fatalf("next run %+v: slot %+dms after the first, want +6000", next, next.SlotMs-slot0)
	}
	if next.DueMs <= e.clock.Now().UnixMilli() {
		t.Fatal("the next run is due at once: a second catch-up run")
	}
}

// Pause results: an unknown handler and a finished task are refused with
// their codes (the API maps them to 404 handler_not_found and 409
// task_finished); repeats are idempotent.
func TestPauseBackendCodes(t *testing.T) {
	e := newPauseEnv(t)
	e.submit("a", "h", oneOff())
	e.propose(raftfsm.Command{Type: raftfsm.CmdCancel, Cancel: &raftfsm.Cancel{ID: "a"}})
	if _, err := e.n.backend.PauseHandler(e.ctx, "h", true); err != nil {
		t.Fatalf("pause h: %v", err)
	}
	if _, err := e.n.backend.PauseHandler(e.ctx, "h", true); err != nil {
		t.Fatalf("pause h again: %v", err)
	}
	if !e.n.pauses.Paused("h") {
		t.Fatal("the cache does not have h paused")
	}
	if _, err := e.n.backend.PauseHandler(e.ctx, "typo", true); err == nil || !isCode(err, "handler_not_found") {
		t.Fatalf("pause of an unknown handler: %v", err)
	}
	if _, err := e.n.backend.PauseTask(e.ctx, "a", true); err == nil || !isCode(err, "task_finished") {
		t.Fatalf("pause of a finished task: %v", err)
	}
	if _, err := e.n.backend.PauseTask(e.ctx, "ghost", true); err == nil || !isCode(err, "not_found") {
		t.Fatalf("pause of an unknown task: %v", err)
	}
	if _, err := e.n.backend.PauseHandler(e.ctx, "h", false); err != nil || e.n.pauses.Paused("h") {
		t.Fatalf("resume h: %v (cached paused %v)", err, e.n.pauses.Paused("h"))
	}
}

func isCode(err error, code string) bool {
	_, c, _, _ := ipc.MapError(err)
	return c == code
}

// The leader's GET /v1/handlers: every handler with tasks, an executor
// named exactly, or a pause; counts by state, the backlog, the parked
// runs by reason, the circuit and the executors.
func TestHandlersView(t *testing.T) {
	e := newPauseEnv(t)
	e.submit("a", "h", oneOff())
	e.submit("b", "h", oneOff())
	e.submit("c", "other", oneOff())
	e.pause("h", "", true)
	e.fireDue("a")
	e.fireDue("b")
	e.fireDue("c")
	list, err := e.n.backend.HandlersView(true)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].Name != "h" || list[1].Name != "other" {
		t.Fatalf("handlers %+v", list)
	}
	h, o := list[0], list[1]
	if !h.Paused || h.Tasks["WAITING"] != 2 || len(h.Tasks) != 1 || h.Backlog == nil || *h.Backlog != 2 ||
		h.Parked[ReasonPaused] != 2 || h.Circuit != "closed" {
		t.Fatalf("h: %+v", h)
	}
	if o.Paused || o.Tasks["RUNNING"] != 1 || len(o.Parked) != 0 || o.Backlog == nil || *o.Backlog != 0 {
		t.Fatalf("other: %+v", o)
	}
	if len(h.Executors) != 1 || h.Executors[0].Node != "a" || h.Executors[0].Name != "x" || h.Executors[0].URL != "unix:///nonexistent.sock" {
		t.Fatalf("h's executors: %+v", h.Executors)
	}
	// A follower's own view has no leader figures.
	list, err = e.n.backend.HandlersView(false)
	if err != nil || list[0].Backlog != nil || list[0].Circuit != "" || len(list[0].Parked) != 0 || !list[0].Paused {
		t.Fatalf("view without the leader: %+v (%v)", list, err)
	}
}

// After a snapshot restore the node reads the paused handlers again, and
// the runs of a handler the snapshot has resumed are woken.
func TestPauseCacheAfterRestore(t *testing.T) {
	e := newPauseEnv(t)
	e.submit("a", "h", oneOff())
	e.pause("h", "", true)
	e.fireDue("a")
	e.wantParked("h", 1)
	// The resume comes with the snapshot, not as an event.
	e.n.fsm.SetObserver(nil)
	e.pause("h", "", false)
	e.n.fsm.SetObserver(pauseObserver{e.n})
	if !e.n.pauses.Paused("h") {
		t.Fatal("the cache saw the resume without an event")
	}
	e.n.leader.OnPauseEvent(&raftfsm.Event{Restored: true})
	if e.n.pauses.Paused("h") {
		t.Fatal("h still paused in the cache after the restore")
	}
	e.wantParked("h", 0)
	e.l.Dispatch(e.ctx)
	if got := e.task("a"); got.State != raftfsm.StateRunning {
		t.Fatalf("the resumed handler's run did not fire after the restore: %s", got.State)
	}
}

// startInmemRaft starts a one-node in-memory Raft group "a" over fsm and
// waits (at most 10 s) until it leads; it is shut down at the test's end.
func startInmemRaft(t *testing.T, fsm raft.FSM) *raft.Raft {
	t.Helper()
	rc := raft.DefaultConfig()
	rc.LocalID = "a"
	rc.HeartbeatTimeout, rc.ElectionTimeout, rc.LeaderLeaseTimeout = 50*time.Millisecond, 50*time.Millisecond, 50*time.Millisecond
	rc.CommitTimeout = time.Millisecond
	rc.LogOutput = zerolog.NewTestWriter(t)
	rc.LogLevel = "ERROR"
	store := raft.NewInmemStore()
	_, trans := raft.NewInmemTransport("a")
	r, err := raft.NewRaft(rc, fsm, store, store, raft.NewInmemSnapshotStore(), trans)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Shutdown().Error() })
	if err := r.BootstrapCluster(raft.Configuration{Servers: []raft.Server{{ID: "a", Address: trans.LocalAddr()}}}).Error(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); r.State() != raft.Leader; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no leader after 10s")
		}
	}
	return r
}

// newLeaderNode returns node "a" over fsm with the fake clock: metrics,
// preparer and scheduler made, no raft yet (startInmemRaft), and the
// node's context, cancelled at the test's end.
func newLeaderNode(t *testing.T, f *raftfsm.FSM, clock engine.Clock) (*Node, context.Context) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	n := &Node{cfg: Config{NodeID: "a", LoadWindow: time.Hour, FireLead: time.Millisecond, MaxBatchCommands: 64, LeaseGrace: 5 * time.Second},
		fsm: f, clock: clock, log: zerolog.Nop(), ctx: ctx}
	n.metrics = nodemetrics.New()
	n.prep = newPreparer(n)
	n.leader = newScheduler(n)
	return n, ctx
}
