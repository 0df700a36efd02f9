package sidecartest_test

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/axsched/ax/sidecar"
	"github.com/axsched/ax/sidecar/sidecartest"
)

// With a handler limit of 2 on a 3-node cluster, never more than 2
// attempts of that handler run at once across all nodes' executors, and
// every task still runs. Each attempt is held by the executor until the
// sidecar cuts it at its 700ms timeout, on the fake clock: the test moves
// the clock by the timeout once the cap's attempts are in, so that the
// overlap is counted on fake times the machine's load cannot skew (moved
// from e2e's TestHandlerCap_ClusterWide, which counted real times at its
// executor: it once saw 3 against a cap of 2 on a busy machine).
func TestHandlerCapClusterWide(t *testing.T) {
	c := sidecartest.New(t, sidecartest.Options{Nodes: 3, Config: func(_ int, cfg *sidecar.Config) {
		cfg.HandlerLimits = map[string]int{"slow": 2}
	}})
	never := make(chan struct{})
	c.Respond(func(sidecartest.Call) sidecartest.Reply { return sidecartest.Reply{Hold: never} })
	f := c.Follower()
	const tasks = 6
	for i := range tasks {
		s := sidecartest.Spec(fmt.Sprintf("cap-%d", i), "slow")
		s.Timeout, s.MaxAttempts = 700*time.Millisecond, 1
		c.Submit(f, s)
	}
	inFlight := func() (started, running int) {
		for _, call := range c.AllCalls() {
			started++
			if call.Ended.IsZero() {
				running++
			}
		}
		return
	}
	for round := 1; ; round++ {
		want := min(2*round, tasks)
		c.Eventually(fmt.Sprintf("round %d: %d attempts started, 2 in flight", round, want), func() bool {
			started, running := inFlight()
			return started >= want && running >= 2
		})
		c.Advance(700 * time.Millisecond)
		if want == tasks {
			break
		}
	}
	for i := range tasks {
		c.WaitState(f, fmt.Sprintf("cap-%d", i), "DEAD")
	}
	type edge struct {
		at    time.Time
		delta int
	}
	var edges []edge
	calls := 0
	for i := range tasks {
		for _, call := range c.CallsFor(fmt.Sprintf("cap-%d", i)) {
			calls++
			if call.Ended.IsZero() {
				t.Fatalf("call %+v still in flight after its task is DEAD", call)
			}
			edges = append(edges, edge{call.At, +1}, edge{call.Ended, -1})
		}
	}
	if calls != tasks {
		t.Fatalf("%d callbacks, want %d", calls, tasks)
	}
	sort.Slice(edges, func(i, j int) bool {
		if edges[i].at.Equal(edges[j].at) {
			return edges[i].delta < edges[j].delta // ends before starts
		}
		return edges[i].at.Before(edges[j].at)
	})
	cur, peak := 0, 0
	for _, e := range edges {
		cur += e.delta
		peak = max(peak, cur)
	}
	if peak > 2 {
		t.Fatalf("%d attempts of slow ran at once, the cluster-wide cap is 2", peak)
	}
	if peak < 2 {
		t.Errorf("peak %d: the cap should still allow 2 at once", peak)
	}
}

// After 3 failed attempts in a row a handler's circuit opens; its next
// due task waits (stays WAITING, not failed) through the 3s cool-down,
// then goes as the single probe; another handler is not held back
// meanwhile (moved from e2e's TestCircuitBreaker_OpenWaitProbe; here the
// clock is held just short of the cool-down's end to show the probe has
// not gone early, then moved past it).
func TestCircuitBreakerOpenWaitProbe(t *testing.T) {
	c := sidecartest.New(t, sidecartest.Options{Config: func(_ int, cfg *sidecar.Config) {
		cfg.BreakerFailures, cfg.BreakerCoolDown = 3, 3*time.Second
	}})
	c.Respond(func(call sidecartest.Call) sidecartest.Reply {
		if call.Handler == "fail" {
			return sidecartest.Reply{Status: 500}
		}
		return sidecartest.Reply{}
	})
	for i := range 3 {
		id := fmt.Sprintf("cb-%d", i)
		s := sidecartest.Spec(id, "fail")
		s.MaxAttempts = 1
		c.Submit(0, s)
		c.WaitState(0, id, "DEAD")
	}
	opened := c.Now()
	s := sidecartest.Spec("cb-held", "fail")
	s.MaxAttempts = 1
	c.Submit(0, s)
	c.Submit(0, sidecartest.Spec("cb-other", "ok"))
	c.WaitState(0, "cb-other", "SUCCESS")
	const open = `ax_circuit_open{handler="fail",state="open"}`
	if m := c.Metrics(0); m[open] != 1 {
		t.Fatalf("circuit of fail not open: %v", m[open])
	}
	held := func(when string) {
		t.Helper()
		tk, err := c.Task(0, "cb-held")
		if err != nil {
			t.Fatal(err)
		}
		if tk.State != "WAITING" || tk.Attempts != 0 || len(c.CallsFor("cb-held")) != 0 {
			t.Fatalf("a task of an open circuit must wait (%s): %+v", when, tk)
		}
	}
	held("at once")
	// Just short of the cool-down's end: still held (a task of another
	// handler runs meanwhile, and is done).
	c.AdvanceTo(opened.Add(3*time.Second - 100*time.Millisecond))
	c.Submit(0, sidecartest.Spec("cb-other2", "ok"))
	c.WaitState(0, "cb-other2", "SUCCESS")
	held("100ms before the cool-down ends")
	c.AdvanceTo(opened.Add(3 * time.Second))
	c.WaitState(0, "cb-held", "DEAD") // the probe went, and failed
	calls := c.CallsFor("cb-held")
	if len(calls) != 1 {
		t.Fatalf("probe calls %d, want 1", len(calls))
	}
	if wait := calls[0].At.Sub(opened); wait < 2500*time.Millisecond {
		t.Fatalf("the probe went %v after the circuit opened, before the 3s cool-down", wait)
	}
}

// One node that leads and delivers: an executor that takes every
// callback and never answers, 60 tasks due at once (timeout 1 s, one
// attempt each), the circuit opening after 5 failures. Its limit of 4
// are in flight and the rest queue on the node; once the circuit opens
// no callback starts (the node's own breaker, fed by the same outcomes
// as the leader's, hands the queued attempts back), then one probe goes
// when the cool-down ends (it fails: the circuit opens again), and the
// next, answered, closes it: every other task then runs once. Before,
// the node called its whole queue after the leader's circuit opened,
// 4 a second (a review counted 193 such calls with 300 tasks).
func TestNodeCircuitStopsTheAttemptsAlreadyHandedOut(t *testing.T) {
	const tasks, coolDown = 60, 10 * time.Second
	c := sidecartest.New(t, sidecartest.Options{Config: func(_ int, cfg *sidecar.Config) {
		cfg.BreakerFailures, cfg.BreakerCoolDown = 5, coolDown
	}})
	never := make(chan struct{})
	c.Respond(func(sidecartest.Call) sidecartest.Reply { return sidecartest.Reply{Hold: never} })
	for i := range tasks {
		s := sidecartest.Spec(fmt.Sprintf("nc-%02d", i), "dead")
		s.Timeout, s.MaxAttempts = time.Second, 1
		c.Submit(0, s)
	}
	ex := c.Executor(0)
	const open = `ax_circuit_open{handler="dead",state="open"}`
	var opened time.Time
	for round := 1; opened.IsZero(); round++ {
		if round > 10 {
			t.Fatalf("the circuit did not open after %d rounds of time-outs (%d calls)", round-1, len(c.AllCalls()))
		}
		c.Eventually(fmt.Sprintf("round %d: callbacks in flight", round), func() bool { return ex.InFlight() > 0 })
		c.Advance(time.Second) // they time out
		c.Eventually(fmt.Sprintf("round %d: the time-outs counted, and the next callbacks in flight or the circuit open", round), func() bool {
			if c.Metrics(0)[open] == 1 {
				opened = c.Now()
				return true
			}
			return ex.InFlight() > 0
		})
	}
	for range 5 { // half the cool-down, a second at a time
		c.Advance(time.Second)
		c.Eventually("no callback in flight after the circuit opened", func() bool { return ex.InFlight() == 0 })
	}
	after := 0
	for _, call := range c.AllCalls() {
		if call.At.After(opened) {
			after++
		}
	}
	atOpen := len(c.AllCalls()) - after
	if after > 0 {
		t.Fatalf("%d callbacks after the circuit opened (%d before), want none", after, atOpen)
	}
	c.Eventually("no attempt left on the node", func() bool {
		m := c.Metrics(0)
		return m[`ax_attempts_total{handler="dead",outcome="circuit_open"}`] == float64(tasks-atOpen) && m[`ax_tasks{state="RUNNING"}`] == 0
	})
	c.AdvanceTo(opened.Add(coolDown)) // both circuits half-open: one probe
	c.Eventually("the probe's callback", func() bool { return len(c.AllCalls()) == atOpen+1 })
	c.Advance(time.Second) // it times out: open again
	c.Eventually("the circuit open again", func() bool {
		return ex.InFlight() == 0 && c.Metrics(0)[open] == 1 && c.Metrics(0)[`ax_tasks{state="RUNNING"}`] == 0
	})
	c.Respond(nil) // 200 from now on
	c.AdvanceTo(opened.Add(2*coolDown + time.Second))
	c.Eventually("every task ended", func() bool {
		m := c.Metrics(0)
		return m[`ax_tasks{state="SUCCESS"}`]+m[`ax_tasks{state="DEAD"}`] == tasks
	})
	if n := len(c.AllCalls()); n != tasks {
		t.Fatalf("%d callbacks for %d tasks of one attempt each, want one each (%d failed before the circuit opened, one probe failed)", n, tasks, atOpen)
	}
	if m := c.Metrics(0); m[`ax_tasks{state="DEAD"}`] != float64(atOpen+1) {
		t.Fatalf("%v DEAD, want the %d that timed out", m[`ax_tasks{state="DEAD"}`], atOpen+1)
	}
	t.Logf("%d callbacks before the circuit opened, none after; %v attempts handed back by the node's circuit",
		atOpen, c.Metrics(0)[`ax_attempts_total{handler="dead",outcome="circuit_open"}`])
}

// Three nodes, each with an executor that takes every callback and never
// answers; 90 tasks (timeout 1 s, one attempt each). The leader's circuit
// opens on the first round of time-outs (12, from all nodes), each
// node's on its own fifth, a round later; the attempts they still hold go
// back, and from then on the executors get one probe per cool-down: the
// leader's, which the node it lands on lets through, as that node's own
// circuit has half-opened by then (it opened when the runs it handed
// back were made due, after the leader's). Once the executors answer,
// the next probe closes both circuits and every other run goes once.
// Before, each node went on calling what it held, 4 at a time: callbacks
// were still in flight after two rounds of time-outs.
func TestNodeCircuitThreeNodesProbeConverges(t *testing.T) {
	const tasks, coolDown = 90, 10 * time.Second
	c := sidecartest.New(t, sidecartest.Options{Nodes: 3, Config: func(_ int, cfg *sidecar.Config) {
		cfg.BreakerFailures, cfg.BreakerCoolDown = 5, coolDown
	}})
	never := make(chan struct{})
	c.Respond(func(sidecartest.Call) sidecartest.Reply { return sidecartest.Reply{Hold: never} })
	l := c.Leader()
	for i := range tasks {
		s := sidecartest.Spec(fmt.Sprintf("nc3-%02d", i), "dead")
		s.Timeout, s.MaxAttempts = time.Second, 1
		c.Submit(l, s)
	}
	inFlight := func() (n int) {
		for i := range c.Nodes() {
			n += c.Executor(i).InFlight()
		}
		return n
	}
	handedBack := func() (n float64) {
		for i := range c.Nodes() {
			n += c.Metrics(i)[`ax_attempts_total{handler="dead",outcome="circuit_open"}`]
		}
		return n
	}
	// Nothing runs or waits on a node, and every callback made is a DEAD
	// task: the rest went back to the leader.
	settled := func() bool {
		m := c.Metrics(l)
		return inFlight() == 0 && m[`ax_tasks{state="RUNNING"}`] == 0 && m[`ax_tasks{state="DEAD"}`] == float64(len(c.AllCalls()))
	}
	c.Eventually("the first callbacks", func() bool { return inFlight() > 0 })
	start := c.Now()
	for range 2 { // two rounds of time-outs open every circuit
		c.Advance(time.Second)
		cut := c.Now().Add(-time.Second)
		c.Eventually("the callbacks of a second ago cut at their time-out", func() bool {
			for _, call := range c.AllCalls() {
				if !call.At.After(cut) && call.Ended.IsZero() {
					return false
				}
			}
			return true
		})
	}
	c.Eventually("no attempt left on the nodes, the callbacks made all DEAD", settled)
	dead, back := len(c.AllCalls()), handedBack()
	// Two rounds of each node's limit of 4: the second started before its
	// own circuit opened.
	if dead > 3*2*4 || back != float64(tasks-dead) {
		t.Fatalf("%d callbacks and %v attempts handed back once every circuit opened, want at most 24 callbacks and the rest handed back", dead, back)
	}
	for probe := 1; probe <= 3; probe++ {
		c.AdvanceUntil(fmt.Sprintf("probe %d's callback", probe), 100*time.Millisecond, func() bool { return len(c.AllCalls()) > dead })
		c.Advance(time.Second) // it times out: the circuits open again
		c.Eventually(fmt.Sprintf("probe %d cut, the circuits open again", probe), settled)
		if n := len(c.AllCalls()); n != dead+1 {
			t.Fatalf("%d callbacks in half-open round %d, want the one probe", n-dead, probe)
		}
		dead++
	}
	if n := handedBack(); n != back {
		t.Fatalf("%v attempts handed back while the circuits half-opened, want none (the leader's probes were let through)", n-back)
	}
	c.Respond(nil) // 200 from now on
	c.AdvanceUntil("every task ended", 100*time.Millisecond, func() bool {
		m := c.Metrics(l)
		return m[`ax_tasks{state="SUCCESS"}`]+m[`ax_tasks{state="DEAD"}`] == tasks
	})
	if m := c.Metrics(l); m[`ax_tasks{state="DEAD"}`] != float64(dead) || len(c.AllCalls()) != tasks {
		t.Fatalf("%v DEAD and %d callbacks, want the %d that timed out and one callback per task", m[`ax_tasks{state="DEAD"}`], len(c.AllCalls()), dead)
	}
	t.Logf("%d callbacks while the executors were dead (%v of fake time), %v attempts handed back by the nodes' circuits", dead, c.Now().Sub(start), back)
}

// gate makes every executor hold each callback until the test lets it go:
// the calls arrive on the returned channel in arrival order, each with
// the channel that answers it 200 when closed.
type gated struct {
	call  sidecartest.Call
	reply chan struct{}
}

func gate(t *testing.T, c *sidecartest.Cluster) <-chan gated {
	ch := make(chan gated, 1000)
	var all []chan struct{}
	var mu sync.Mutex
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, r := range all {
			select {
			case <-r:
			default:
				close(r)
			}
		}
	})
	c.Respond(func(call sidecartest.Call) sidecartest.Reply {
		r := make(chan struct{})
		mu.Lock()
		all = append(all, r)
		mu.Unlock()
		ch <- gated{call, r}
		return sidecartest.Reply{Hold: r}
	})
	return ch
}

// With a handler limit of 1 and the cap held by a running task, 5
// priority-4 tasks queued first and then 5 priority-0 ones: as the cap
// frees one at a time, the priority-0 ones start first, each priority in
// submit order (moved from e2e's TestHandlerLimit_PriorityOrder; the runs
// held by the cap used to be re-polled every 50 ms in no order).
func TestHandlerLimitPriorityOrder(t *testing.T) {
	c := sidecartest.New(t, sidecartest.Options{Config: func(_ int, cfg *sidecar.Config) {
		cfg.HandlerLimits = map[string]int{"gate": 1}
	}})
	calls := gate(t, c)
	next := func() gated {
		t.Helper()
		var g gated
		c.Eventually("a callback", func() bool {
			select {
			case g = <-calls:
				return true
			default:
				return false
			}
		})
		return g
	}
	s := sidecartest.Spec("pl-first", "gate")
	s.MaxAttempts = 1
	c.Submit(0, s)
	first := next()
	if first.call.TaskID != "pl-first" {
		t.Fatalf("first callback %s", first.call.TaskID)
	}
	for _, p := range []int{4, 0} {
		for i := range 5 {
			s := sidecartest.Spec(fmt.Sprintf("pl-%d-%d", p, i), "gate")
			s.Priority, s.MaxAttempts = p, 1
			c.Submit(0, s)
		}
	}
	const key = `ax_parked_runs{handler="gate",reason="handler_limit"}`
	c.Eventually("10 runs held by the cap", func() bool { return c.Metrics(0)[key] == 10 })
	close(first.reply)
	var order []string
	for range 10 {
		g := next()
		order = append(order, g.call.TaskID)
		close(g.reply)
	}
	t.Logf("start order under the cap: %v", order)
	for i, id := range order {
		if want := "pl-0-"; i < 5 && !strings.HasPrefix(id, want) || i >= 5 && !strings.HasPrefix(id, "pl-4-") {
			t.Fatalf("start order %v: want the 5 priority-0 runs first, each priority in submit order", order)
		}
	}
	for i := 1; i < 10; i++ {
		if i != 5 && order[i] < order[i-1] {
			t.Fatalf("start order %v: not FIFO within a priority", order)
		}
	}
}

// With the backlog bound at 1000 and no executor anywhere, 1000 due tasks
// are accepted (with a warning header from 80 % of the bound), the 1001st
// submit gets 429 queue_full with Retry-After, the depth and the limit,
// through the leader and through a follower alike, and nothing accepted
// earlier is lost (moved from e2e's TestBackpressure_QueueFull).
func TestBackpressureQueueFull(t *testing.T) {
	c := sidecartest.New(t, sidecartest.Options{Nodes: 3, NoExecutor: true, Config: func(_ int, cfg *sidecar.Config) {
		cfg.BacklogLimit = 1000
	}})
	leader := c.WaitLeader()
	follower := c.Follower()
	warned := 0
	for b := range 10 {
		var items []string
		for i := range 100 {
			items = append(items, fmt.Sprintf(`{"id":"bp-%d-%d","handler":"bp.none"}`, b, i))
		}
		resp := c.HTTP(follower, "POST", "/v1/tasks/batch", []byte(`{"tasks":[`+strings.Join(items, ",")+`]}`))
		if resp.Status != 200 {
			t.Fatalf("batch %d: %d %s", b, resp.Status, resp.Body)
		}
		if resp.Header.Get("Ax-Backlog-Warning") != "" {
			warned++
		}
	}
	// The leader counts the 1000 as its backlog. It counts a submit once
	// its scheduler has armed it, from the FSM's event, a moment after
	// the write was applied, and a new leader (a loaded machine can miss
	// a Raft election timeout, which is real time) only once it has
	// loaded its due runs: a submit admitted before is not refused. Wait
	// for the count first, as a precondition, with the leader and the
	// follower found again.
	c.Eventually("the leader's backlog of bp.none at 1000", func() bool {
		leader = c.WaitLeader()
		h := handlersOf(t, c, leader)["bp.none"]
		return c.Leader() == leader && h.Backlog != nil && *h.Backlog == 1000
	})
	if follower == leader {
		follower = c.Follower()
	}
	// A single submit at the bound: refused, on both nodes.
	for _, n := range []int{leader, follower} {
		id := fmt.Sprintf("bp-over-n%d", n)
		resp := c.HTTP(n, "POST", "/v1/tasks", []byte(fmt.Sprintf(`{"id":%q,"handler":"bp.none"}`, id)))
		if resp.Status != 429 {
			t.Fatalf("submit past the bound via n%d: %d %s", n, resp.Status, resp.Body)
		}
		if resp.RetryAfter() <= 0 {
			t.Errorf("429 without Retry-After: %v", resp.Header)
		}
		var body struct {
			Error struct {
				Code         string
				Message      string
				Depth, Limit int
			}
		}
		if err := json.Unmarshal(resp.Body, &body); err != nil {
			t.Fatal(err)
		}
		if body.Error.Code != "queue_full" || body.Error.Depth != 1000 || body.Error.Limit != 1000 || !strings.Contains(body.Error.Message, "bp.none") {
			t.Fatalf("429 body: %s", resp.Body)
		}
		if _, err := c.Task(n, id); err == nil {
			t.Fatalf("a refused task was stored")
		}
	}
	// Another handler is not held back by this one's backlog, and a task
	// due later is not counted.
	c.Submit(follower, sidecartest.Spec("bp-other", "bp.other"))
	later := sidecartest.Spec("bp-later", "bp.none")
	later.Delay = time.Hour
	c.Submit(follower, later)
	// Every accepted task is stored and waiting.
	if got := c.Metrics(leader)[`ax_tasks{state="WAITING"}`]; got != 1002 {
		t.Fatalf("WAITING tasks %v, want 1002", got)
	}
	for b := range 10 {
		if _, err := c.Task(leader, fmt.Sprintf("bp-%d-99", b)); err != nil {
			t.Fatalf("accepted task lost: %v", err)
		}
	}
	if warned < 2 {
		t.Errorf("want an Ax-Backlog-Warning on the batches past 80 %% of the bound, got %d", warned)
	}
}

// With an executor limit of 8 (fixed), 200 due tasks that hold their
// callback: the node gets only what its executor holds (8 in flight + a
// queue of 8), so 16 are RUNNING (a few more at most: an attempt between
// its Fire and its slot is not counted by the node yet); the others wait
// on the leader as executor_busy, and all finish once released (moved
// from e2e's TestRunningMeansRunning).
func TestRunningMeansRunning(t *testing.T) {
	c := sidecartest.New(t, sidecartest.Options{Config: func(_ int, cfg *sidecar.Config) {
		cfg.DeliveryConcurrency, cfg.DeliveryMinConcurrency = 8, 8
	}})
	release := make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	c.Respond(func(sidecartest.Call) sidecartest.Reply { return sidecartest.Reply{Hold: release} })
	const tasks = 200
	for i := range tasks {
		s := sidecartest.Spec(fmt.Sprintf("rm-%03d", i), "hold")
		s.Timeout, s.MaxAttempts = time.Minute, 1
		c.Submit(0, s)
	}
	running := 0
	var last string
	c.Eventually("16 RUNNING, the rest executor_busy", func() bool {
		m := c.Metrics(0)
		r, busy := m[`ax_tasks{state="RUNNING"}`], m[`ax_parked_runs{handler="hold",reason="executor_busy"}`]
		if r > 20 {
			t.Fatalf("%v RUNNING with an executor limit of 8 (8 + a queue of 8)", r)
		}
		last = fmt.Sprintf("%v RUNNING, %v executor_busy", r, busy)
		running = int(r)
		return r >= 16 && int(busy) == tasks-int(r)
	})
	t.Logf("%s", last)
	resp := c.HTTP(0, "GET", "/v1/tasks?state=waiting&limit=500", nil)
	if resp.Status != 200 {
		t.Fatalf("list: %d %s", resp.Status, resp.Body)
	}
	var page struct {
		Tasks []struct {
			WaitingReason string `json:"waiting_reason"`
		} `json:"tasks"`
	}
	_ = json.Unmarshal(resp.Body, &page)
	if len(page.Tasks) != tasks-running {
		t.Fatalf("%d WAITING listed, want %d", len(page.Tasks), tasks-running)
	}
	for _, v := range page.Tasks {
		if v.WaitingReason != "executor_busy" {
			t.Fatalf("a waiting task says %q, want executor_busy", v.WaitingReason)
		}
	}
	once.Do(func() { close(release) })
	for i := range tasks {
		c.WaitState(0, fmt.Sprintf("rm-%03d", i), "SUCCESS")
	}
}
