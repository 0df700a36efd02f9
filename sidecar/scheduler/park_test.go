package scheduler

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/axsched/ax/engine"
	"github.com/axsched/ax/raftfsm"
)

// parkEnv is a probe env (a leader over a real FSM, fake clock, breakers
// that open after one failure for 2 s) whose Fires are applied to the FSM
// at once, in the test's goroutine; fired lists the started tasks in
// order. Node "a" is the leader's own node; "b" another.
type parkEnv struct {
	*windowEnv
	ctx   context.Context
	fired []string
}

func newParkEnv(t *testing.T) *parkEnv {
	t.Helper()
	e := &parkEnv{windowEnv: newProbeEnv(t), ctx: context.Background()}
	cfg := &e.l.cfg
	cfg.NodeID, cfg.MaxBatchCommands, cfg.LeaseGrace = "a", 512, time.Second
	e.l.horizonMs.Store(math.MaxInt64) // every due time is inside the window
	e.l.proposer = ProposerFunc(func(_ context.Context, cmds []raftfsm.Command) ([]raftfsm.Result, error) {
		e.index++
		res := applyEntry(e.t, e.fsm, e.index, cmds...)
		for i, r := range res {
			if cmds[i].Type == raftfsm.CmdFire && r.Code == raftfsm.CodeOK {
				e.fired = append(e.fired, cmds[i].Fire.ID)
			}
		}
		return res, nil
	})
	for _, id := range []string{"a", "b"} {
		e.apply(raftfsm.Command{Type: raftfsm.CmdNode, Node: &raftfsm.Node{ID: id}})
	}
	return e
}

// executor registers an executor for handler h on node with the given
// max_concurrency (a capacity of 1 + max on a node with no load report:
// the limiter's starting limit here is 1). The leader's own node "a" has
// no delivery here: it reads nothing in use there, so its capacity never
// binds; tests of capacity use node "b" and its reports.
func (e *parkEnv) executor(node string, maxC int) {
	e.t.Helper()
	e.apply(raftfsm.Command{Type: raftfsm.CmdExecutor, Executor: &raftfsm.ExecutorChange{
		Node: node, Executor: raftfsm.Executor{Name: "x-" + node, Handlers: []string{"h"}, URL: "http://x", MaxConcurrency: maxC}}})
}

// due submits tasks due now with the given priority and has their due
// timers fire, as the leader's timers would.
func (e *parkEnv) due(prio int, ids ...string) {
	e.t.Helper()
	now := e.clock.Now().UnixMilli()
	for _, id := range ids {
		e.apply(raftfsm.Command{Type: raftfsm.CmdSubmit, Submit: &raftfsm.Submit{ID: id, DueMs: now, AtMs: now,
			Spec: raftfsm.Spec{Handler: "h", Priority: prio, TimeoutNs: int64(time.Second), MaxAttempts: 3}}})
		e.timers.Cancel(dueKeyPrefix + id) // it fires now
	}
	e.l.fire(e.ctx, ids, nil)
}

// complete ends task id's RUNNING attempt with outcome o.
func (e *parkEnv) complete(id string, o raftfsm.Outcome) {
	e.t.Helper()
	t := e.task(id)
	if t.State != raftfsm.StateRunning {
		e.t.Fatalf("complete %s: %s", id, t.State)
	}
	e.apply(raftfsm.Command{Type: raftfsm.CmdComplete, Complete: &raftfsm.Complete{
		ID: id, Epoch: t.Epoch, Attempt: t.Attempts, Outcome: o, AtMs: e.clock.Now().UnixMilli(),
		NextDueMs: e.clock.Now().UnixMilli()}})
}

// dispatch drains the woken handlers, as the dispatch loop does.
func (e *parkEnv) dispatch() { e.l.dispatch(e.ctx) }

func (e *parkEnv) wantParked(want map[string]int) {
	e.t.Helper()
	got := e.l.ParkedByReason()["h"]
	if len(got) != len(want) {
		e.t.Fatalf("parked %v, want %v", got, want)
	}
	for r, n := range want {
		if got[r] != n {
			e.t.Fatalf("parked %v, want %v", got, want)
		}
	}
}

func (e *parkEnv) wantReason(id, reason string) WaitingView {
	e.t.Helper()
	w, ok := e.l.Waiting([]string{id})[id]
	if reason == "" {
		if ok {
			e.t.Fatalf("task %s: waiting %+v, want none", id, w)
		}
		return w
	}
	if !ok || w.Reason != reason {
		e.t.Fatalf("task %s: waiting %+v (%v), want %s", id, w, ok, reason)
	}
	return w
}

func ids(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%05d", prefix, i)
	}
	return out
}

// 10 000 due runs with no executor wait in memory at no cost: each was
// read from the store once, no timer is armed for any of them, and time
// passing or load reports re-read none. An executor registering starts as
// many as its capacity holds, without reading the store again, and each
// completion starts one more.
func TestParkedRunsCostNothingWhileTheyWait(t *testing.T) {
	e := newParkEnv(t)
	all := ids("t", 10_000)
	e.due(2, all...)
	e.wantParked(map[string]int{ReasonNoExecutor: 10_000})
	if r := e.l.storeReads.Load(); r != 10_000 {
		t.Fatalf("%d store reads to park 10 000 runs, want one each", r)
	}
	if n := e.timers.Len(); n != 0 {
		t.Fatalf("%d timers armed for parked runs, want none (no polling)", n)
	}
	w := e.wantReason(all[0], ReasonNoExecutor)
	if w.SinceMs != e.clock.Now().UnixMilli() {
		t.Fatalf("waiting since %d, want %d", w.SinceMs, e.clock.Now().UnixMilli())
	}
	dispatches := e.l.dispatches.Load()
	for range 10 {
		e.clock.Advance(time.Minute)
		e.l.Report(Report{ID: "b"}) // a node without an executor for h
	}
	if e.timers.Len() != 0 || e.l.storeReads.Load() != 10_000 || e.l.dispatches.Load() != dispatches || len(e.fired) != 0 {
		t.Fatalf("after 10 min: %d timers, %d reads, %d dispatches (was %d), %d fired", e.timers.Len(), e.l.storeReads.Load(), e.l.dispatches.Load(), dispatches, len(e.fired))
	}

	e.executor("b", 2)
	e.l.Report(Report{ID: "b", Executors: []ExecutorLoad{{Name: "x-b", Handlers: []string{"h"}, Limit: 1}}}) // capacity 1 + 2
	e.dispatch()
	if len(e.fired) != 3 {
		t.Fatalf("fired %d after the executor registered, want its capacity 3", len(e.fired))
	}
	e.wantParked(map[string]int{ReasonExecutorBusy: 9_997})
	e.wantReason(all[5], ReasonExecutorBusy)
	e.wantReason(e.fired[0], "")
	e.complete(e.fired[0], raftfsm.OutcomeSuccess)
	e.dispatch()
	if len(e.fired) != 4 {
		t.Fatalf("fired %d after a completion, want one more", len(e.fired))
	}
	if r := e.l.storeReads.Load(); r != 10_000 {
		t.Fatalf("%d store reads, want 10 000: parked runs are not read again", r)
	}
	// In due order, as parked.
	for i, id := range e.fired {
		if id != all[i] {
			t.Fatalf("fired %v, want the first due first", e.fired)
		}
	}
}

// A node whose executor is unavailable (down in its load report) gets
// nothing; its next report with the executor up wakes the runs.
func TestParkedExecutorUnavailableWokenByReport(t *testing.T) {
	e := newParkEnv(t)
	e.executor("b", 10)
	until := time.Now().Add(time.Hour)
	e.l.Report(Report{ID: "b", Executors: []ExecutorLoad{{Name: "x-b", Handlers: []string{"h"}, Limit: 4, DownUntilMs: until.UnixMilli()}}})
	e.due(2, "u1", "u2")
	e.wantParked(map[string]int{ReasonExecutorUnavailable: 2})
	if w := e.wantReason("u1", ReasonExecutorUnavailable); w.UntilMs != until.UnixMilli() {
		t.Fatalf("waiting until %d, want %d", w.UntilMs, until.UnixMilli())
	}
	e.l.Report(Report{ID: "b", Executors: []ExecutorLoad{{Name: "x-b", Handlers: []string{"h"}, Limit: 4}}})
	e.dispatch()
	if len(e.fired) != 2 || e.task("u1").Node != "b" {
		t.Fatalf("fired %v after the executor came back", e.fired)
	}
}

// Capacity on a reporting node is its executors' limit plus a queue of
// max_concurrency, less what runs there.
func TestParkedExecutorBusyUsesReportedLimit(t *testing.T) {
	e := newParkEnv(t)
	e.executor("b", 3)
	e.l.Report(Report{ID: "b", Executors: []ExecutorLoad{{Name: "x-b", Handlers: []string{"h"}, Limit: 2, InFlight: 2}}})
	e.due(2, ids("b", 10)...)
	if len(e.fired) != 3 {
		t.Fatalf("fired %d, want limit 2 + queue 3 - 2 in flight", len(e.fired))
	}
	e.wantParked(map[string]int{ReasonExecutorBusy: 7})
	// The next report counts the three as queued; an attempt that ends
	// frees its unit at once.
	e.l.Report(Report{ID: "b", Executors: []ExecutorLoad{{Name: "x-b", Handlers: []string{"h"}, Limit: 2, InFlight: 2, Queued: 3}}})
	e.dispatch()
	if len(e.fired) != 3 {
		t.Fatalf("fired %d after a full report", len(e.fired))
	}
	e.complete(e.fired[0], raftfsm.OutcomeSuccess)
	e.dispatch()
	if len(e.fired) != 4 {
		t.Fatalf("fired %d after a completion, want one more", len(e.fired))
	}
}

// An open circuit parks the handler's runs with one timer (not one per
// run) at its half-open instant; then one probe goes, and its success
// starts the rest.
func TestParkedCircuitOpenOneTimerPerHandler(t *testing.T) {
	e := newParkEnv(t)
	e.executor("a", 100)
	a, err := e.l.breakers.AllowAttempt("h")
	if err != nil {
		t.Fatal(err)
	}
	a.Done(false) // open for 2 s
	e.due(2, ids("c", 100)...)
	e.wantParked(map[string]int{ReasonCircuitOpen: 100})
	at, ok := e.timers.Due(circuitKeyPrefix + "h")
	if !ok || e.timers.Len() != 1 {
		t.Fatalf("%d timers (circuit timer %v), want exactly the handler's", e.timers.Len(), ok)
	}
	if w := e.wantReason("c00000", ReasonCircuitOpen); w.UntilMs != at.UnixMilli() {
		t.Fatalf("waiting until %d, want the timer's %v", w.UntilMs, at)
	}
	e.clock.Advance(2 * time.Second)
	e.l.fired(e.ctx, []engine.Expired{{Key: circuitKeyPrefix + "h"}})
	e.dispatch()
	if len(e.fired) != 1 {
		t.Fatalf("fired %d at half-open, want one probe", len(e.fired))
	}
	e.wantParked(map[string]int{ReasonCircuitOpen: 99})
	e.complete(e.fired[0], raftfsm.OutcomeSuccess)
	e.dispatch()
	if len(e.fired) != 100 {
		t.Fatalf("fired %d after the probe succeeded, want all", len(e.fired))
	}
}

// fail ends task id's RUNNING attempt as failed (a 5xx), its retry due now.
func (e *parkEnv) fail(id string) {
	e.t.Helper()
	t := e.task(id)
	if t.State != raftfsm.StateRunning {
		e.t.Fatalf("fail %s: %s", id, t.State)
	}
	now := e.clock.Now().UnixMilli()
	e.apply(raftfsm.Command{Type: raftfsm.CmdComplete, Complete: &raftfsm.Complete{
		ID: id, Epoch: t.Epoch, Attempt: t.Attempts, Outcome: raftfsm.OutcomeRetryable, Error: "500", AtMs: now, RetryDueMs: now}})
}

// redue has the due timers of ids (armed by their last events) fire now.
func (e *parkEnv) redue(ids ...string) {
	e.t.Helper()
	for _, id := range ids {
		e.timers.Cancel(dueKeyPrefix + id)
	}
	e.l.fire(e.ctx, ids, nil)
}

// halfOpen lets the circuit's cool-down pass and has its timer fire.
func (e *parkEnv) halfOpen() {
	e.t.Helper()
	e.clock.Advance(2 * time.Second)
	if st := e.l.breakers.State("h"); st != engine.BreakerHalfOpen {
		e.t.Fatalf("after the cool-down: %s, want half-open", st)
	}
	e.l.fired(e.ctx, []engine.Expired{{Key: circuitKeyPrefix + "h"}})
	e.dispatch()
}

// wantProbe checks that the last run fired is id, as the circuit's probe.
func (e *parkEnv) wantProbe(id string) {
	e.t.Helper()
	if n := len(e.fired); n == 0 || e.fired[n-1] != id {
		e.t.Fatalf("fired %v, want the probe %s last", e.fired, id)
	}
	e.l.mu.Lock()
	p := e.l.probes[id]
	e.l.mu.Unlock()
	if p == nil || !p.attempt.Probe() {
		e.t.Fatalf("%s was fired but is not the half-open probe", id)
	}
}

// When the circuit half-opens, the probe is the first parked run in
// queue order that may start and has no failed attempt yet, not the
// retry at the head: a task its executor fails every time made every
// probe fail and reopen the circuit, cool-down after cool-down, while
// the healthy runs parked behind it (and those due later) waited (19
// failed probes in a row, each a retry, over 9.5 min). A paused run is
// not chosen. With only retries parked, the head probes. The rest keep
// their queue order. A fresh run that cannot be placed gives the probe
// back, as the head would.
func TestHalfOpenProbeIsAFreshRun(t *testing.T) {
	// node's load report: its executor x-<node>, down until downUntil.
	report := func(e *parkEnv, node string, downUntil int64) {
		e.l.Report(Report{ID: node, Executors: []ExecutorLoad{{Name: "x-" + node, Handlers: []string{"h"}, Limit: 10, DownUntilMs: downUntil}}})
	}
	// Three runs fail once each on node (max_attempts 3): the circuit
	// opens and their retries park, at the head of the queue.
	setup := func(t *testing.T, node string) *parkEnv {
		e := newParkEnv(t)
		e.l.breakers = engine.NewBreakers(e.clock, engine.BreakerOptions{ConsecutiveFailures: 3, CoolDown: 2 * time.Second})
		e.executor(node, 100)
		if node != "a" { // the leader's own node reads its capacity itself
			report(e, node, 0)
		}
		e.due(2, "r1", "r2", "r3")
		if len(e.fired) != 3 {
			t.Fatalf("fired %v, want r1, r2, r3", e.fired)
		}
		for _, id := range e.fired {
			e.fail(id)
		}
		if st := e.l.breakers.State("h"); st != engine.BreakerOpen {
			t.Fatalf("after 3 failures: %s, want open", st)
		}
		e.redue("r1", "r2", "r3")
		e.wantParked(map[string]int{ReasonCircuitOpen: 3})
		return e
	}
	t.Run("fresh runs parked behind retries", func(t *testing.T) {
		e := setup(t, "a")
		e.l.paused = func(t *raftfsm.Task) bool { return t.ID == "f0" }
		e.due(2, "f0", "f1", "f2")
		e.wantParked(map[string]int{ReasonCircuitOpen: 6})
		e.halfOpen()
		if len(e.fired) != 4 {
			t.Fatalf("fired %v at half-open, want one probe", e.fired)
		}
		e.wantProbe("f1") // f0 is paused
		if a := e.task("f1").Attempts; a != 1 {
			t.Fatalf("probe f1 at attempt %d, want 1", a)
		}
		e.wantParked(map[string]int{ReasonCircuitOpen: 5})
		e.complete("f1", raftfsm.OutcomeSuccess) // closes the circuit
		e.dispatch()
		if got, want := fmt.Sprint(e.fired[4:]), fmt.Sprint([]string{"r1", "r2", "r3", "f2"}); got != want {
			t.Fatalf("fired %v after the probe succeeded, want %s (queue order, f0 paused)", e.fired[4:], want)
		}
		e.wantParked(map[string]int{ReasonPaused: 1})
	})
	t.Run("only retries parked, then a fresh run due", func(t *testing.T) {
		e := setup(t, "a")
		e.halfOpen()
		if len(e.fired) != 4 {
			t.Fatalf("fired %v at half-open, want one probe", e.fired)
		}
		e.wantProbe("r1") // no fresh run: the head retry probes
		// A run due while that probe is out waits behind r2 and r3; the
		// probe fails and the circuit reopens; r1's next retry parks last.
		e.due(2, "f1")
		e.fail("r1")
		if st := e.l.breakers.State("h"); st != engine.BreakerOpen {
			t.Fatalf("after the probe failed: %s, want open", st)
		}
		e.redue("r1")
		e.wantParked(map[string]int{ReasonCircuitOpen: 4})
		e.halfOpen()
		if len(e.fired) != 5 {
			t.Fatalf("fired %v at half-open, want one probe", e.fired)
		}
		e.wantProbe("f1")
	})
	t.Run("fresh run that cannot be placed", func(t *testing.T) {
		e := setup(t, "b")
		e.due(2, "f1")
		report(e, "b", time.Now().Add(time.Hour).UnixMilli()) // b's executor down
		e.halfOpen()
		if len(e.fired) != 3 {
			t.Fatalf("fired %v with the executor down, want nothing more", e.fired)
		}
		e.wantParked(map[string]int{ReasonExecutorUnavailable: 4})
		// The probe was given back, not held by a run that did not start.
		a, err := e.l.breakers.AllowAttempt("h")
		if err != nil || !a.Probe() {
			t.Fatalf("after a probe that could not be placed: %v (probe %v), want the probe free", err, a != nil && a.Probe())
		}
		a.Abandon()
		report(e, "b", 0)
		e.dispatch()
		if len(e.fired) != 4 {
			t.Fatalf("fired %v once the executor came back, want one probe", e.fired)
		}
		e.wantProbe("f1")
	})
}

// Runs held by the handler's cluster-wide cap start when a RUNNING
// attempt of the handler ends.
func TestParkedHandlerLimitReleasedByCompletion(t *testing.T) {
	e := newParkEnv(t)
	e.l.cfg.HandlerLimits = map[string]int{"h": 2}
	e.executor("a", 100)
	e.due(2, "l1", "l2", "l3", "l4")
	if len(e.fired) != 2 {
		t.Fatalf("fired %v, want 2 (the cap)", e.fired)
	}
	e.wantParked(map[string]int{ReasonHandlerLimit: 2})
	e.wantReason("l3", ReasonHandlerLimit)
	e.complete("l1", raftfsm.OutcomeSuccess)
	e.dispatch()
	if len(e.fired) != 3 || e.fired[2] != "l3" {
		t.Fatalf("fired %v, want l3 after l1 ended", e.fired)
	}
}

// With --handler-limit full, queued priority-0 runs start before
// priority-4 ones queued earlier; a run that waited past the wait budget
// (30 s) goes first whatever its priority.
func TestParkedHandlerLimitServesByPriority(t *testing.T) {
	e := newParkEnv(t)
	e.l.cfg.HandlerLimits = map[string]int{"h": 1}
	e.executor("a", 100)
	e.due(2, "first")
	e.due(4, "old4")
	e.clock.Advance(31 * time.Second) // old4 is over the wait budget
	e.due(4, "p4-1", "p4-2", "p4-3")
	e.due(0, "p0-1", "p0-2", "p0-3")
	e.wantParked(map[string]int{ReasonHandlerLimit: 7})
	for len(e.fired) < 8 {
		n := len(e.fired)
		e.complete(e.fired[n-1], raftfsm.OutcomeSuccess)
		e.dispatch()
		if len(e.fired) != n+1 {
			t.Fatalf("fired %v: want one more per completion", e.fired)
		}
	}
	want := []string{"first", "old4", "p0-1", "p0-2", "p0-3", "p4-1", "p4-2", "p4-3"}
	for i := range want {
		if e.fired[i] != want[i] {
			t.Fatalf("start order %v, want %v", e.fired, want)
		}
	}
}

// The pause hook parks a run with reason paused; resumeTask and
// resumeHandler start it.
func TestParkedPausedAndResumed(t *testing.T) {
	e := newParkEnv(t)
	e.executor("a", 100)
	paused := map[string]bool{"p1": true, "h": false}
	e.l.paused = func(t *raftfsm.Task) bool { return paused[t.ID] || paused[t.Spec.Handler] }
	e.due(2, "p1", "p2")
	if len(e.fired) != 1 || e.fired[0] != "p2" {
		t.Fatalf("fired %v, want p2 only", e.fired)
	}
	e.wantParked(map[string]int{ReasonPaused: 1})
	e.wantReason("p1", ReasonPaused)
	e.l.resumeTask("p1") // still paused by the hook: stays
	e.dispatch()
	e.wantParked(map[string]int{ReasonPaused: 1})
	paused["p1"] = false
	e.l.resumeTask("p1")
	e.dispatch()
	if len(e.fired) != 2 {
		t.Fatalf("fired %v after resume", e.fired)
	}
	paused["h"] = true
	e.due(2, "p3", "p4")
	e.wantParked(map[string]int{ReasonPaused: 2})
	paused["h"] = false
	e.l.resumeHandler("h")
	e.dispatch()
	if len(e.fired) != 4 {
		t.Fatalf("fired %v after the handler resumed", e.fired)
	}
}

// A cancel or an overwrite of a parked task drops its parked copy (an
// overwritten one is parked again from its new record).
func TestParkedTaskChangedByEvents(t *testing.T) {
	e := newParkEnv(t)
	e.due(2, "k1", "k2")
	e.wantParked(map[string]int{ReasonNoExecutor: 2})
	e.apply(raftfsm.Command{Type: raftfsm.CmdCancel, Cancel: &raftfsm.Cancel{ID: "k1", AtMs: e.clock.Now().UnixMilli()}})
	e.wantParked(map[string]int{ReasonNoExecutor: 1})
	e.wantReason("k1", "")
	now := e.clock.Now().UnixMilli()
	e.apply(raftfsm.Command{Type: raftfsm.CmdSubmit, Submit: &raftfsm.Submit{ID: "k2", DueMs: now, AtMs: now, Overwrite: true,
		Spec: raftfsm.Spec{Handler: "h", Priority: 0, TimeoutNs: int64(time.Second), MaxAttempts: 1}}})
	if len(e.l.ParkedByReason()) != 0 {
		t.Fatalf("parked %v after the overwrite, want its old copy gone", e.l.ParkedByReason())
	}
	if _, ok := e.timers.Due(dueKeyPrefix + "k2"); !ok {
		t.Fatal("the overwritten task's due timer is not armed")
	}
	e.l.fire(e.ctx, []string{"k2"}, nil)
	e.wantParked(map[string]int{ReasonNoExecutor: 1})
	e.executor("a", 1)
	e.dispatch()
	if len(e.fired) != 1 || e.task("k2").Epoch == 0 || e.task("k2").State != raftfsm.StateRunning {
		t.Fatalf("fired %v", e.fired)
	}
}

// A new term parks the due runs again from the due index.
func TestParkedRebuiltOnNewTerm(t *testing.T) {
	e := newParkEnv(t)
	e.due(2, ids("r", 50)...)
	e.l.Stop()
	if len(e.l.ParkedByReason()) != 0 {
		t.Fatal("parked runs kept after stepping down")
	}
	timers := engine.NewTimers(e.clock, engine.TimersOptions{})
	e.l.mu.Lock()
	e.l.timers = timers
	e.l.mu.Unlock()
	e.l.horizonMs.Store(math.MinInt64)
	if n, err := e.l.loadWindow(timers); err != nil || n != 50 {
		t.Fatalf("loadWindow armed %d (%v)", n, err)
	}
	e.l.fire(e.ctx, ids("r", 50), nil)
	e.wantParked(map[string]int{ReasonNoExecutor: 50})
}

// Each live node that runs a handler hears its share of the handler's
// runs parked as executor_busy (its limiter counts them as backlog); a
// node that does not run it hears nothing.
func TestParkedShareForLimiters(t *testing.T) {
	e := newParkEnv(t)
	e.executor("a", 1)
	e.executor("b", 1)
	e.l.local = nil
	e.l.Report(Report{ID: "b", Executors: []ExecutorLoad{{Name: "x-b", Handlers: []string{"h"}, Limit: 1}}})
	e.apply(raftfsm.Command{Type: raftfsm.CmdNode, Node: &raftfsm.Node{ID: "c"}})
	e.l.Report(Report{ID: "c"})
	e.due(2, ids("s", 11)...)
	e.wantParked(map[string]int{ReasonExecutorBusy: 7})
	if got := e.l.ParkedShare("a"); got["h"] != 4 {
		t.Fatalf("share of a: %v, want 4 (7 over 2 nodes, rounded up)", got)
	}
	if got := e.l.ParkedShare("c"); len(got) != 0 {
		t.Fatalf("share of c (no executor for h): %v", got)
	}
}

// Many runs due at once are read and fired MaxBatchCommands at a time:
// the first Fires are proposed after one chunk's reads, not after every
// due run was read, and the runs still go in due order.
func TestManyDueRunsFireChunkByChunk(t *testing.T) {
	e := newParkEnv(t)
	e.l.cfg.MaxBatchCommands = 4
	e.executor("a", 100) // the leader's own node: capacity does not bind here
	inner := e.l.proposer
	var readsAtFire []uint64
	e.l.proposer = ProposerFunc(func(ctx context.Context, cmds []raftfsm.Command) ([]raftfsm.Result, error) {
		if len(cmds) > 0 && cmds[0].Type == raftfsm.CmdFire {
			readsAtFire = append(readsAtFire, e.l.storeReads.Load())
		}
		return inner.Propose(ctx, cmds)
	})
	all := ids("t", 10)
	e.due(2, all...)
	if len(e.fired) != 10 {
		t.Fatalf("fired %d runs, want 10", len(e.fired))
	}
	if want := []uint64{4, 8, 10}; fmt.Sprint(readsAtFire) != fmt.Sprint(want) {
		t.Fatalf("store reads when each entry of Fires was proposed: %v, want %v (one chunk of MaxBatchCommands read before its Fires)", readsAtFire, want)
	}
	for i, id := range e.fired {
		if id != all[i] {
			t.Fatalf("fired %v, want due order", e.fired)
		}
	}
}

// The fire path takes a due task from the copy the last event about it
// left (no store read) when it is due within taskCopyHorizon; a task due
// later is read from the store; a copy follows every event (a cancel
// drops it, so the cancelled task is not fired); and a copy is what the
// store holds, payload aside.
func TestFireTakesTheTaskFromItsLastEvent(t *testing.T) {
	e := newParkEnv(t)
	e.executor("a", 100)
	now := e.clock.Now()
	submit := func(id string, due time.Time) {
		e.apply(raftfsm.Command{Type: raftfsm.CmdSubmit, Submit: &raftfsm.Submit{ID: id, DueMs: due.UnixMilli(), AtMs: now.UnixMilli(),
			Spec: raftfsm.Spec{Handler: "h", TimeoutNs: int64(time.Second), MaxAttempts: 3, Payload: []byte(`{"p":1}`)}}})
		e.timers.Cancel(dueKeyPrefix + id)
	}
	submit("soon", now)
	submit("gone", now)
	submit("later", now.Add(taskCopyHorizon+time.Second))
	e.l.mu.Lock()
	c, stored := e.l.copies["soon"], e.task("soon")
	_, laterKept := e.l.copies["later"]
	e.l.mu.Unlock()
	if c == nil || laterKept {
		t.Fatalf("copies: soon %v, later kept %v; want soon's only", c != nil, laterKept)
	}
	if c.Spec.Payload != nil || c.Epoch != stored.Epoch || c.DueMs != stored.DueMs || c.State != stored.State || c.Spec.Handler != stored.Spec.Handler {
		t.Fatalf("soon's copy %+v, stored %+v; want the same task without its payload", c, stored)
	}
	e.apply(raftfsm.Command{Type: raftfsm.CmdCancel, Cancel: &raftfsm.Cancel{ID: "gone"}})
	e.l.fire(e.ctx, []string{"soon", "gone"}, nil)
	if e.l.storeReads.Load() != 2 || e.l.copyReads.Load() != 1 {
		t.Fatalf("%d reads, %d of copies; want 2, soon's from its copy (gone's was dropped by its cancel)", e.l.storeReads.Load(), e.l.copyReads.Load())
	}
	if st := e.task("gone").State; st != raftfsm.StateCancelled || len(e.fired) != 1 || e.fired[0] != "soon" {
		t.Fatalf("fired %v, gone %s; want soon fired, gone CANCELLED", e.fired, st)
	}
	e.l.mu.Lock()
	_, kept := e.l.copies["soon"]
	e.l.mu.Unlock()
	if kept {
		t.Fatal("soon's copy kept after its Fire applied (RUNNING)")
	}
	e.clock.Advance(taskCopyHorizon + time.Second)
	e.l.fire(e.ctx, []string{"later"}, nil)
	if e.l.copyReads.Load() != 1 || len(e.fired) != 2 {
		t.Fatalf("later: %d copy reads, fired %v; want it read from the store and fired", e.l.copyReads.Load(), e.fired)
	}
}

// A handler's attempts on a node go to its best executor there (an exact
// match before "*", as delivery picks it), so only that executor's room
// counts for it: before, a "*" executor's room was added, and a handler's
// runs piled up in the node's queue for its exact executor's slots
// (where a pause could no longer hold them). The "*" executor takes them
// only while the exact one is down.
func TestCapacityIsTheDeliveringExecutors(t *testing.T) {
	e := newParkEnv(t)
	for _, x := range []raftfsm.Executor{
		{Name: "x-b", Handlers: []string{"h"}, URL: "http://x", MaxConcurrency: 2},
		{Name: "all-b", Handlers: []string{"*"}, URL: "http://all", MaxConcurrency: 100},
	} {
		e.apply(raftfsm.Command{Type: raftfsm.CmdExecutor, Executor: &raftfsm.ExecutorChange{Node: "b", Executor: x}})
	}
	report := func(downUntil int64) {
		e.l.Report(Report{ID: "b", Executors: []ExecutorLoad{
			{Name: "x-b", Handlers: []string{"h"}, Limit: 1, DownUntilMs: downUntil},
			{Name: "all-b", Handlers: []string{"*"}, Limit: 100},
		}})
	}
	report(0)
	e.due(2, ids("c", 10)...)
	if len(e.fired) != 3 {
		t.Fatalf("fired %d, want the exact executor's limit 1 + queue 2 (not the \"*\" executor's 200 more)", len(e.fired))
	}
	e.wantParked(map[string]int{ReasonExecutorBusy: 7})
	report(time.Now().Add(time.Hour).UnixMilli()) // the exact one down: "*" takes them
	e.dispatch()
	if len(e.fired) != 10 {
		t.Fatalf("fired %d with the exact executor down, want all 10 on the \"*\" one", len(e.fired))
	}
}

// Every run that a drain starts after it waited in a blocked queue
// carries the queue's reason in its Fire (parked_reason of its run), not
// only the first one drained.
func TestParkedReasonOnEveryRunOfADrain(t *testing.T) {
	e := newParkEnv(t)
	e.executor("b", 10)
	e.l.Report(Report{ID: "b", Executors: []ExecutorLoad{{Name: "x-b", Handlers: []string{"h"}, Limit: 4, DownUntilMs: time.Now().Add(time.Hour).UnixMilli()}}})
	e.due(2, "u1", "u2", "u3")
	e.wantParked(map[string]int{ReasonExecutorUnavailable: 3})
	e.l.Report(Report{ID: "b", Executors: []ExecutorLoad{{Name: "x-b", Handlers: []string{"h"}, Limit: 4}}})
	e.dispatch()
	if len(e.fired) != 3 {
		t.Fatalf("fired %v, want the three", e.fired)
	}
	for _, id := range []string{"u1", "u2", "u3"} {
		if got := e.task(id).RunParked; got != ReasonExecutorUnavailable {
			t.Errorf("%s: parked reason %q, want %q", id, got, ReasonExecutorUnavailable)
		}
	}
	// A run that never waited has none.
	e.due(2, "v1")
	if got := e.task("v1").RunParked; got != "" {
		t.Errorf("v1: parked reason %q, want none", got)
	}
}

// A retry that fails again does not count against the handler's circuit
// when the executor answered a success after the retry's run began: the
// task fails, not the executor. Without it, retries of a task its
// executor fails every time reopened the circuit a fresh probe had just
// closed, and with only such retries parked the circuit let one through
// per cool-down. A retry of a run with no success since it began, and
// every run's first failure, still count.
func TestRetryFailingAfterASuccessDoesNotCount(t *testing.T) {
	setup := func(t *testing.T) *parkEnv {
		e := newParkEnv(t)
		e.l.breakers = engine.NewBreakers(e.clock, engine.BreakerOptions{ConsecutiveFailures: 3, CoolDown: 2 * time.Second})
		e.executor("a", 100)
		e.due(2, "r1", "r2", "r3")
		for _, id := range []string{"r1", "r2", "r3"} {
			e.fail(id)
		}
		e.redue("r1", "r2", "r3")
		e.wantParked(map[string]int{ReasonCircuitOpen: 3})
		// A fresh run probes and succeeds: the circuit closes, and the
		// retries parked behind it go.
		e.due(2, "f1")
		e.halfOpen()
		e.wantProbe("f1")
		e.clock.Advance(time.Millisecond)
		e.complete("f1", raftfsm.OutcomeSuccess)
		e.dispatch()
		if got, want := fmt.Sprint(e.fired[4:]), "[r1 r2 r3]"; got != want {
			t.Fatalf("fired %v after the probe succeeded, want %s", e.fired[4:], want)
		}
		e.clock.Advance(time.Millisecond)
		return e
	}
	t.Run("retries of runs that failed before the success", func(t *testing.T) {
		e := setup(t)
		for _, id := range []string{"r1", "r2", "r3"} {
			e.fail(id)
		}
		if st := e.l.breakers.Status("h"); st.State != engine.BreakerClosed || st.ConsecutiveFailures != 0 {
			t.Fatalf("after three retries failed again: %+v, want closed with no failure counted", st)
		}
		// A fresh run's failures still count.
		e.due(2, "g1", "g2", "g3")
		for _, id := range []string{"g1", "g2", "g3"} {
			e.fail(id)
		}
		if st := e.l.breakers.State("h"); st != engine.BreakerOpen {
			t.Fatalf("after three fresh runs failed: %s, want open", st)
		}
	})
	t.Run("a retry with no success since its failure", func(t *testing.T) {
		e := setup(t)
		e.complete("r1", raftfsm.OutcomeSuccess)
		e.complete("r2", raftfsm.OutcomeSuccess)
		e.complete("r3", raftfsm.OutcomeSuccess)
		e.clock.Advance(time.Millisecond)
		e.due(2, "g1")
		e.fail("g1") // 1
		e.clock.Advance(time.Millisecond)
		e.redue("g1")
		if n := len(e.fired); e.fired[n-1] != "g1" || e.task("g1").Attempts != 2 {
			t.Fatalf("fired %v, want g1's retry last", e.fired)
		}
		e.fail("g1") // 2: no success since its run began
		if st := e.l.breakers.Status("h"); st.ConsecutiveFailures != 2 {
			t.Fatalf("after a fresh failure and its retry's: %+v, want 2 failures counted", st)
		}
		e.due(2, "g2")
		e.fail("g2") // 3
		if st := e.l.breakers.State("h"); st != engine.BreakerOpen {
			t.Fatalf("after three failures: %s, want open", st)
		}
	})
	t.Run("half-open with only such retries parked", func(t *testing.T) {
		e := newParkEnv(t)
		e.l.breakers = engine.NewBreakers(e.clock, engine.BreakerOptions{ConsecutiveFailures: 3, CoolDown: 2 * time.Second})
		e.executor("a", 100)
		e.due(2, "a1", "a2", "a3", "a4", "s1")
		e.clock.Advance(time.Millisecond)
		e.complete("s1", raftfsm.OutcomeSuccess)
		e.clock.Advance(time.Millisecond)
		for _, id := range []string{"a1", "a2", "a3", "a4"} {
			e.fail(id) // the fourth is reported after the circuit opened: ignored
		}
		if st := e.l.breakers.State("h"); st != engine.BreakerOpen {
			t.Fatalf("after three first failures: %s, want open", st)
		}
		e.redue("a1", "a2", "a3", "a4")
		e.wantParked(map[string]int{ReasonCircuitOpen: 4})
		e.halfOpen()
		e.wantProbe("a1") // no fresh run: a retry probes
		e.fail("a1")
		e.dispatch()
		e.wantProbe("a2") // a1's failure said nothing of the executor
		e.complete("a2", raftfsm.OutcomeSuccess)
		e.dispatch()
		if st := e.l.breakers.State("h"); st != engine.BreakerClosed {
			t.Fatalf("after the probe succeeded: %s, want closed", st)
		}
		if got, want := fmt.Sprint(e.fired[len(e.fired)-2:]), "[a3 a4]"; got != want {
			t.Fatalf("fired %v, want a3 and a4 last", e.fired)
		}
	})
}

// Every node notes each handler's latest success as it applies it,
// leading or not, so that a node that becomes leader does not count the
// retries of tasks its executor always fails against the circuit (a
// review: after a leader kill the new leader knew no success and let one
// such retry through per cool-down, ~150 minutes for 150 tasks).
func TestSuccessNotedWhileNotLeading(t *testing.T) {
	l := New(Config{NodeID: "b"}, Deps{Clock: engine.NewFakeClock(time.UnixMilli(1_000))})
	ok := func(h string, atMs int64, o raftfsm.Outcome) {
		l.OnEvent(&raftfsm.Event{Type: raftfsm.CmdComplete, Outcome: o, Prev: raftfsm.StateRunning,
			Task: &raftfsm.Task{ID: "t", State: raftfsm.StateSuccess, UpdatedMs: atMs, Spec: raftfsm.Spec{Handler: h}}})
	}
	ok("h", 5_000, raftfsm.OutcomeSuccess)
	ok("h", 4_000, raftfsm.OutcomeSuccess) // an older time does not move it back
	ok("h", 9_000, raftfsm.OutcomeRetryable)
	if got := l.lastSuccess("h"); got != 5_000 {
		t.Fatalf("last success of h on a follower: %d, want 5000", got)
	}
	if got := l.lastSuccess("other"); got != 0 {
		t.Fatalf("last success of a handler with none: %d, want 0", got)
	}
}
