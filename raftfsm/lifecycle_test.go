package raftfsm

import (
	"errors"
	"testing"
	"time"
)

// step runs the FSM's transition for c on prev, as apply does after
// loading the task.
func step(prev *Task, c *Command, index uint64) (*Task, Result, error) {
	switch c.Type {
	case CmdSubmit:
		t, r := submitTask(prev, c.Submit, index)
		return t, r, nil
	case CmdCancel:
		t, r := cancelTask(prev, c.Cancel)
		return t, r, nil
	case CmdFire:
		t, r := fireTask(prev, c.Fire)
		return t, r, nil
	case CmdComplete:
		return completeTask(prev, c.Complete)
	case CmdRetry:
		t, r := retryTask(prev, c.Retry)
		return t, r, nil
	case CmdLease:
		t, r := leaseTask(prev, c.Lease)
		return t, r, nil
	case CmdPause:
		t, r := pauseTask(prev, c.Pause)
		return t, r, nil
	}
	panic("no transition for command type")
}

// lcTask is a stored task in state st at attempt attempts of 3, epoch 7.
func lcTask(st State, attempts int) *Task {
	return &Task{
		ID: "a", Spec: Spec{Handler: "h", Payload: []byte("p"), TimeoutNs: int64(30 * time.Second), MaxAttempts: 3},
		Epoch: 7, State: st, Attempts: attempts, Run: 1, DueMs: 1000, Node: "n1", FiredMs: 900, LeaseMs: 40_000,
		LastError: "earlier", CreatedMs: 100, UpdatedMs: 900,
	}
}

func lcRecurring(st State, attempts int) *Task {
	t := lcTask(st, attempts)
	t.Spec.EveryNs, t.SlotMs = int64(time.Minute), 1000
	return t
}

func complete(attempt int, o Outcome) *Command {
	return &Command{Type: CmdComplete, Complete: &Complete{ID: "a", Epoch: 7, Attempt: attempt, Outcome: o, Error: "boom", RetryDueMs: 5000, AtMs: 2000}}
}

func completeNext(attempt int, o Outcome) *Command {
	c := complete(attempt, o)
	c.Complete.NextSlotMs, c.Complete.NextDueMs = 61_000, 61_000
	return c
}

// TestTransitionTable walks the transition table of lifecycle.go row by
// row: each row is one line of the table (state × event → state) with the
// fields its rule sets.
func TestTransitionTable(t *testing.T) {
	const unchanged State = 0
	spec := lcTask(StateWaiting, 0).Spec
	other := spec
	other.Payload = []byte("other")
	paused := lcTask(StateWaiting, 0)
	paused.Paused = true
	pausedDone := lcTask(StateSuccess, 1)
	pausedDone.Paused = true
	rows := []struct {
		name  string
		prev  *Task
		cmd   *Command
		want  State // unchanged: no new task
		code  string
		check func(t *testing.T, got *Task)
	}{
		{"(none) submit → WAITING", nil,
			&Command{Type: CmdSubmit, Submit: &Submit{ID: "a", Spec: spec, DueMs: 3000, AtMs: 2000}}, StateWaiting, "",
			func(t *testing.T, got *Task) {
				if got.DueMs != 3000 || got.Run != 1 || got.Epoch != 42 || got.CreatedMs != 2000 || got.RunBase != 0 {
					t.Errorf("%+v", got)
				}
			}},
		{"any submit same spec → unchanged", lcTask(StateRunning, 1),
			&Command{Type: CmdSubmit, Submit: &Submit{ID: "a", Spec: spec, AtMs: 2000}}, unchanged, "", nil},
		{"any submit other spec → unchanged conflict", lcTask(StateSuccess, 1),
			&Command{Type: CmdSubmit, Submit: &Submit{ID: "a", Spec: other, AtMs: 2000}}, unchanged, CodeConflict, nil},
		{"any submit overwrite → WAITING, new epoch, runs after, pause kept", func() *Task { p := *paused; p.Run = 2; return &p }(),
			&Command{Type: CmdSubmit, Submit: &Submit{ID: "a", Spec: other, DueMs: 3000, AtMs: 2000, Overwrite: true}}, StateWaiting, "",
			func(t *testing.T, got *Task) {
				if got.Epoch != 42 || got.RunBase != 2 || got.Run != 1 || !got.Paused || got.Attempts != 0 {
					t.Errorf("%+v", got)
				}
			}},
		{"WAITING fire → RUNNING", func() *Task { p := lcTask(StateWaiting, 1); p.HeldBy = OutcomeBusy; return p }(),
			&Command{Type: CmdFire, Fire: &Fire{ID: "a", Epoch: 7, Attempt: 2, Node: "n2", AtMs: 2000, LeaseMs: 9000}}, StateRunning, "",
			func(t *testing.T, got *Task) {
				if got.Attempts != 2 || got.Node != "n2" || got.FiredMs != 2000 || got.LeaseMs != 9000 || got.HeldBy != 0 {
					t.Errorf("%+v", got)
				}
			}},
		{"not WAITING fire → stale", lcTask(StateRunning, 1),
			&Command{Type: CmdFire, Fire: &Fire{ID: "a", Epoch: 7, Attempt: 2}}, unchanged, CodeStale, nil},
		{"WAITING fire, other epoch → stale", lcTask(StateWaiting, 0),
			&Command{Type: CmdFire, Fire: &Fire{ID: "a", Epoch: 6, Attempt: 1}}, unchanged, CodeStale, nil},
		{"WAITING fire, other attempt → stale", lcTask(StateWaiting, 0),
			&Command{Type: CmdFire, Fire: &Fire{ID: "a", Epoch: 7, Attempt: 2}}, unchanged, CodeStale, nil},
		{"RUNNING success → SUCCESS", lcTask(StateRunning, 1), complete(1, OutcomeSuccess), StateSuccess, "",
			func(t *testing.T, got *Task) {
				if got.LastError != "" || got.FinishedMs != 2000 || got.DueMs != 0 || got.LeaseMs != 0 {
					t.Errorf("%+v", got)
				}
			}},
		{"RUNNING success, recurring → WAITING next run", lcRecurring(StateRunning, 2), completeNext(2, OutcomeSuccess), StateWaiting, "",
			func(t *testing.T, got *Task) {
				if got.Run != 2 || got.Attempts != 0 || got.DueMs != 61_000 || got.SlotMs != 61_000 || got.FinishedMs != 0 || got.FailedRuns != 0 {
					t.Errorf("%+v", got)
				}
			}},
		{"RUNNING success, recurring, schedule ended → SUCCESS", lcRecurring(StateRunning, 1), complete(1, OutcomeSuccess), StateSuccess, "", nil},
		{"RUNNING permanent → FAILED", lcTask(StateRunning, 1), complete(1, OutcomePermanent), StateFailed, "",
			func(t *testing.T, got *Task) {
				if got.LastError != "boom" || got.FinishedMs != 2000 || got.DueMs != 0 {
					t.Errorf("%+v", got)
				}
			}},
		{"RUNNING busy → WAITING, attempt given back, snoozed", lcTask(StateRunning, 2), complete(2, OutcomeBusy), StateWaiting, "",
			func(t *testing.T, got *Task) {
				if got.Attempts != 1 || got.DueMs != 5000 || got.Snoozes != 1 || got.HeldBy != OutcomeBusy || got.LastError != "earlier" {
					t.Errorf("%+v", got)
				}
			}},
		{"RUNNING unavailable → WAITING, attempt given back", lcTask(StateRunning, 3), complete(3, OutcomeUnavailable), StateWaiting, "",
			func(t *testing.T, got *Task) {
				if got.Attempts != 2 || got.DueMs != 5000 || got.Snoozes != 0 || got.HeldBy != OutcomeUnavailable || got.LastError != "earlier" {
					t.Errorf("%+v", got)
				}
			}},
		{"RUNNING retryable, attempts left → WAITING", lcTask(StateRunning, 2), complete(2, OutcomeRetryable), StateWaiting, "",
			func(t *testing.T, got *Task) {
				if got.Attempts != 2 || got.DueMs != 5000 || got.LastError != "boom" {
					t.Errorf("%+v", got)
				}
			}},
		{"RUNNING timeout, attempts left → WAITING", lcTask(StateRunning, 1), complete(1, OutcomeTimeout), StateWaiting, "", nil},
		{"RUNNING lost, attempts left → WAITING", lcTask(StateRunning, 1), complete(1, OutcomeLost), StateWaiting, "", nil},
		{"RUNNING retryable, last attempt → DEAD", lcTask(StateRunning, 3), complete(3, OutcomeRetryable), StateDead, "",
			func(t *testing.T, got *Task) {
				if got.FinishedMs != 2000 || got.DueMs != 0 || got.LastError != "boom" || got.FailedRuns != 0 {
					t.Errorf("%+v", got)
				}
			}},
		{"RUNNING timeout, last attempt, recurring → WAITING next run", lcRecurring(StateRunning, 3), completeNext(3, OutcomeTimeout), StateWaiting, "",
			func(t *testing.T, got *Task) {
				if got.FailedRuns != 1 || got.Run != 2 || got.Attempts != 0 || got.DueMs != 61_000 || got.FinishedMs != 0 {
					t.Errorf("%+v", got)
				}
			}},
		{"RUNNING lost, last attempt, recurring, schedule ended → DEAD", lcRecurring(StateRunning, 3), complete(3, OutcomeLost), StateDead, "",
			func(t *testing.T, got *Task) {
				if got.FailedRuns != 0 {
					t.Errorf("%+v", got)
				}
			}},
		{"not RUNNING complete → stale", lcTask(StateWaiting, 1), complete(1, OutcomeSuccess), unchanged, CodeStale, nil},
		{"RUNNING complete, other attempt → stale", lcTask(StateRunning, 2), complete(1, OutcomeSuccess), unchanged, CodeStale, nil},
		{"RUNNING complete, other epoch → stale", lcTask(StateRunning, 1),
			&Command{Type: CmdComplete, Complete: &Complete{ID: "a", Epoch: 6, Attempt: 1, Outcome: OutcomeSuccess}}, unchanged, CodeStale, nil},
		{"RUNNING complete, epoch 0 (an app's report) → SUCCESS", lcTask(StateRunning, 1),
			&Command{Type: CmdComplete, Complete: &Complete{ID: "a", Attempt: 1, Outcome: OutcomeSuccess, AtMs: 2000}}, StateSuccess, "", nil},
		{"WAITING cancel → CANCELLED", lcTask(StateWaiting, 0), &Command{Type: CmdCancel, Cancel: &Cancel{ID: "a", AtMs: 2000}}, StateCancelled, "",
			func(t *testing.T, got *Task) {
				if got.DueMs != 0 || got.LeaseMs != 0 || got.FinishedMs != 2000 {
					t.Errorf("%+v", got)
				}
			}},
		{"RUNNING cancel → CANCELLED", lcTask(StateRunning, 1), &Command{Type: CmdCancel, Cancel: &Cancel{ID: "a", AtMs: 2000}}, StateCancelled, "", nil},
		{"terminal cancel → unchanged", lcTask(StateDead, 3), &Command{Type: CmdCancel, Cancel: &Cancel{ID: "a", AtMs: 2000}}, unchanged, "", nil},
		{"DEAD retry → WAITING new run", lcTask(StateDead, 3), &Command{Type: CmdRetry, Retry: &Retry{ID: "a", AtMs: 2000}}, StateWaiting, "",
			func(t *testing.T, got *Task) {
				if got.Run != 2 || got.Attempts != 0 || got.DueMs != 2000 || got.FinishedMs != 0 || got.LeaseMs != 0 {
					t.Errorf("%+v", got)
				}
			}},
		{"FAILED retry → WAITING", lcTask(StateFailed, 1), &Command{Type: CmdRetry, Retry: &Retry{ID: "a", AtMs: 2000}}, StateWaiting, "", nil},
		{"other retry → unchanged CodeState", lcTask(StateSuccess, 1), &Command{Type: CmdRetry, Retry: &Retry{ID: "a", AtMs: 2000}}, unchanged, CodeState, nil},
		{"RUNNING lease → RUNNING, extended", lcTask(StateRunning, 1),
			&Command{Type: CmdLease, Lease: &Lease{ID: "a", Attempt: 1, GraceMs: 5000, AtMs: 20_000}}, StateRunning, "",
			func(t *testing.T, got *Task) {
				if got.LeaseMs != 55_000 || got.UpdatedMs != 20_000 {
					t.Errorf("%+v", got)
				}
			}},
		{"RUNNING lease never shortens", lcTask(StateRunning, 1),
			&Command{Type: CmdLease, Lease: &Lease{ID: "a", Attempt: 1, AtMs: 1000}}, StateRunning, "",
			func(t *testing.T, got *Task) {
				if got.LeaseMs != 40_000 {
					t.Errorf("%+v", got)
				}
			}},
		{"other lease → stale", lcTask(StateWaiting, 1), &Command{Type: CmdLease, Lease: &Lease{ID: "a", Attempt: 1}}, unchanged, CodeStale, nil},
		{"RUNNING lease, other attempt → stale", lcTask(StateRunning, 2), &Command{Type: CmdLease, Lease: &Lease{ID: "a", Attempt: 1}}, unchanged, CodeStale, nil},
		{"WAITING pause → paused", lcTask(StateWaiting, 0), &Command{Type: CmdPause, Pause: &Pause{ID: "a", Paused: true, AtMs: 2000}}, StateWaiting, "",
			func(t *testing.T, got *Task) {
				if !got.Paused || got.UpdatedMs != 2000 {
					t.Errorf("%+v", got)
				}
			}},
		{"paused pause → unchanged", paused, &Command{Type: CmdPause, Pause: &Pause{ID: "a", Paused: true}}, unchanged, "", nil},
		{"paused resume → resumed", paused, &Command{Type: CmdPause, Pause: &Pause{ID: "a", AtMs: 2000}}, StateWaiting, "",
			func(t *testing.T, got *Task) {
				if got.Paused {
					t.Errorf("%+v", got)
				}
			}},
		{"terminal pause → unchanged CodeState", lcTask(StateSuccess, 1), &Command{Type: CmdPause, Pause: &Pause{ID: "a", Paused: true}}, unchanged, CodeState, nil},
		{"terminal paused resume → resumed", pausedDone, &Command{Type: CmdPause, Pause: &Pause{ID: "a"}}, StateSuccess, "", nil},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			var before Task
			if r.prev != nil {
				before = *r.prev
			}
			got, res, err := step(r.prev, r.cmd, 42)
			if err != nil {
				t.Fatal(err)
			}
			if res.Code != r.code {
				t.Fatalf("code %q, want %q", res.Code, r.code)
			}
			if r.prev != nil && (r.prev.State != before.State || r.prev.Attempts != before.Attempts || r.prev.DueMs != before.DueMs) {
				t.Fatalf("the stored task was modified: %+v", r.prev)
			}
			if r.want == unchanged {
				if got != nil {
					t.Fatalf("changed to %v, want unchanged", got.State)
				}
				if r.prev != nil && res.Task != r.prev {
					t.Fatalf("result names %+v, want the stored task", res.Task)
				}
				return
			}
			if got == nil {
				t.Fatalf("unchanged, want %v", r.want)
			}
			if got.State != r.want || res.Task != got {
				t.Fatalf("state %v (result %p, task %p), want %v", got.State, res.Task, got, r.want)
			}
			// A complete or cancel leaves a due time only on a WAITING task.
			if (r.cmd.Type == CmdComplete || r.cmd.Type == CmdCancel) && got.State != StateWaiting && got.DueMs != 0 {
				t.Errorf("%v with a due time %d", got.State, got.DueMs)
			}
			if r.check != nil {
				r.check(t, got)
			}
		})
	}
}

// An outcome that ends no attempt is refused: it cannot be in the log.
func TestCompleteRefusesNonAttemptOutcomes(t *testing.T) {
	for _, o := range []Outcome{0, OutcomeAccepted, OutcomeCancelled, 8, 77} {
		if _, _, err := completeTask(lcTask(StateRunning, 1), complete(1, o).Complete); !errors.Is(err, ErrBadEntry) {
			t.Errorf("outcome %v: %v, want ErrBadEntry", o, err)
		}
	}
}

// stubSchedule is every period from the slot it is given, with a run
// limit; NextRunAfter skips no slot unless skip says so.
type stubSchedule struct {
	period  time.Duration
	repeats int
	skip    int
}

func (s stubSchedule) Next(after time.Time) time.Time { return after.Add(s.period) }
func (s stubSchedule) NextRunAfter(prev, started, now time.Time) (time.Time, int) {
	return prev.Add(time.Duration(s.skip+1) * s.period), s.skip
}
func (s stubSchedule) Done(runs int, slot time.Time) bool {
	return slot.IsZero() || s.repeats > 0 && runs >= s.repeats
}

// doubling is a backoff of 1 s × 2^(attempt-1) plus jitter × 1 s.
type doubling struct{}

func (doubling) Delay(attempt int, rnd float64) time.Duration {
	return time.Second<<(attempt-1) + time.Duration(rnd*float64(time.Second))
}

// TestPrepareTable walks the leader's side (Prepare) row by row.
func TestPrepareTable(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_000).Add(300 * time.Microsecond) // not on a millisecond
	nowMs := now.UnixMilli()
	up := nowMs + 1 // now rounded up
	every := stubSchedule{period: time.Minute}
	bad := errors.New("bad cron")
	rec := func(attempts, run int) *Task {
		t := lcRecurring(StateRunning, attempts)
		t.Run, t.SlotMs = run, nowMs-1000
		return t
	}
	rows := []struct {
		name     string
		cmd      *Command
		in       LeaderInputs
		schedErr error
		check    func(t *testing.T, c *Command, p Prepared)
	}{
		{"submit at run_at", &Command{Type: CmdSubmit, Submit: &Submit{Spec: Spec{RunAtMs: 5}}}, LeaderInputs{}, nil,
			func(t *testing.T, c *Command, _ Prepared) {
				if c.Submit.DueMs != 5 || c.Submit.AtMs != nowMs || c.Submit.SlotMs != 0 {
					t.Errorf("%+v", c.Submit)
				}
			}},
		{"submit with a delay, rounded up", &Command{Type: CmdSubmit, Submit: &Submit{Spec: Spec{DelayNs: int64(time.Second)}}}, LeaderInputs{}, nil,
			func(t *testing.T, c *Command, _ Prepared) {
				if c.Submit.DueMs != up+1000 {
					t.Errorf("due %d, want %d", c.Submit.DueMs, up+1000)
				}
			}},
		{"one-off submit: due now", &Command{Type: CmdSubmit, Submit: &Submit{}}, LeaderInputs{}, nil,
			func(t *testing.T, c *Command, _ Prepared) {
				if c.Submit.DueMs != up {
					t.Errorf("due %d, want %d", c.Submit.DueMs, up)
				}
			}},
		{"recurring submit with a delay: slot = due", &Command{Type: CmdSubmit, Submit: &Submit{Spec: Spec{EveryNs: int64(time.Minute), DelayNs: int64(time.Second)}}}, LeaderInputs{}, nil,
			func(t *testing.T, c *Command, _ Prepared) {
				if c.Submit.DueMs != up+1000 || c.Submit.SlotMs != c.Submit.DueMs {
					t.Errorf("%+v", c.Submit)
				}
			}},
		{"recurring submit: first slot", &Command{Type: CmdSubmit, Submit: &Submit{Spec: Spec{EveryNs: int64(time.Minute)}, SlotMs: 9}}, LeaderInputs{}, nil,
			func(t *testing.T, c *Command, _ Prepared) {
				if c.Submit.DueMs != up+60_000 || c.Submit.SlotMs != c.Submit.DueMs {
					t.Errorf("%+v", c.Submit)
				}
			}},
		{"recurring submit, schedule does not parse: due now", &Command{Type: CmdSubmit, Submit: &Submit{Spec: Spec{Cron: "x"}}}, LeaderInputs{}, bad,
			func(t *testing.T, c *Command, p Prepared) {
				if c.Submit.DueMs != nowMs || !errors.Is(p.ScheduleErr, bad) {
					t.Errorf("%+v %+v", c.Submit, p)
				}
			}},
		{"success, one-off: no next run", complete(1, OutcomeSuccess), LeaderInputs{Task: lcTask(StateRunning, 1)}, nil,
			func(t *testing.T, c *Command, _ Prepared) {
				if c.Complete.NextSlotMs != 0 || c.Complete.AtMs != nowMs {
					t.Errorf("%+v", c.Complete)
				}
			}},
		{"success, recurring: next slot", completeNext(1, OutcomeSuccess), LeaderInputs{Task: rec(1, 1)}, nil,
			func(t *testing.T, c *Command, p Prepared) {
				if want := nowMs - 1000 + 60_000; c.Complete.NextSlotMs != want || c.Complete.NextDueMs != want || p.Skipped != 0 {
					t.Errorf("%+v %+v", c.Complete, p)
				}
			}},
		{"success, recurring, missed slots: skipped reported", complete(1, OutcomeSuccess), LeaderInputs{Task: rec(1, 1)}, nil,
			func(t *testing.T, c *Command, p Prepared) {
				// The row's schedule skips 2 (set below).
				if want := nowMs - 1000 + 3*60_000; c.Complete.NextSlotMs != want || p.Skipped != 2 || p.NextSlot.UnixMilli() != want {
					t.Errorf("%+v %+v", c.Complete, p)
				}
			}},
		{"success, recurring, repeats reached: schedule ends", completeNext(1, OutcomeSuccess), LeaderInputs{Task: rec(1, 3)}, nil,
			func(t *testing.T, c *Command, _ Prepared) {
				if c.Complete.NextSlotMs != 0 || c.Complete.NextDueMs != 0 {
					t.Errorf("%+v", c.Complete)
				}
			}},
		{"success, recurring, stale attempt: no next run", complete(1, OutcomeSuccess), LeaderInputs{Task: rec(2, 1)}, nil,
			func(t *testing.T, c *Command, _ Prepared) {
				if c.Complete.NextSlotMs != 0 {
					t.Errorf("%+v", c.Complete)
				}
			}},
		{"success, recurring, schedule does not parse: ends", complete(1, OutcomeSuccess), LeaderInputs{Task: rec(1, 1)}, bad,
			func(t *testing.T, c *Command, p Prepared) {
				if c.Complete.NextSlotMs != 0 || !errors.Is(p.ScheduleErr, bad) {
					t.Errorf("%+v %+v", c.Complete, p)
				}
			}},
		{"retryable: backoff of the attempt", complete(2, OutcomeRetryable), LeaderInputs{Task: lcTask(StateRunning, 2), Jitter: 0.5}, nil,
			func(t *testing.T, c *Command, _ Prepared) {
				if want := up + 2500; c.Complete.RetryDueMs != want || c.Complete.NextSlotMs != 0 {
					t.Errorf("retry due %d, want %d", c.Complete.RetryDueMs, want)
				}
			}},
		{"timeout, task unknown: backoff", complete(1, OutcomeTimeout), LeaderInputs{}, nil,
			func(t *testing.T, c *Command, _ Prepared) {
				if c.Complete.RetryDueMs != up+1000 {
					t.Errorf("retry due %d", c.Complete.RetryDueMs)
				}
			}},
		{"lost, last attempt, recurring: DEAD and next run", complete(3, OutcomeLost), LeaderInputs{Task: rec(3, 1)}, nil,
			func(t *testing.T, c *Command, _ Prepared) {
				if c.Complete.RetryDueMs != up+4000 || c.Complete.NextSlotMs != nowMs-1000+60_000 {
					t.Errorf("%+v", c.Complete)
				}
			}},
		{"retryable, attempts left, recurring: no next run", complete(2, OutcomeRetryable), LeaderInputs{Task: rec(2, 1)}, nil,
			func(t *testing.T, c *Command, _ Prepared) {
				if c.Complete.NextSlotMs != 0 {
					t.Errorf("%+v", c.Complete)
				}
			}},
		{"permanent: nothing to decide", complete(1, OutcomePermanent), LeaderInputs{Task: rec(1, 1)}, nil,
			func(t *testing.T, c *Command, _ Prepared) {
				if c.Complete.NextSlotMs != 0 || c.Complete.RetryDueMs != 5000 {
					t.Errorf("%+v", c.Complete)
				}
			}},
		{"busy: Retry-After", &Command{Type: CmdComplete, Complete: &Complete{Outcome: OutcomeBusy, RetryAfterMs: 2000}}, LeaderInputs{}, nil,
			func(t *testing.T, c *Command, _ Prepared) {
				if c.Complete.RetryDueMs != up+2000 {
					t.Errorf("due %d", c.Complete.RetryDueMs)
				}
			}},
		{"busy: at least 1 s", &Command{Type: CmdComplete, Complete: &Complete{Outcome: OutcomeBusy, RetryAfterMs: 10}}, LeaderInputs{}, nil,
			func(t *testing.T, c *Command, _ Prepared) {
				if c.Complete.RetryDueMs != up+1000 {
					t.Errorf("due %d", c.Complete.RetryDueMs)
				}
			}},
		{"unavailable: probe backoff, at least ProbeMin", &Command{Type: CmdComplete, Complete: &Complete{Outcome: OutcomeUnavailable, RetryAfterMs: 10}}, LeaderInputs{}, nil,
			func(t *testing.T, c *Command, _ Prepared) {
				if c.Complete.RetryDueMs != up+100 {
					t.Errorf("due %d", c.Complete.RetryDueMs)
				}
			}},
		{"unavailable: at most ProbeMax", &Command{Type: CmdComplete, Complete: &Complete{Outcome: OutcomeUnavailable, RetryAfterMs: 60_000}}, LeaderInputs{}, nil,
			func(t *testing.T, c *Command, _ Prepared) {
				if c.Complete.RetryDueMs != up+5000 {
					t.Errorf("due %d", c.Complete.RetryDueMs)
				}
			}},
		{"unavailable hand-back keeps its due time", &Command{Type: CmdComplete, Complete: &Complete{Outcome: OutcomeUnavailable, RetryDueMs: 77}}, LeaderInputs{}, nil,
			func(t *testing.T, c *Command, _ Prepared) {
				if c.Complete.RetryDueMs != 77 {
					t.Errorf("due %d", c.Complete.RetryDueMs)
				}
			}},
		{"lease: grace", &Command{Type: CmdLease, Lease: &Lease{}}, LeaderInputs{LeaseGrace: 5 * time.Second}, nil,
			func(t *testing.T, c *Command, _ Prepared) {
				if c.Lease.GraceMs != 5000 || c.Lease.AtMs != nowMs {
					t.Errorf("%+v", c.Lease)
				}
			}},
		{"fire keeps its time", &Command{Type: CmdFire, Fire: &Fire{AtMs: 9}}, LeaderInputs{}, nil,
			func(t *testing.T, c *Command, _ Prepared) {
				if c.Fire.AtMs != 9 {
					t.Errorf("%+v", c.Fire)
				}
			}},
		{"fire without a time: now", &Command{Type: CmdFire, Fire: &Fire{}}, LeaderInputs{}, nil,
			func(t *testing.T, c *Command, _ Prepared) {
				if c.Fire.AtMs != nowMs {
					t.Errorf("%+v", c.Fire)
				}
			}},
		{"cancel, retry, node, executor, pause: now", &Command{Type: CmdCancel, Cancel: &Cancel{}}, LeaderInputs{}, nil,
			func(t *testing.T, c *Command, _ Prepared) {
				for _, o := range []*Command{{Type: CmdRetry, Retry: &Retry{}}, {Type: CmdNode, Node: &Node{}}, {Type: CmdExecutor, Executor: &ExecutorChange{}}, {Type: CmdPause, Pause: &Pause{}}} {
					Prepare(o, now, LeaderInputs{})
					if o.Retry == nil && o.Node == nil && o.Executor == nil && o.Pause == nil {
						t.Fatal("no command")
					}
					at := map[CommandType]int64{}
					switch o.Type {
					case CmdRetry:
						at[o.Type] = o.Retry.AtMs
					case CmdNode:
						at[o.Type] = o.Node.UpdateMs
					case CmdExecutor:
						at[o.Type] = o.Executor.AtMs
					case CmdPause:
						at[o.Type] = o.Pause.AtMs
					}
					if at[o.Type] != nowMs {
						t.Errorf("type %d: at %d", o.Type, at[o.Type])
					}
				}
				if c.Cancel.AtMs != nowMs {
					t.Errorf("%+v", c.Cancel)
				}
			}},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			sched := every
			if r.name == "success, recurring, missed slots: skipped reported" {
				sched.skip = 2
			}
			sched.repeats = 3
			in := r.in
			in.Backoff, in.ProbeMin, in.ProbeMax = doubling{}, 100*time.Millisecond, 5*time.Second
			in.Schedule = func(*Spec) (Schedule, error) {
				if r.schedErr != nil {
					return nil, r.schedErr
				}
				return sched, nil
			}
			Prepare(r.cmd, now, in)
			p := Prepare(r.cmd, now, in) // idempotent: the next leader prepares the same command again
			r.check(t, r.cmd, p)
		})
	}
}

func TestSubmitDue(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_000)
	for _, tc := range []struct {
		spec Spec
		due  time.Time
		ok   bool
	}{
		{Spec{}, now, true},
		{Spec{DelayNs: 5}, now.Add(5), true},
		{Spec{RunAtMs: 7, DelayNs: 5}, time.UnixMilli(7), true},
		{Spec{EveryNs: 1, DelayNs: 5}, now.Add(5), true},
		{Spec{Cron: "@daily"}, time.Time{}, false},
	} {
		due, ok := SubmitDue(&tc.spec, now)
		if !due.Equal(tc.due) || ok != tc.ok {
			t.Errorf("%+v: %v %v, want %v %v", tc.spec, due, ok, tc.due, tc.ok)
		}
	}
}

// TestOutcomeNames: the log names, the metric labels, and which outcomes
// are failed attempts.
func TestOutcomeNames(t *testing.T) {
	for o, want := range map[Outcome][3]string{
		OutcomeSuccess: {"success", "success", ""}, OutcomeRetryable: {"retryable", "failed", "failed"},
		OutcomePermanent: {"permanent", "permanent", ""}, OutcomeTimeout: {"timeout", "timeout", "failed"},
		OutcomeBusy: {"busy", "snoozed", ""}, OutcomeLost: {"lost", "failed", "failed"}, OutcomeUnavailable: {"unavailable", "unavailable", ""},
		OutcomeAccepted: {"accepted", "accepted", ""}, OutcomeCancelled: {"cancelled", "cancelled", ""}, 0: {"Outcome(0)", "failed", ""},
	} {
		failed := ""
		if o.Failed() {
			failed = "failed"
		}
		if got := [3]string{o.String(), o.MetricLabel(), failed}; got != want {
			t.Errorf("%d: %q, want %q", uint8(o), got, want)
		}
	}
}

func TestCeilMsNeverEarly(t *testing.T) {
	base := time.UnixMilli(1_700_000_000_000)
	for _, d := range []time.Duration{0, 1, time.Microsecond, 999 * time.Microsecond, time.Millisecond, time.Millisecond + 1} {
		tt := base.Add(d)
		ms := CeilMs(tt)
		if time.UnixMilli(ms).Before(tt) {
			t.Errorf("CeilMs(%v) = %d is before it", d, ms)
		}
		if time.UnixMilli(ms).Sub(tt) >= time.Millisecond {
			t.Errorf("CeilMs(%v) = %d rounds up by a whole millisecond or more", d, ms)
		}
	}
}

// everySlot: a slot stored within a millisecond of its grid point stands
// for that point; one stored off the grid (drifted before the rule) gives
// a next run at least an interval (less 2 ms) after it, back on the grid;
// a task with no start keeps its stored slot.
func TestEverySlot(t *testing.T) {
	every := 10 * time.Second / 3
	task := &Task{Spec: Spec{EveryNs: int64(every)}, CreatedMs: 1_000_000}
	start := time.UnixMilli(1_000_001)
	for k := range 5000 {
		p := start.Add(time.Duration(k) * every)
		for _, off := range []time.Duration{-999 * time.Microsecond, 0, 999 * time.Microsecond} {
			if got := everySlot(task, p.Add(off)); !got.Equal(p) {
				t.Fatalf("k=%d off %v: %v, want %v", k, off, got.Sub(start), p.Sub(start))
			}
		}
	}
	for _, off := range []time.Duration{3 * time.Millisecond, time.Second, 2 * time.Second, 3333 * time.Millisecond} {
		stored := start.Add(100*every + off)
		got := everySlot(task, stored)
		if next := got.Add(every); next.Before(stored.Add(every-2*time.Millisecond)) || (got.Sub(start))%every != 0 {
			t.Errorf("stored %v off the grid: slot %v, next %v after it", off, got.Sub(start), next.Sub(stored))
		}
	}
	if got := everySlot(&Task{Spec: Spec{EveryNs: int64(every)}}, start); !got.Equal(start) {
		t.Errorf("no start: %v", got)
	}
	ra := &Task{Spec: Spec{EveryNs: int64(every), RunAtMs: 5_000_000}, CreatedMs: 1_000_000}
	if got := everySlot(ra, time.UnixMilli(5_000_000).Add(3*every+time.Millisecond)); !got.Equal(time.UnixMilli(5_000_000).Add(3 * every)) {
		t.Errorf("run_at grid: %v", got)
	}
}
