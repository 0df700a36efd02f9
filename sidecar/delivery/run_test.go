package delivery

import (
	"context"
	"errors"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/axsched/ax/engine"
	"github.com/axsched/ax/raftfsm"
)

// fakeProposer records the commands delivery proposes and answers each
// with answer (nil: CodeOK).
type fakeProposer struct {
	mu     sync.Mutex
	calls  [][]raftfsm.Command
	fail   int // the first fail calls return an error
	answer func(raftfsm.Command) raftfsm.Result
	got    chan []raftfsm.Command
}

func newFakeProposer() *fakeProposer { return &fakeProposer{got: make(chan []raftfsm.Command, 100)} }

func (p *fakeProposer) Propose(_ context.Context, cmds []raftfsm.Command) ([]raftfsm.Result, error) {
	p.mu.Lock()
	p.calls = append(p.calls, cmds)
	fail := len(p.calls) <= p.fail
	p.mu.Unlock()
	if fail {
		return nil, errors.New("no leader")
	}
	res := make([]raftfsm.Result, len(cmds))
	for i, c := range cmds {
		res[i] = raftfsm.Result{Code: raftfsm.CodeOK}
		if p.answer != nil {
			res[i] = p.answer(c)
		}
	}
	p.got <- cmds
	return res, nil
}

func (p *fakeProposer) numCalls() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.calls)
}

// next returns the next commands proposed successfully.
func (p *fakeProposer) next(t *testing.T) []raftfsm.Command {
	t.Helper()
	select {
	case cmds := <-p.got:
		return cmds
	case <-time.After(30 * time.Second):
		t.Fatal("nothing proposed")
		return nil
	}
}

// runEnv is a delivery of node n1 over a real FSM and a fake proposer.
type runEnv struct {
	*deliveryEnv
	p *fakeProposer
}

func newRunEnv(t *testing.T, clock engine.Clock, cfg Config, xs ...raftfsm.Executor) *runEnv {
	t.Helper()
	f := testFSM(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	p := newFakeProposer()
	cfg.NodeID = "n1"
	d := New(Deps{Config: cfg, Log: zerolog.Nop(), Store: f, Context: ctx, Clock: clock, Metrics: testMetrics(), Proposer: p})
	t.Cleanup(d.Stop)
	e := &deliveryEnv{t: t, f: f, d: d}
	f.SetObserver(deliveryObserver{d})
	e.apply(raftfsm.Command{Type: raftfsm.CmdNode, Node: &raftfsm.Node{ID: "n1"}})
	for _, x := range xs {
		e.register(x)
	}
	return &runEnv{deliveryEnv: e, p: p}
}

// fire hands delivery the Fire of attempt 1 of task id (handler h), due at
// due, with its lease ending at lease.
func (e *runEnv) fire(id string, due, lease time.Time) { e.d.OnEvent(fireEvent(id, due, lease)) }

// fireEvent is the event of attempt 1 of task id (handler h) assigned to
// n1, due at due, with its lease ending at lease.
func fireEvent(id string, due, lease time.Time) *raftfsm.Event {
	return &raftfsm.Event{Type: raftfsm.CmdFire, Prev: raftfsm.StateWaiting, Task: &raftfsm.Task{
		ID: id, Epoch: 1, Attempts: 1, State: raftfsm.StateRunning, Node: "n1", DueMs: due.UnixMilli(), FiredMs: due.UnixMilli(),
		LeaseMs: lease.UnixMilli(), Spec: raftfsm.Spec{Handler: "h", Priority: 2, TimeoutNs: int64(10 * time.Second), MaxAttempts: 3}}}
}

// executorAt serves handle on a Unix socket and returns its executor for
// handler h.
func executorAt(t *testing.T, maxC int, handle http.HandlerFunc) raftfsm.Executor {
	t.Helper()
	path := filepath.Join(t.TempDir(), "x.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: handle}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return raftfsm.Executor{Name: "x", Handlers: []string{"h"}, URL: "unix://" + path, MinConcurrency: maxC, MaxConcurrency: maxC}
}

// Each answer of the executor becomes the outcome reported to the leader
// (a Complete of the attempt), counted in ax_attempts_total by its label;
// a 202 is reported by the executor itself, so nothing is proposed.
func TestDeliveryReportsTheOutcome(t *testing.T) {
	for _, c := range []struct {
		status     int
		retryAfter string
		want       raftfsm.Outcome
		wantMs     int64
		label      string
	}{
		{200, "", raftfsm.OutcomeSuccess, 0, "success"},
		{429, "3", raftfsm.OutcomeBusy, 3000, "snoozed"},
		{400, "", raftfsm.OutcomePermanent, 0, "permanent"},
		{500, "", raftfsm.OutcomeRetryable, 0, "failed"},
		{202, "", 0, 0, "accepted"},
	} {
		t.Run(c.label, func(t *testing.T) {
			x := executorAt(t, 4, func(w http.ResponseWriter, r *http.Request) {
				if c.retryAfter != "" {
					w.Header().Set("Retry-After", c.retryAfter)
				}
				w.WriteHeader(c.status)
			})
			e := newRunEnv(t, engine.RealClock(), Config{Concurrency: 10, MinConcurrency: 4}, x)
			now := time.Now()
			e.fire("a", now, now.Add(time.Hour))
			waitUntil(t, "the attempt to end", func() bool { return e.d.InFlight() == 0 && e.d.Active() == 0 })
			if got := testutil.ToFloat64(e.d.m.Attempts.WithLabelValues("h", c.label)); got != 1 {
				t.Fatalf("ax_attempts_total{outcome=%q} = %v, want 1", c.label, got)
			}
			if testutil.CollectAndCount(e.d.m.Lateness) != 1 {
				t.Fatal("lateness not observed")
			}
			if c.status == 202 {
				if n := e.p.numCalls(); n != 0 {
					t.Fatalf("%d proposals after a 202, want none", n)
				}
				return
			}
			cmds := e.p.next(t)
			if len(cmds) != 1 || cmds[0].Type != raftfsm.CmdComplete {
				t.Fatalf("proposed %+v, want one Complete", cmds)
			}
			got := cmds[0].Complete
			if got.ID != "a" || got.Epoch != 1 || got.Attempt != 1 || got.Outcome != c.want || got.RetryAfterMs != c.wantMs {
				t.Fatalf("Complete %+v, want outcome %v retry after %d ms", got, c.want, c.wantMs)
			}
		})
	}
}

// EncodeResult stores JSON text as JSON and anything else as binary,
// shown as result_base64: a body that json.Valid takes but that is not
// UTF-8 too, or the views would splice its bytes in raw and not be JSON.
func TestEncodeResult(t *testing.T) {
	for body, binary := range map[string]bool{
		`{"a":1}`:             false,
		`"é 日本 \ud83d\ude00"`: false,
		"\"\xef\xbf\xbd\"":    false, // U+FFFD itself
		"plain text":          true,
		"\x00\x01":            true,
		"{\"a\":\"\xff\"}":    true,
		"\"\xed\xa0\x80\"":    true, // an encoded surrogate
		"[\"\xc3\"]":          true, // a truncated sequence
	} {
		stored, bin := EncodeResult([]byte(body))
		if string(stored) != body || bin != binary {
			t.Errorf("EncodeResult(%q) = %q, %v; want the body, binary %v", body, stored, bin, binary)
		}
	}
}

// An executor's 2xx answer that is JSON but not UTF-8 is reported as a
// binary result.
func TestDeliveryReportsInvalidUTF8JSONAsBinary(t *testing.T) {
	const body = "{\"a\":\"\xff\"}"
	x := executorAt(t, 4, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(body))
	})
	e := newRunEnv(t, engine.RealClock(), Config{Concurrency: 10, MinConcurrency: 4}, x)
	now := time.Now()
	e.fire("a", now, now.Add(time.Hour))
	cmds := e.p.next(t)
	if len(cmds) != 1 || cmds[0].Type != raftfsm.CmdComplete {
		t.Fatalf("proposed %+v, want one Complete", cmds)
	}
	if c := cmds[0].Complete; c.Outcome != raftfsm.OutcomeSuccess || string(c.Result) != body || !c.ResultBinary {
		t.Fatalf("Complete: outcome %v, result %q, binary %v; want success, the body, binary", c.Outcome, c.Result, c.ResultBinary)
	}
}

// An attempt assigned to a node whose executor went away is reported busy
// (retried elsewhere in a second), not failed.
func TestDeliveryWithoutExecutorReportsBusy(t *testing.T) {
	e := newRunEnv(t, engine.RealClock(), Config{Concurrency: 10, MinConcurrency: 4})
	now := time.Now()
	e.fire("a", now, now.Add(time.Hour))
	cmds := e.p.next(t)
	if c := cmds[0].Complete; c == nil || c.Outcome != raftfsm.OutcomeBusy || c.RetryAfterMs != 1000 {
		t.Fatalf("proposed %+v, want a busy Complete retried after 1 s", cmds)
	}
}

// An attempt that could not reach its executor (no socket file) reports
// no call start: the run's record takes its start and lateness from the
// first call that reached an executor, not from one that never connected.
func TestDeliveryUnavailableReportsNoCallStart(t *testing.T) {
	x := raftfsm.Executor{Name: "x", Handlers: []string{"h"}, URL: "unix://" + filepath.Join(t.TempDir(), "absent.sock"), MinConcurrency: 4, MaxConcurrency: 4}
	e := newRunEnv(t, engine.RealClock(), Config{Concurrency: 10, MinConcurrency: 4}, x)
	now := time.Now()
	e.fire("a", now, now.Add(time.Hour))
	c := e.p.next(t)[0].Complete
	if c == nil || c.Outcome != raftfsm.OutcomeUnavailable {
		t.Fatalf("reported %+v, want unavailable", c)
	}
	if c.StartedMs != 0 || c.EndedMs != 0 || c.DurationNs != 0 || c.QueueNs != 0 || c.ConnectNs != 0 {
		t.Fatalf("unavailable attempt reported call times %+v, want none", c)
	}
}

// A report the leader does not take (no leader) is proposed again until it
// commits.
func TestDeliveryReportIsRetried(t *testing.T) {
	e := newRunEnv(t, engine.RealClock(), Config{Concurrency: 10, MinConcurrency: 4})
	e.p.fail = 2
	now := time.Now()
	e.fire("a", now, now.Add(time.Hour))
	if c := e.p.next(t)[0].Complete; c == nil || c.ID != "a" {
		t.Fatalf("reported %+v", c)
	}
	if n := e.p.numCalls(); n != 3 {
		t.Fatalf("%d proposals, want 3 (two refused)", n)
	}
}

// Draining hands the attempts not started back to the leader (unavailable,
// due again at their own due time) and any assigned afterwards at once;
// WaitIdle then finds nothing running.
func TestDeliveryDrainHandsBackWaitingAttempts(t *testing.T) {
	x := executorAt(t, 4, func(http.ResponseWriter, *http.Request) {})
	e := newRunEnv(t, engine.RealClock(), Config{Concurrency: 10, MinConcurrency: 4}, x)
	due := time.Now().Add(time.Hour)
	e.fire("waiting", due, due.Add(time.Hour))
	waitUntil(t, "the attempt to wait", func() bool { return e.d.Active() == 1 })
	e.d.BeginDrain()
	c := e.p.next(t)[0].Complete
	if c == nil || c.ID != "waiting" || c.Outcome != raftfsm.OutcomeUnavailable || c.RetryDueMs != due.UnixMilli() {
		t.Fatalf("handed back %+v, want unavailable due at %d", c, due.UnixMilli())
	}
	now := time.Now()
	e.fire("late", now, now.Add(time.Hour))
	if c := e.p.next(t)[0].Complete; c == nil || c.ID != "late" || c.Outcome != raftfsm.OutcomeUnavailable {
		t.Fatalf("handed back %+v, want the late attempt unavailable", c)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if left := e.d.WaitIdle(ctx); left != 0 {
		t.Fatalf("%d attempts left after the drain", left)
	}
	if got := testutil.ToFloat64(e.d.m.Attempts.WithLabelValues("h", "unavailable")); got != 2 {
		t.Fatalf("ax_attempts_total{outcome=unavailable} = %v, want 2", got)
	}
}

// Every renewInterval the attempts whose lease ends within grace/2 +
// renewInterval get a heartbeat, in proposals of at most MaxBatchCommands;
// the lease the leader gives back is the attempt's from then on.
func TestDeliveryRenewsLeasesOfWaitingAttempts(t *testing.T) {
	clock := engine.NewFakeClock(time.Now())
	e := newRunEnv(t, clock, Config{Concurrency: 10, MinConcurrency: 4, LeaseGrace: 10 * time.Second, MaxBatchCommands: 2},
		raftfsm.Executor{Name: "x", Handlers: []string{"h"}, URL: "unix:///nonexistent/x.sock"})
	renewed := clock.Now().Add(time.Hour).UnixMilli()
	e.p.answer = func(c raftfsm.Command) raftfsm.Result {
		return raftfsm.Result{Code: raftfsm.CodeOK, Task: &raftfsm.Task{ID: c.Lease.ID, LeaseMs: renewed}}
	}
	due := clock.Now().Add(time.Hour) // the attempts wait for their due time
	for _, id := range []string{"a", "b", "c"} {
		e.fire(id, due, clock.Now().Add(2*time.Second))
	}
	e.fire("far", due, clock.Now().Add(30*time.Minute))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); e.d.RenewLeases(ctx) }()
	defer func() { cancel(); <-done }()
	clock.BlockUntil(5) // four attempts wait for their due time, RenewLeases for its interval
	clock.Advance(renewInterval)
	ids := map[string]bool{}
	for _, n := range []int{2, 1} {
		cmds := e.p.next(t)
		if len(cmds) != n {
			t.Fatalf("a proposal of %d heartbeats, want %d (MaxBatchCommands 2)", len(cmds), n)
		}
		for _, c := range cmds {
			if c.Type != raftfsm.CmdLease || c.Lease.Attempt != 1 {
				t.Fatalf("proposed %+v, want a heartbeat of attempt 1", c)
			}
			ids[c.Lease.ID] = true
		}
	}
	if len(ids) != 3 || ids["far"] {
		t.Fatalf("renewed %v, want a, b and c", ids)
	}
	// The renewal stores each lease once its proposal returns, after the
	// proposer handed the commands over: wait for the last one.
	leases := func() (out []int64) {
		e.d.mu.Lock()
		defer e.d.mu.Unlock()
		for _, id := range []string{"a", "b", "c"} {
			out = append(out, e.d.running[id].leaseMs.Load())
		}
		return out
	}
	waitUntil(t, "the renewed leases stored", func() bool {
		for _, got := range leases() {
			if got != renewed {
				return false
			}
		}
		return true
	})
}

// Attempts waiting for a slot of a saturated executor count in the load
// report's queue by handler and in the backlog by priority; LimitOf is the
// executor's limit.
func TestDeliveryCountsAttemptsWaitingForASlot(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{}, 2)
	x := executorAt(t, 1, func(http.ResponseWriter, *http.Request) { started <- struct{}{}; <-release })
	e := newRunEnv(t, engine.RealClock(), Config{Concurrency: 10, MinConcurrency: 1}, x)
	if got := e.d.LimitOf(&x); got != 0 {
		t.Fatalf("LimitOf before any callback = %d, want 0", got)
	}
	now := time.Now()
	e.fire("a", now, now.Add(time.Hour))
	<-started
	e.fire("b", now, now.Add(time.Hour))
	waitUntil(t, "b to queue", func() bool { return e.d.QueuedByHandler()["h"] == 1 && e.d.Backlog()[2] == 1 })
	if b := e.d.Backlog(); b[0]+b[1]+b[3]+b[4] != 0 {
		t.Fatalf("backlog %v, want 1 at priority 2 only", b)
	}
	if got := e.d.LimitOf(&x); got != 1 {
		t.Fatalf("LimitOf = %d, want 1", got)
	}
	close(release)
	waitUntil(t, "both attempts to end", func() bool { return e.d.Active() == 0 })
	if q := e.d.QueuedByHandler(); q != nil {
		t.Fatalf("queued %v after both ended", q)
	}
}
