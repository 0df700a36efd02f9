package delivery

import (
	"net/http"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/axsched/ax/engine"
	"github.com/axsched/ax/raftfsm"
	"github.com/axsched/ax/sidecar/load"
)

// fireFor is the event of attempt 1 of task id of handler h assigned to
// n1, due at due with a lease of an hour, and the given timeout.
func fireFor(id, h string, due time.Time, timeout time.Duration) *raftfsm.Event {
	ev := fireEvent(id, due, due.Add(time.Hour))
	ev.Task.Spec.Handler, ev.Task.Spec.TimeoutNs = h, int64(timeout)
	return ev
}

// hangingExecutor serves handler h (and g) on a Unix socket with a fixed
// limit of limit callbacks: each call counts in calls and hangs until the
// sidecar gives up on it (its time-out), unless answer is set, when it
// waits for answer to be closed and answers 200.
type hangingExecutor struct {
	x      raftfsm.Executor
	calls  atomic.Int64
	byID   chan string
	answer atomic.Pointer[chan struct{}]
}

func newHangingExecutor(t *testing.T, limit int) *hangingExecutor {
	e := &hangingExecutor{byID: make(chan string, 100)}
	e.x = executorAt(t, limit, func(w http.ResponseWriter, r *http.Request) {
		e.calls.Add(1)
		e.byID <- r.Header.Get("Ax-Task-Id")
		if a := e.answer.Load(); a != nil {
			select {
			case <-*a:
			case <-r.Context().Done():
			}
			return
		}
		<-r.Context().Done()
	})
	e.x.Handlers = []string{"h", "g"}
	return e
}

// called waits for the next call and returns its task id.
func (e *hangingExecutor) called(t *testing.T) string {
	t.Helper()
	select {
	case id := <-e.byID:
		return id
	case <-time.After(30 * time.Second):
		t.Fatal("no callback")
		return ""
	}
}

// reports collects the next proposals until they hold n Completes (in
// one entry or several, in any order), failing at any callback meanwhile:
// an attempt that was to be handed back uncalled.
func (e *runEnv) reports(ex *hangingExecutor, n int) map[string]*raftfsm.Complete {
	e.t.Helper()
	got := map[string]*raftfsm.Complete{}
	for len(got) < n {
		select {
		case cmds := <-e.p.got:
			for _, c := range cmds {
				if c.Complete == nil {
					e.t.Fatalf("proposed %+v, want Completes only", c)
				}
				got[c.Complete.ID] = c.Complete
			}
		case id := <-ex.byID:
			e.t.Fatalf("%s was called (callback %d), want no call (reported so far: %d of %d)", id, ex.calls.Load(), len(got), n)
		case <-time.After(10 * time.Second):
			e.t.Fatalf("%d of %d Completes reported in 10 s", len(got), n)
		}
	}
	return got
}

// checkCircuitBack checks that c hands id's attempt 1 back uncalled,
// because handler h's circuit is open on n1, due at dueMs.
func checkCircuitBack(t *testing.T, c *raftfsm.Complete, id, h string, dueMs int64) {
	t.Helper()
	if c == nil {
		t.Fatalf("no Complete of %s, want its attempt handed back", id)
	}
	if c.ID != id || c.Attempt != 1 || c.Outcome != raftfsm.OutcomeUnavailable || c.RetryDueMs != dueMs || c.RetryAfterMs != 0 || c.StartedMs != 0 ||
		!strings.Contains(c.Error, "circuit of handler "+h+" is open on node n1") {
		t.Fatalf("handed back %+v, want %s's attempt 1 unavailable, due at %d (%v), the circuit of %s open on n1, no call start",
			c, id, dueMs, time.UnixMilli(dueMs), h)
	}
}

// wantOpenCircuits checks d's load report's circuits.
func wantOpenCircuits(t *testing.T, d *Delivery, want []load.Circuit) {
	t.Helper()
	if got := d.OpenCircuits(); !reflect.DeepEqual(got, want) {
		t.Fatalf("open circuits %+v, want %+v", got, want)
	}
}

// The node's own circuit breaker: an executor that takes the callbacks
// and never answers, attempts of one handler handed to the node beyond
// its limit of 2, the circuit opening after 3 failures. Once it opens,
// the attempts queued here for a slot go back to the leader (Complete
// UNAVAILABLE, due at the cool-down's end) without their callback, and
// so does one assigned while it is open; after the cool-down one probe
// goes, an attempt that meets it out goes back due at the probe's
// deadline, and the probe's success closes the circuit. Before, the
// leader's circuit was the only one, and every attempt already handed to
// the node was called, one time-out each (a review counted 193 after the
// leader's circuit opened).
func TestDeliveryNodeCircuitHandsBackQueuedAttempts(t *testing.T) {
	ex := newHangingExecutor(t, 2)
	clock := engine.NewFakeClock(time.Now())
	e := newRunEnv(t, clock, Config{Concurrency: 2, MinConcurrency: 2, BreakerFailures: 3, BreakerCoolDown: 10 * time.Second}, ex.x)
	now := clock.Now()
	ids := []string{"a0", "a1", "a2", "a3", "a4", "a5", "a6", "a7"}
	for _, id := range ids {
		e.d.OnEvent(fireFor(id, "h", now, time.Second))
	}
	called := map[string]bool{ex.called(t): true, ex.called(t): true}
	waitUntil(t, "6 attempts queued for a slot", func() bool { return e.d.QueuedByHandler()["h"] == 6 })
	clock.BlockUntil(2) // the two callbacks' deadlines
	// Two time-outs: two failures, the circuit stays closed, two more go.
	clock.Advance(time.Second)
	round2 := []string{ex.called(t), ex.called(t)}
	for id, c := range e.completes(2) {
		if !called[id] || c.Outcome != raftfsm.OutcomeTimeout {
			t.Fatalf("%s: %+v, want a time-out of one called first (%v)", id, c, called)
		}
	}
	clock.BlockUntil(2)
	wantOpenCircuits(t, e.d, nil) // two failures: closed
	// Two more: the third failure opens the circuit until now + 10 s; the
	// four attempts still queued go back, uncalled.
	clock.Advance(time.Second)
	opened := clock.Now()
	dueMs := raftfsm.CeilMs(opened.Add(10 * time.Second))
	got := e.reports(ex, 6)
	timeouts := 0
	for id, c := range got {
		if c.Outcome == raftfsm.OutcomeTimeout && (id == round2[0] || id == round2[1]) {
			timeouts++
			continue
		}
		checkCircuitBack(t, c, id, "h", dueMs)
	}
	if timeouts != 2 {
		t.Fatalf("%d time-outs in %+v, want 2", timeouts, got)
	}
	if n := ex.calls.Load(); n != 4 {
		t.Fatalf("%d callbacks, want 4: the attempts queued when the circuit opened must not be called", n)
	}
	if q := e.d.QueuedByHandler(); q != nil {
		t.Fatalf("still queued: %v", q)
	}
	// The load report tells the leader: open until the cool-down's end.
	wantOpenCircuits(t, e.d, []load.Circuit{{Handler: "h", UntilMs: dueMs}})
	// An attempt assigned while the circuit is open goes back at once.
	e.d.OnEvent(fireFor("late", "h", clock.Now(), time.Second))
	checkCircuitBack(t, e.reports(ex, 1)["late"], "late", "h", dueMs)
	// Just before the cool-down's end: still open.
	clock.Advance(10*time.Second - time.Millisecond)
	e.d.OnEvent(fireFor("early", "h", clock.Now(), time.Second))
	checkCircuitBack(t, e.reports(ex, 1)["early"], "early", "h", dueMs)
	if n := ex.calls.Load(); n != 4 {
		t.Fatalf("%d callbacks, want still 4", n)
	}
	wantOpenCircuits(t, e.d, []load.Circuit{{Handler: "h", UntilMs: dueMs}})
	// The cool-down ends: one probe goes (the executor now answers when
	// told to); an attempt that meets it out goes back due at the probe's
	// deadline (its start + its 1 s timeout).
	clock.Advance(time.Millisecond)
	// Cooled down, no probe out yet: no longer reported, so the leader
	// routes here again and the probe can come.
	wantOpenCircuits(t, e.d, nil)
	answer := make(chan struct{})
	ex.answer.Store(&answer)
	e.d.OnEvent(fireFor("probe", "h", clock.Now(), time.Second))
	if id := ex.called(t); id != "probe" {
		t.Fatalf("call of %s, want the probe", id)
	}
	probeEnd := clock.Now().Add(time.Second)
	e.d.OnEvent(fireFor("behind", "h", clock.Now(), time.Second))
	checkCircuitBack(t, e.reports(ex, 1)["behind"], "behind", "h", raftfsm.CeilMs(probeEnd))
	// The probe out: reported until its deadline.
	wantOpenCircuits(t, e.d, []load.Circuit{{Handler: "h", UntilMs: raftfsm.CeilMs(probeEnd)}})
	close(answer)
	if c := e.completes(1)["probe"]; c == nil || c.Outcome != raftfsm.OutcomeSuccess {
		t.Fatalf("the probe's report %+v, want success", c)
	}
	wantOpenCircuits(t, e.d, nil) // closed
	// Closed: attempts are called again.
	e.d.OnEvent(fireFor("after", "h", clock.Now(), time.Second))
	if id := ex.called(t); id != "after" {
		t.Fatalf("call of %s, want after's", id)
	}
	if c := e.completes(1)["after"]; c == nil || c.Outcome != raftfsm.OutcomeSuccess {
		t.Fatalf("after's report %+v, want success", c)
	}
	if got := testutil.ToFloat64(e.d.m.Attempts.WithLabelValues("h", "circuit_open")); got != 7 {
		t.Fatalf("ax_attempts_total{outcome=circuit_open} = %v, want 7 (4 queued, late, early, behind)", got)
	}
	if st := e.d.circ.b.Status("h"); st.State != engine.BreakerClosed {
		t.Fatalf("node circuit %v, want closed", st.State)
	}
}

// When the circuit opens while its handler's attempts wait for a slot
// that the opening does not free (the slot it frees goes to an attempt of
// another handler ahead of them in the queue, whose callback hangs), the
// opening itself hands them back: they do not wait for a hung callback's
// time-out (here an hour) to be granted a slot and found blocked. One
// assigned while the circuit is open and the slots are held goes back
// without queueing.
func TestDeliveryNodeCircuitWakesTheQueue(t *testing.T) {
	ex := newHangingExecutor(t, 2)
	clock := engine.NewFakeClock(time.Now())
	e := newRunEnv(t, clock, Config{Concurrency: 2, MinConcurrency: 2, BreakerFailures: 1, BreakerCoolDown: 10 * time.Second}, ex.x)
	now := clock.Now()
	e.d.OnEvent(fireFor("g1", "g", now, time.Hour))
	e.d.OnEvent(fireFor("h1", "h", now, time.Second))
	ex.called(t)
	ex.called(t)
	for i, id := range []string{"g2", "h2", "h3"} { // g2 is granted the next slot
		e.d.OnEvent(fireFor(id, id[:1], now, map[bool]time.Duration{true: time.Hour, false: time.Second}[id[0] == 'g']))
		waitUntil(t, id+" queued", func() bool { return e.d.Backlog()[2] == i+1 })
	}
	clock.BlockUntil(2)
	clock.Advance(time.Second) // h1 times out: h's circuit opens
	dueMs := raftfsm.CeilMs(clock.Now().Add(10 * time.Second))
	if id := ex.called(t); id != "g2" {
		t.Fatalf("call of %s, want g2's (its handler's circuit is closed)", id)
	}
	got := e.reports(ex, 3)
	if c := got["h1"]; c.Outcome != raftfsm.OutcomeTimeout {
		t.Fatalf("h1: %+v, want a time-out", c)
	}
	checkCircuitBack(t, got["h2"], "h2", "h", dueMs)
	checkCircuitBack(t, got["h3"], "h3", "h", dueMs)
	// Both slots are held by g's hung callbacks: an attempt of h assigned
	// now goes back at once, without queueing for one.
	e.d.OnEvent(fireFor("h4", "h", clock.Now(), time.Second))
	checkCircuitBack(t, e.reports(ex, 1)["h4"], "h4", "h", dueMs)
	if n := ex.calls.Load(); n != 3 {
		t.Fatalf("%d callbacks, want 3 (g1, h1, g2)", n)
	}
}

// The node's breaker counts what the leader's counts: a retryable answer
// or a time-out is a failure; a success, a 202, a busy or permanent
// answer is not; an unavailable executor or a cut call says nothing. A
// shard count that does not parse is reported retryable, so it fails.
func TestCallFailed(t *testing.T) {
	plain := &raftfsm.Task{}
	shards := &raftfsm.Task{Spec: raftfsm.Spec{Shards: &raftfsm.Shards{Ask: true, Max: 10}}}
	for _, c := range []struct {
		t             *raftfsm.Task
		kind          raftfsm.Outcome
		body          string
		failed, known bool
	}{
		{plain, raftfsm.OutcomeSuccess, "", false, true},
		{plain, raftfsm.OutcomeAccepted, "", false, true},
		{plain, raftfsm.OutcomeBusy, "", false, true},
		{plain, raftfsm.OutcomePermanent, "", false, true},
		{plain, raftfsm.OutcomeRetryable, "", false, false}, // a quick failure: the leader's breaker counts it
		{plain, raftfsm.OutcomeTimeout, "", true, true},
		{plain, raftfsm.OutcomeUnavailable, "", false, false},
		{plain, raftfsm.OutcomeCancelled, "", false, false},
		{shards, raftfsm.OutcomeSuccess, `{"count":3}`, false, true},
		{shards, raftfsm.OutcomeSuccess, `{"count":"3"}`, false, false},
	} {
		out := okOutcome
		out.Kind, out.Body = c.kind, []byte(c.body)
		if failed, known := callFailed(c.t, out); failed != c.failed || known != c.known {
			t.Errorf("%v %q: failed %v known %v, want %v %v", c.kind, c.body, failed, known, c.failed, c.known)
		}
	}
}

// An executor that answers some tasks with a quick 500 is not hanging:
// the node's circuit, which counts time-outs only, stays closed and every
// attempt handed to the node is called (the leader's breaker counts the
// failures). Counting the quick failures too, the node handed back the
// runs it held, due at its cool-down's end, behind the leader's parked
// retries of the tasks that had failed: a review saw 19 probes in a row,
// 9.5 minutes, each a retry that failed again, while 258 fresh runs of an
// executor that ran half of its tasks waited.
func TestDeliveryNodeCircuitIgnoresQuickFailures(t *testing.T) {
	var calls atomic.Int64
	x := executorAt(t, 2, func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.WriteHeader(http.StatusInternalServerError)
	})
	clock := engine.NewFakeClock(time.Now())
	e := newRunEnv(t, clock, Config{Concurrency: 2, MinConcurrency: 2, BreakerFailures: 3, BreakerCoolDown: 10 * time.Second}, x)
	now := clock.Now()
	const n = 8
	for i := range n {
		e.d.OnEvent(fireFor("q"+string(rune('0'+i)), "h", now, time.Second))
	}
	for id, c := range e.completes(n) {
		if c.Outcome != raftfsm.OutcomeRetryable || c.StartedMs == 0 {
			t.Errorf("%s: %+v, want a called attempt answered 500 (retryable), not handed back", id, c)
		}
	}
	if got := calls.Load(); got != n {
		t.Errorf("%d callbacks, want %d: every attempt called", got, n)
	}
	if st := e.d.circ.b.Status("h"); st.State != engine.BreakerClosed {
		t.Errorf("node circuit %s after %d quick failures, want closed", st.State, n)
	}
}
