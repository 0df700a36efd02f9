package scheduler

import (
	"github.com/axsched/ax/engine"
	"github.com/axsched/ax/raftfsm"
)

// probe is the breaker attempt of a fired attempt of task id, in
// Scheduler.probes, with the task's epoch and run when it was fired.
type probe struct {
	id      string
	epoch   uint64
	run     int
	attempt *engine.BreakerAttempt
	// runMs is, for a retry, when its run's first attempt was fired
	// (Unix ms, leader time): a success of the handler after it says the
	// executor worked while this run failed (reportProbe). 0 for the
	// run's first attempt.
	runMs int64
}

// newProbe returns the probe of the attempt of t (WAITING, about to be
// fired) that breaker attempt ba allowed.
func newProbe(t *raftfsm.Task, ba *engine.BreakerAttempt) *probe {
	p := &probe{id: t.ID, epoch: t.Epoch, run: t.Run, attempt: ba}
	if t.Attempts > 0 {
		p.runMs = t.RunFiredMs
		if p.runMs == 0 {
			// History off for this run: the Complete that failed it, or
			// a later change (only stricter), is the best time known.
			p.runMs = t.UpdatedMs
		}
	}
	return p
}

// newBreakers makes the leader's per-handler circuit breakers; state
// changes are logged.
func (l *Scheduler) newBreakers() *engine.Breakers {
	log := l.log
	return engine.NewBreakers(l.clock, engine.BreakerOptions{
		ConsecutiveFailures: l.cfg.BreakerFailures,
		CoolDown:            l.cfg.BreakerCoolDown,
		OnStateChange: func(handler string, from, to engine.BreakerState) {
			log.Warn().Str("handler", handler).Str("from", from.String()).Str("to", to.String()).Msg("circuit breaker state changed")
		},
	})
}

// setProbe records p as the breaker attempt of the attempt of task p.id
// being fired. A probe still recorded for the task belongs to no RUNNING
// attempt (the task was WAITING when read): it is abandoned.
func (l *Scheduler) setProbe(p *probe) {
	l.mu.Lock()
	old := l.probes[p.id]
	l.probes[p.id] = p
	l.mu.Unlock()
	if old != nil {
		old.attempt.Abandon()
	}
}

// dropProbe abandons p, the breaker attempt of a Fire that did not
// apply, unless it is already gone (p nil, or reported).
func (l *Scheduler) dropProbe(p *probe) {
	if p == nil {
		return
	}
	l.mu.Lock()
	if l.probes[p.id] == p {
		delete(l.probes, p.id)
	}
	l.mu.Unlock()
	p.attempt.Abandon() // ignored if already ended
}

// noteSuccess records that an attempt of handler succeeded at atMs (the
// task's UpdatedMs after the Complete): OnEvent calls it for every
// successful Complete, on every node, so that a node that becomes leader
// knows the latest success it applied.
func (l *Scheduler) noteSuccess(handler string, atMs int64) {
	l.successMu.Lock()
	if atMs > l.lastSuccessMs[handler] {
		l.lastSuccessMs[handler] = atMs
	}
	l.successMu.Unlock()
}

// lastSuccess returns the latest success of handler noteSuccess saw (Unix
// ms), 0 if none.
func (l *Scheduler) lastSuccess(handler string) int64 {
	l.successMu.Lock()
	defer l.successMu.Unlock()
	return l.lastSuccessMs[handler]
}

// reportProbe tells the handler's breaker how the attempt that just left
// RUNNING (ev: Prev is RUNNING, t is the task after ev) ended: a failed or
// timed-out attempt counts as a failure; a success, a permanent (4xx)
// answer, a busy answer, a lost lease, a cancel or an overwrite does not.
// An unavailable executor (the request never reached it) is neither: the
// breaker attempt is abandoned, so a half-open circuit's probe is not
// used up by an executor that was being restarted.
//
// A retry that fails again does not count when the handler's executor
// answered with a success after the retry's run began (its first Fire;
// lastSuccess: the latest success this node applied, leading or not): the executor
// worked while this task failed, so the task is what fails, and the
// breaker attempt is abandoned (neither success nor failure; a half-open
// probe's slot goes to the next parked run at once). Without that, a
// task its executor fails every time (a bad payload) reopened the circuit
// after a few of its retries in a row while healthy runs waited behind
// them, and once only such retries were left the circuit let one through
// per cool-down (a real run: 150 such tasks at 3 attempts, one reaching
// DEAD every 30 s). Every run's first failure counts, and so does a
// retry of a run with no success since it began: an executor that fails
// everything still opens the circuit, and runs started after it broke
// stay parked. What is given up: the runs that were in flight when an
// executor broke, whose run began before its last success, retry one at
// a time while the circuit is half-open and no fresh run waits to probe
// (each still after its own backoff). A run's first failure counts even
// when the executor answers other tasks: a handler most of whose tasks
// fail (a review: 90 %) keeps its circuit open, its probe usually such a
// task, as any breaker on failures would.
//
// The probe is found by task id, since a task has one RUNNING attempt at
// most: by its attempt number it could not be, as a recurring task's next
// run starts at attempt 0 and an overwrite starts a new task. A recorded
// probe that is not that attempt's (another epoch or run) is abandoned.
func (l *Scheduler) reportProbe(t *raftfsm.Task, ev *raftfsm.Event) {
	l.mu.Lock()
	p := l.probes[t.ID]
	delete(l.probes, t.ID)
	l.mu.Unlock()
	if p == nil {
		return
	}
	// The ended attempt's epoch and run, as ev tells them: an overwrite
	// ended the replaced task's attempt (another epoch), and a completed
	// run of a recurring task may have moved on to the next run.
	mine := true
	switch ev.Type {
	case raftfsm.CmdSubmit:
		mine = p.epoch != t.Epoch
	case raftfsm.CmdComplete:
		mine = p.epoch == t.Epoch && (p.run == t.Run || p.run == t.Run-1 && t.State == raftfsm.StateWaiting && t.Attempts == 0)
	case raftfsm.CmdCancel:
		mine = p.epoch == t.Epoch && p.run == t.Run
	}
	if !mine || ev.Type == raftfsm.CmdComplete && ev.Outcome == raftfsm.OutcomeUnavailable {
		p.attempt.Abandon()
		return
	}
	failed := ev.Type == raftfsm.CmdComplete && (ev.Outcome == raftfsm.OutcomeRetryable || ev.Outcome == raftfsm.OutcomeTimeout)
	if failed && p.runMs > 0 && l.lastSuccess(t.Spec.Handler) > p.runMs {
		// The executor succeeded after this run began: the task fails,
		// not the executor.
		p.attempt.Abandon()
		return
	}
	p.attempt.Done(!failed)
}
