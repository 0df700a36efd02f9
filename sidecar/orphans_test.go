package sidecar

import (
	"testing"
	"time"

	"github.com/axsched/ax/internal/fsmtest"
	"github.com/axsched/ax/raftfsm"
)

// An orphan (an attempt the store said ran here at start) whose run ended
// in the log the node replayed, and whose task's next run has attempt 1
// running on another node, is no longer current: reported lost, it would
// end that attempt (a Complete names only the attempt's number). One still
// running here in the same run is current; a purged task is not.
func TestOrphanCurrent(t *testing.T) {
	fsm := fsmtest.Open(t)
	var index uint64
	apply := func(cmds ...raftfsm.Command) {
		t.Helper()
		index++
		fsmtest.Apply(t, fsm, index, cmds...)
	}
	at := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC).UnixMilli()
	every := raftfsm.Spec{Handler: "h", EveryNs: int64(time.Second), TimeoutNs: int64(30 * time.Second), MaxAttempts: 3}
	once := raftfsm.Spec{Handler: "h", TimeoutNs: int64(30 * time.Second), MaxAttempts: 3}
	apply(raftfsm.Command{Type: raftfsm.CmdSubmit, Submit: &raftfsm.Submit{ID: "ended", Spec: every, DueMs: at, SlotMs: at, AtMs: at}},
		raftfsm.Command{Type: raftfsm.CmdSubmit, Submit: &raftfsm.Submit{ID: "again", Spec: every, DueMs: at, SlotMs: at, AtMs: at}},
		raftfsm.Command{Type: raftfsm.CmdSubmit, Submit: &raftfsm.Submit{ID: "running", Spec: once, DueMs: at, AtMs: at}},
		raftfsm.Command{Type: raftfsm.CmdSubmit, Submit: &raftfsm.Submit{ID: "purged", Spec: once, DueMs: at, AtMs: at}})
	epoch := map[string]uint64{}
	for _, id := range []string{"ended", "again", "running", "purged"} {
		tk, err := fsm.Task(id)
		if err != nil {
			t.Fatal(err)
		}
		epoch[id] = tk.Epoch
		apply(raftfsm.Command{Type: raftfsm.CmdFire, Fire: &raftfsm.Fire{ID: id, Epoch: tk.Epoch, Attempt: 1, Node: "n1", AtMs: at, LeaseMs: at + 60_000}})
	}
	// The node starts: the store says the four run here.
	n := &Node{cfg: Config{NodeID: "n1"}, fsm: fsm}
	n.orphans, n.orphanRuns = findOrphans(fsm, "n1")
	if len(n.orphans) != 4 || len(n.orphanRuns) != 4 {
		t.Fatalf("orphans %+v, runs %+v", n.orphans, n.orphanRuns)
	}
	// The replay: "ended"'s run 1 succeeded (the previous process's
	// report, committed before it died) and run 2's attempt 1 went to n2;
	// "again"'s too, its run 2's attempt 1 to this node (the same epoch,
	// attempt and node: only the run tells them apart); "purged" was
	// cancelled and purged.
	apply(raftfsm.Command{Type: raftfsm.CmdComplete, Complete: &raftfsm.Complete{ID: "ended", Epoch: epoch["ended"], Attempt: 1, Outcome: raftfsm.OutcomeSuccess, NextSlotMs: at + 1000, NextDueMs: at + 1000, AtMs: at + 500}})
	apply(raftfsm.Command{Type: raftfsm.CmdFire, Fire: &raftfsm.Fire{ID: "ended", Epoch: epoch["ended"], Attempt: 1, Node: "n2", AtMs: at + 1000, LeaseMs: at + 61_000}})
	apply(raftfsm.Command{Type: raftfsm.CmdComplete, Complete: &raftfsm.Complete{ID: "again", Epoch: epoch["again"], Attempt: 1, Outcome: raftfsm.OutcomeSuccess, NextSlotMs: at + 1000, NextDueMs: at + 1000, AtMs: at + 500}})
	apply(raftfsm.Command{Type: raftfsm.CmdFire, Fire: &raftfsm.Fire{ID: "again", Epoch: epoch["again"], Attempt: 1, Node: "n1", AtMs: at + 1000, LeaseMs: at + 61_000}})
	apply(raftfsm.Command{Type: raftfsm.CmdCancel, Cancel: &raftfsm.Cancel{ID: "purged", AtMs: at + 600}})
	if tk, err := fsm.Task("ended"); err != nil || tk.State != raftfsm.StateRunning || tk.Run != 2 || tk.Attempts != 1 || tk.Node != "n2" {
		t.Fatalf("the next run: %+v %v, want run 2's attempt 1 RUNNING on n2", tk, err)
	}
	current := n.orphanCurrent()
	for _, o := range n.orphans {
		want := o.ID == "running"
		if o.ID == "purged" {
			continue // checked below, once purged
		}
		if got := current(o); got != want {
			t.Errorf("orphan %s (epoch %d, attempt %d): current %v, want %v", o.ID, o.Epoch, o.Attempt, got, want)
		}
	}
	pt, err := fsm.Task("purged")
	if err != nil || pt.State != raftfsm.StateCancelled {
		t.Fatalf("purged before its purge: %+v %v", pt, err)
	}
	apply(raftfsm.Command{Type: raftfsm.CmdPurge, Purge: &raftfsm.Purge{Tasks: []raftfsm.PurgeTask{{ID: "purged", Epoch: pt.Epoch, FinishedMs: pt.FinishedMs}}}})
	if _, err := fsm.Task("purged"); err == nil {
		t.Fatal("the task was not purged")
	}
	for _, o := range n.orphans {
		if o.ID == "purged" && current(o) {
			t.Error("a purged task's orphan is current")
		}
	}
}
