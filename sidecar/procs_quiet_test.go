package sidecar

import (
	"testing"
	"time"

	"github.com/axsched/ax/raftfsm"
)

// NothingDueWithin (the adaptive GOMAXPROCS's Quiet) is false while a
// task is due within the window (or came due within dueLookBack) or a run
// is in flight, true otherwise.
func TestNothingDueWithin(t *testing.T) {
	e := newPauseEnv(t)
	const window = 2 * time.Second
	if !e.n.NothingDueWithin(window) {
		t.Fatal("a node without tasks is not quiet")
	}
	far := oneOff()
	far.DelayNs = int64(time.Hour)
	e.submit("far", "h", far)
	if !e.n.NothingDueWithin(window) {
		t.Fatal("a task due in an hour keeps the node from being quiet")
	}
	soon := oneOff()
	soon.DelayNs = int64(time.Second)
	e.submit("soon", "h", soon)
	if e.n.NothingDueWithin(window) {
		t.Fatal("quiet with a task due in 1 s")
	}
	now := oneOff() // due at once
	e.submit("now", "h", now)
	if e.n.NothingDueWithin(window) {
		t.Fatal("quiet with a task due now")
	}
	// Both still WAITING dueLookBack after their due time: they cannot
	// fire (as for a paused handler) and no longer count. The seek starts
	// there, past the deleted keys of the tasks fired before.
	e.clock.Advance(time.Second + dueLookBack + time.Millisecond)
	if !e.n.NothingDueWithin(window) {
		t.Fatalf("not quiet with tasks overdue by more than %v", dueLookBack)
	}
	e.fireDue("soon")
	if st := e.task("soon").State; st != raftfsm.StateRunning {
		t.Fatalf("soon is %v after its fire, want RUNNING", st)
	}
	if e.n.NothingDueWithin(window) {
		t.Fatal("quiet with a run in flight")
	}
}
