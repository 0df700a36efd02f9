package scheduler

import (
	"math"
	"testing"
	"time"

	"github.com/axsched/ax/engine"
	"github.com/axsched/ax/raftfsm"
	"github.com/rs/zerolog"
)

// windowEnv is a Scheduler over a real FSM in a temp dir, with a fake
// clock and timers that no Run drives: the test reads what is armed.
type windowEnv struct {
	t      *testing.T
	clock  *engine.FakeClock
	fsm    *raftfsm.FSM
	l      *Scheduler
	timers *engine.Timers
	index  uint64
}

func newWindowEnv(t *testing.T, window time.Duration) *windowEnv {
	t.Helper()
	f := testFSM(t)
	clock := engine.NewFakeClock(time.Now().Truncate(time.Millisecond))
	l := New(testConfig(Config{LoadWindow: window, FireLead: time.Millisecond}), Deps{Store: f, Clock: clock, Log: zerolog.Nop()})
	timers := engine.NewTimers(clock, engine.TimersOptions{})
	l.timers = timers
	l.horizonMs.Store(math.MinInt64)
	return &windowEnv{t: t, clock: clock, fsm: f, l: l, timers: timers}
}

// submit stores a WAITING task due at now + in.
func (e *windowEnv) submit(id string, in time.Duration) {
	e.t.Helper()
	e.apply(raftfsm.Command{Type: raftfsm.CmdSubmit, Submit: &raftfsm.Submit{
		ID: id, DueMs: e.clock.Now().Add(in).UnixMilli(), AtMs: e.clock.Now().UnixMilli(),
		Spec: raftfsm.Spec{Handler: "h", Priority: 2, TimeoutNs: int64(time.Second), MaxAttempts: 1},
	}})
}

func (e *windowEnv) armed(id string) bool {
	_, ok := e.timers.Due(dueKeyPrefix + id)
	return ok
}

func (e *windowEnv) wantArmed(want map[string]bool) {
	e.t.Helper()
	for id, w := range want {
		if got := e.armed(id); got != w {
			e.t.Errorf("task %s armed = %v, want %v", id, got, w)
		}
	}
}

// The leader arms only the tasks inside its load window (overdue ones
// included), loads the next stretch half a window before the horizon,
// and keeps events and the window consistent: a task moved beyond the
// horizon loses its timer, one moved inside gets one.
func TestLoadWindowArmsOnlyTheWindow(t *testing.T) {
	e := newWindowEnv(t, 10*time.Minute)
	e.submit("overdue", -time.Hour)
	e.submit("a", time.Minute)
	e.submit("b", 9*time.Minute)
	e.submit("c", 11*time.Minute)
	e.submit("d", 30*time.Minute)

	n, err := e.l.loadWindow(e.timers)
	if err != nil || n != 3 {
		t.Fatalf("first load armed %d (err %v), want overdue, a, b", n, err)
	}
	e.wantArmed(map[string]bool{"overdue": true, "a": true, "b": true, "c": false, "d": false})
	if got := e.l.Armed(); got != 3 {
		t.Fatalf("armed() = %d, want 3 (the window's own timer is not counted)", got)
	}
	if at, ok := e.timers.Due(windowKey); !ok || !at.Equal(e.clock.Now().Add(5*time.Minute)) {
		t.Fatalf("next load at %v (armed %v), want now + 5m", at, ok)
	}

	// Events: a new task inside the window is armed, one beyond it is
	// not; a task moved beyond the horizon is disarmed.
	event := func(id string, in time.Duration) {
		e.l.OnEvent(&raftfsm.Event{Type: raftfsm.CmdSubmit, Task: &raftfsm.Task{
			ID: id, State: raftfsm.StateWaiting, DueMs: e.clock.Now().Add(in).UnixMilli(), Spec: raftfsm.Spec{Handler: "h"},
		}})
	}
	event("near", 2*time.Minute)
	event("far", 20*time.Minute)
	event("a", 15*time.Minute)
	e.wantArmed(map[string]bool{"near": true, "far": false, "a": false})

	// Half a window later the next stretch, (now+10m, now+15m], loads:
	// c only (d is still beyond it); what was armed stays armed.
	e.clock.Advance(5 * time.Minute)
	if n, err := e.l.loadWindow(e.timers); err != nil || n != 1 {
		t.Fatalf("second load armed %d (err %v), want c", n, err)
	}
	e.wantArmed(map[string]bool{"overdue": true, "b": true, "c": true, "d": false, "near": true})
	e.clock.Advance(15 * time.Minute)
	if n, err := e.l.loadWindow(e.timers); err != nil || n != 1 {
		t.Fatalf("third load armed %d (err %v), want d", n, err)
	}
	e.wantArmed(map[string]bool{"d": true})
}

// A clock step forward of more than a window loads everything up to the
// new horizon at once: nothing due is left in the store unarmed.
func TestLoadWindowAfterLongPause(t *testing.T) {
	e := newWindowEnv(t, time.Minute)
	for i, in := range []time.Duration{30 * time.Second, 5 * time.Minute, 50 * time.Minute, 3 * time.Hour} {
		e.submit(string(rune('a'+i)), in)
	}
	if n, _ := e.l.loadWindow(e.timers); n != 1 {
		t.Fatalf("first load armed %d, want 1", n)
	}
	e.clock.Advance(time.Hour)
	if n, _ := e.l.loadWindow(e.timers); n != 2 {
		t.Fatalf("after an hour armed %d, want b and c", n)
	}
	e.wantArmed(map[string]bool{"a": true, "b": true, "c": true, "d": false})
}

// After the leader stops, a late window load arms nothing.
func TestLoadWindowAfterStop(t *testing.T) {
	e := newWindowEnv(t, time.Minute)
	e.submit("a", time.Second)
	old := e.timers
	e.l.mu.Lock()
	e.l.timers = nil
	e.l.mu.Unlock()
	if n, err := e.l.loadWindow(old); n != 0 || err != nil {
		t.Fatalf("load after stop armed %d (err %v)", n, err)
	}
	if old.Len() != 0 {
		t.Fatalf("%d timers armed after stop", old.Len())
	}
}
