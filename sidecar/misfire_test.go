package sidecar

import (
	"testing"
	"time"

	"github.com/axsched/ax/raftfsm"
	"github.com/rs/zerolog"
)

// After downtime a recurring task fires once, then keeps its schedule.
// Repro: every 2 s; the node is down from +5 s to +11.2 s, so the stored
// run (slot +6 s) fires at +11.2 s and succeeds 3 ms later. Its next run
// is the +12 s slot, not the +10 s slot at once: the run that ended was
// the catch-up for every slot up to its start (it used to be due at once,
// and runs 3 and 4 were delivered 3 ms apart).
func TestNextRunAfterDowntimeFiresOnce(t *testing.T) {
	created := time.UnixMilli(1_700_000_000_000)
	ms := func(d time.Duration) int64 { return created.Add(d).UnixMilli() }
	spec := raftfsm.Spec{Handler: "rk", TimeoutNs: int64(time.Second), MaxAttempts: 3, EveryNs: int64(2 * time.Second)}
	for _, tc := range []struct {
		name          string
		fired, ends   time.Duration
		wantNextSlot  time.Duration
		wantImmediate bool
	}{
		{"catch-up after downtime", 11200 * time.Millisecond, 11203 * time.Millisecond, 12 * time.Second, false},
		// A run that outlasts its period (fired on time, ends at +11.2 s)
		// is still followed at once by one run for the slots it overran.
		{"run outlasts its period", 6 * time.Second, 11200 * time.Millisecond, 10 * time.Second, true},
	} {
		task := &raftfsm.Task{
			ID: "rk1", Spec: spec, Epoch: 1, State: raftfsm.StateRunning, Attempts: 1, Run: 3,
			SlotMs: ms(6 * time.Second), FiredMs: ms(tc.fired), LeaseMs: ms(tc.fired + 6*time.Second),
		}
		p := &proposer{n: &Node{cfg: Config{LeaseGrace: 5 * time.Second}, log: zerolog.Nop()}, task: func(string) *raftfsm.Task { return task }}
		c := raftfsm.Command{Type: raftfsm.CmdComplete, Complete: &raftfsm.Complete{ID: "rk1", Epoch: 1, Attempt: 1, Outcome: raftfsm.OutcomeSuccess}}
		now := created.Add(tc.ends)
		p.prepare(&c, now)
		x := c.Complete
		if x.NextSlotMs != ms(tc.wantNextSlot) || x.NextDueMs != x.NextSlotMs {
			t.Errorf("%s: next slot %v due %v, want %v", tc.name,
				time.UnixMilli(x.NextSlotMs).Sub(created), time.UnixMilli(x.NextDueMs).Sub(created), tc.wantNextSlot)
		}
		if immediate := x.NextDueMs <= now.UnixMilli(); immediate != tc.wantImmediate {
			t.Errorf("%s: next run due at once = %v, want %v", tc.name, immediate, tc.wantImmediate)
		}
	}
}
