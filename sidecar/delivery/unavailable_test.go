package delivery

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/axsched/ax/engine"
	"github.com/axsched/ax/raftfsm"
	"github.com/axsched/ax/sidecar/delivery/callback"
)

// deliveryObserver hands the FSM's events to a delivery, as the node does.
type deliveryObserver struct{ d *Delivery }

func (o deliveryObserver) Applied(_ uint64, events []raftfsm.Event) {
	for i := range events {
		o.d.OnEvent(&events[i])
	}
}

// deliveryEnv is a delivery of node n1 over a real FSM, whose record has
// the executors of the test.
type deliveryEnv struct {
	t     *testing.T
	f     *raftfsm.FSM
	d     *Delivery
	index uint64
}

func newDeliveryEnv(t *testing.T, xs ...raftfsm.Executor) *deliveryEnv {
	t.Helper()
	f := testFSM(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	d := New(Deps{Config: Config{NodeID: "n1", Concurrency: 50, MinConcurrency: 4}, Log: zerolog.Nop(), Store: f, Context: ctx,
		Clock: engine.RealClock(), Metrics: testMetrics()})
	t.Cleanup(d.Stop)
	e := &deliveryEnv{t: t, f: f, d: d}
	f.SetObserver(deliveryObserver{d})
	e.apply(raftfsm.Command{Type: raftfsm.CmdNode, Node: &raftfsm.Node{ID: "n1"}})
	for _, x := range xs {
		e.register(x)
	}
	return e
}

func (e *deliveryEnv) apply(c raftfsm.Command) raftfsm.Result {
	e.t.Helper()
	e.index++
	return applyEntry(e.t, e.f, e.index, c)[0]
}

func (e *deliveryEnv) register(x raftfsm.Executor) {
	e.t.Helper()
	if r := e.apply(raftfsm.Command{Type: raftfsm.CmdExecutor, Executor: &raftfsm.ExecutorChange{Node: "n1", Executor: x}}); r.Code != raftfsm.CodeOK {
		e.t.Fatalf("register %s: %+v", x.Name, r)
	}
}

func (e *deliveryEnv) unregister(name string) {
	e.t.Helper()
	if r := e.apply(raftfsm.Command{Type: raftfsm.CmdExecutor, Executor: &raftfsm.ExecutorChange{Node: "n1", Executor: raftfsm.Executor{Name: name}, Remove: true}}); r.Code != raftfsm.CodeOK {
		e.t.Fatalf("unregister %s: %+v", name, r)
	}
}

// deliverOnce runs deliverAvailable for a fresh attempt of a task of handler h.
func (e *deliveryEnv) deliverOnce(ctx context.Context, id string) (callback.Outcome, bool) {
	t := &raftfsm.Task{ID: id, Epoch: 1, Attempts: 1, State: raftfsm.StateRunning, Node: "n1", DueMs: time.Now().UnixMilli(),
		Spec: raftfsm.Spec{Handler: "h", TimeoutNs: int64(10 * time.Second), MaxAttempts: 3}}
	r := &attemptRun{epoch: 1, attempt: 1, timeout: 10 * time.Second}
	return e.d.deliverAvailable(ctx, t, r, e.d.executorsFor("h"), func(ev *zerolog.Event) *zerolog.Event { return ev })
}

func (e *deliveryEnv) down(x raftfsm.Executor) (downState, bool) {
	e.d.mu.Lock()
	defer e.d.mu.Unlock()
	st, ok := e.d.down[x.Name+"|"+x.URL]
	return st, ok
}

// probeDue moves x's next probe to now.
func (e *deliveryEnv) probeDue(x raftfsm.Executor) {
	e.d.mu.Lock()
	defer e.d.mu.Unlock()
	st := e.d.down[x.Name+"|"+x.URL]
	st.until = time.Now().Add(-time.Millisecond)
	e.d.down[x.Name+"|"+x.URL] = st
}

func (e *deliveryEnv) unavailableCount() float64 {
	return testutil.ToFloat64(e.d.m.Attempts.WithLabelValues("h", "unavailable"))
}

// serve answers 200 on a Unix socket at path (or on ln), counting calls.
func serve(t *testing.T, ln net.Listener) *atomic.Int64 {
	t.Helper()
	var calls atomic.Int64
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { calls.Add(1) })}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return &calls
}

// An absent executor (no socket file) is not an attempt: the callback is
// OutcomeUnavailable, not overloaded, for the leader to retry at the next
// probe; until then it is not tried again; each failed probe doubles the
// backoff (100 ms, 200 ms…), and an answer ends the down record.
func TestDeliveryAbsentExecutorIsProbedWithBackoff(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.sock")
	x := raftfsm.Executor{Name: "x", Handlers: []string{"h"}, URL: "unix://" + path, MaxConcurrency: 10}
	e := newDeliveryEnv(t, x)
	ctx := context.Background()

	out, ok := e.deliverOnce(ctx, "a")
	if !ok || out.Kind != raftfsm.OutcomeUnavailable || out.Overloaded || out.RetryAfter <= 0 || out.RetryAfter > ProbeBackoffMin {
		t.Fatalf("first callback: %+v (ok %v), want unavailable, absent, retry within %v", out, ok, ProbeBackoffMin)
	}
	st, down := e.down(x)
	if !down || st.backoff != ProbeBackoffMin || st.overloaded {
		t.Fatalf("down record %+v (%v), want backoff %v, absent", st, down, ProbeBackoffMin)
	}
	if got := e.unavailableCount(); got != 1 {
		t.Fatalf("%v unavailable callbacks, want 1", got)
	}
	// Before its next probe it is not tried.
	if out, _ := e.deliverOnce(ctx, "b"); out.Kind != raftfsm.OutcomeUnavailable || out.Overloaded || out.RetryAfter > ProbeBackoffMin {
		t.Fatalf("before the probe: %+v", out)
	}
	if got := e.unavailableCount(); got != 1 {
		t.Fatalf("%v unavailable callbacks, want still 1 (no callback before the next probe)", got)
	}
	// Failed probes double the backoff, up to ProbeBackoffMax.
	for want := 2 * ProbeBackoffMin; want <= 4*ProbeBackoffMin; want *= 2 {
		e.probeDue(x)
		if out, _ := e.deliverOnce(ctx, "c"); out.Kind != raftfsm.OutcomeUnavailable || out.RetryAfter > want {
			t.Fatalf("probe: %+v", out)
		}
		if st, _ := e.down(x); st.backoff != want {
			t.Fatalf("backoff %v after a failed probe, want %v", st.backoff, want)
		}
	}
	// The executor comes back: the next probe reaches it, the record goes.
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	calls := serve(t, ln)
	e.probeDue(x)
	if out, _ := e.deliverOnce(ctx, "d"); out.Kind != raftfsm.OutcomeSuccess {
		t.Fatalf("after the executor returned: %+v", out)
	}
	if _, down := e.down(x); down {
		t.Fatal("down record kept after an answer")
	}
	if calls.Load() != 1 {
		t.Fatalf("%d calls reached the executor, want 1", calls.Load())
	}
	// The limiter saw no overload and no failure for an absent executor.
	if st := e.d.slot(&x).lim.Stats(); st.Overloads != 0 || st.Failures != 0 || st.Timeouts != 0 {
		t.Fatalf("limiter stats %+v", st)
	}
}

// An overloaded executor (its accept queue full: EAGAIN) keeps the attempt
// on this node: deliverAvailable does not return while it is overloaded,
// the limiter is cut, and once the executor accepts again the same attempt
// is delivered (one call).
func TestDeliveryOverloadedExecutorKeepsTheAttempt(t *testing.T) {
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "x.sock")
	if err := syscall.Bind(fd, &syscall.SockaddrUnix{Name: path}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 1); err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), "listener")
	// Fill the accept queue: connects until EAGAIN.
	for i := 0; ; i++ {
		c, err := net.Dial("unix", path)
		if err != nil {
			break
		}
		defer c.Close()
		if i > 100 {
			t.Fatal("accept queue never full")
		}
	}
	x := raftfsm.Executor{Name: "x", Handlers: []string{"h"}, URL: "unix://" + path, MaxConcurrency: 10, MinConcurrency: 10}
	e := newDeliveryEnv(t, x)
	type result struct {
		out callback.Outcome
		ok  bool
	}
	done := make(chan result, 1)
	go func() {
		out, ok := e.deliverOnce(context.Background(), "a")
		done <- result{out, ok}
	}()
	waitUntil(t, "the executor marked overloaded", func() bool {
		st, down := e.down(x)
		return down && st.overloaded
	})
	select {
	case r := <-done:
		t.Fatalf("deliverAvailable returned %+v while the executor was overloaded; want it to wait on this node", r.out)
	default:
	}
	if st := e.d.slot(&x).lim.Stats(); st.Overloads == 0 {
		t.Fatalf("limiter saw no overload: %+v", st)
	}
	// The executor starts accepting.
	ln, err := net.FileListener(f)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	calls := serve(t, ln)
	var r result
	select {
	case r = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the attempt was not delivered after the executor accepted again")
	}
	if !r.ok || r.out.Kind != raftfsm.OutcomeSuccess {
		t.Fatalf("outcome %+v, want success", r.out)
	}
	if calls.Load() != 1 {
		t.Fatalf("%d calls, want 1", calls.Load())
	}
}

// Registering an executor again with other bounds changes its slot's
// limiter at once; unregistering it drops its slot and its metric series.
func TestDeliveryReRegistrationAndUnregistration(t *testing.T) {
	x := raftfsm.Executor{Name: "x", Handlers: []string{"h"}, URL: "unix:///nonexistent/x.sock", MaxConcurrency: 100}
	e := newDeliveryEnv(t, x)
	s := e.d.slot(&x)
	if mn, mx := s.lim.Bounds(); mn != 4 || mx != 100 {
		t.Fatalf("bounds [%d, %d], want [4, 100]", mn, mx)
	}
	e.unregister("x")
	x.MaxConcurrency, x.MinConcurrency = 200, 150
	e.register(x)
	s = e.d.slot(&x)
	if mn, mx := s.lim.Bounds(); mn != 150 || mx != 200 || s.lim.Limit() != 150 {
		t.Fatalf("after registering again: bounds [%d, %d] limit %d, want [150, 200] at 150", mn, mx, s.lim.Limit())
	}
	if got := testutil.ToFloat64(e.d.m.ExecutorLimit.WithLabelValues("x")); got != 150 {
		t.Fatalf("ax_executor_limit %v, want 150", got)
	}
	// Same name, new bounds, without unregistering (an update): at once.
	x.MaxConcurrency, x.MinConcurrency = 300, 0
	e.register(x)
	if mn, mx := s.lim.Bounds(); mn != 4 || mx != 300 {
		t.Fatalf("after an update: bounds [%d, %d], want [4, 300]", mn, mx)
	}
	s.gauges()
	e.unregister("x")
	e.d.mu.Lock()
	_, kept := e.d.slots["x|"+x.URL]
	e.d.mu.Unlock()
	if kept {
		t.Fatal("the slot of an unregistered idle executor was kept")
	}
	m := e.d.m
	for name, n := range map[string]int{"limit": testutil.CollectAndCount(m.ExecutorLimit),
		"in_flight": testutil.CollectAndCount(m.ExecutorFlight), "queue_length": testutil.CollectAndCount(m.ExecutorQueue)} {
		if n != 0 {
			t.Errorf("ax_executor_%s has %d series after the executor was unregistered, want 0", name, n)
		}
	}
}

// An API-registered executor unavailable for staleExecutorAfter is
// unregistered at its next failed probe; one from a flag never is, and a
// shorter streak is not.
func TestDeliveryStaleExecutorIsUnregistered(t *testing.T) {
	api := raftfsm.Executor{Name: "api", Handlers: []string{"h"}, URL: "unix:///nonexistent/api.sock"}
	e := newDeliveryEnv(t, api)
	var dropped []string
	e.d.unregisterStale = func(x *raftfsm.Executor) { dropped = append(dropped, x.Name) }
	streak := func(x raftfsm.Executor, since time.Duration) {
		e.d.mu.Lock()
		e.d.down[x.Name+"|"+x.URL] = downState{since: time.Now().Add(-since), until: time.Now().Add(-time.Millisecond),
			backoff: ProbeBackoffMax, wake: make(chan struct{})}
		e.d.mu.Unlock()
	}
	streak(api, 20*time.Second)
	e.d.markDown(&api, false)
	if len(dropped) != 0 {
		t.Fatalf("unregistered after a 20 s streak: %v", dropped)
	}
	streak(api, staleExecutorAfter+time.Second)
	e.d.markDown(&api, false)
	e.d.markDown(&api, false) // once only
	if len(dropped) != 1 || dropped[0] != "api" {
		t.Fatalf("unregistered %v after a streak of a minute, want [api]", dropped)
	}
	flag := raftfsm.Executor{Name: "flag", Handlers: []string{"h"}, URL: "unix:///nonexistent/flag.sock", FromFlag: true}
	streak(flag, 10*time.Minute)
	e.d.markDown(&flag, false)
	if len(dropped) != 1 {
		t.Fatalf("a flag executor was unregistered: %v", dropped)
	}
}
