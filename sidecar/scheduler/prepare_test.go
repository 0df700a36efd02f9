package scheduler

import (
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/axsched/ax/raftfsm"
)

// Prepare must be idempotent: propose resends the very same commands to
// the next leader after a leadership change. A busy outcome once turned its
// Retry-After into a due time in place, and the second Prepare read that
// due time (~1.8e12 ms) as a Retry-After: the task snoozed for 57 years.
func TestPrepareIsIdempotent(t *testing.T) {
	p := NewPreparer(PrepareConfig{LeaseGrace: 5 * time.Second, ProbeMin: probeMin, ProbeMax: probeMax, Task: func(string) *raftfsm.Task { return nil }, Log: zerolog.Nop()})
	now := time.UnixMilli(1_700_000_000_000)
	c := raftfsm.Command{Type: raftfsm.CmdComplete, Complete: &raftfsm.Complete{ID: "a", Attempt: 1, Outcome: raftfsm.OutcomeBusy, RetryAfterMs: 2000}}
	p.Prepare(&c, now)
	first := c.Complete.RetryDueMs
	if want := now.UnixMilli() + 2000; first != want {
		t.Fatalf("busy due %d, want %d", first, want)
	}
	later := now.Add(300 * time.Millisecond)
	p.Prepare(&c, later)
	if want := later.UnixMilli() + 2000; c.Complete.RetryDueMs != want {
		t.Fatalf("second prepare: due %d, want %d", c.Complete.RetryDueMs, want)
	}

	s := raftfsm.Command{Type: raftfsm.CmdSubmit, Submit: &raftfsm.Submit{ID: "b", Spec: raftfsm.Spec{DelayNs: int64(time.Second)}}}
	p.Prepare(&s, now)
	p.Prepare(&s, now)
	if want := now.UnixMilli() + 1000; s.Submit.DueMs != want {
		t.Fatalf("submit due %d, want %d", s.Submit.DueMs, want)
	}
	l := raftfsm.Command{Type: raftfsm.CmdLease, Lease: &raftfsm.Lease{ID: "c", Attempt: 1}}
	p.Prepare(&l, now)
	if l.Lease.GraceMs != 5000 || l.Lease.AtMs != now.UnixMilli() {
		t.Fatalf("lease %+v", l.Lease)
	}
}

// probeMin and probeMax are the node's bounds of an unavailable
// executor's probe backoff (delivery.ProbeBackoffMin, ProbeBackoffMax).
const probeMin, probeMax = 100 * time.Millisecond, 5 * time.Second

// A hand-back (unavailable, no RetryAfterMs, RetryDueMs set by the
// draining node) keeps the run's own due time through prepare, also when
// prepared again after a leadership change; an ordinary unavailable
// outcome still waits for the probe backoff.
func TestPrepareKeepsHandBackDueTime(t *testing.T) {
	p := NewPreparer(PrepareConfig{LeaseGrace: 5 * time.Second, ProbeMin: probeMin, ProbeMax: probeMax, Task: func(string) *raftfsm.Task { return nil }, Log: zerolog.Nop()})
	now := time.UnixMilli(1_700_000_000_000)
	due := now.UnixMilli() + 40
	c := raftfsm.Command{Type: raftfsm.CmdComplete, Complete: &raftfsm.Complete{ID: "a", Attempt: 1, Outcome: raftfsm.OutcomeUnavailable, RetryDueMs: due}}
	p.Prepare(&c, now)
	p.Prepare(&c, now.Add(time.Second))
	if c.Complete.RetryDueMs != due {
		t.Fatalf("hand-back due %d, want the run's %d", c.Complete.RetryDueMs, due)
	}
	u := raftfsm.Command{Type: raftfsm.CmdComplete, Complete: &raftfsm.Complete{ID: "b", Attempt: 1, Outcome: raftfsm.OutcomeUnavailable, RetryAfterMs: 300}}
	p.Prepare(&u, now)
	if want := now.UnixMilli() + 300; u.Complete.RetryDueMs != want {
		t.Fatalf("unavailable due %d, want %d", u.Complete.RetryDueMs, want)
	}
}

// The leader turns an unavailable outcome's RetryAfterMs (the node's probe
// backoff) into RetryDueMs, bounded to [100 ms, 5 s], idempotently.
func TestPrepareUnavailable(t *testing.T) {
	p := NewPreparer(PrepareConfig{LeaseGrace: 5 * time.Second, ProbeMin: probeMin, ProbeMax: probeMax, Task: func(string) *raftfsm.Task { return nil }, Log: zerolog.Nop()})
	now := time.UnixMilli(1_700_000_000_000)
	for after, want := range map[int64]int64{0: 100, 40: 100, 800: 800, 60_000: 5000} {
		c := raftfsm.Command{Type: raftfsm.CmdComplete, Complete: &raftfsm.Complete{ID: "a", Attempt: 1, Outcome: raftfsm.OutcomeUnavailable, RetryAfterMs: after}}
		p.Prepare(&c, now)
		p.Prepare(&c, now)
		if got := c.Complete.RetryDueMs - now.UnixMilli(); got != want {
			t.Errorf("RetryAfterMs %d: due in %d ms, want %d", after, got, want)
		}
	}
}

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
		p := NewPreparer(PrepareConfig{LeaseGrace: 5 * time.Second, ProbeMin: probeMin, ProbeMax: probeMax, Task: func(string) *raftfsm.Task { return task }, Log: zerolog.Nop()})
		c := raftfsm.Command{Type: raftfsm.CmdComplete, Complete: &raftfsm.Complete{ID: "rk1", Epoch: 1, Attempt: 1, Outcome: raftfsm.OutcomeSuccess}}
		now := created.Add(tc.ends)
		p.Prepare(&c, now)
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

// A successful Complete of a one-off task's current attempt is prepared
// without reading the task (the leader knows from the FSM's events that it
// runs and is not recurring); a recurring task's, a failure's, or one for
// another attempt still reads it, and a recurring task still gets its
// next run.
func TestPrepareSkipsTheReadOfAOneOffSuccess(t *testing.T) {
	e := newParkEnv(t)
	e.executor("a", 10)
	now := e.clock.Now().UnixMilli()
	for _, id := range []string{"plain", "every"} {
		sp := raftfsm.Spec{Handler: "h", TimeoutNs: int64(time.Second), MaxAttempts: 3}
		if id == "every" {
			sp.EveryNs = int64(time.Minute)
		}
		e.apply(raftfsm.Command{Type: raftfsm.CmdSubmit, Submit: &raftfsm.Submit{ID: id, DueMs: now, AtMs: now, Spec: sp}})
		e.timers.Cancel(dueKeyPrefix + id)
	}
	e.l.fire(e.ctx, []string{"plain", "every"}, nil)
	plain, every := e.task("plain"), e.task("every")
	if plain.State != raftfsm.StateRunning || every.State != raftfsm.StateRunning {
		t.Fatalf("plain %s, every %s; want both RUNNING", plain.State, every.State)
	}
	if !e.l.RunningOneOff("plain", plain.Epoch, plain.Attempts) || e.l.RunningOneOff("every", every.Epoch, every.Attempts) ||
		e.l.RunningOneOff("plain", plain.Epoch, plain.Attempts+1) || e.l.RunningOneOff("plain", plain.Epoch+1, plain.Attempts) {
		t.Fatal("RunningOneOff: want true for plain's attempt only")
	}
	reads := map[string]int{}
	p := NewPreparer(PrepareConfig{LeaseGrace: time.Second, ProbeMin: probeMin, ProbeMax: probeMax, Log: zerolog.Nop(),
		OneOff: e.l.RunningOneOff,
		Task: func(id string) *raftfsm.Task {
			reads[id]++
			return e.task(id)
		}})
	complete := func(tk *raftfsm.Task, o raftfsm.Outcome) *raftfsm.Complete {
		c := raftfsm.Command{Type: raftfsm.CmdComplete, Complete: &raftfsm.Complete{ID: tk.ID, Epoch: tk.Epoch, Attempt: tk.Attempts, Outcome: o}}
		p.Prepare(&c, e.clock.Now())
		return c.Complete
	}
	if c := complete(plain, raftfsm.OutcomeSuccess); reads["plain"] != 0 || c.NextDueMs != 0 {
		t.Fatalf("plain's success: %d reads, next due %d; want no read, no next run", reads["plain"], c.NextDueMs)
	}
	if complete(plain, raftfsm.OutcomeRetryable); reads["plain"] != 1 {
		t.Fatalf("plain's failure: %d reads, want 1 (its backoff)", reads["plain"])
	}
	if c := complete(every, raftfsm.OutcomeSuccess); reads["every"] != 1 || c.NextDueMs == 0 {
		t.Fatalf("every's success: %d reads, next due %d; want a read and its next run", reads["every"], c.NextDueMs)
	}
	e.complete("plain", raftfsm.OutcomeSuccess)
	if e.l.RunningOneOff("plain", plain.Epoch, plain.Attempts) {
		t.Fatal("RunningOneOff after plain completed: want false")
	}
}

// An every schedule stays on its grid (creation, delay or run_at + k ×
// every) when the interval is not a whole number of milliseconds (every
// 10s/3 from the Python client's every=10/3, or time.Hour/7 from Go):
// each slot is stored rounded up to the millisecond, and the next slot
// was computed from that rounded slot, so the rounding added up, up to
// 1 ms a run (every 3.333333333s: 0.67 ms a run, 17 s a day late after
// 26 000 runs). Each run here fires on time and succeeds 5 ms later; no
// slot may be before its grid instant (never early) nor more than 2 ms
// after it.
func TestEveryOffTheMillisecondGridDoesNotDrift(t *testing.T) {
	now := time.Unix(1_700_000_000, 123_456_789) // not on a millisecond
	for _, tc := range []struct {
		name  string
		every time.Duration
		delay time.Duration
		runAt time.Time
	}{
		{"every 10s/3", 10 * time.Second / 3, 0, time.Time{}},
		{"every 1h/7 after a delay", time.Hour / 7, 1500*time.Millisecond + 300*time.Microsecond, time.Time{}},
		{"every 1.0005s from run_at", 1000500 * time.Microsecond, 0, now.Add(time.Minute).Truncate(time.Millisecond)},
		{"every 2s (whole ms)", 2 * time.Second, 0, time.Time{}},
	} {
		spec := raftfsm.Spec{Handler: "h", TimeoutNs: int64(time.Second), MaxAttempts: 3, EveryNs: int64(tc.every), DelayNs: int64(tc.delay)}
		grid := now.Add(tc.delay) // the instant the client asked for slot 0
		k0 := int64(1)            // an every task without a start runs first one interval after the submit
		if !tc.runAt.IsZero() {
			spec.RunAtMs, grid = tc.runAt.UnixMilli(), tc.runAt
		}
		if tc.delay > 0 || !tc.runAt.IsZero() {
			k0 = 0
		}
		var task *raftfsm.Task
		p := NewPreparer(PrepareConfig{LeaseGrace: 5 * time.Second, ProbeMin: probeMin, ProbeMax: probeMax, Task: func(string) *raftfsm.Task { return task }, Log: zerolog.Nop()})
		sub := raftfsm.Command{Type: raftfsm.CmdSubmit, Submit: &raftfsm.Submit{ID: "e", Spec: spec}}
		p.Prepare(&sub, now)
		s := sub.Submit
		task = &raftfsm.Task{ID: "e", Spec: spec, Epoch: 1, State: raftfsm.StateWaiting, Run: 1, DueMs: s.DueMs, SlotMs: s.SlotMs, CreatedMs: s.AtMs, UpdatedMs: s.AtMs}
		const runs = 3000
		k := k0
		for range runs {
			want := grid.Add(time.Duration(k) * tc.every)
			slot := time.UnixMilli(task.SlotMs)
			if slot.Before(want) || slot.Sub(want) > 2*time.Millisecond {
				t.Fatalf("%s: run %d's slot is %v after its grid instant (k=%d), want 0 to 2ms", tc.name, task.Run, slot.Sub(want), k)
			}
			// The run fires at its due time and succeeds 5 ms later; every
			// 100th fires 10.5 intervals late (the leader was down): one
			// catch-up run, and the next back on the grid.
			task.State, task.Attempts, task.FiredMs = raftfsm.StateRunning, 1, task.DueMs
			k++
			if task.Run%100 == 50 {
				task.FiredMs += (10*tc.every + tc.every/2).Milliseconds()
				k += 10
			}
			c := raftfsm.Command{Type: raftfsm.CmdComplete, Complete: &raftfsm.Complete{ID: "e", Epoch: 1, Attempt: 1, Outcome: raftfsm.OutcomeSuccess}}
			p.Prepare(&c, time.UnixMilli(task.FiredMs+5))
			x := c.Complete
			if x.NextSlotMs == 0 || x.NextDueMs != x.NextSlotMs {
				t.Fatalf("%s: run %d: next slot %d due %d", tc.name, task.Run, x.NextSlotMs, x.NextDueMs)
			}
			task.State, task.Attempts, task.Run, task.SlotMs, task.DueMs = raftfsm.StateWaiting, 0, task.Run+1, x.NextSlotMs, x.NextDueMs
		}
	}
}

// raftfsm.ReadsStore names the commands the leader's proposer holds until
// this node has caught up with its term (Scheduler.CaughtUp), because
// their Prepare reads the store: it must name every command whose
// Prepare reads a task or a flow here, or a new leader still applying
// its log decides that command from a stale read (a recurring task's or
// a cron flow's next run: none, and the schedule ends).
func TestReadsStoreNamesEveryCommandPrepareReadsTheStoreFor(t *testing.T) {
	var reads []string
	p := NewPreparer(PrepareConfig{LeaseGrace: time.Second, ProbeMin: probeMin, ProbeMax: probeMax, Log: zerolog.Nop(),
		Task: func(id string) *raftfsm.Task { reads = append(reads, "task "+id); return nil },
		Flow: func(id string) *raftfsm.Flow { reads = append(reads, "flow "+id); return nil }})
	stage := raftfsm.FlowStageID("f", 1, "A")
	shard := raftfsm.ShardID(stage, 1, 0)
	cmds := []raftfsm.Command{
		{Type: raftfsm.CmdSubmit, Submit: &raftfsm.Submit{ID: "a", Spec: raftfsm.Spec{Handler: "h"}}},
		{Type: raftfsm.CmdSubmit, Submit: &raftfsm.Submit{ID: stage, Spec: raftfsm.Spec{Handler: "h"}}},
		{Type: raftfsm.CmdCancel, Cancel: &raftfsm.Cancel{ID: "a"}},
		{Type: raftfsm.CmdCancel, Cancel: &raftfsm.Cancel{ID: stage}},
		{Type: raftfsm.CmdCancel, Cancel: &raftfsm.Cancel{ID: shard}},
		{Type: raftfsm.CmdFire, Fire: &raftfsm.Fire{ID: stage, Attempt: 1}},
		{Type: raftfsm.CmdComplete, Complete: &raftfsm.Complete{ID: "a", Attempt: 1, Outcome: raftfsm.OutcomeSuccess}},
		{Type: raftfsm.CmdComplete, Complete: &raftfsm.Complete{ID: stage, Attempt: 1, Outcome: raftfsm.OutcomeRetryable}},
		{Type: raftfsm.CmdComplete, Complete: &raftfsm.Complete{ID: shard, Attempt: 1, Outcome: raftfsm.OutcomeBusy}},
		{Type: raftfsm.CmdNode, Node: &raftfsm.Node{ID: "n"}},
		{Type: raftfsm.CmdExecutor, Executor: &raftfsm.ExecutorChange{Node: "n"}},
		{Type: raftfsm.CmdRetry, Retry: &raftfsm.Retry{ID: stage}},
		{Type: raftfsm.CmdLease, Lease: &raftfsm.Lease{ID: stage, Attempt: 1}},
		{Type: raftfsm.CmdPurge, Purge: &raftfsm.Purge{}},
		{Type: raftfsm.CmdPause, Pause: &raftfsm.Pause{ID: stage, Paused: true}},
		{Type: raftfsm.CmdFlow, Flow: &raftfsm.FlowSubmit{ID: "f", Cancel: true}},
		{Type: raftfsm.CmdAlertDone, AlertDone: &raftfsm.AlertDone{Seq: 1}},
	}
	now := time.UnixMilli(1_700_000_000_000)
	for i := range cmds {
		c := &cmds[i]
		reads = nil
		p.Prepare(c, now)
		if got := raftfsm.ReadsStore(c); got != (len(reads) > 0) {
			t.Errorf("command %d (type %d): Prepare read %v, ReadsStore %v", i, c.Type, reads, got)
		}
	}
}

// Preparing a submit allocates nothing: the schedule parser's method
// value is made once, not per command (it was one allocation of every
// command the leader proposed).
func TestPrepareASubmitAllocatesNothing(t *testing.T) {
	p := NewPreparer(PrepareConfig{LeaseGrace: 5 * time.Second, ProbeMin: probeMin, ProbeMax: probeMax, Task: func(string) *raftfsm.Task { return nil }, Log: zerolog.Nop()})
	now := time.UnixMilli(1_700_000_000_000)
	s := raftfsm.Command{Type: raftfsm.CmdSubmit, Submit: &raftfsm.Submit{ID: "b", Spec: raftfsm.Spec{DelayNs: int64(time.Second)}}}
	if n := testing.AllocsPerRun(100, func() { p.Prepare(&s, now) }); n != 0 {
		t.Fatalf("%.1f allocations a submit's Prepare, want 0", n)
	}
}
