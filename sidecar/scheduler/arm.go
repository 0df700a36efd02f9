package scheduler

import (
	"time"

	"github.com/axsched/ax/engine"
	"github.com/axsched/ax/raftfsm"
)

// loadWindow extends the load window to now + LoadWindow: it arms the
// WAITING tasks due after the old horizon and up to the new one (at
// start, every task due up to it, overdue ones included) and arms the
// next load for half a window before the new horizon. The horizon moves
// before the store is read, so a task applied meanwhile is armed either
// by onEvent (applied after the move) or by the scan (applied before it:
// the scan's read view is newer). A timer armed from a view that is
// already stale is harmless: fire checks every task again. It returns
// how many tasks it armed.
func (l *Scheduler) loadWindow(timers *engine.Timers) (int, error) {
	now := l.clock.Now()
	l.mu.Lock()
	if l.timers != timers { // stopped leading meanwhile
		l.mu.Unlock()
		return 0, nil
	}
	from := l.horizonMs.Load()
	to := max(from, now.Add(l.cfg.LoadWindow).UnixMilli())
	l.horizonMs.Store(to)
	l.mu.Unlock()
	armed := 0
	err := l.store.DueBetween(from, to, func(id string, dueMs int64) bool {
		timers.Arm(dueKeyPrefix+id, l.fireAt(dueMs))
		armed++
		return true
	})
	if err != nil {
		// Load the same stretch again soon; what was armed stays armed.
		l.mu.Lock()
		if l.timers == timers && l.horizonMs.Load() == to {
			l.horizonMs.Store(from)
		}
		l.mu.Unlock()
		timers.Arm(windowKey, now.Add(windowRetry))
		return armed, err
	}
	timers.Arm(windowKey, time.UnixMilli(to).Add(-l.cfg.LoadWindow/2))
	return armed, nil
}

// refill loads the next stretch of the load window (the windowKey timer).
func (l *Scheduler) refill() {
	timers := l.currentTimers()
	if timers == nil {
		return
	}
	n, err := l.loadWindow(timers)
	if err != nil {
		l.log.Error().Err(err).Msg("loading the next window of tasks failed; retrying")
		return
	}
	l.log.Debug().Int("armed", n).Msg("leader loaded the next window of tasks")
}

// armDue arms the due timer of a WAITING task if its due time is inside
// the load window, and drops it otherwise (the window will reach it).
func (l *Scheduler) armDue(timers *engine.Timers, id string, dueMs int64) {
	if dueMs <= l.horizonMs.Load() {
		timers.Arm(dueKeyPrefix+id, l.fireAt(dueMs))
	} else {
		timers.Cancel(dueKeyPrefix + id)
	}
}

// fireAt is when the leader proposes the Fire of a run due at dueMs:
// FireLead before it, so that the Raft commit of the Fire (a few
// milliseconds, more under load) happens before the due time instead of
// adding to the lateness. The delivering node holds the attempt until the
// due time by its own clock, so a run is still never delivered early.
func (l *Scheduler) fireAt(dueMs int64) time.Time {
	return time.UnixMilli(dueMs).Add(-l.cfg.FireLead)
}

func (l *Scheduler) rearm(key string, at time.Time) {
	if timers := l.currentTimers(); timers != nil {
		timers.Arm(key, at)
	}
}

// OnEvent keeps the timers, the parked runs, the running counts and the
// circuit breakers in step with one applied change of the FSM. The node
// calls it for every event in log order (after OnPauseEvent); it does
// nothing while not leading but watch node changes.
func (l *Scheduler) OnEvent(ev *raftfsm.Event) {
	if ev.Type == raftfsm.CmdComplete && ev.Outcome == raftfsm.OutcomeSuccess && ev.Task != nil {
		// On every node, leading or not: a node that becomes leader
		// knows the handler's latest success (reportProbe).
		l.noteSuccess(ev.Task.Spec.Handler, ev.Task.UpdatedMs)
	}
	if ev.Task == nil {
		if ev.Restored {
			l.mu.Lock()
			clear(l.copies) // the store was replaced
			l.mu.Unlock()
		}
		if ev.Node != nil || ev.Restored {
			if l.currentTimers() != nil {
				l.nodesChanged() // an executor may have come or gone
			}
		}
		return
	}
	timers := l.currentTimers()
	if timers == nil {
		return
	}
	t := ev.Task
	// The task changed: a parked copy of it is stale. Its due timer
	// (armed below) reads it again.
	l.mu.Lock()
	l.keepCopyLocked(t)
	l.dequeueLocked(t.ID)
	if r := l.reading[t.ID]; r != nil {
		r.gen++
	}
	if ev.Type == raftfsm.CmdFire {
		l.settleFireLocked(t.ID) // applied: now counted as RUNNING
	}
	ended := ev.Prev == raftfsm.StateRunning && ev.Type != raftfsm.CmdLease
	if ended && ev.PrevNode != "" && ev.PrevNode != l.cfg.NodeID {
		l.sinceCount(ev.PrevNode, t.Spec.Handler, -1) // a unit of room there
	}
	l.mu.Unlock()
	if ended {
		// The attempt ended (or was cancelled / replaced): report it to
		// the handler's circuit breaker.
		l.reportProbe(t, ev)
	}
	if ev.Type == raftfsm.CmdComplete {
		switch {
		case t.State == raftfsm.StateDead:
			if l.counters != nil {
				l.counters.Dead(t.Spec.Handler)
			}
		case t.State == raftfsm.StateWaiting && ev.Outcome != raftfsm.OutcomeBusy && ev.Outcome != raftfsm.OutcomeUnavailable &&
			ev.Outcome != raftfsm.OutcomeSuccess:
			if l.counters != nil {
				l.counters.Retry(t.Spec.Handler)
			}
		}
	}
	l.trackRunning(t)
	if ended {
		// A unit of its node's capacity and of the handler's cap is free,
		// and a half-open circuit's probe may have ended.
		l.wake(t.Spec.Handler)
	}
	if t.State == raftfsm.StateWaiting && t.DueMs <= l.clock.Now().Add(l.cfg.FireLead).UnixMilli() {
		l.park(t.ID, t.Spec.Handler, t.Spec.Priority)
	} else {
		l.unpark(t.ID)
	}
	switch t.State {
	case raftfsm.StateWaiting:
		timers.Cancel(leaseKeyPrefix + t.ID)
		l.armDue(timers, t.ID, t.DueMs)
	case raftfsm.StateRunning:
		timers.Cancel(dueKeyPrefix + t.ID)
		if t.AwaitingShards() { // no attempt: its shards' ends end the run
			timers.Cancel(leaseKeyPrefix + t.ID)
		} else {
			timers.Arm(leaseKeyPrefix+t.ID, time.UnixMilli(t.LeaseMs))
		}
	default:
		timers.Cancel(dueKeyPrefix + t.ID)
		timers.Cancel(leaseKeyPrefix + t.ID)
	}
}
