package scheduler

import (
	"context"
	"testing"
	"time"

	"github.com/axsched/ax/engine"
	"github.com/axsched/ax/raftfsm"
)

// leaderObserver hands the FSM's events to the leader, as the node does.
type leaderObserver struct{ l *Scheduler }

func (o leaderObserver) Applied(_ uint64, events []raftfsm.Event) {
	for i := range events {
		o.l.OnEvent(&events[i])
	}
}

// newProbeEnv is a windowEnv whose leader sees the FSM's events and whose
// breakers open after one failure for a 2 s cool-down.
func newProbeEnv(t *testing.T) *windowEnv {
	e := newWindowEnv(t, time.Hour)
	e.l.breakers = engine.NewBreakers(e.clock, engine.BreakerOptions{ConsecutiveFailures: 1, CoolDown: 2 * time.Second})
	e.fsm.SetObserver(leaderObserver{e.l})
	return e
}

func (e *windowEnv) apply(c raftfsm.Command) raftfsm.Result {
	e.t.Helper()
	e.index++
	return applyEntry(e.t, e.fsm, e.index, c)[0]
}

func (e *windowEnv) task(id string) *raftfsm.Task {
	e.t.Helper()
	t, err := e.fsm.Task(id)
	if err != nil {
		e.t.Fatal(err)
	}
	return t
}

// tripAndCool opens handler h's circuit with one failed attempt and lets
// the cool-down pass: the next attempt is the half-open probe.
func (e *windowEnv) tripAndCool() {
	e.t.Helper()
	a, err := e.l.breakers.AllowAttempt("h")
	if err != nil {
		e.t.Fatal(err)
	}
	a.Done(false)
	e.clock.Advance(2 * time.Second)
	if st := e.l.breakers.State("h"); st != engine.BreakerHalfOpen {
		e.t.Fatalf("after the cool-down: %s, want half-open", st)
	}
}

// fireProbe does what Scheduler.fire does for a due task: takes the
// breaker's attempt (the probe), records it, and applies the Fire.
func (e *windowEnv) fireProbe(id string) *raftfsm.Task {
	e.t.Helper()
	t := e.task(id)
	ba, err := e.l.breakers.AllowAttempt(t.Spec.Handler)
	if err != nil {
		e.t.Fatalf("probe refused: %v", err)
	}
	p := &probe{id: id, epoch: t.Epoch, run: t.Run, attempt: ba}
	e.l.setProbe(p)
	now := e.clock.Now().UnixMilli()
	r := e.apply(raftfsm.Command{Type: raftfsm.CmdFire, Fire: &raftfsm.Fire{
		ID: id, Epoch: t.Epoch, Attempt: t.Attempts + 1, Node: "a", AtMs: now, LeaseMs: now + 6000,
	}})
	if r.Code != raftfsm.CodeOK {
		e.l.dropProbe(p)
		return r.Task
	}
	if _, err := e.l.breakers.AllowAttempt("h"); err == nil {
		e.t.Fatal("a second attempt was allowed while the probe is out")
	}
	return r.Task
}

func recurringSpec() raftfsm.Spec {
	return raftfsm.Spec{Handler: "h", Priority: 2, TimeoutNs: int64(time.Second), MaxAttempts: 1, EveryNs: int64(time.Second)}
}

func (e *windowEnv) submitSpec(id string, s raftfsm.Spec, overwrite bool) {
	e.t.Helper()
	now := e.clock.Now().UnixMilli()
	r := e.apply(raftfsm.Command{Type: raftfsm.CmdSubmit, Submit: &raftfsm.Submit{
		ID: id, Spec: s, DueMs: now, SlotMs: now, AtMs: now, Overwrite: overwrite,
	}})
	if r.Code != raftfsm.CodeOK {
		e.t.Fatalf("submit %s: code %v", id, r.Code)
	}
}

// Every way a RUNNING probe attempt ends reports it to the breaker, so the
// handler's circuit does not stay half-open with its probe out: above all
// the end of a recurring task's run, after which the next run starts at
// attempt 0 (the probe used to be looked up by "id#attempts" of the task
// after the event, and was never found).
func TestProbeEndsWithItsAttempt(t *testing.T) {
	complete := func(o raftfsm.Outcome) func(e *windowEnv, r *raftfsm.Task) {
		return func(e *windowEnv, r *raftfsm.Task) {
			next := r.SlotMs + time.Second.Milliseconds()
			res := e.apply(raftfsm.Command{Type: raftfsm.CmdComplete, Complete: &raftfsm.Complete{
				ID: r.ID, Epoch: r.Epoch, Attempt: r.Attempts, Outcome: o, AtMs: e.clock.Now().UnixMilli(),
				NextSlotMs: next, NextDueMs: next,
			}})
			if res.Code != raftfsm.CodeOK || res.Task.State != raftfsm.StateWaiting || res.Task.Run != 2 || res.Task.Attempts != 0 {
				e.t.Fatalf("complete: %+v", res)
			}
		}
	}
	cases := []struct {
		name string
		end  func(e *windowEnv, running *raftfsm.Task)
		want engine.BreakerState // after the end
	}{
		{"recurring run succeeds", complete(raftfsm.OutcomeSuccess), engine.BreakerClosed},
		{"recurring run's lease expires", complete(raftfsm.OutcomeLost), engine.BreakerClosed},
		{"recurring run fails", complete(raftfsm.OutcomeRetryable), engine.BreakerOpen},
		{"cancelled", func(e *windowEnv, r *raftfsm.Task) {
			e.apply(raftfsm.Command{Type: raftfsm.CmdCancel, Cancel: &raftfsm.Cancel{ID: r.ID, AtMs: e.clock.Now().UnixMilli()}})
		}, engine.BreakerClosed},
		{"overwritten", func(e *windowEnv, r *raftfsm.Task) {
			s := recurringSpec()
			s.EveryNs *= 2
			e.submitSpec(r.ID, s, true)
		}, engine.BreakerClosed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newProbeEnv(t)
			e.submitSpec("rec", recurringSpec(), false)
			e.tripAndCool()
			running := e.fireProbe("rec")
			if running.State != raftfsm.StateRunning {
				t.Fatalf("fire: %+v", running)
			}
			c.end(e, running)
			if st := e.l.breakers.State("h"); st != c.want {
				t.Fatalf("after the probe's attempt ended: %s, want %s", st, c.want)
			}
			if len(e.l.probes) != 0 {
				t.Fatalf("probes left: %v", e.l.probes)
			}
		})
	}
}

// A probe whose attempt does not start (a stale Fire) or whose outcome
// this leader will not see (it steps down) is abandoned: the next attempt
// gets a new probe.
func TestProbeAbandonedWhenItsAttemptCannotReport(t *testing.T) {
	t.Run("stale fire", func(t *testing.T) {
		e := newProbeEnv(t)
		e.submitSpec("x", recurringSpec(), false)
		e.tripAndCool()
		t0 := e.task("x")
		ba, err := e.l.breakers.AllowAttempt("h")
		if err != nil {
			t.Fatal(err)
		}
		p := &probe{id: "x", epoch: t0.Epoch, run: t0.Run, attempt: ba}
		e.l.setProbe(p)
		// The task is cancelled before the Fire applies.
		e.apply(raftfsm.Command{Type: raftfsm.CmdCancel, Cancel: &raftfsm.Cancel{ID: "x", AtMs: e.clock.Now().UnixMilli()}})
		r := e.apply(raftfsm.Command{Type: raftfsm.CmdFire, Fire: &raftfsm.Fire{ID: "x", Epoch: t0.Epoch, Attempt: 1, Node: "a"}})
		if r.Code == raftfsm.CodeOK {
			t.Fatal("Fire of a cancelled task applied")
		}
		e.l.dropProbe(p)
		if _, err := e.l.breakers.AllowAttempt("h"); err != nil {
			t.Fatalf("no new probe after a stale Fire: %v", err)
		}
	})
	t.Run("leadership lost", func(t *testing.T) {
		e := newProbeEnv(t)
		e.submitSpec("x", recurringSpec(), false)
		e.tripAndCool()
		e.fireProbe("x")
		e.l.Stop()
		if _, err := e.l.breakers.AllowAttempt("h"); err != nil {
			t.Fatalf("no new probe after the leader stepped down: %v", err)
		}
	})
}

// An attempt handed back because its executor was unavailable is neither a
// failure nor a success for the circuit breaker: a half-open circuit's
// probe is abandoned (the next attempt may probe), not closed or reopened.
func TestProbeAbandonedWhenExecutorUnavailable(t *testing.T) {
	e := newProbeEnv(t)
	e.submitSpec("u", raftfsm.Spec{Handler: "h", Priority: 2, TimeoutNs: int64(time.Second), MaxAttempts: 1}, false)
	e.tripAndCool()
	running := e.fireProbe("u")
	res := e.apply(raftfsm.Command{Type: raftfsm.CmdComplete, Complete: &raftfsm.Complete{
		ID: "u", Epoch: running.Epoch, Attempt: running.Attempts, Outcome: raftfsm.OutcomeUnavailable,
		RetryDueMs: e.clock.Now().Add(100 * time.Millisecond).UnixMilli(), AtMs: e.clock.Now().UnixMilli()}})
	if res.Code != raftfsm.CodeOK || res.Task.State != raftfsm.StateWaiting || res.Task.Attempts != 0 {
		t.Fatalf("complete unavailable: %+v", res)
	}
	if st := e.l.breakers.State("h"); st != engine.BreakerHalfOpen {
		t.Fatalf("after an unavailable probe: %s, want still half-open", st)
	}
	if len(e.l.probes) != 0 {
		t.Fatalf("probes left: %v", e.l.probes)
	}
	if _, err := e.l.breakers.AllowAttempt("h"); err != nil {
		t.Fatalf("the next attempt may not probe: %v", err)
	}
}

// Fires whose proposal fails (leadership lost) or that do not apply (a
// stale Fire) hold nothing: no unit of capacity or of the handler's cap
// stays pending, and the half-open circuit's probe is abandoned, so the
// next attempt may probe.
func TestFiresThatDoNotApplyHoldNothing(t *testing.T) {
	for name, propose := range map[string]ProposerFunc{
		"proposal fails": func(context.Context, []raftfsm.Command) ([]raftfsm.Result, error) { return nil, errNotLeader },
		"stale fire": func(_ context.Context, cmds []raftfsm.Command) ([]raftfsm.Result, error) {
			res := make([]raftfsm.Result, len(cmds))
			for i := range res {
				res[i].Code = raftfsm.CodeStale
			}
			return res, nil
		},
	} {
		t.Run(name, func(t *testing.T) {
			e := newParkEnv(t)
			e.executor("a", 5)
			e.tripAndCool()
			e.l.proposer = propose
			e.due(2, "x1")
			e.l.mu.Lock()
			pending, probes := len(e.l.pending)+len(e.l.pendingBy)+len(e.l.transit), len(e.l.probes)
			e.l.mu.Unlock()
			if pending != 0 || probes != 0 {
				t.Fatalf("after a Fire that did not apply: %d pending counts, %d probes", pending, probes)
			}
			if _, err := e.l.breakers.AllowAttempt("h"); err != nil {
				t.Fatalf("the probe of the Fire that did not apply is still out: %v", err)
			}
		})
	}
}
