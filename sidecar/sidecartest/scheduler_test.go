package sidecartest_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/axsched/ax/ipc"
	"github.com/axsched/ax/sidecar"
	"github.com/axsched/ax/sidecar/config"
	"github.com/axsched/ax/sidecar/sidecartest"
)

func isCode(err error, code string) bool {
	_, c, _, _ := ipc.MapError(err)
	return c == code
}

// A recurring task (every 1m, 3 repeats) runs once per period, each run
// at or after its due time, with Ax-Run counting up, then is SUCCESS.
func TestRecurringEveryRunsEachPeriod(t *testing.T) {
	c := sidecartest.New(t, sidecartest.Options{})
	s := sidecartest.Spec("tick", "h")
	s.Every, s.Repeats = time.Minute, 3
	tk := c.Submit(0, s)
	var dues []time.Time
	for run := 1; run <= 3; run++ {
		d := due(t, tk)
		if run > 1 && d.Sub(dues[len(dues)-1]) != time.Minute {
			t.Errorf("run %d due %v after run %d, want 1m", run, d.Sub(dues[len(dues)-1]), run-1)
		}
		dues = append(dues, d)
		c.AdvanceTo(d)
		calls := c.WaitCalls("tick", run)
		if got := calls[run-1]; got.Run != run || got.At.Before(d) {
			t.Errorf("callback %+v, want run %d at or after %v", got, run, d)
		}
		if run < 3 {
			tk = c.WaitTask(0, "tick", "next run armed", func(tk ipc.Task) bool {
				return tk.State == "WAITING" && tk.NextRunAt != nil && tk.NextRunAt.After(d)
			})
		}
	}
	c.WaitState(0, "tick", "SUCCESS")
	c.Advance(time.Hour)
	c.Submit(0, sidecartest.Spec("sentinel", "h"))
	c.WaitState(0, "sentinel", "SUCCESS")
	if n := len(c.CallsFor("tick")); n != 3 {
		t.Errorf("%d runs of a task with 3 repeats", n)
	}
}

// A paused handler holds its due runs (waiting reason paused) while
// other handlers run; resuming releases them at once.
func TestPauseHandlerHoldsAndResumeReleases(t *testing.T) {
	c := sidecartest.New(t, sidecartest.Options{})
	if _, err := c.API(0).PauseHandler(ctx, "held", true); err != nil {
		t.Fatal(err)
	}
	c.Submit(0, sidecartest.Spec("p", "held"))
	c.Advance(time.Second)
	c.WaitTask(0, "p", "waiting reason paused", func(tk ipc.Task) bool { return tk.State == "WAITING" && tk.WaitingReason == "paused" })
	// A minute passes with nothing in flight (a callback in flight across
	// the jump would outlive its lease on the fake clock); then a task of
	// another handler runs while p stays held.
	c.Advance(time.Minute)
	c.Submit(0, sidecartest.Spec("sentinel", "other"))
	c.WaitState(0, "sentinel", "SUCCESS")
	if tk, _ := c.Task(0, "p"); tk.State != "WAITING" || tk.WaitingReason != "paused" {
		t.Errorf("paused handler's task after a minute: %+v", tk)
	}
	if calls := c.CallsFor("p"); len(calls) != 0 {
		t.Fatalf("a paused handler's task was called back: %+v", calls)
	}
	if _, err := c.API(0).PauseHandler(ctx, "held", false); err != nil {
		t.Fatal(err)
	}
	c.WaitState(0, "p", "SUCCESS")
	if n := len(c.CallsFor("p")); n != 1 {
		t.Errorf("%d callbacks after resume, want 1", n)
	}
}

// A paused task waits past its due time and runs once resumed.
func TestPauseTaskHoldsAndResumeReleases(t *testing.T) {
	c := sidecartest.New(t, sidecartest.Options{})
	s := sidecartest.Spec("t", "h")
	s.Delay = time.Second
	c.Submit(0, s)
	if tk, err := c.API(0).PauseTask(ctx, "t", true); err != nil || tk.State != "WAITING" {
		t.Fatalf("pause: %+v %v", tk, err)
	}
	c.Advance(time.Minute)
	c.WaitTask(0, "t", "waiting reason paused", func(tk ipc.Task) bool { return tk.WaitingReason == "paused" })
	c.Submit(0, sidecartest.Spec("sentinel", "h"))
	c.WaitState(0, "sentinel", "SUCCESS")
	if calls := c.CallsFor("t"); len(calls) != 0 {
		t.Fatalf("a paused task was called back: %+v", calls)
	}
	if _, err := c.API(0).PauseTask(ctx, "t", false); err != nil {
		t.Fatal(err)
	}
	c.WaitState(0, "t", "SUCCESS")
}

// When the leader is partitioned away before a task falls due, the new
// leader fires it, exactly once; after the heal the old leader reads the
// outcome.
func TestLeaderPartitionedNewLeaderFiresOnce(t *testing.T) {
	c := sidecartest.New(t, sidecartest.Options{Nodes: 3})
	old := c.WaitLeader()
	s := sidecartest.Spec("p", "h")
	s.Delay = 5 * time.Second
	c.Submit(old, s)
	for i := range c.Nodes() {
		c.WaitState(i, "p", "WAITING")
	}
	c.Partition(old)
	l := c.WaitLeader()
	if l == old {
		t.Fatalf("the partitioned node still leads")
	}
	c.Advance(6 * time.Second)
	c.WaitState(l, "p", "SUCCESS")
	c.Heal(old)
	c.WaitState(old, "p", "SUCCESS")
	c.Submit(c.WaitLeader(), sidecartest.Spec("sentinel", "h"))
	c.Advance(time.Second)
	c.WaitState(c.WaitLeader(), "sentinel", "SUCCESS")
	if calls := c.CallsFor("p"); len(calls) != 1 {
		t.Errorf("%d callbacks across a leader change, want 1: %+v", len(calls), calls)
	}
}

// A follower cut off from the cluster does not stop it: the others keep
// a leader and run tasks; after the heal the follower reads them.
func TestFollowerPartitionedCatchesUpAfterHeal(t *testing.T) {
	c := sidecartest.New(t, sidecartest.Options{Nodes: 3})
	l := c.WaitLeader()
	f := c.Follower()
	c.Partition(f)
	// Past NodeLiveness without a report from f: the leader routes no
	// attempt to it.
	c.Advance(2 * time.Second)
	c.Submit(l, sidecartest.Spec("during", "h"))
	c.AdvanceUntil("during SUCCESS", 50*time.Millisecond, func() bool {
		tk, err := c.Task(l, "during")
		return err == nil && tk.State == "SUCCESS"
	})
	if calls := c.CallsFor("during"); len(calls) != 1 || calls[0].Node == c.Node(f).ID() {
		t.Errorf("callbacks %+v, want one, not on the partitioned %s", calls, c.Node(f).ID())
	}
	if _, err := c.Task(f, "during"); err == nil {
		t.Errorf("a partitioned follower reads a task submitted after the partition")
	}
	c.Heal(f)
	c.WaitState(f, "during", "SUCCESS")
	if l2 := c.WaitLeader(); l2 == f {
		t.Logf("the healed follower took the lead")
	}
}

// A submit on a follower is forwarded to the leader: created there,
// readable on every node, and delivered once.
func TestFollowerForwardsSubmit(t *testing.T) {
	c := sidecartest.New(t, sidecartest.Options{Nodes: 3})
	l := c.WaitLeader()
	f := c.Follower()
	s := sidecartest.Spec("fwd", "h")
	s.Delay = time.Second
	var tk ipc.Task
	var created bool
	var err error
	c.Do(func() { tk, created, err = c.API(f).Submit(ctx, s) })
	if err != nil || !created || tk.State != "WAITING" {
		t.Fatalf("submit on a follower: %+v created=%v %v", tk, created, err)
	}
	// The follower reads its own write at once.
	if got, err := c.Task(f, "fwd"); err != nil || got.ID != "fwd" {
		t.Errorf("follower reads its write: %+v %v", got, err)
	}
	c.WaitState(l, "fwd", "WAITING")
	c.Advance(time.Second)
	c.WaitState(l, "fwd", "SUCCESS")
	for i := range c.Nodes() {
		c.WaitState(i, "fwd", "SUCCESS")
	}
	if n := len(c.CallsFor("fwd")); n != 1 {
		t.Errorf("%d callbacks, want 1", n)
	}
}

// Same id and same spec is 200 with the stored task; a different spec
// is 409 conflict with the stored task unchanged; overwrite replaces it.
func TestIdempotentSubmit(t *testing.T) {
	c := sidecartest.New(t, sidecartest.Options{Nodes: 3})
	for _, via := range []int{c.WaitLeader(), c.Follower()} {
		id := fmt.Sprintf("idem/%d", via)
		a := sidecartest.Spec(id, "h")
		a.Delay, a.Priority, a.Payload = time.Hour, 3, []byte(`{"v": 1}`)
		submit := func(s ipc.TaskSpec) (tk ipc.Task, created bool, err error) {
			c.Do(func() { tk, created, err = c.API(via).Submit(ctx, s) })
			return
		}
		first, created, err := submit(a)
		if err != nil || !created {
			t.Fatalf("first submit: %v created=%v", err, created)
		}
		same, created, err := submit(a)
		if err != nil || created || same.ID != id || !same.CreatedAt.Equal(first.CreatedAt) || !same.NextRunAt.Equal(*first.NextRunAt) {
			t.Errorf("same spec again: %+v created=%v %v; want the stored task, not created", same, created, err)
		}
		b, d, p := a, a, a
		b.Payload = []byte(`{"v": 2}`)
		d.Delay = 2 * time.Hour
		p.Priority = 0
		for name, s := range map[string]ipc.TaskSpec{"payload": b, "delay": d, "priority": p} {
			if _, _, err := submit(s); !isCode(err, "conflict") {
				t.Errorf("different %s: %v, want conflict", name, err)
			}
		}
		if got, _ := c.Task(via, id); string(got.Payload) != `{"v": 1}` || got.Priority != 3 {
			t.Errorf("after conflicts: %+v", got)
		}
		b.Overwrite = true
		if over, _, err := submit(b); err != nil || string(over.Payload) != `{"v": 2}` || over.State != "WAITING" {
			t.Errorf("overwrite: %+v %v", over, err)
		}
		if _, _, err := submit(a); !isCode(err, "conflict") {
			t.Errorf("old spec after overwrite: %v, want conflict", err)
		}
	}
	if calls := c.AllCalls(); len(calls) != 0 {
		t.Errorf("tasks due in an hour were called back: %+v", calls)
	}
}

// List pages through a handler's tasks with a cursor: every task once,
// pages of at most the limit, no cursor after the last page.
func TestListPaging(t *testing.T) {
	c := sidecartest.New(t, sidecartest.Options{})
	var want []string
	for i := range 5 {
		s := sidecartest.Spec(fmt.Sprintf("l%d", i), "listed")
		s.Delay = time.Hour
		c.Submit(0, s)
		want = append(want, s.ID)
	}
	c.Submit(0, sidecartest.Spec("other", "unlisted"))
	var got []string
	q := ipc.ListQuery{Handler: "listed", Limit: 2}
	for pages := 0; ; pages++ {
		if pages > 5 {
			t.Fatalf("more than 5 pages for 5 tasks")
		}
		page, err := c.API(0).List(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Tasks) > 2 {
			t.Errorf("page of %d tasks, limit 2", len(page.Tasks))
		}
		for _, tk := range page.Tasks {
			got = append(got, tk.ID)
		}
		if page.NextCursor == "" {
			break
		}
		q.Cursor = page.NextCursor
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("listed %v, want %v", got, want)
	}
	c.WaitState(0, "other", "SUCCESS")
	page, err := c.API(0).List(ctx, ipc.ListQuery{State: "WAITING", Limit: 100})
	if err != nil || len(page.Tasks) != 5 {
		t.Errorf("WAITING tasks: %d %v, want the 5 due in an hour", len(page.Tasks), err)
	}
}

// A finished task is kept for its retention, then purged by the leader:
// not_found once the clock has passed its finish time plus retention.
func TestRetentionPurgesAfterClockAdvance(t *testing.T) {
	c := sidecartest.New(t, sidecartest.Options{Config: func(_ int, cfg *sidecar.Config) {
		cfg.PurgeInterval = time.Second
	}})
	s := sidecartest.Spec("kept", "h")
	s.Retention = time.Minute
	c.Submit(0, s)
	done := c.WaitState(0, "kept", "SUCCESS")
	c.Advance(30 * time.Second)
	c.Advance(time.Second) // a purge pass at +31s
	s = sidecartest.Spec("sentinel", "h")
	c.Submit(0, s)
	c.WaitState(0, "sentinel", "SUCCESS")
	if _, err := c.Task(0, "kept"); err != nil {
		t.Fatalf("task purged %v after it finished, retention 1m: %v", c.Now().Sub(*done.FinishedAt), err)
	}
	c.AdvanceUntil("task purged", time.Second, func() bool {
		_, err := c.Task(0, "kept")
		return isCode(err, "not_found")
	})
	if age := c.Now().Sub(*done.FinishedAt); age < time.Minute {
		t.Errorf("purged %v after it finished, retention 1m", age)
	}
}

// A handler limit of 1 runs one attempt at a time cluster-wide; the runs
// held back wait with the reason handler_limit and start in priority
// order (0 first) as the slot frees.
func TestHandlerLimitRunsInPriorityOrder(t *testing.T) {
	c := sidecartest.New(t, sidecartest.Options{Config: func(_ int, cfg *sidecar.Config) {
		cfg.HandlerLimits = map[string]int{"lim": 1}
	}})
	release := make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	c.Respond(func(call sidecartest.Call) sidecartest.Reply {
		if call.TaskID == "first" {
			return sidecartest.Reply{Hold: release}
		}
		return sidecartest.Reply{}
	})
	c.Submit(0, sidecartest.Spec("first", "lim"))
	c.WaitCalls("first", 1)
	for _, p := range []int{4, 0, 2} {
		s := sidecartest.Spec(fmt.Sprintf("p%d", p), "lim")
		s.Priority = p
		c.Submit(0, s)
	}
	c.Advance(time.Second)
	for _, id := range []string{"p0", "p2", "p4"} {
		c.WaitTask(0, id, "waiting reason handler_limit", func(tk ipc.Task) bool { return tk.WaitingReason == "handler_limit" })
	}
	if n := len(c.AllCalls()); n != 1 {
		t.Fatalf("%d callbacks while the limit's one slot is taken, want 1", n)
	}
	once.Do(func() { close(release) })
	for _, id := range []string{"p0", "p2", "p4"} {
		c.WaitState(0, id, "SUCCESS")
	}
	var order []string
	for _, call := range c.AllCalls() {
		order = append(order, call.TaskID)
	}
	if want := []string{"first", "p0", "p2", "p4"}; !slices.Equal(order, want) {
		t.Errorf("callback order %v, want %v", order, want)
	}
}

// An attempt whose node is cut off is lost once its lease (timeout +
// lease grace) ends on the leader's clock, and is retried on another
// node as the next attempt.
func TestLeaseExpiryRetriesOnAnotherNode(t *testing.T) {
	c := sidecartest.New(t, sidecartest.Options{Nodes: 3, Handlers: []string{"h"}})
	l := c.WaitLeader()
	hold := make(chan struct{})
	t.Cleanup(func() { close(hold) })
	var followers []int
	for i := range c.Nodes() {
		if i == l {
			continue
		}
		followers = append(followers, i)
		var err error
		c.Do(func() {
			_, _, err = c.API(i).RegisterExecutor(ctx, ipc.ExecutorSpec{Name: "lease", Handlers: []string{"lease"}, URL: c.Executor(i).URL()})
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	c.Respond(func(call sidecartest.Call) sidecartest.Reply {
		if call.Attempt == 1 {
			return sidecartest.Reply{Hold: hold}
		}
		return sidecartest.Reply{}
	})
	// Both followers' executors are known to the leader before the submit.
	c.Eventually("executors registered", func() bool {
		hs, err := c.API(l).Handlers(ctx)
		if err != nil {
			return false
		}
		for _, h := range hs {
			if h.Name == "lease" {
				return len(h.Executors) == 2
			}
		}
		return false
	})
	s := sidecartest.Spec("leased", "lease")
	s.Timeout, s.MaxAttempts, s.Backoff = 2*time.Second, 3, noJitter
	c.Submit(l, s)
	first := c.WaitCalls("leased", 1)[0]
	cut := -1
	for _, i := range followers {
		if c.Node(i).ID() == first.Node {
			cut = i
		}
	}
	if cut < 0 {
		t.Fatalf("first attempt on %s, not on a follower", first.Node)
	}
	c.Partition(cut)
	var second sidecartest.Call
	c.AdvanceUntil("attempt 2 on another node", 100*time.Millisecond, func() bool {
		for _, call := range c.CallsFor("leased") {
			if call.Attempt == 2 {
				second = call
				return true
			}
		}
		return false
	})
	if second.Node == first.Node || second.Attempt != 2 {
		t.Errorf("retry %+v, want attempt 2 on a node other than %s", second, first.Node)
	}
	if lease := second.At.Sub(first.At); lease < s.Timeout+config.LeaseGraceDefault {
		t.Errorf("retried %v after the first attempt began, before its lease (%v + %v) ended", lease, s.Timeout, config.LeaseGraceDefault)
	}
	done := c.WaitState(l, "leased", "SUCCESS")
	if done.Attempts != 2 {
		t.Errorf("SUCCESS after %d attempts, want 2", done.Attempts)
	}
	c.Heal(cut)
	c.WaitState(cut, "leased", "SUCCESS")
}

// A leader change with no write after it leaves the new leader's no-op
// entry last in the log. The state machine never sees a no-op (nor a
// barrier), so a follower's applied index stays below the leader's commit
// index: readiness compares with what the leader has applied, not with
// its commit index, or the follower reports "catching up" until the next
// write (CI saw a cluster with an early election never get ready).
func TestEveryNodeReadyAfterALeaderChangeWithoutWrites(t *testing.T) {
	c := sidecartest.New(t, sidecartest.Options{Nodes: 3})
	old := c.WaitLeader()
	c.Partition(old)
	if l := c.WaitLeader(); l == old {
		t.Fatalf("the partitioned node still leads")
	}
	c.Heal(old)
	var last error
	c.AdvanceUntil("every node ready after the leader change", 50*time.Millisecond, func() bool {
		for i := range c.Nodes() {
			if last = c.Node(i).Ready(context.Background()); last != nil {
				return false
			}
		}
		return true
	})
	if t.Failed() {
		t.Logf("last readiness error: %v", last)
	}
}

// A strong read on a new leader waits until what it has committed is
// applied; the no-op and the scheduler's barrier never are, so waiting
// for the commit index timed out ("applying up to 9 took too long") until
// the next write.
func TestStrongReadAfterALeaderChangeWithoutWrites(t *testing.T) {
	c := sidecartest.New(t, sidecartest.Options{Nodes: 3})
	old := c.WaitLeader()
	s := sidecartest.Spec("r", "h")
	s.Delay = time.Hour
	c.Submit(old, s)
	for i := range c.Nodes() {
		c.WaitState(i, "r", "WAITING")
	}
	c.Partition(old)
	l := c.WaitLeader()
	if l == old {
		t.Fatalf("the partitioned node still leads")
	}
	done := make(chan error, 1)
	go func() {
		_, err := c.API(l).Task(ipc.WithStrongRead(context.Background()), "r")
		done <- err
	}()
	var err error
	c.AdvanceUntil("the strong read answers", 50*time.Millisecond, func() bool {
		select {
		case err = <-done:
			return true
		default:
			return false
		}
	})
	if err != nil {
		t.Errorf("strong read on the new leader: %v", err)
		for i := range c.Nodes() {
			tk, err := c.Task(i, "r")
			t.Logf("node %d (leader %v) reads it %s (%v)", i, c.Node(i).IsLeader(), tk.State, err)
		}
	}
}
