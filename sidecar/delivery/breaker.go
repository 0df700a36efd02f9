package delivery

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/axsched/ax/engine"
	"github.com/axsched/ax/raftfsm"
	"github.com/axsched/ax/sidecar/delivery/callback"
	"github.com/axsched/ax/sidecar/load"
)

// The node's own circuit breakers. The leader's breaker (package
// scheduler) stops firing a handler's runs once its circuit opens, but the
// attempts it had already handed to a node (up to the executor's limit in
// flight and a queue of max_concurrency) would still be called there one
// after the other, each until its timeout. So each node keeps an
// engine.Breakers of its own, per handler, with the leader's options, fed
// by the callbacks this node makes; only time-outs count as failures
// there (callFailed). Its state is this node's alone: nothing of it is
// replicated, and no command is added; the node's load report tells the
// leader which circuits are open here (OpenCircuits), so that it routes
// their handlers' runs to other nodes meanwhile.
//
// While this node's circuit of a handler is open, an attempt of that
// handler is not called: when it is granted a slot (or before it queues
// for one) it goes back to the leader as a Complete UNAVAILABLE (not an
// attempt; the leader's breaker ignores it) due at the end of the node's
// cool-down, and the slot goes to the next waiting attempt at once. When
// the circuit opens, the attempts of the handler that wait here and have
// not started (for a slot, their due time, an executor's probe) are woken
// and handed back at once, so that none waits for a slot that only a
// hung callback's time-out would free. Half-open, engine.Breakers lets
// one probe through; the attempts that meet its probe out are handed back
// due when that probe's callback ends at the latest (its deadline).

// circuits is this node's breakers and what delivery keeps beside them.
type circuits struct {
	b *engine.Breakers
	// probeTimeout is the breakers' ProbeTimeout (with its default).
	probeTimeout time.Duration
	// nOpen is len(open), read without the lock: with no circuit open
	// (the usual case) an attempt takes no lock to learn it.
	nOpen atomic.Int32
	// mu guards open and probes; it is a leaf: nothing else is locked, and
	// the breakers are not called, while it is held.
	mu sync.Mutex
	// open holds, per handler whose circuit is open here, the end of its
	// cool-down.
	open map[string]time.Time
	// probes holds, per handler whose half-open probe is out here, the
	// probe and the deadline of its callback.
	probes map[string]probeOut
}

// probeOut is a half-open probe out on this node (circuits.probes).
type probeOut struct {
	a        *engine.BreakerAttempt
	deadline time.Time
}

// newCircuits makes d's breakers from cfg; their state changes are
// logged, and an opening wakes the handler's waiting attempts
// (circuitChanged).
func (d *Delivery) newCircuits(cfg Config) *circuits {
	opts := engine.BreakerOptions{
		ConsecutiveFailures: max(cfg.BreakerFailures, 0),
		CoolDown:            max(cfg.BreakerCoolDown, 0),
		ProbeTimeout:        max(cfg.BreakerProbeTimeout, 0),
		OnStateChange:       d.circuitChanged,
	}
	return &circuits{
		b: engine.NewBreakers(d.clock, opts), probeTimeout: opts.WithDefaults().ProbeTimeout,
		open: map[string]time.Time{}, probes: map[string]probeOut{},
	}
}

// circuitChanged is the breakers' OnStateChange: it logs the change and
// keeps circuits.open; an opening hands back the handler's attempts that
// wait here (wakeCircuit). It runs on the goroutine whose report changed
// the state, with no lock held.
func (d *Delivery) circuitChanged(handler string, from, to engine.BreakerState) {
	d.log.Warn().Str("handler", handler).Str("from", from.String()).Str("to", to.String()).
		Msg("node circuit breaker state changed")
	c := d.circ
	var until time.Time
	if to == engine.BreakerOpen {
		until = c.b.Status(handler).OpenUntil // zero if it moved on meanwhile
	}
	c.mu.Lock()
	if until.IsZero() {
		delete(c.open, handler)
	} else {
		c.open[handler] = until
	}
	c.nOpen.Store(int32(len(c.open)))
	c.mu.Unlock()
	if !until.IsZero() {
		d.wakeCircuit(handler, until)
	}
}

// wakeCircuit hands back the attempts of handler that wait on this node
// and have not started their callback (for a slot, their due time, an
// executor's probe, catching up): their wait ends (as a drain ends it),
// and run hands them back due at until. Without it an attempt queued
// behind callbacks that hang would wait for one of them to time out
// (the limiter, cut by the time-outs, may free no slot before several
// have), and one granted after the cool-down would take the node's probe
// and send back the leader's own probe until it ended.
func (d *Delivery) wakeCircuit(handler string, until time.Time) {
	var woken []func()
	d.mu.Lock()
	for _, r := range d.running {
		if r.handler == handler && r.startMs.Load() == 0 && r.endWait != nil {
			r.circuitDueMs.Store(raftfsm.CeilMs(until))
			woken = append(woken, r.endWait)
		}
	}
	d.mu.Unlock()
	for _, end := range woken {
		end()
	}
}

// circuitOpen reports whether t's handler's circuit is open on this node
// (cooling down); it then marks r to be handed back due at the cool-down's
// end. An attempt so found is handed back without queueing for a slot.
func (d *Delivery) circuitOpen(t *raftfsm.Task, r *attemptRun) bool {
	c := d.circ
	if c.nOpen.Load() == 0 {
		return false
	}
	c.mu.Lock()
	until, ok := c.open[t.Spec.Handler]
	c.mu.Unlock()
	if !ok || !d.clock.Now().Before(until) {
		return false // half-open: allowCall decides at the slot
	}
	r.circuitDueMs.Store(raftfsm.CeilMs(until))
	return true
}

// OpenCircuits lists, sorted by handler, the handlers whose circuit is
// open on this node (cooling down: until its end) or half-open with its
// probe out here (until that probe's deadline, when its outcome is known
// at the latest), for this node's load report: until then the node would
// hand their attempts back uncalled, so the leader routes them to other
// nodes. A circuit whose cool-down has ended and whose probe is not out
// is not listed, so the leader routes to the node again and the node's
// probe can go. nil when none is (or d is nil: no delivery).
func (d *Delivery) OpenCircuits() []load.Circuit {
	if d == nil || d.circ == nil {
		return nil
	}
	c := d.circ
	now := d.clock.Now()
	c.mu.Lock()
	if len(c.open) == 0 && len(c.probes) == 0 {
		c.mu.Unlock()
		return nil
	}
	until := make(map[string]time.Time, len(c.open)+len(c.probes))
	for h, u := range c.open {
		if now.Before(u) {
			until[h] = u
		}
	}
	for h, p := range c.probes {
		if _, open := until[h]; !open && now.Before(p.deadline) {
			until[h] = p.deadline
		}
	}
	c.mu.Unlock()
	if len(until) == 0 {
		return nil
	}
	out := make([]load.Circuit, 0, len(until))
	for h, u := range until {
		out = append(out, load.Circuit{Handler: h, UntilMs: raftfsm.CeilMs(u)})
	}
	slices.SortFunc(out, func(a, b load.Circuit) int { return strings.Compare(a.Handler, b.Handler) })
	return out
}

// allowCall asks this node's breaker whether attempt r of t may call its
// executor now, once it holds a slot. If it may, the returned attempt
// must be ended with endCall. If not, r is marked to be handed back:
// due at the cool-down's end while the circuit is open, or, while the
// half-open probe is out, when that probe's callback ends at the latest.
func (d *Delivery) allowCall(t *raftfsm.Task, r *attemptRun) (*engine.BreakerAttempt, bool) {
	c := d.circ
	h := t.Spec.Handler
	a, err := c.b.AllowAttempt(h)
	now := d.clock.Now()
	if err == nil {
		if a.Probe() {
			c.mu.Lock()
			c.probes[h] = probeOut{a, now.Add(time.Duration(t.Spec.TimeoutNs))}
			c.mu.Unlock()
		}
		return a, true
	}
	var open *engine.CircuitOpenError
	if !errors.As(err, &open) {
		// Not a circuit's answer (engine.Breakers returns no other):
		// call, unguarded.
		return nil, true
	}
	due := open.Until
	if due.IsZero() {
		// The half-open probe is out: its outcome decides, and it is
		// known when its callback ends, at its deadline at the latest.
		// Sooner, this attempt would only meet the probe again (and be
		// handed back again, two Raft entries each time); it is due then,
		// or, if that is unknown (the probe was let through a moment ago),
		// after this attempt's own timeout, a probe's likely length. A
		// probe out longer than ProbeTimeout is abandoned by the breakers.
		c.mu.Lock()
		due = c.probes[h].deadline
		c.mu.Unlock()
		if !due.After(now) {
			due = now.Add(time.Duration(t.Spec.TimeoutNs))
		}
		if limit := now.Add(c.probeTimeout); due.After(limit) {
			due = limit
		}
	}
	if !due.After(now) {
		// Open a moment ago by the breakers' own reckoning (Until now):
		// not due at once, or the leader would fire it straight back.
		due = now.Add(ProbeBackoffMin)
	}
	r.circuitDueMs.Store(raftfsm.CeilMs(due))
	return nil, false
}

// endCall reports the callback's outcome to this node's breaker (a nil a:
// none was asked). It is called before the callback's slot is released,
// so that the attempt granted that slot sees a circuit this outcome
// opened.
func (d *Delivery) endCall(a *engine.BreakerAttempt, t *raftfsm.Task, out callback.Outcome) {
	if a == nil {
		return
	}
	if failed, known := callFailed(t, out); !known {
		a.Abandon()
	} else {
		a.Done(!failed)
	}
	if a.Probe() {
		c := d.circ
		c.mu.Lock()
		if c.probes[t.Spec.Handler].a == a { // not a later probe's
			delete(c.probes, t.Spec.Handler)
		}
		c.mu.Unlock()
	}
}

// callFailed classifies a callback's outcome for the node's breaker. Only
// a time-out is a failure: what the node's circuit saves is the time of
// attempts that hang (an executor that takes connections and never
// answers held each queued attempt for its whole timeout, about 25 minutes
// of them at the default 30 s). A success, a 202, a busy (429/503) or
// permanent (other 4xx) answer is not a failure. known is false when the
// outcome says nothing of hanging: a quick failed answer (5xx, an error
// after the request was written, a shard count that does not parse:
// retryable for the leader, whose own breaker counts it), an unavailable
// executor (no request reached it), or a call cut short (a cancel, a
// lease expiry, the node stopping). Counting quick failures too handed
// back, behind the leader's parked retries, the runs of an executor that
// fails some tasks and runs the others: a review saw 19 probes in a row,
// over 9.5 minutes, each the retry of a task that had failed already,
// while 258 fresh runs waited.
func callFailed(t *raftfsm.Task, out callback.Outcome) (failed, known bool) {
	switch out.Kind {
	case raftfsm.OutcomeTimeout:
		return true, true
	case raftfsm.OutcomeSuccess:
		if t.Spec.Shards != nil { // ask mode: run reports a bad count as retryable
			if _, err := ParseShardCount(out.Body); err != nil {
				return false, false
			}
		}
		return false, true
	case raftfsm.OutcomeAccepted, raftfsm.OutcomeBusy, raftfsm.OutcomePermanent:
		return false, true
	}
	return false, false // retryable, unavailable, cancelled
}
