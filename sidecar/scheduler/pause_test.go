package scheduler

import (
	"context"
	"sync"
	"testing"
	"time"

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

// lagEnv is a park env whose FSM events reach the scheduler only when
// the test hands them over (handle), as the node's event goroutine does
// some time after the FSM applied them and the client had its answer.
type lagEnv struct {
	*parkEnv
	p      *Pauses
	mu     sync.Mutex
	queued []raftfsm.Event
}

func newLagEnv(t *testing.T) *lagEnv {
	e := &lagEnv{parkEnv: newParkEnv(t), p: &Pauses{}}
	if err := e.p.Load(e.fsm); err != nil {
		t.Fatal(err)
	}
	e.l.setPauses(e.p)
	e.fsm.SetObserver(observerFunc(func(_ uint64, evs []raftfsm.Event) {
		e.p.Queued(evs)
		e.mu.Lock()
		e.queued = append(e.queued, evs...)
		e.mu.Unlock()
	}))
	return e
}

// handle hands the queued events to the scheduler, in order.
func (e *lagEnv) handle() {
	e.mu.Lock()
	evs := e.queued
	e.queued = nil
	e.mu.Unlock()
	for i := range evs {
		e.l.OnPauseEvent(&evs[i])
		e.l.OnEvent(&evs[i])
	}
	e.p.Handled(evs)
}

// waiting reports whether a drain waits in Pauses.await.
func (p *Pauses) waiting() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.progress != nil
}

// runLagging runs fn while events are still queued: once fn waits for
// them the queued events are handed over. It reports whether fn waited
// (false: it returned without them).
func (e *lagEnv) runLagging(fn func()) bool {
	e.t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); fn() }()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case <-done:
			return false
		case <-deadline:
			e.t.Fatal("neither returned nor waited for the queued events in 10 s")
		default:
		}
		if e.p.waiting() {
			e.handle()
			<-done
			return true
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// A pause answered before a run's drain holds that run even when its
// event has not reached the scheduler yet (the node hands events over on
// a goroutine of their own): the drain waits for it. Without that wait
// the run was fired from the scheduler's older copy of the task, or from
// its pause set that did not hold the handler yet.
func TestDrainWaitsForPausesAnswered(t *testing.T) {
	t.Run("task paused before its timer fires", func(t *testing.T) {
		e := newLagEnv(t)
		e.executor("a", 5)
		now := e.clock.Now()
		e.apply(raftfsm.Command{Type: raftfsm.CmdSubmit, Submit: &raftfsm.Submit{ID: "t1", DueMs: now.Add(time.Second).UnixMilli(), AtMs: now.UnixMilli(),
			Spec: raftfsm.Spec{Handler: "h", Priority: 2, TimeoutNs: 1e9, MaxAttempts: 1}}})
		e.handle() // the scheduler keeps its copy: not paused
		e.pause("", "t1", true)
		e.clock.Advance(time.Minute)
		if !e.runLagging(func() { e.l.FireDue(e.ctx, "t1") }) {
			t.Errorf("the fire did not wait for the task's pause event")
		}
		if len(e.fired) != 0 {
			t.Fatalf("fired %v after the task's pause was answered", e.fired)
		}
		if got := e.task("t1"); got.State != raftfsm.StateWaiting || !got.Paused {
			t.Fatalf("t1: %s paused %v, want WAITING and paused", got.State, got.Paused)
		}
		// Its event re-armed the timer: fired again, the run is held.
		e.l.FireDue(e.ctx, "t1")
		e.wantParked(map[string]int{ReasonPaused: 1})
		if len(e.fired) != 0 {
			t.Fatalf("fired %v while the task is paused", e.fired)
		}
	})
	t.Run("handler paused while its runs wait for room", func(t *testing.T) {
		e := newLagEnv(t)
		e.executor("a", 5)
		e.l.cfg.HandlerLimits = map[string]int{"h": 1}
		now := e.clock.Now().UnixMilli()
		for _, id := range []string{"r1", "r2"} {
			e.apply(raftfsm.Command{Type: raftfsm.CmdSubmit, Submit: &raftfsm.Submit{ID: id, DueMs: now, AtMs: now,
				Spec: raftfsm.Spec{Handler: "h", Priority: 2, TimeoutNs: 1e9, MaxAttempts: 1}}})
		}
		e.handle()
		e.l.FireDue(e.ctx, "r1", "r2")
		e.handle() // r1's Fire
		if len(e.fired) != 1 || e.fired[0] != "r1" {
			t.Fatalf("fired %v, want [r1] (handler limit 1)", e.fired)
		}
		e.wantParked(map[string]int{ReasonHandlerLimit: 1})
		e.complete("r1", raftfsm.OutcomeSuccess)
		e.handle() // r1 ended: room for r2, its handler woken
		e.pause("h", "", true)
		if !e.runLagging(func() { e.l.Dispatch(e.ctx) }) {
			t.Errorf("the drain did not wait for the handler's pause event")
		}
		if len(e.fired) != 1 {
			t.Fatalf("fired %v after the handler's pause was answered", e.fired)
		}
		e.wantParked(map[string]int{ReasonPaused: 1})
	})
}

// A drain waits for queued pause events only until its context ends or
// the limit passes; with none queued it does not wait.
func TestPausesAwaitBounds(t *testing.T) {
	var p Pauses
	pause := []raftfsm.Event{{Type: raftfsm.CmdPause, Pause: &raftfsm.Pause{Handler: "h", Paused: true}}}
	resume := []raftfsm.Event{{Type: raftfsm.CmdPause, Pause: &raftfsm.Pause{Handler: "h"}}}
	p.Queued(resume)
	if !p.await(context.Background(), time.Nanosecond) {
		t.Fatal("a queued resume made the drain wait")
	}
	p.Queued(pause)
	if p.await(context.Background(), 10*time.Millisecond) {
		t.Fatal("await returned true with a pause event not handled")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if p.await(ctx, time.Minute) {
		t.Fatal("await returned true after its context ended")
	}
	p.Handled(pause)
	if !p.await(context.Background(), time.Nanosecond) {
		t.Fatal("await still waits after the pause event was handled")
	}
}
