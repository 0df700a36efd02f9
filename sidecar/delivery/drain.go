package delivery

import (
	"context"
	"time"

	"github.com/axsched/ax/raftfsm"
)

// A graceful stop drains delivery: BeginDrain ends the wait of every
// attempt not started yet (its due time, a slot, a probe), which hands it
// back to the leader (handBack) instead of calling its executor, and
// hands back at once any attempt assigned from then on; callbacks in
// flight go on, and WaitIdle waits for them and their reports.

// BeginDrain makes delivery take no new attempts: attempts not started
// yet (and any assigned from now on) are handed back to the leader;
// callbacks in flight go on.
func (d *Delivery) BeginDrain() {
	d.mu.Lock()
	d.draining = true
	d.mu.Unlock()
	d.drainCancel()
}

// isDraining reports whether BeginDrain was called.
func (d *Delivery) isDraining() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.draining
}

// waitContext returns the context an attempt waits in (for its due time,
// a slot or a probe): ctx, ended also when the node begins to drain or
// end is called; stop releases it.
func (d *Delivery) waitContext(ctx context.Context) (wctx context.Context, end, stop func()) {
	wctx, cancel := context.WithCancel(ctx)
	after := context.AfterFunc(d.drainCtx, cancel)
	return wctx, cancel, func() { after(); cancel() }
}

// handBack gives an attempt that was assigned here but not started back to
// the leader: an unavailable outcome (the attempt number is given back,
// not counted) due again at the run's own due time (never early), at once
// if that has passed; or, when its handler's circuit is open on this node
// (and the node is not stopping), at the time allowCall or wakeCircuit
// set, counted in ax_attempts_total as circuit_open.
func (d *Delivery) handBack(t *raftfsm.Task, r *attemptRun) {
	due := max(t.FiredMs, t.DueMs, 1)
	label, why := "unavailable", "node "+d.cfg.NodeID+" is stopping"
	switch circuitMs := r.circuitDueMs.Load(); {
	case r.pausedBack.Load():
		why = "paused before its callback started on node " + d.cfg.NodeID
	case circuitMs != 0 && !d.isDraining():
		label, why = "circuit_open", "the circuit of handler "+t.Spec.Handler+" is open on node "+d.cfg.NodeID
		due = max(due, circuitMs)
	}
	d.m.attempt(t.Spec.Handler, label, 0)
	d.report(&raftfsm.Complete{
		ID: t.ID, Epoch: r.epoch, Attempt: r.attempt, Outcome: raftfsm.OutcomeUnavailable,
		RetryDueMs: due, Error: why,
	}, t)
}

// WaitIdle waits until no attempt goroutine runs here (callbacks finished
// and reported, attempts handed back), or ctx ends; it returns how many
// were still running.
func (d *Delivery) WaitIdle(ctx context.Context) int {
	tick := d.clock.NewTimer(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if k := int(d.active.Load()); k == 0 || ctx.Err() != nil {
			return k
		}
		select {
		case <-ctx.Done():
		case <-tick.C():
			tick.Reset(10 * time.Millisecond)
		}
	}
}

// Active returns the attempt goroutines running here: what WaitIdle
// waits for.
func (d *Delivery) Active() int { return int(d.active.Load()) }
