package raftfsm

import (
	"testing"
	"time"
)

// TestStaleReadEndsRecurringSchedule: a leader whose store has not yet
// applied the Fire of a recurring task's attempt (a new leader catching
// up after an election, or a leader whose FSM lags its commits) prepares
// the successful Complete of that attempt from its stale read: nextRun
// sees Attempts 0 != 1 and decides no next run (NextSlotMs 0). Every node
// then applies the Complete to the fired task, whose attempt matches, and
// the schedule ends: SUCCESS, purged at its retention. A recurring task
// must never end for a success.
func TestStaleReadEndsRecurringSchedule(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_000)
	stored := lcRecurring(StateRunning, 1) // as applied: the Fire of attempt 1
	stale := lcRecurring(StateWaiting, 0)  // the leader's read: before that Fire
	stale.FiredMs, stale.LeaseMs, stale.Node = 0, 0, ""
	c := &Command{Type: CmdComplete, Complete: &Complete{ID: "a", Epoch: 7, Attempt: 1, Outcome: OutcomeSuccess}}
	Prepare(c, now, LeaderInputs{Task: stale, Schedule: func(*Spec) (Schedule, error) { return stubSchedule{period: time.Minute}, nil }})
	got, _, err := completeTask(stored, c.Complete)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != StateWaiting {
		t.Fatalf("recurring task after a successful run prepared from a stale read: %s (NextSlotMs %d), want WAITING for its next slot", got.State, c.Complete.NextSlotMs)
	}
}
