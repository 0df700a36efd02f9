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

// reportProbe tells the handler's breaker how the attempt that just left
// RUNNING (ev: Prev is RUNNING, t is the task after ev) ended: a failed or
// timed-out attempt counts as a failure; a success, a permanent (4xx)
// answer, a busy answer, a lost lease, a cancel or an overwrite does not.
// An unavailable executor (the request never reached it) is neither: the
// breaker attempt is abandoned, so a half-open circuit's probe is not
// used up by an executor that was being restarted.
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
	p.attempt.Done(!failed)
}
