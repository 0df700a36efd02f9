package api

import (
	"testing"
	"time"

	"github.com/axsched/ax/raftfsm"
)

// A run handed back without an attempt counted (its executor unavailable,
// or a 429/503 answer) waits until its due time, and its view says why on
// every node, from the stored task alone: the leader has not parked it
// (it is not due yet). A review found most tasks of an executor outage
// listed without a reason.
func TestTaskViewHeldBackRun(t *testing.T) {
	upd, due := int64(1_700_000_000_000), int64(1_700_000_002_500)
	for _, tc := range []struct {
		held   raftfsm.Outcome
		state  raftfsm.State
		reason string
	}{
		{raftfsm.OutcomeUnavailable, raftfsm.StateWaiting, ReasonExecutorUnavailable},
		{raftfsm.OutcomeBusy, raftfsm.StateWaiting, ReasonExecutorBusy},
		{0, raftfsm.StateWaiting, ""},
		{raftfsm.OutcomeUnavailable, raftfsm.StateCancelled, ""},
	} {
		v := taskView(&raftfsm.Task{ID: "a", State: tc.state, HeldBy: tc.held, UpdatedMs: upd, DueMs: due, Spec: raftfsm.Spec{Handler: "h"}})
		if v.WaitingReason != tc.reason {
			t.Fatalf("held by %v, %v: reason %q, want %q", tc.held, tc.state, v.WaitingReason, tc.reason)
		}
		if tc.reason == "" {
			continue
		}
		if v.WaitingSince == nil || !v.WaitingSince.Equal(time.UnixMilli(upd)) || v.WaitingUntil == nil || !v.WaitingUntil.Equal(time.UnixMilli(due)) {
			t.Fatalf("held by %v: since %v until %v, want %v and %v", tc.held, v.WaitingSince, v.WaitingUntil, time.UnixMilli(upd), time.UnixMilli(due))
		}
	}
}
