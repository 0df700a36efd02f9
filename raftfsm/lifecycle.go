package raftfsm

import (
	"fmt"
	"time"
)

// The lifecycle of a task: every rule that decides a task's next state, in
// one file, as pure functions (no I/O, no clock, no randomness: the time
// and the random draw are arguments). Two sides use it:
//
//   - The leader, before it proposes a command, fills in what only it may
//     decide (Prepare): times, a new task's due time, a retry's due time
//     after its backoff, the next run of a recurring task. A Complete's
//     decision is made from the task as the leader last read it; a stale
//     read is harmless, since the FSM checks epoch and attempt.
//   - The FSM, applying a committed command (apply.go), moves the stored
//     task with the transition functions below (submitTask … pauseTask),
//     using only what the command carries.
//
// # Transitions
//
// States × events → state. "unchanged" leaves the task as it is and
// answers it with the code given (none: the command was an idempotent
// repeat). A command naming no task answers CodeNotFound (a submit
// creates it). "attempt given back": Attempts is decremented, so the same
// attempt number is delivered again.
//
//	state            event                                     → state      rule
//	(none)           submit                                    WAITING    due at Submit.DueMs; run 1; Epoch = entry index
//	any              submit, same spec, no overwrite           unchanged  a client retrying after a lost reply
//	any              submit, other spec, no overwrite          unchanged  CodeConflict
//	any              submit with overwrite                     WAITING    new epoch; runs renumbered after the old (RunBase); Paused kept
//	WAITING          fire (its epoch, attempt Attempts+1)      RUNNING    Attempts+1, Node, FiredMs, LeaseMs; HeldBy cleared
//	not WAITING      fire, or another epoch or attempt         unchanged  CodeStale
//	RUNNING          complete success                          SUCCESS    LastError cleared; a recurring task: next run
//	RUNNING          complete success with ShardCount,
//	                   a sharded task                          RUNNING    waits for its shards: no node, no lease (shard.go)
//	RUNNING, waiting
//	  for shards     complete, lease                           unchanged  CodeStale; its last shard's end ends the run
//	RUNNING          complete permanent                        FAILED     LastError
//	RUNNING          complete busy                             WAITING    due at RetryDueMs; attempt given back; Snoozes+1; HeldBy busy
//	RUNNING          complete unavailable                      WAITING    due at RetryDueMs; attempt given back; HeldBy unavailable
//	RUNNING          complete failed (retryable/timeout/lost),
//	                   attempts left                           WAITING    due at RetryDueMs (the backoff); LastError
//	RUNNING          complete failed, last attempt             DEAD       LastError; a recurring task: next run, FailedRuns+1
//	not RUNNING      complete, or another epoch or attempt     unchanged  CodeStale (epoch 0, an app's report, matches any)
//	WAITING/RUNNING  cancel                                    CANCELLED  DueMs and LeaseMs cleared
//	terminal         cancel                                    unchanged
//	DEAD/FAILED      retry                                     WAITING    a new run (Run+1), Attempts 0, due at once
//	other            retry                                     unchanged  CodeState
//	RUNNING          lease (the current attempt)               RUNNING    LeaseMs = max(LeaseMs, now + timeout + grace)
//	other            lease, or another attempt                 unchanged  CodeStale
//	any              pause / resume a task                     same       Paused set / cleared (idempotent)
//	terminal         pause                                     unchanged  CodeState
//
// "Next run": when the leader found one (Complete.NextSlotMs != 0) a
// recurring task goes on WAITING, due at NextDueMs, its slot NextSlotMs,
// Run+1, Attempts 0; otherwise it keeps SUCCESS or DEAD. The leader finds
// one (nextRun) with the schedule's misfire rule (missed slots fire once,
// then the schedule goes on: Schedule.NextRunAfter) unless Repeats or
// UntilMs end the schedule (Schedule.Done). The slot of an every task
// whose interval is not a whole number of milliseconds is taken from its
// grid (everySlot), not from the stored slot rounded up to the
// millisecond.
//
// The leader's side (Prepare), by command:
//
//	submit    DueMs: RunAtMs; else now + DelayNs (a one-off task, or a delay);
//	          else the schedule's first slot after now. SlotMs = DueMs for a
//	          recurring task, 0 for a one-off one.
//	complete  success: next run. Failed: RetryDueMs = now + backoff of the
//	          attempt; at the last attempt (lastAttempt) also next run. Busy:
//	          RetryDueMs = now + Retry-After, at least 1 s. Unavailable:
//	          now + the node's probe backoff in [ProbeMin, ProbeMax], except
//	          a draining node's hand-back (RetryAfterMs 0, RetryDueMs set),
//	          which keeps its run's due time.
//	lease     GraceMs = LeaseGrace.
//	any       AtMs (UpdateMs) = now; a fire keeps an AtMs already set.
//
// Due times are rounded up to the millisecond, so that a task never fires
// before the instant the client asked for. Prepare is idempotent: it reads
// only fields it never writes, since the same commands may be prepared
// again by the next leader.

// Schedule is a recurring task's parsed schedule with its end, as the
// lifecycle uses it. The leader builds it from engine.Schedule and
// engine.Limits; see those for the rules.
type Schedule interface {
	// Next returns the first slot strictly after after; the zero Time
	// when there is none.
	Next(after time.Time) time.Time
	// NextRunAfter returns the slot of the run that follows the run of
	// slot prev which started at started, when it ends at now: missed
	// slots fire once (the run that ends counts as the one run of every
	// slot up to its start), and how many slots that one run skips.
	NextRunAfter(prev, started, now time.Time) (slot time.Time, skipped int)
	// Done reports whether the schedule ends after runs runs when the
	// next slot would be slot (Repeats reached, slot after Until, or no
	// slot).
	Done(runs int, slot time.Time) bool
}

// BackoffPolicy gives the wait before the retry of a failed attempt (1
// for the first) given a random draw in [0, 1) for its jitter;
// engine.Backoff implements it.
type BackoffPolicy interface {
	Delay(attempt int, rnd float64) time.Duration
}

// LeaderInputs is what Prepare needs besides the command and the time.
type LeaderInputs struct {
	// Task is the stored task a Complete is about, as the leader read it
	// (nil when absent or unreadable).
	Task *Task
	// Schedule returns the parsed schedule of a recurring task's spec; it
	// is called only when a rule needs it. A parse error is reported in
	// Prepared.ScheduleErr.
	Schedule func(*Spec) (Schedule, error)
	// Backoff is the retry backoff of Task (the default when it names
	// none, or when Task is nil); Jitter the random draw for it.
	Backoff BackoffPolicy
	Jitter  float64
	// LeaseGrace is added to every lease (Lease.GraceMs).
	LeaseGrace time.Duration
	// ProbeMin and ProbeMax bound the wait before an attempt the executor
	// was unavailable for is due again.
	ProbeMin, ProbeMax time.Duration
	// Alerts says the leader has a dead-run webhook: a Complete gets
	// Alert set (alert.go).
	Alerts bool
	// Flow is the stored flow a Complete or Cancel of a stage task is
	// about, as the leader read it (nil for other tasks, or when absent):
	// a cron flow's next slot is computed from it (flowNextSlot).
	Flow *Flow
}

// Prepared tells the leader what Prepare decided beyond the command's
// fields, for its log.
type Prepared struct {
	// ScheduleErr is set when a rule needed the schedule and it did not
	// parse (the API validates it, so this does not happen): a submit is
	// then due now, a recurring task's schedule ends.
	ScheduleErr error
	// Skipped is how many missed slots the next run of a recurring task
	// fires once for; NextSlot is that run's slot.
	Skipped  int
	NextSlot time.Time
}

// Prepare fills in the fields of c the leader decides, at now (see the
// table above). It needs in only for a submit (Schedule), a complete
// (Task, Schedule, Backoff, Jitter, ProbeMin, ProbeMax), a lease
// (LeaseGrace), a flow submit (Schedule) and, for a stage task of a cron
// flow, a complete or cancel (Flow, Schedule).
func Prepare(c *Command, now time.Time, in LeaderInputs) Prepared {
	nowMs := now.UnixMilli()
	switch c.Type {
	case CmdSubmit:
		return prepareSubmit(c.Submit, now, in)
	case CmdCancel:
		c.Cancel.AtMs = nowMs
		var p Prepared
		c.Cancel.FlowNextSlotMs, p = flowNextSlot(in.Flow, now, in)
		return p
	case CmdFire:
		if c.Fire.AtMs == 0 {
			c.Fire.AtMs = nowMs
		}
	case CmdComplete:
		return prepareComplete(c.Complete, now, in)
	case CmdNode:
		c.Node.UpdateMs = nowMs
	case CmdExecutor:
		c.Executor.AtMs = nowMs
	case CmdRetry:
		c.Retry.AtMs = nowMs
	case CmdLease:
		c.Lease.AtMs = nowMs
		c.Lease.GraceMs = in.LeaseGrace.Milliseconds()
	case CmdPause:
		c.Pause.AtMs = nowMs
	case CmdFlow:
		return prepareFlow(c.Flow, now, in)
	}
	return Prepared{}
}

// ReadsStore reports whether Prepare of c decides from what the leader
// read of its own store (LeaderInputs.Task, LeaderInputs.Flow): a Complete
// (its task; its flow for a stage task) and a Cancel of a flow's stage
// task (the flow). Such a command prepared from a store that has not yet
// applied every committed entry may decide from a stale read (a new
// leader still applying its log: the next run of a recurring task or a
// cron flow), so the leader's proposer holds it until this node has
// caught up with its term (raftstore.ProposerConfig.CaughtUp).
func ReadsStore(c *Command) bool {
	switch c.Type {
	case CmdComplete:
		return true
	case CmdCancel:
		if c.Cancel == nil {
			return false
		}
		_, ok := FlowOfTask(c.Cancel.ID)
		return ok
	}
	return false
}

// SubmitDue returns when a submit of spec at now is due, not rounded; ok
// is false for a recurring task with neither a start time nor a delay,
// whose first run is its schedule's first slot after now.
func SubmitDue(spec *Spec, now time.Time) (due time.Time, ok bool) {
	switch {
	case spec.RunAtMs != 0:
		return time.UnixMilli(spec.RunAtMs), true
	case spec.DelayNs > 0 || !spec.Recurring():
		return now.Add(time.Duration(spec.DelayNs)), true
	}
	return time.Time{}, false
}

func prepareSubmit(s *Submit, now time.Time, in LeaderInputs) (p Prepared) {
	s.AtMs = now.UnixMilli()
	if due, ok := SubmitDue(&s.Spec, now); ok {
		s.DueMs = CeilMs(due)
	} else if sched, err := in.Schedule(&s.Spec); err != nil {
		p.ScheduleErr = err
		s.DueMs = s.AtMs
	} else { // a recurring task without a start: its first slot
		s.DueMs = CeilMs(sched.Next(now))
	}
	s.SlotMs = 0
	if s.Spec.Recurring() {
		s.SlotMs = s.DueMs
	}
	return p
}

func prepareComplete(x *Complete, now time.Time, in LeaderInputs) (p Prepared) {
	x.AtMs = now.UnixMilli()
	x.NextSlotMs, x.NextDueMs = 0, 0
	x.Alert = in.Alerts
	var fp Prepared
	x.FlowNextSlotMs, fp = flowNextSlot(in.Flow, now, in)
	defer func() {
		if p.ScheduleErr == nil {
			p.ScheduleErr = fp.ScheduleErr
		}
	}()
	t := in.Task
	switch {
	case x.Outcome == OutcomeSuccess:
		p = nextRun(x, t, now, in)
	case x.Outcome.Failed():
		x.RetryDueMs = CeilMs(now.Add(in.Backoff.Delay(x.Attempt, in.Jitter)))
		if t != nil && lastAttempt(t, x.Attempt) {
			p = nextRun(x, t, now, in) // the run is DEAD: a recurring task goes on
		}
	case x.Outcome == OutcomeBusy:
		// Computed from RetryAfterMs, never from RetryDueMs: Prepare must
		// be idempotent, because propose resends the same commands
		// after a leadership change.
		wait := max(time.Duration(x.RetryAfterMs)*time.Millisecond, time.Second)
		x.RetryDueMs = CeilMs(now.Add(wait))
	case x.Outcome == OutcomeUnavailable:
		if x.RetryAfterMs == 0 && x.RetryDueMs > 0 {
			// A draining node hands back an attempt it had not started:
			// due again at its run's due time.
			break
		}
		// The node's probe backoff (RetryAfterMs), from RetryAfterMs for
		// the same reason as busy.
		wait := min(max(time.Duration(x.RetryAfterMs)*time.Millisecond, in.ProbeMin), in.ProbeMax)
		x.RetryDueMs = CeilMs(now.Add(wait))
	}
	return p
}

// lastAttempt is the DEAD rule: a failed attempt number attempt of t ends
// its run when it was the last one its spec allows.
func lastAttempt(t *Task, attempt int) bool { return attempt >= t.Spec.MaxAttempts }

// nextRun decides the next run of a recurring task whose run ends now
// (success, or DEAD) into x.NextSlotMs and x.NextDueMs: the schedule's
// next slot after the run's slot, with the misfire rule, unless the
// schedule ends. A one-off task, or a Complete for another attempt than
// the task's, has none.
//
// t is the leader's read of its own store, which may not have applied the
// Fire of x's attempt yet (a leader still applying its log after an
// election, or whose FSM lags its commits) while the node that ran the
// attempt had: t is then WAITING, of x's epoch, one attempt short. Such a
// read decides the next run too, from the attempt's due time (its Fire's
// time is not known here): deciding none, as for a stale Complete, ended
// the schedule for good when every node applied the Complete to the fired
// task (SUCCESS, then purged at its retention: a review lost two recurring
// tasks of 400 in a few elections). A Complete that is stale indeed
// changes nothing whatever is decided (the FSM checks epoch and attempt).
func nextRun(x *Complete, t *Task, now time.Time, in LeaderInputs) (p Prepared) {
	if t == nil || !t.Spec.Recurring() {
		return p
	}
	started := time.UnixMilli(t.FiredMs)
	switch {
	case t.Attempts == x.Attempt:
	case t.State == StateWaiting && t.Epoch == x.Epoch && t.Attempts == x.Attempt-1:
		started = time.UnixMilli(t.DueMs) // before the Fire of x's attempt
	default:
		return p
	}
	sched, err := in.Schedule(&t.Spec)
	if err != nil {
		p.ScheduleErr = err
		return p
	}
	prev := time.UnixMilli(t.SlotMs)
	if t.SlotMs == 0 {
		prev = time.UnixMilli(t.DueMs)
	}
	if t.Spec.EveryNs%int64(time.Millisecond) != 0 {
		// Slots a whole number of milliseconds apart are exact as
		// stored; others are rounded, and must not be stepped from.
		prev = everySlot(t, prev)
	}
	// The run that ends was the one run of every slot up to its start
	// (FiredMs): only slots since then may fire at once.
	slot, skipped := sched.NextRunAfter(prev, started, now)
	if sched.Done(max(t.Run, 1), slot) {
		return p
	}
	x.NextSlotMs = CeilMs(slot)
	x.NextDueMs = x.NextSlotMs
	return Prepared{Skipped: skipped, NextSlot: slot}
}

// everySlot returns the exact slot of the run of every task t whose slot
// is stored as stored (rounded up to the millisecond): the point of t's
// grid it stands for. The grid is its start plus whole multiples of the
// interval, the start being run_at, else the submit's time plus the
// delay (without either the first run is one interval after the submit).
// The submit's time is stored in milliseconds, rounded down, so the grid
// starts 1 ms after it: never before the instant the submit asked for.
// nextRun steps from this slot when the interval is not a whole number of
// milliseconds (10s/3): stepped from the stored slot, such a schedule
// drifted late by up to 1 ms a run. (Whole milliseconds are stepped from
// the stored slot, which is exact: the first one is rounded up from the
// submit's instant, and each next one an interval later.)
//
// A slot of the grid is stored less than 1 ms from its point, so the
// point is the first one at or after stored − 2 ms. A slot stored off the
// grid (drifted before this rule) gets the first point from there: its
// next run is at least an interval (less 2 ms) after it, and on the grid.
// stored itself is returned when t has no usable start, or when it is
// before the start.
func everySlot(t *Task, stored time.Time) time.Time {
	var start time.Time
	switch {
	case t.Spec.RunAtMs != 0:
		start = time.UnixMilli(t.Spec.RunAtMs)
	case t.CreatedMs != 0:
		start = time.UnixMilli(t.CreatedMs + 1).Add(time.Duration(t.Spec.DelayNs))
	default:
		return stored
	}
	const tolerance = 2 * time.Millisecond
	every := time.Duration(t.Spec.EveryNs)
	d := stored.Sub(start) - tolerance
	switch {
	case d < -2*tolerance: // before the grid's start: not of this grid
		return stored
	case d <= 0:
		return start
	}
	return start.Add((d + every - 1) / every * every)
}

// CeilMs returns t in Unix milliseconds, rounded up: the due times the
// leader writes, so that a task never fires before the instant asked for.
func CeilMs(t time.Time) int64 {
	ms := t.UnixMilli()
	if t.Sub(time.UnixMilli(ms)) > 0 {
		ms++
	}
	return ms
}

// The FSM's side. Each function takes the stored task (never nil: a
// missing one is CodeNotFound before) and the command, and returns the
// task after it, or nil and the Result when the command changes nothing.
// The caller stores the new task (putTask) and emits the event.

// submitTask: prev is nil for a new id; index is the entry's Raft index.
func submitTask(prev *Task, s *Submit, index uint64) (*Task, Result) {
	if prev != nil {
		if prev.Spec.Equal(s.Spec) && !s.Overwrite {
			return nil, Result{Task: prev}
		}
		if !s.Overwrite {
			return nil, Result{Code: CodeConflict, Task: prev}
		}
	}
	t := &Task{
		ID: s.ID, Spec: s.Spec, Epoch: index, State: StateWaiting, DueMs: s.DueMs,
		Run: 1, SlotMs: s.SlotMs, CreatedMs: s.AtMs, UpdatedMs: s.AtMs,
	}
	if prev != nil {
		// The new spec starts a new run after the replaced task's latest
		// one, even if that run was never delivered (a busy answer leaves
		// no attempt counted): an executor de-duplicating on (id, run,
		// attempt) must not take its first attempt for an old delivery.
		t.RunBase = prev.RunNumber()
		// A pause is the operator's, not the spec's: a redeploy that
		// submits the task again with overwrite does not lift it.
		t.Paused = prev.Paused
	}
	return t, Result{Created: true, Task: t}
}

func cancelTask(prev *Task, c *Cancel) (*Task, Result) {
	if prev.State.Terminal() {
		return nil, Result{Task: prev}
	}
	t := *prev
	t.State, t.DueMs, t.LeaseMs = StateCancelled, 0, 0
	t.UpdatedMs, t.FinishedMs = c.AtMs, c.AtMs
	return &t, Result{Task: &t}
}

func fireTask(prev *Task, f *Fire) (*Task, Result) {
	if prev.State != StateWaiting || prev.Epoch != f.Epoch || prev.Attempts != f.Attempt-1 {
		return nil, Result{Code: CodeStale, Task: prev}
	}
	t := *prev
	t.HeldBy = 0
	t.State, t.Attempts, t.Node = StateRunning, f.Attempt, f.Node
	t.FiredMs, t.LeaseMs, t.UpdatedMs = f.AtMs, f.LeaseMs, f.AtMs
	return &t, Result{Task: &t}
}

// completeTask returns ErrBadEntry (wrapped) for an outcome that ends no
// attempt (unknown, accepted, cancelled).
func completeTask(prev *Task, c *Complete) (*Task, Result, error) {
	if prev.State != StateRunning || (c.Epoch != 0 && prev.Epoch != c.Epoch) || prev.Attempts != c.Attempt || prev.AwaitingShards() {
		return nil, Result{Code: CodeStale, Task: prev}, nil
	}
	t := *prev
	t.UpdatedMs, t.LeaseMs = c.AtMs, 0
	switch {
	case c.Outcome == OutcomeSuccess && prev.Spec.Shards != nil && c.ShardCount > 0:
		// The run's shards start (shard.go): it waits for them, on no
		// node and with no lease.
		t.Node, t.LastError = "", ""
		t.Shards = &ShardRun{Total: prev.Spec.Shards.Bound(c.ShardCount), NextSlotMs: c.NextSlotMs, NextDueMs: c.NextDueMs}
	case c.Outcome == OutcomeSuccess:
		t.State, t.FinishedMs, t.LastError = StateSuccess, c.AtMs, ""
		toNextRun(&t, c)
	case c.Outcome == OutcomePermanent:
		t.State, t.FinishedMs, t.LastError = StateFailed, c.AtMs, c.Error
	case c.Outcome == OutcomeBusy:
		// A busy answer is not a failed attempt: the same attempt number is
		// delivered again at RetryDueMs.
		t.State, t.DueMs, t.Snoozes = StateWaiting, c.RetryDueMs, t.Snoozes+1
		t.Attempts--
		t.HeldBy = OutcomeBusy
	case c.Outcome == OutcomeUnavailable:
		// The executor was unavailable before the request was written: the
		// callback did not run, so the attempt is given back and the
		// same attempt number is delivered again at RetryDueMs. LastError
		// stays that of the last failed attempt, as with a busy answer.
		t.State, t.DueMs = StateWaiting, c.RetryDueMs
		t.Attempts--
		t.HeldBy = OutcomeUnavailable
	case c.Outcome.Failed():
		t.LastError = c.Error
		if lastAttempt(&t, t.Attempts) {
			t.State, t.FinishedMs = StateDead, c.AtMs
			if t.Spec.Recurring() && c.NextSlotMs != 0 {
				t.FailedRuns++
			}
			toNextRun(&t, c)
		} else {
			t.State, t.DueMs = StateWaiting, c.RetryDueMs
		}
	default:
		return nil, Result{}, fmt.Errorf("outcome %d: %w", c.Outcome, ErrBadEntry)
	}
	if t.State != StateWaiting {
		t.DueMs = 0
	}
	return &t, Result{Task: &t}, nil
}

// toNextRun moves a recurring task whose run ended (SUCCESS or DEAD) to
// the next run the leader decided (nextRun): WAITING, due at NextDueMs,
// attempts reset. A one-off task, or a schedule that ended (NextSlotMs 0),
// keeps its terminal state.
func toNextRun(t *Task, c *Complete) {
	if !t.Spec.Recurring() || c.NextSlotMs == 0 {
		return
	}
	t.State, t.DueMs, t.SlotMs = StateWaiting, c.NextDueMs, c.NextSlotMs
	t.Run++
	t.Attempts, t.FinishedMs = 0, 0
}

func retryTask(prev *Task, r *Retry) (*Task, Result) {
	if prev.State != StateDead && prev.State != StateFailed {
		return nil, Result{Code: CodeState, Task: prev}
	}
	t := *prev
	// A re-run is a new run: (id, run, attempt) stays unique, so an
	// executor that de-duplicates on it does not drop the re-run.
	t.State, t.Attempts, t.DueMs, t.Run = StateWaiting, 0, r.AtMs, max(t.Run, 1)+1
	t.UpdatedMs, t.FinishedMs, t.LeaseMs = r.AtMs, 0, 0
	return &t, Result{Task: &t}
}

func leaseTask(prev *Task, l *Lease) (*Task, Result) {
	if prev.State != StateRunning || prev.Attempts != l.Attempt || prev.AwaitingShards() {
		return nil, Result{Code: CodeStale, Task: prev}
	}
	t := *prev
	t.LeaseMs = max(prev.LeaseMs, l.AtMs+time.Duration(prev.Spec.TimeoutNs).Milliseconds()+l.GraceMs)
	t.UpdatedMs = l.AtMs
	return &t, Result{Task: &t}
}

// pauseTask pauses or resumes one task (p.ID set).
func pauseTask(prev *Task, p *Pause) (*Task, Result) {
	if p.Paused && prev.State.Terminal() {
		return nil, Result{Code: CodeState, Task: prev}
	}
	if prev.Paused == p.Paused {
		return nil, Result{Task: prev}
	}
	t := *prev
	t.Paused, t.UpdatedMs = p.Paused, p.AtMs
	return &t, Result{Task: &t}
}
