package delivery

import (
	"context"
	"time"

	"github.com/rs/zerolog"

	"github.com/axsched/ax/raftfsm"
	"github.com/axsched/ax/sidecar/delivery/callback"
)

// Executor overload and absence are backpressure, never a failed attempt
// (README "Backpressure"). A callback that could not be given to its
// executor (raftfsm.OutcomeUnavailable: nothing of the request reached it) is
// not an attempt: the executor is marked down until its next probe
// (Delivery.down, markDown: 100 ms, doubling to 5 s, reset by any answer),
// and then
//
//   - overload (EAGAIN, a connect that timed out: the executor is alive
//     but its accept queue is full): the attempt stays on this node, with
//     its lease renewed, and goes back into the executor's slot queue at
//     the next probe or as soon as the executor answers another call (no
//     Raft entry); the limiter cuts by its Backoff (engine.LimitOverload);
//   - absence (refused, no socket file): the attempt goes back to the
//     leader as raftfsm.OutcomeUnavailable with RetryAfterMs = the time to
//     the next probe; the task waits, its attempt number given back, and
//     the circuit breaker does not see it. An API-registered executor
//     absent for staleExecutorAfter is unregistered.

// downUntil returns x's down record if x is unavailable until its next
// probe, which has not come yet.
func (d *Delivery) downUntil(x *raftfsm.Executor) (downState, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.down) == 0 { // the usual case: no key built
		return downState{}, false
	}
	st, ok := d.down[x.Name+"|"+x.URL]
	return st, ok && d.clock.Now().Before(st.until)
}

// outcome describes a callback not started because x is down, at now.
func (st downState) outcome(x *raftfsm.Executor, now time.Time) callback.Outcome {
	return callback.Outcome{Kind: raftfsm.OutcomeUnavailable, Overloaded: st.overloaded,
		RetryAfter: max(st.until.Sub(now), 0), Error: "executor " + x.Name + " unavailable until its next probe"}
}

// deliverAvailable delivers the attempt to the first of xs (best first)
// that takes it; false when ctx ended first or it is not to be called
// (deliver). An executor down until its
// next probe is skipped; one found unavailable is marked down and the
// next is tried, within the same attempt (the callback never reached the
// first). When every one is down: if one of them is overloaded the
// attempt waits here for the earliest next probe (or an answer from that
// executor) and tries again; if all are absent it returns
// OutcomeUnavailable with RetryAfter = the time to the earliest probe.
func (d *Delivery) deliverAvailable(ctx context.Context, t *raftfsm.Task, r *attemptRun, xs []*raftfsm.Executor,
	log func(*zerolog.Event) *zerolog.Event) (callback.Outcome, bool) {
	for {
		var last callback.Outcome
		for _, x := range xs {
			if st, down := d.downUntil(x); down {
				last = st.outcome(x, d.clock.Now())
				continue
			}
			out, ok, tried := d.deliver(ctx, t, r, x)
			if !ok {
				return out, false
			}
			if out.Kind != raftfsm.OutcomeUnavailable {
				return out, true
			}
			last = out
			if tried {
				d.markDown(x, out.Overloaded)
				log(d.log.Debug()).Str("executor", x.Name).Str("url", x.URL).Bool("overloaded", out.Overloaded).Str("error", out.Error).
					Msg("executor unavailable; not an attempt")
			}
		}
		wait, overloaded, wake := d.nextProbe(xs)
		if !overloaded {
			last.Kind, last.Overloaded, last.RetryAfter = raftfsm.OutcomeUnavailable, false, wait
			return last, true
		}
		if wait > 0 {
			timer := d.clock.NewTimer(wait)
			select {
			case <-timer.C():
			case <-wake:
				timer.Stop()
			case <-r.waitCtx(ctx).Done(): // aborted, or draining (drain.go)
				timer.Stop()
				return callback.Outcome{}, false
			}
		}
		if xs = d.executorsFor(t.Spec.Handler); len(xs) == 0 {
			return callback.Outcome{Kind: raftfsm.OutcomeBusy, RetryAfter: time.Second, Error: "node " + d.cfg.NodeID + " has no executor for handler " + t.Spec.Handler}, true
		}
	}
}

// nextProbe returns, for executors xs that were all just found down, the
// time to the earliest next probe (0 if one is up again), whether any of
// them is overloaded (alive), and the wake channel of the earliest
// overloaded one.
func (d *Delivery) nextProbe(xs []*raftfsm.Executor) (wait time.Duration, overloaded bool, wake <-chan struct{}) {
	now := d.clock.Now()
	d.mu.Lock()
	defer d.mu.Unlock()
	wait = ProbeBackoffMax
	var first time.Time
	for _, x := range xs {
		st, ok := d.down[x.Name+"|"+x.URL]
		if !ok || !now.Before(st.until) {
			return 0, true, nil // up again, or due for a probe: try at once
		}
		wait = min(wait, st.until.Sub(now))
		if st.overloaded && (!overloaded || st.until.Before(first)) {
			overloaded, first, wake = true, st.until, st.wake
		}
	}
	if overloaded {
		wait = first.Sub(now)
	}
	return wait, overloaded, wake
}

// bounds returns the concurrency bounds of executor x's limiter: its
// registration's, or the node's defaults (Config.MinConcurrency,
// Config.Concurrency).
func (d *Delivery) bounds(x *raftfsm.Executor) (minC, maxC int) {
	maxC = d.cfg.Concurrency
	if x.MaxConcurrency > 0 {
		maxC = x.MaxConcurrency
	}
	minC = d.cfg.MinConcurrency
	if x.MinConcurrency > 0 {
		minC = x.MinConcurrency
	}
	return min(minC, maxC), maxC
}

// rebound applies new bounds to slot s at once (an executor registered
// again with other min/max concurrency); d.mu is held.
func (d *Delivery) rebound(s *slot, minC, maxC int) {
	if err := s.lim.SetBounds(minC, maxC); err != nil {
		d.log.Warn().Err(err).Str("executor", s.name).Msg("executor concurrency bounds not applied")
		return
	}
	s.minC, s.maxC = minC, maxC
	d.log.Info().Str("executor", s.name).Int("min_concurrency", minC).Int("max_concurrency", maxC).Msg("executor concurrency bounds changed")
}

// pruneExecutors brings the slots in line with this node's record rec
// (nil: read it): an executor registered with new bounds gets them at
// once; the slot of one no longer registered is dropped when idle (else
// when its last callback ends), with its down record and, unless another
// slot has its name, its metric series (ax_executor_limit,
// ax_executor_in_flight, ax_executor_queue_length).
func (d *Delivery) pruneExecutors(rec *raftfsm.Node) {
	if rec == nil {
		var err error
		if rec, err = d.store.Node(d.cfg.NodeID); err != nil || rec == nil {
			return
		}
	}
	live := make(map[string]*raftfsm.Executor, len(rec.Executors))
	for i := range rec.Executors {
		x := &rec.Executors[i]
		live[x.Name+"|"+x.URL] = x
	}
	var gone []*slot
	d.mu.Lock()
	for key, s := range d.slots {
		if x, ok := live[key]; ok {
			s.orphan.Store(false)
			if minC, maxC := d.bounds(x); minC != s.minC || maxC != s.maxC {
				d.rebound(s, minC, maxC)
			}
			continue
		}
		delete(d.down, key)
		s.mu.Lock()
		idle := s.ready.Len() == 0 && s.lim.InFlight() == 0
		s.mu.Unlock()
		if !idle {
			s.orphan.Store(true)
			continue
		}
		delete(d.slots, key)
		s.stop()
		gone = append(gone, s)
	}
	for _, g := range gone {
		kept := false
		for _, s := range d.slots {
			kept = kept || s.name == g.name
		}
		g.gmu.Lock()
		g.dropped = true
		if !kept {
			m := d.m
			m.ExecutorLimit.DeleteLabelValues(g.name)
			m.ExecutorFlight.DeleteLabelValues(g.name)
			m.ExecutorQueue.DeleteLabelValues(g.name)
		}
		g.gmu.Unlock()
	}
	d.mu.Unlock()
}
