package raftfsm

import (
	"strings"
	"testing"
)

func shardSpec(sh Shards) Spec {
	s := spec("h", `{"job":1}`)
	s.Shards = &sh
	return s
}

// startRun submits task id with s and runs its first attempt to the
// Complete that carries count shards, at 1000–2000.
func (e *flowEnv) startRun(id string, s Spec, count int) *Task {
	e.t.Helper()
	e.next(submitCmd(id, s, 1000, 1000))
	t := e.task(id)
	e.next(fireCmd(id, t.Epoch, 1, "n1", 1000, 31000))
	c := completeCmd(id, t.Epoch, 1, OutcomeSuccess, "", 0, 2000)
	c.Complete.ShardCount = count
	c.Complete.Result = []byte(`{"count":5}`)
	if r := e.next(c); r[0].Code != CodeOK {
		e.t.Fatalf("complete with shards: %q", r[0].Code)
	}
	return e.task(id)
}

func TestShardsCount(t *testing.T) {
	e := &flowEnv{env: newEnv(t)}
	p := e.startRun("p", shardSpec(Shards{Count: 8}), 8)
	if !p.AwaitingShards() || p.Node != "" || p.LeaseMs != 0 || p.Shards.Total != 8 {
		t.Fatalf("parent after its shards started: %+v %+v", p, p.Shards)
	}
	if got := e.running(); len(got) != 1 || got[0] != "p" {
		t.Fatalf("running %v", got)
	}
	for i := 0; i < 8; i++ {
		s := e.task(ShardID("p", 1, i))
		if s.State != StateWaiting || s.DueMs != 2000 || s.Spec.ShardIndex != i || s.Spec.ShardTotal != 8 ||
			s.Spec.Shards != nil || s.Spec.Handler != "h" || string(s.Spec.Payload) != `{"job":1}` || s.Spec.MaxAttempts != 3 ||
			s.Spec.RouteKey != ShardRouteKey(i) {
			t.Fatalf("shard %d: %+v", i, s)
		}
	}
	e.checkIndexes()
	// A second Complete, or a heartbeat, of the parent's attempt is stale.
	if r := e.next(completeCmd("p", p.Epoch, 1, OutcomeSuccess, "", 0, 2100)); r[0].Code != CodeStale {
		t.Fatalf("resent parent complete: %q", r[0].Code)
	}
	if r := e.next(Command{Type: CmdLease, Lease: &Lease{ID: "p", Attempt: 1, AtMs: 2100}}); r[0].Code != CodeStale {
		t.Fatalf("parent lease: %q", r[0].Code)
	}
	for i := 0; i < 7; i++ {
		e.finish(ShardID("p", 1, i), OutcomeSuccess, "", 3000)
	}
	if p := e.task("p"); !p.AwaitingShards() || p.Shards.Succeeded != 7 {
		t.Fatalf("parent after 7 shards: %+v", p.Shards)
	}
	e.finish(ShardID("p", 1, 7), OutcomeSuccess, "", 4000)
	p = e.task("p")
	if p.State != StateSuccess || p.FinishedMs != 4000 || p.Shards.Succeeded != 8 || p.Shards.Running() != 0 {
		t.Fatalf("parent after all shards: %+v %+v", p, p.Shards)
	}
	runs, _, err := e.f.Runs("p", 0, 10)
	if err != nil || len(runs) != 1 {
		t.Fatalf("runs %v %v", runs, err)
	}
	if r := runs[0]; r.State != StateSuccess || r.Shards != 8 || r.ShardsSucceeded != 8 || len(r.Attempts) != 1 || r.FinishedMs != 4000 {
		t.Fatalf("run record %+v", r)
	}
	e.checkIndexes()
}

func TestShardsAskRecordWhileRunning(t *testing.T) {
	e := &flowEnv{env: newEnv(t)}
	// The executor answers 9; max 5 bounds it.
	e.startRun("p", shardSpec(Shards{Ask: true, Max: 5}), 9)
	p := e.task("p")
	if p.Shards.Total != 5 {
		t.Fatalf("total %d, want 5", p.Shards.Total)
	}
	e.noTask(ShardID("p", 1, 5))
	r, err := e.f.Run("p", 1)
	if err != nil || r.State != StateRunning || r.Shards != 5 || len(r.Attempts) != 1 || r.Attempts[0].Outcome != OutcomeSuccess {
		t.Fatalf("run while shards run: %+v %v", r, err)
	}
	e.finish(ShardID("p", 1, 0), OutcomeSuccess, "", 3000)
	if r, _ := e.f.Run("p", 1); r.ShardsSucceeded != 1 || r.State != StateRunning {
		t.Fatalf("run after a shard: %+v", r)
	}
}

func TestShardRetriedThenSucceeds(t *testing.T) {
	e := &flowEnv{env: newEnv(t)}
	e.startRun("p", shardSpec(Shards{Count: 2}), 2)
	id := ShardID("p", 1, 1)
	s := e.task(id)
	for a := 1; a <= 2; a++ {
		e.next(fireCmd(id, s.Epoch, a, "n2", int64(3000*a), 40000))
		e.next(completeCmd(id, s.Epoch, a, OutcomeRetryable, "http 500", int64(3000*a+500), int64(3000*a+100)))
	}
	if p := e.task("p"); !p.AwaitingShards() {
		t.Fatalf("parent ended on a retried shard: %+v", p)
	}
	e.finish(id, OutcomeSuccess, "", 8000)
	e.finish(ShardID("p", 1, 0), OutcomeSuccess, "", 9000)
	if p := e.task("p"); p.State != StateSuccess {
		t.Fatalf("parent %s", p.State)
	}
	runs, _, _ := e.f.Runs(id, 0, 10)
	if len(runs) != 1 || len(runs[0].Attempts) != 3 || runs[0].State != StateSuccess {
		t.Fatalf("shard history %+v", runs)
	}
}

func TestShardDeadParentDeadOthersFinish(t *testing.T) {
	e := &flowEnv{env: newEnv(t)}
	sp := shardSpec(Shards{Count: 3})
	sp.MaxAttempts = 1
	e.startRun("p", sp, 3)
	e.finish(ShardID("p", 1, 1), OutcomeRetryable, "", 3000) // its only attempt: DEAD
	if s := e.task(ShardID("p", 1, 1)); s.State != StateDead {
		t.Fatalf("shard 1 %s", s.State)
	}
	p := e.task("p")
	if !p.AwaitingShards() || p.Shards.Failed != 1 {
		t.Fatalf("parent after a dead shard: %+v", p.Shards)
	}
	if s := e.task(ShardID("p", 1, 0)); s.State != StateWaiting {
		t.Fatalf("shard 0 %s: the others must still run", s.State)
	}
	e.finish(ShardID("p", 1, 0), OutcomeSuccess, "", 4000)
	e.finish(ShardID("p", 1, 2), OutcomeSuccess, "", 5000)
	p = e.task("p")
	if p.State != StateDead || p.Shards.Succeeded != 2 || p.Shards.Failed != 1 || !strings.HasPrefix(p.LastError, "shard 1: ") {
		t.Fatalf("parent %+v %+v", p, p.Shards)
	}
	// A retry of the dead shard is refused (TestShardRetryRefused): it
	// would not move the parent.
	if r := e.next(Command{Type: CmdRetry, Retry: &Retry{ID: ShardID("p", 1, 1), AtMs: 6000}}); r[0].Code != CodeShard {
		t.Fatalf("retry of a dead shard: %+v", r[0])
	}
	if p2 := e.task("p"); p2.State != StateDead || p2.UpdatedMs != p.UpdatedMs {
		t.Fatalf("parent moved by a retried shard: %+v", p2)
	}
	e.checkIndexes()
}

func TestShardsCancelParent(t *testing.T) {
	e := &flowEnv{env: newEnv(t)}
	e.startRun("p", shardSpec(Shards{Count: 3}), 3)
	e.finish(ShardID("p", 1, 0), OutcomeSuccess, "", 3000)
	s1 := e.task(ShardID("p", 1, 1))
	e.next(fireCmd(s1.ID, s1.Epoch, 1, "n2", 3000, 40000))
	e.next(cancelCmd("p", 4000))
	if p := e.task("p"); p.State != StateCancelled {
		t.Fatalf("parent %s", p.State)
	}
	want := []State{StateSuccess, StateCancelled, StateCancelled}
	for i, w := range want {
		if s := e.task(ShardID("p", 1, i)); s.State != w {
			t.Fatalf("shard %d: %s, want %s", i, s.State, w)
		}
	}
	if r, err := e.f.Run("p", 1); err != nil || r.State != StateCancelled {
		t.Fatalf("parent run %+v %v", r, err)
	}
	// The cancelled parent counts no shard running (its view said "2
	// running" for ever): the cancelled ones count as failed.
	if p := e.task("p"); p.Shards.Running() != 0 || p.Shards.Succeeded != 1 || p.Shards.Failed != 2 {
		t.Fatalf("parent shards %+v", p.Shards)
	}
	e.checkIndexes()
}

// Cancelling a flow cancels the shards of its running sharded stage (they
// ran on to SUCCESS, their work done for a cancelled flow).
func TestShardsFlowCancelCancelsStageShards(t *testing.T) {
	e := &flowEnv{env: newEnv(t)}
	a := stage("A")
	a.Spec.Shards = &Shards{Count: 3}
	e.next(flowCmd("f", FlowSpec{Stages: []FlowStage{a, stage("B", "A")}}, 1000, 1000))
	st := e.task(sid("A"))
	e.next(fireCmd(sid("A"), st.Epoch, 1, "n1", 1000, 31000))
	c := completeCmd(sid("A"), st.Epoch, 1, OutcomeSuccess, "", 0, 2000)
	c.Complete.ShardCount = 3
	e.next(c)
	e.finish(ShardID(sid("A"), 1, 0), OutcomeSuccess, "", 3000)
	s1 := e.task(ShardID(sid("A"), 1, 1))
	e.next(fireCmd(s1.ID, s1.Epoch, 1, "n2", 3000, 40000))
	e.next(Command{Type: CmdFlow, Flow: &FlowSubmit{ID: "f", Cancel: true, AtMs: 4000}})
	want := []State{StateSuccess, StateCancelled, StateCancelled}
	for i, w := range want {
		if s := e.task(ShardID(sid("A"), 1, i)); s.State != w {
			t.Fatalf("shard %d: %s, want %s", i, s.State, w)
		}
	}
	if p := e.task(sid("A")); p.State != StateCancelled || p.Shards.Running() != 0 {
		t.Fatalf("stage %s, shards %+v", p.State, p.Shards)
	}
	if e.exists(sid("B")) {
		t.Fatal("B created after the flow was cancelled")
	}
	e.checkIndexes()
}

func TestShardsCancelOneShardParentDead(t *testing.T) {
	e := &flowEnv{env: newEnv(t)}
	e.startRun("p", shardSpec(Shards{Count: 2}), 2)
	e.next(cancelCmd(ShardID("p", 1, 0), 3000))
	e.finish(ShardID("p", 1, 1), OutcomeSuccess, "", 4000)
	if p := e.task("p"); p.State != StateDead || p.LastError != "shard 0: CANCELLED" {
		t.Fatalf("parent %s %q", p.State, p.LastError)
	}
}

func TestShardsReplayAndSnapshot(t *testing.T) {
	e := &flowEnv{env: newEnv(t)}
	e.next(submitCmd("p", shardSpec(Shards{Count: 2}), 1000, 1000))
	p := e.task("p")
	e.next(fireCmd("p", p.Epoch, 1, "n1", 1000, 31000))
	c := completeCmd("p", p.Epoch, 1, OutcomeSuccess, "", 0, 2000)
	c.Complete.ShardCount = 2
	e.next(c)
	startIdx := e.idx
	before := e.dump()
	e.reopen()
	if out := e.applyEntry(startIdx, c); out != nil {
		t.Fatalf("replayed entry applied: %v", out)
	}
	e.assertUnchanged(before)
	e.finish(ShardID("p", 1, 0), OutcomeSuccess, "", 3000)
	stream := persist(t, e.snapshot())

	o := &flowEnv{env: newEnv(t), idx: e.idx}
	if err := o.restore(stream); err != nil {
		t.Fatal(err)
	}
	if p := o.task("p"); !p.AwaitingShards() || p.Shards.Succeeded != 1 {
		t.Fatalf("restored parent %+v", p.Shards)
	}
	o.finish(ShardID("p", 1, 1), OutcomeSuccess, "", 4000)
	if p := o.task("p"); p.State != StateSuccess {
		t.Fatalf("parent after restore %s", p.State)
	}
	o.checkIndexes()
}

func TestShardsRecurringNextRun(t *testing.T) {
	e := &flowEnv{env: newEnv(t)}
	sp := shardSpec(Shards{Count: 1})
	sp.EveryNs = 10e9
	e.next(submitCmd("p", sp, 1000, 1000))
	p := e.task("p")
	e.next(fireCmd("p", p.Epoch, 1, "n1", 1000, 31000))
	c := completeCmd("p", p.Epoch, 1, OutcomeSuccess, "", 0, 2000)
	c.Complete.ShardCount, c.Complete.NextSlotMs, c.Complete.NextDueMs = 1, 11000, 11000
	e.next(c)
	if s := e.task(ShardID("p", 1, 0)); s.Spec.EveryNs != 0 {
		t.Fatalf("shard recurring: %+v", s.Spec)
	}
	e.finish(ShardID("p", 1, 0), OutcomeSuccess, "", 3000)
	p = e.task("p")
	if p.State != StateWaiting || p.DueMs != 11000 || p.Run != 2 || p.Attempts != 0 {
		t.Fatalf("parent after run 1: %+v", p)
	}
	if r, err := e.f.Run("p", 1); err != nil || r.State != StateSuccess || r.Shards != 1 {
		t.Fatalf("run 1 %+v %v", r, err)
	}
}

func TestShardsFlowStage(t *testing.T) {
	e := &flowEnv{env: newEnv(t)}
	a := stage("A")
	a.Spec.Shards = &Shards{Count: 2}
	e.next(flowCmd("f", FlowSpec{Stages: []FlowStage{a, stage("B", "A")}}, 1000, 1000))
	st := e.task(sid("A"))
	e.next(fireCmd(sid("A"), st.Epoch, 1, "n1", 1000, 31000))
	c := completeCmd(sid("A"), st.Epoch, 1, OutcomeSuccess, "", 0, 2000)
	c.Complete.ShardCount = 2
	e.next(c)
	if e.exists(sid("B")) {
		t.Fatal("B created before A's shards ended")
	}
	e.finish(ShardID(sid("A"), 1, 0), OutcomeSuccess, "", 3000)
	e.finish(ShardID(sid("A"), 1, 1), OutcomeSuccess, "", 4000)
	if !e.exists(sid("B")) {
		t.Fatal("B not created once A's shards ended")
	}
}

func TestParseShardID(t *testing.T) {
	for _, c := range []struct {
		id, parent string
		run, index int
		ok         bool
	}{
		{ShardID("a/b", 3, 7), "a/b", 3, 7, true},
		{"shard/x/1/1024", "", 0, 0, false},
		{"shard/x/0/1", "", 0, 0, false},
		{"shard/x/1/-1", "", 0, 0, false},
		{"shard//1/1", "", 0, 0, false},
		{"shard/1/1", "", 0, 0, false},
		{"x/1/1", "", 0, 0, false},
	} {
		p, r, i, ok := ParseShardID(c.id)
		if p != c.parent || r != c.run || i != c.index || ok != c.ok {
			t.Errorf("%q: %q %d %d %v", c.id, p, r, i, ok)
		}
	}
	if (&Shards{Ask: true, Max: 4}).Bound(0) != 1 || (&Shards{Count: 5000}).Bound(5000) != ShardsMax {
		t.Error("Bound")
	}
}

// Bad input that reaches the FSM anyway changes nothing unexpected: a
// ShardCount for a task without shards is a plain success; a count over
// the bound is clamped; a Complete with ShardCount 0 on a sharded task is
// a plain success too (an app's report).
func TestShardsBadInput(t *testing.T) {
	e := &flowEnv{env: newEnv(t)}
	e.startRun("plain", spec("h", ""), 7)
	if p := e.task("plain"); p.State != StateSuccess || p.Shards != nil {
		t.Fatalf("plain task with a ShardCount: %+v", p)
	}
	e.noTask(ShardID("plain", 1, 0))
	e.startRun("big", shardSpec(Shards{Ask: true, Max: 3}), 1<<30)
	if p := e.task("big"); p.Shards.Total != 3 {
		t.Fatalf("clamped total %d", p.Shards.Total)
	}
	e.startRun("zero", shardSpec(Shards{Count: 2}), 0)
	if p := e.task("zero"); p.State != StateSuccess || p.Shards != nil {
		t.Fatalf("sharded task completed without a count: %+v", p)
	}
	e.checkIndexes()
}

// An overwrite of a task waiting for its shards cancels them; their ends
// do not touch the new task.
func TestShardsOverwriteCancelsShards(t *testing.T) {
	e := &flowEnv{env: newEnv(t)}
	e.startRun("p", shardSpec(Shards{Count: 2}), 2)
	e.next(overwriteCmd("p", spec("h2", ""), 5000, 3000))
	for i := 0; i < 2; i++ {
		if s := e.task(ShardID("p", 1, i)); s.State != StateCancelled {
			t.Fatalf("shard %d: %s", i, s.State)
		}
	}
	if p := e.task("p"); p.State != StateWaiting || p.Spec.Handler != "h2" || p.Shards != nil {
		t.Fatalf("overwritten task %+v", p)
	}
	e.checkIndexes()
}

// A sharded run that ends DEAD leaves one pending alert, the parent's (a
// DEAD shard leaves none of its own: one failing shard sent two alerts),
// and its record the RunEnded event; a cancel of a parent waiting for its
// shards adds no phantom attempt.
func TestShardsDeadAlertAndCancelRecord(t *testing.T) {
	e := &flowEnv{env: newEnv(t)}
	sp := shardSpec(Shards{Count: 2})
	sp.MaxAttempts = 1
	e.startRun("p", sp, 2)
	rec := &recorder{}
	e.f.SetObserver(rec)
	s0 := e.task(ShardID("p", 1, 0))
	e.next(fireCmd(s0.ID, s0.Epoch, 1, "n1", 3000, 9000))
	e.next(alerting(completeCmd(s0.ID, s0.Epoch, 1, OutcomeRetryable, "boom", 0, 3500)))
	e.finish(ShardID("p", 1, 1), OutcomeSuccess, "", 4000) // without the Alert flag: no alert for the parent
	if p := e.task("p"); p.State != StateDead {
		t.Fatalf("parent %s", p.State)
	}
	as := e.alerts()
	if len(as) != 0 {
		t.Fatalf("alerts after the dead shard (the last Complete had no Alert flag): %+v", as)
	}
	var parentEnd *Event
	for _, c := range rec.calls {
		for i := range c.events {
			if ev := &c.events[i]; ev.Task != nil && ev.Task.ID == "p" {
				parentEnd = ev
			}
		}
	}
	if parentEnd == nil || parentEnd.RunEnded != 1 || parentEnd.Task.State != StateDead {
		t.Fatalf("parent's end event %+v", parentEnd)
	}

	// The same with the last shard's Complete carrying the Alert flag.
	e.startRun("q", sp, 2)
	e.finish(ShardID("q", 1, 0), OutcomeSuccess, "", 5000)
	s1 := e.task(ShardID("q", 1, 1))
	e.next(fireCmd(s1.ID, s1.Epoch, 1, "n1", 5000, 9000))
	e.next(alerting(completeCmd(s1.ID, s1.Epoch, 1, OutcomePermanent, "bad", 0, 5500)))
	as = e.alerts()
	if len(as) != 1 || as[0].TaskID != "q" || as[0].State != StateDead || as[0].Error != "shard 1: bad" {
		t.Fatalf("alerts %+v", as)
	}

	e.startRun("c", shardSpec(Shards{Count: 2}), 2)
	e.next(cancelCmd("c", 6000))
	r, err := e.f.Run("c", 1)
	if err != nil || r.State != StateCancelled || len(r.Attempts) != 1 || r.Attempts[0].Outcome != OutcomeSuccess {
		t.Fatalf("cancelled parent's run %+v %v", r, err)
	}
}

// The leader prepares a shard's Complete with its stage's flow, so that
// the shard that ends a sharded stage of a cron flow carries the flow's
// next slot (without it the cron flow ended after that run).
func TestFlowOfTask(t *testing.T) {
	stage := FlowStageID("nightly", 3, "load")
	for id, want := range map[string]string{
		stage:                       "nightly",
		ShardID(stage, 1, 7):        "nightly",
		ShardID("plain", 1, 0):      "",
		"plain":                     "",
		FlowStagePrefix + "garbage": "",
	} {
		got, ok := FlowOfTask(id)
		if got != want || ok != (want != "") {
			t.Errorf("FlowOfTask(%q) = %q, %v; want %q", id, got, ok, want)
		}
	}
}

// A retry of a DEAD shard is refused while its parent is stored: the
// parent's run counted the shard's end (a retried shard ran to SUCCESS
// while the parent stayed DEAD); without the parent it is a plain task.
func TestShardRetryRefused(t *testing.T) {
	e := &flowEnv{env: newEnv(t)}
	sp := shardSpec(Shards{Count: 2})
	sp.MaxAttempts = 1
	e.startRun("p", sp, 2)
	e.finish(ShardID("p", 1, 0), OutcomeRetryable, "boom", 3000)
	id := ShardID("p", 1, 0)
	if s := e.task(id); s.State != StateDead {
		t.Fatalf("shard %s", s.State)
	}
	if r := e.next(Command{Type: CmdRetry, Retry: &Retry{ID: id, AtMs: 3500}}); r[0].Code != CodeShard || e.task(id).State != StateDead {
		t.Fatalf("retry of a shard of a stored parent: %+v, shard %s", r[0], e.task(id).State)
	}
}
