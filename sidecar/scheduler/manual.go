package scheduler

import (
	"context"
	"math"
	"time"

	"github.com/axsched/ax/engine"
)

// The calls below let a test of a whole node drive the leader's timers by
// hand: nothing in a running node calls them.

// LeadManually begins a term without the barrier, the store scan and the
// timers' goroutine: timers (which the caller never runs) take the arming,
// every WAITING task is inside the load window, and CaughtUp is closed
// for Raft's current term (the caller's store has what it applied).
func (l *Scheduler) LeadManually(timers *engine.Timers) {
	var term uint64
	if l.raft != nil {
		term = l.raft.CurrentTerm()
	}
	l.mu.Lock()
	l.timers, l.loaded = timers, true
	l.mu.Unlock()
	l.horizonMs.Store(math.MaxInt64)
	l.caughtUp(timers, term)
}

// FireDue does what the timers do when the due timers of ids expire: it
// takes the timers and fires the runs (parks them, drains the queues,
// proposes their Fires), returning once the Fires are applied.
func (l *Scheduler) FireDue(ctx context.Context, ids ...string) {
	if t := l.currentTimers(); t != nil {
		for _, id := range ids {
			t.Cancel(dueKeyPrefix + id)
		}
	}
	l.fire(ctx, ids, nil)
}

// Dispatch drains the woken handlers' parked runs, as the dispatch loop
// does when woken, and returns once their Fires are applied.
func (l *Scheduler) Dispatch(ctx context.Context) { l.dispatch(ctx) }

// DueTimer returns when task id's due timer is armed, and whether it is.
func (l *Scheduler) DueTimer(id string) (time.Time, bool) { return l.timer(dueKeyPrefix + id) }

// LeaseTimer returns when task id's lease timer is armed, and whether it is.
func (l *Scheduler) LeaseTimer(id string) (time.Time, bool) { return l.timer(leaseKeyPrefix + id) }

func (l *Scheduler) timer(key string) (time.Time, bool) {
	t := l.currentTimers()
	if t == nil {
		return time.Time{}, false
	}
	return t.Due(key)
}
