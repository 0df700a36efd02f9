package scheduler

import (
	"testing"

	"github.com/axsched/ax/raftfsm"
)

// newPausedParkEnv is a park env whose scheduler keeps a pause set and
// sees the pause events before the others, as the node calls them.
func newPausedParkEnv(t *testing.T) (*parkEnv, *Pauses) {
	e := newParkEnv(t)
	p := &Pauses{}
	if err := p.Load(e.fsm); err != nil {
		t.Fatal(err)
	}
	e.l.setPauses(p)
	e.fsm.SetObserver(observerFunc(func(_ uint64, evs []raftfsm.Event) {
		for i := range evs {
			e.l.OnPauseEvent(&evs[i])
			e.l.OnEvent(&evs[i])
		}
	}))
	return e, p
}

func (e *parkEnv) pause(handler, id string, paused bool) {
	e.t.Helper()
	r := e.apply(raftfsm.Command{Type: raftfsm.CmdPause, Pause: &raftfsm.Pause{Handler: handler, ID: id, Paused: paused, AtMs: e.clock.Now().UnixMilli()}})
	if r.Code != raftfsm.CodeOK {
		e.t.Fatalf("pause %q %q: %+v", handler, id, r)
	}
}

// A handler's pause event holds its due runs (reason paused), a resume
// event starts them; a task's pause holds that task only.
func TestPauseEventsHoldAndResumeRuns(t *testing.T) {
	e, p := newPausedParkEnv(t)
	e.executor("a", 5)
	e.pause("h", "", true)
	if !p.Paused("h") {
		t.Fatal("the pause event did not reach the pause set")
	}
	e.due(2, "p1", "p2")
	e.wantParked(map[string]int{ReasonPaused: 2})
	if len(e.fired) != 0 {
		t.Fatalf("fired %v while the handler is paused", e.fired)
	}
	e.pause("h", "", false)
	if p.Paused("h") {
		t.Fatal("the resume event did not reach the pause set")
	}
	e.dispatch()
	if len(e.fired) != 2 || e.fired[0] != "p1" || e.fired[1] != "p2" {
		t.Fatalf("fired %v after the resume, want [p1 p2]", e.fired)
	}

	now := e.clock.Now().UnixMilli()
	e.apply(raftfsm.Command{Type: raftfsm.CmdSubmit, Submit: &raftfsm.Submit{ID: "t1", DueMs: now, AtMs: now,
		Spec: raftfsm.Spec{Handler: "h", Priority: 2, TimeoutNs: 1e9, MaxAttempts: 1}}})
	e.pause("", "t1", true)
	e.l.FireDue(e.ctx, "t1")
	e.wantParked(map[string]int{ReasonPaused: 1})
	if _, ok := e.l.DueTimer("t1"); ok {
		t.Fatal("a paused run is polled by its due timer")
	}
	e.pause("", "t1", false)
	if at, ok := e.l.DueTimer("t1"); !ok || at.After(e.clock.Now()) {
		t.Fatalf("after the task's resume its due timer is at %v (%v), want now", at, ok)
	}
	e.l.FireDue(e.ctx, "t1")
	e.l.Dispatch(e.ctx)
	if got := e.task("t1"); got.State != raftfsm.StateRunning {
		t.Fatalf("resumed task: %s, want RUNNING", got.State)
	}
	if _, ok := e.l.LeaseTimer("t1"); !ok {
		t.Fatal("the running attempt has no lease timer")
	}
}

// A snapshot restore reloads the pause set from the store and wakes the
// runs of a handler the snapshot resumed.
func TestPauseSetReloadedOnRestore(t *testing.T) {
	e, p := newPausedParkEnv(t)
	e.executor("a", 5)
	e.pause("h", "", true)
	e.due(2, "r1")
	e.wantParked(map[string]int{ReasonPaused: 1})
	e.fsm.SetObserver(nil) // the resume comes with the snapshot
	e.pause("h", "", false)
	if !p.Paused("h") {
		t.Fatal("the pause set saw the resume without an event")
	}
	e.l.OnPauseEvent(&raftfsm.Event{Restored: true})
	if p.Paused("h") {
		t.Fatal("h still paused after the restore")
	}
	e.wantParked(map[string]int{})
	e.dispatch()
	if len(e.fired) != 1 || e.fired[0] != "r1" {
		t.Fatalf("fired %v after the restore, want [r1]", e.fired)
	}
}
