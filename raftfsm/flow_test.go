package raftfsm

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
)

func flowCmd(id string, fs FlowSpec, dueMs, atMs int64) Command {
	return Command{Type: CmdFlow, Flow: &FlowSubmit{ID: id, Spec: fs, DueMs: dueMs, AtMs: atMs}}
}

func stage(name string, deps ...string) FlowStage {
	return FlowStage{Name: name, Spec: spec("h."+name, `{"n":"`+name+`"}`), DependsOn: deps}
}

// diamond is A -> (B, C) -> D.
func diamond() FlowSpec {
	return FlowSpec{Stages: []FlowStage{stage("A"), stage("B", "A"), stage("C", "A"), stage("D", "B", "C")}}
}

// flowEnv applies entries at increasing indexes.
type flowEnv struct {
	*env
	idx uint64
}

func (e *flowEnv) next(cmds ...Command) []Result {
	e.t.Helper()
	e.idx++
	return e.apply(e.idx, cmds...)
}

// finish fires the stage task id and completes it with outcome o (and a
// result body), at atMs.
func (e *flowEnv) finish(id string, o Outcome, result string, atMs int64) {
	e.t.Helper()
	t := e.task(id)
	if r := e.next(fireCmd(id, t.Epoch, t.Attempts+1, "n1", atMs, atMs+30000)); r[0].Code != CodeOK {
		e.t.Fatalf("fire %s: %q", id, r[0].Code)
	}
	c := completeCmd(id, t.Epoch, t.Attempts+1, o, "", atMs+100, atMs)
	if result != "" {
		c.Complete.Result = []byte(result)
	}
	if r := e.next(c); r[0].Code != CodeOK {
		e.t.Fatalf("complete %s: %q", id, r[0].Code)
	}
}

func (e *flowEnv) exists(id string) bool {
	e.t.Helper()
	_, err := e.f.Task(id)
	return err == nil
}

func (e *flowEnv) flow(id string) *Flow {
	e.t.Helper()
	fl, err := e.f.Flow(id)
	if err != nil {
		e.t.Fatalf("flow %s: %v", id, err)
	}
	return fl
}

func sid(name string) string { return FlowStageID("f", 1, name) }

func TestFlowDiamond(t *testing.T) {
	e := &flowEnv{env: newEnv(t)}
	r := e.next(flowCmd("f", diamond(), 5000, 1000))
	if !r[0].Created || r[0].Flow == nil || r[0].Flow.State != StateWaiting {
		t.Fatalf("submit: %+v", r[0])
	}
	if a := e.task(sid("A")); a.State != StateWaiting || a.DueMs != 5000 {
		t.Fatalf("A: %+v", a)
	}
	for _, n := range []string{"B", "C", "D"} {
		if e.exists(sid(n)) {
			t.Fatalf("%s created before A ended", n)
		}
	}
	e.finish(sid("A"), OutcomeSuccess, `{"rows":5}`, 6000)
	if !e.exists(sid("B")) || !e.exists(sid("C")) || e.exists(sid("D")) {
		t.Fatal("after A: want B and C, not D")
	}
	if b := e.task(sid("B")); b.DueMs != 6000 {
		t.Fatalf("B due %d, want the time of A's Complete 6000", b.DueMs)
	}
	e.finish(sid("B"), OutcomeSuccess, `"b"`, 7000)
	if e.exists(sid("D")) {
		t.Fatal("D created before C ended")
	}
	e.finish(sid("C"), OutcomeSuccess, "not json", 8000)
	d := e.task(sid("D"))
	var env FlowEnvelope
	if err := json.Unmarshal(d.Spec.Payload, &env); err != nil {
		t.Fatalf("D payload %s: %v", d.Spec.Payload, err)
	}
	if string(env.Payload) != `{"n":"D"}` || string(env.Upstream["B"].Result) != `"b"` || env.Upstream["C"].ResultBase64 == "" ||
		env.Upstream["C"].State != "SUCCESS" {
		t.Fatalf("D envelope: %s", d.Spec.Payload)
	}
	if fl := e.flow("f"); fl.State != StateWaiting {
		t.Fatalf("flow %s before D ended", fl.State)
	}
	e.finish(sid("D"), OutcomeSuccess, "", 9000)
	fl := e.flow("f")
	if fl.State != StateSuccess || fl.FinishedMs != 9000 || fl.Succeeded != 1 {
		t.Fatalf("flow: %+v", fl)
	}
}

func TestFlowFailureCancelsDependents(t *testing.T) {
	e := &flowEnv{env: newEnv(t)}
	e.next(flowCmd("f", diamond(), 1000, 1000))
	e.finish(sid("A"), OutcomeSuccess, "", 2000)
	e.finish(sid("C"), OutcomePermanent, "", 3000)
	if e.exists(sid("D")) {
		t.Fatal("D created after C failed")
	}
	if fl := e.flow("f"); fl.State != StateWaiting || fl.Stages[3] != StateCancelled {
		t.Fatalf("flow with B running: %+v", fl)
	}
	e.finish(sid("B"), OutcomeSuccess, "", 4000)
	fl := e.flow("f")
	if fl.State != StateFailed || fl.Stages[2] != StateFailed || fl.Stages[3] != StateCancelled {
		t.Fatalf("flow: %+v", fl)
	}
}

func TestFlowDeadStageFailsFlow(t *testing.T) {
	e := &flowEnv{env: newEnv(t)}
	fs := FlowSpec{Stages: []FlowStage{stage("A"), stage("B", "A"), stage("C", "B")}}
	fs.Stages[0].Spec.MaxAttempts = 1
	e.next(flowCmd("f", fs, 1000, 1000))
	e.finish(sid("A"), OutcomeRetryable, "", 2000)
	fl := e.flow("f")
	if fl.State != StateFailed || fl.Stages[0] != StateDead || fl.Stages[1] != StateCancelled || fl.Stages[2] != StateCancelled {
		t.Fatalf("flow: %+v", fl)
	}
}

func TestFlowOnFailureContinue(t *testing.T) {
	e := &flowEnv{env: newEnv(t)}
	fs := diamond()
	fs.Stages[3].Continue = true
	e.next(flowCmd("f", fs, 1000, 1000))
	e.finish(sid("A"), OutcomeSuccess, "", 2000)
	e.finish(sid("C"), OutcomePermanent, "", 3000)
	if e.exists(sid("D")) {
		t.Fatal("D created before B ended")
	}
	e.finish(sid("B"), OutcomeSuccess, "", 4000)
	d := e.task(sid("D"))
	if !strings.Contains(string(d.Spec.Payload), `"C":{"state":"FAILED"}`) {
		t.Fatalf("D envelope: %s", d.Spec.Payload)
	}
	e.finish(sid("D"), OutcomeSuccess, "", 5000)
	if fl := e.flow("f"); fl.State != StateFailed || fl.Stages[3] != StateSuccess {
		t.Fatalf("flow: %+v", fl)
	}
}

func TestFlowCancel(t *testing.T) {
	e := &flowEnv{env: newEnv(t)}
	e.next(flowCmd("f", diamond(), 1000, 1000))
	e.finish(sid("A"), OutcomeSuccess, "", 2000)
	b := e.task(sid("B"))
	e.next(fireCmd(sid("B"), b.Epoch, 1, "n1", 2100, 9000)) // B running, C waiting
	r := e.next(Command{Type: CmdFlow, Flow: &FlowSubmit{ID: "f", Cancel: true, AtMs: 2500}})
	if r[0].Flow == nil || r[0].Flow.State != StateCancelled {
		t.Fatalf("cancel: %+v", r[0])
	}
	for _, n := range []string{"B", "C"} {
		if s := e.task(sid(n)).State; s != StateCancelled {
			t.Fatalf("%s %s after the flow's cancel", n, s)
		}
	}
	if e.exists(sid("D")) {
		t.Fatal("D created")
	}
	// B's late answer is stale and moves nothing.
	if r := e.next(completeCmd(sid("B"), b.Epoch, 1, OutcomeSuccess, "", 0, 3000)); r[0].Code != CodeStale {
		t.Fatalf("late complete: %q", r[0].Code)
	}
	fl := e.flow("f")
	if fl.State != StateCancelled || fl.Stages[3] != StateCancelled || e.exists(sid("D")) {
		t.Fatalf("flow: %+v", fl)
	}
	// Cancelling again, or an unknown flow.
	if r := e.next(Command{Type: CmdFlow, Flow: &FlowSubmit{ID: "f", Cancel: true, AtMs: 2600}}); r[0].Flow.FinishedMs != 2500 {
		t.Fatalf("second cancel: %+v", r[0].Flow)
	}
	if r := e.next(Command{Type: CmdFlow, Flow: &FlowSubmit{ID: "nope", Cancel: true}}); r[0].Code != CodeNotFound {
		t.Fatalf("cancel of unknown flow: %q", r[0].Code)
	}
}

func TestFlowStageCancelledFailsFlow(t *testing.T) {
	e := &flowEnv{env: newEnv(t)}
	e.next(flowCmd("f", diamond(), 1000, 1000))
	e.next(cancelCmd(sid("A"), 1500))
	if fl := e.flow("f"); fl.State != StateFailed || fl.Stages[1] != StateCancelled {
		t.Fatalf("flow: %+v", fl)
	}
}

func TestFlowResubmit(t *testing.T) {
	e := &flowEnv{env: newEnv(t)}
	e.next(flowCmd("f", diamond(), 1000, 1000))
	r := e.next(flowCmd("f", diamond(), 2000, 2000))
	if r[0].Code != CodeOK || r[0].Created || r[0].Flow.CreatedMs != 1000 {
		t.Fatalf("same spec: %+v", r[0])
	}
	other := diamond()
	other.Stages[3].Continue = true
	if r := e.next(flowCmd("f", other, 2000, 2000)); r[0].Code != CodeConflict {
		t.Fatalf("different spec: %q", r[0].Code)
	}
	if a := e.task(sid("A")); a.Epoch != 1 {
		t.Fatalf("A re-created: epoch %d", a.Epoch)
	}
}

// A Complete is applied once: replayed at its index (a restart) it is
// skipped, resent at a new index it is stale; either way no stage is
// created twice. A retried stage that ends again changes nothing.
func TestFlowExactlyOnce(t *testing.T) {
	e := &flowEnv{env: newEnv(t)}
	e.next(flowCmd("f", diamond(), 1000, 1000))
	a := e.task(sid("A"))
	e.next(fireCmd(sid("A"), a.Epoch, 1, "n1", 1000, 9000))
	done := completeCmd(sid("A"), a.Epoch, 1, OutcomeSuccess, "", 0, 2000)
	e.next(done)
	doneIdx := e.idx
	b := e.task(sid("B"))
	e.reopen()
	if out := e.applyEntry(doneIdx, done); out != nil {
		t.Fatalf("replayed entry applied: %v", out)
	}
	if r := e.next(done); r[0].Code != CodeStale {
		t.Fatalf("resent complete: %q", r[0].Code)
	}
	if b2 := e.task(sid("B")); b2.Epoch != b.Epoch || b2.UpdatedMs != b.UpdatedMs {
		t.Fatalf("B touched: %+v, was %+v", b2, b)
	}
	// C dies; a retry of C is refused (it would not revive the flow's D).
	c := e.task(sid("C"))
	e.finish(sid("B"), OutcomeSuccess, "", 3000)
	e.next(fireCmd(sid("C"), c.Epoch, 1, "n1", 3000, 9000))
	e.next(completeCmd(sid("C"), c.Epoch, 1, OutcomePermanent, "", 0, 3500))
	if fl := e.flow("f"); fl.State != StateFailed {
		t.Fatalf("flow %s", fl.State)
	}
	if r := e.next(Command{Type: CmdRetry, Retry: &Retry{ID: sid("C"), AtMs: 4000}}); r[0].Code != CodeFlowStage {
		t.Fatalf("retry of C: %q", r[0].Code)
	}
	if e.exists(sid("D")) || e.task(sid("C")).State != StateFailed {
		t.Fatal("D created, or C retried, after the flow ended")
	}
}

func TestFlowSnapshotRoundTrip(t *testing.T) {
	e := &flowEnv{env: newEnv(t)}
	e.next(flowCmd("f", diamond(), 1000, 1000))
	e.finish(sid("A"), OutcomeSuccess, "", 2000)
	e.finish(sid("B"), OutcomeSuccess, "", 3000)
	stream := persist(t, e.snapshot())

	o := &flowEnv{env: newEnv(t), idx: e.idx}
	if err := o.restore(stream); err != nil {
		t.Fatal(err)
	}
	if fl := o.flow("f"); fl.Stages[0] != StateSuccess || fl.Stages[1] != StateSuccess || fl.Stages[2] != StateWaiting {
		t.Fatalf("restored flow: %+v", fl)
	}
	o.finish(sid("C"), OutcomeSuccess, "", 4000)
	o.finish(sid("D"), OutcomeSuccess, "", 5000)
	if fl := o.flow("f"); fl.State != StateSuccess {
		t.Fatalf("flow after restore: %+v", fl)
	}
}

func TestFlowRecurring(t *testing.T) {
	e := &flowEnv{env: newEnv(t)}
	fs := FlowSpec{Stages: []FlowStage{stage("A"), stage("B", "A")}, EveryNs: 2e9}
	e.next(flowCmd("f", fs, 10000, 9000))
	run := func(n int, name string) string { return FlowStageID("f", n, name) }
	e.finish(run(1, "A"), OutcomeSuccess, "", 10000)
	e.finish(run(1, "B"), OutcomeSuccess, "", 11000)
	fl := e.flow("f")
	if fl.Run != 2 || fl.SlotMs != 12000 || fl.State != StateWaiting || fl.Succeeded != 1 {
		t.Fatalf("after run 1: %+v", fl)
	}
	if a := e.task(run(2, "A")); a.DueMs != 12000 {
		t.Fatalf("run 2's A due %d", a.DueMs)
	}
	// Run 2 overruns the slots at 14000 and 16000: they are skipped.
	e.finish(run(2, "A"), OutcomeSuccess, "", 12000)
	e.finish(run(2, "B"), OutcomePermanent, "", 16000)
	fl = e.flow("f")
	if fl.Run != 3 || fl.SlotMs != 18000 || fl.Failed != 1 || fl.LastRun != StateFailed {
		t.Fatalf("after run 2: %+v", fl)
	}
	e.next(Command{Type: CmdFlow, Flow: &FlowSubmit{ID: "f", Cancel: true, AtMs: 17000}})
	if s := e.task(run(3, "A")).State; s != StateCancelled {
		t.Fatalf("run 3's A %s", s)
	}
}

func TestFlowOrder(t *testing.T) {
	cases := []struct {
		stages []FlowStage
		err    string
	}{
		{[]FlowStage{stage("A", "C"), stage("B", "A"), stage("C", "B")}, "dependency cycle: A -> C -> B -> A"},
		{[]FlowStage{stage("A", "A")}, "dependency cycle: A -> A"},
		{[]FlowStage{stage("A", "X")}, `stage "A" depends on unknown stage "X"`},
		{[]FlowStage{stage("A"), stage("A")}, `duplicate stage name "A"`},
	}
	for _, c := range cases {
		if _, err := FlowOrder(c.stages); err == nil || err.Error() != c.err {
			t.Errorf("%v: got %v, want %s", c.stages, err, c.err)
		}
	}
	order, err := FlowOrder(diamond().Stages)
	if err != nil || len(order) != 4 || order[0] != 0 || order[3] != 3 {
		t.Fatalf("diamond order %v, %v", order, err)
	}
}

// finishNext is finish with the leader's FlowNextSlotMs on the Complete.
func (e *flowEnv) finishNext(id string, o Outcome, atMs, nextSlotMs int64) {
	e.t.Helper()
	t := e.task(id)
	if r := e.next(fireCmd(id, t.Epoch, t.Attempts+1, "n1", atMs, atMs+30000)); r[0].Code != CodeOK {
		e.t.Fatalf("fire %s: %q", id, r[0].Code)
	}
	c := completeCmd(id, t.Epoch, t.Attempts+1, o, "", atMs+100, atMs)
	c.Complete.FlowNextSlotMs = nextSlotMs
	if r := e.next(c); r[0].Code != CodeOK {
		e.t.Fatalf("complete %s: %q", id, r[0].Code)
	}
}

// A cron flow starts its next run at the slot the leader put in the
// Complete that ends the run (the FSM parses no cron), only once the run
// has ended; a slot the leader sent that is not after the run's end, or
// none (the schedule has no further slot), ends the flow.
func TestFlowCron(t *testing.T) {
	e := &flowEnv{env: newEnv(t)}
	fs := FlowSpec{Stages: []FlowStage{stage("A"), stage("B", "A")}, Cron: "*/10 * * * * *", Timezone: "Europe/Berlin"}
	e.next(flowCmd("f", fs, 10000, 9000))
	if fl := e.flow("f"); !fl.Recurring() || fl.Spec.Cron != fs.Cron || fl.Spec.Timezone != fs.Timezone {
		t.Fatalf("stored: %+v", fl)
	}
	run := func(n int, name string) string { return FlowStageID("f", n, name) }
	// A's Complete carries a slot too (the leader cannot know which
	// Complete ends the run): it is not used while B is to come.
	e.finishNext(run(1, "A"), OutcomeSuccess, 10000, 20000)
	if fl := e.flow("f"); fl.Run != 1 || e.exists(run(2, "A")) {
		t.Fatalf("run 2 started before run 1 ended: %+v", fl)
	}
	e.finishNext(run(1, "B"), OutcomeSuccess, 25000, 30000) // the 20000 slot passed during run 1
	fl := e.flow("f")
	if fl.Run != 2 || fl.SlotMs != 30000 || fl.State != StateWaiting || fl.Succeeded != 1 {
		t.Fatalf("after run 1: %+v", fl)
	}
	if a := e.task(run(2, "A")); a.DueMs != 30000 || a.State != StateWaiting {
		t.Fatalf("run 2's A: due %d, %s", a.DueMs, a.State)
	}
	// Run 2's A is cancelled: the Cancel carries the slot, the run ends
	// FAILED, run 3 is due at that slot.
	c := cancelCmd(run(2, "A"), 30500)
	c.Cancel.FlowNextSlotMs = 40000
	e.next(c)
	fl = e.flow("f")
	if fl.Run != 3 || fl.SlotMs != 40000 || fl.Failed != 1 || fl.LastRun != StateFailed || !e.exists(run(3, "A")) {
		t.Fatalf("after run 2: %+v", fl)
	}
	// A slot not after the run's end: the schedule is over, the flow ends.
	e.finishNext(run(3, "A"), OutcomeSuccess, 40000, 0)
	e.finishNext(run(3, "B"), OutcomeSuccess, 41000, 41000)
	fl = e.flow("f")
	if fl.Run != 3 || fl.State != StateSuccess || fl.FinishedMs != 41000 || fl.Succeeded != 2 || e.exists(run(4, "A")) {
		t.Fatalf("after run 3: %+v", fl)
	}
}

// The leader's side of a cron flow: the first run is due at the
// schedule's first slot after now (unless run_at or delay say otherwise),
// and each Complete or Cancel of a stage task carries the first slot after
// both now and the run's slot.
func TestPrepareFlowCron(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_000)
	nowMs := now.UnixMilli()
	in := LeaderInputs{Schedule: func(s *Spec) (Schedule, error) {
		if s.Cron != "@every-minute" || s.Timezone != "Asia/Tokyo" {
			return nil, errors.New("unexpected spec")
		}
		return stubSchedule{period: time.Minute}, nil
	}}
	fs := FlowSpec{Cron: "@every-minute", Timezone: "Asia/Tokyo"}
	sub := Command{Type: CmdFlow, Flow: &FlowSubmit{ID: "f", Spec: fs}}
	Prepare(&sub, now, in)
	if sub.Flow.DueMs != nowMs+60000 {
		t.Fatalf("first run due %d, want %d", sub.Flow.DueMs, nowMs+60000)
	}
	withDelay := Command{Type: CmdFlow, Flow: &FlowSubmit{ID: "f", Spec: FlowSpec{Cron: fs.Cron, Timezone: fs.Timezone, DelayNs: int64(time.Second)}}}
	Prepare(&withDelay, now, in)
	if withDelay.Flow.DueMs != nowMs+1000 {
		t.Fatalf("with a delay: due %d", withDelay.Flow.DueMs)
	}
	for _, tc := range []struct {
		name       string
		slotMs     int64
		state      State
		cron       bool
		wantSlotMs int64
	}{
		{"run's slot passed: after now", nowMs - 5000, StateWaiting, true, nowMs + 60000},
		{"before the run's slot (a cancel): after the slot", nowMs + 5000, StateWaiting, true, nowMs + 65000},
		{"an every flow: none", nowMs - 5000, StateWaiting, false, 0},
		{"a finished flow: none", nowMs - 5000, StateCancelled, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fl := &Flow{ID: "f", SlotMs: tc.slotMs, State: tc.state, Spec: FlowSpec{EveryNs: int64(time.Minute)}}
			if tc.cron {
				fl.Spec = fs
			}
			in := in
			in.Flow = fl
			comp := Command{Type: CmdComplete, Complete: &Complete{ID: FlowStageID("f", 1, "A"), Attempt: 1, Outcome: OutcomeSuccess}}
			cancel := Command{Type: CmdCancel, Cancel: &Cancel{ID: FlowStageID("f", 1, "A")}}
			Prepare(&comp, now, in)
			Prepare(&cancel, now, in)
			if comp.Complete.FlowNextSlotMs != tc.wantSlotMs || cancel.Cancel.FlowNextSlotMs != tc.wantSlotMs {
				t.Fatalf("complete %d, cancel %d, want %d", comp.Complete.FlowNextSlotMs, cancel.Cancel.FlowNextSlotMs, tc.wantSlotMs)
			}
		})
	}
}

// rawKeys counts the stored keys under prefix.
func (e *flowEnv) rawKeys(prefix string) int {
	e.t.Helper()
	n := 0
	err := e.f.db.View(func(txn *badger.Txn) error {
		opts := badger.DefaultIteratorOptions
		opts.Prefix = []byte(prefix)
		it := txn.NewIterator(opts)
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			n++
		}
		return nil
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return n
}

// A finished flow is found by ExpiredFlows once its class's retention has
// passed (SUCCESS: retention, FAILED: retentionDead) and a Purge of it
// deletes its record, its stages' specs and its index entry; a purge read
// from a stale view (another finish time), a flow still running and a
// recurring flow between runs are kept.
func TestFlowPurge(t *testing.T) {
	e := &flowEnv{env: newEnv(t)}
	two := FlowSpec{Stages: []FlowStage{stage("A"), stage("B", "A")}}
	e.next(flowCmd("ok", two, 1000, 1000))
	e.finish(FlowStageID("ok", 1, "A"), OutcomeSuccess, "", 1000)
	e.finish(FlowStageID("ok", 1, "B"), OutcomeSuccess, "", 2000)
	e.next(flowCmd("bad", two, 1000, 1000))
	e.finish(FlowStageID("bad", 1, "A"), OutcomePermanent, "", 3000)
	e.next(flowCmd("running", two, 1000, 1000))
	rec := two
	rec.EveryNs = 2e9
	e.next(flowCmd("rec", rec, 1000, 1000))
	e.finish(FlowStageID("rec", 1, "A"), OutcomeSuccess, "", 1000)
	e.finish(FlowStageID("rec", 1, "B"), OutcomeSuccess, "", 1500)
	if fl := e.flow("ok"); fl.State != StateSuccess || fl.FinishedMs != 2000 {
		t.Fatalf("ok: %+v", fl)
	}
	ids := func(ts []PurgeTask) string {
		var s []string
		for _, x := range ts {
			s = append(s, x.ID)
		}
		return strings.Join(s, ",")
	}
	for _, tc := range []struct {
		nowMs          int64
		keep, keepDead time.Duration
		want           string
	}{
		{2000, time.Second, time.Second, ""},
		{3100, time.Second, time.Hour, "ok"},
		{4200, time.Hour, time.Second, "bad"},
		{9000, time.Second, time.Second, "bad,ok"},
		{9000, 0, 0, ""}, // kept forever
	} {
		got, err := e.f.ExpiredFlows(tc.nowMs, tc.keep, tc.keepDead, 10, nil)
		if err != nil || ids(got) != tc.want {
			t.Fatalf("ExpiredFlows(%d, %v, %v) = %q, %v; want %q", tc.nowMs, tc.keep, tc.keepDead, ids(got), err, tc.want)
		}
	}
	// A cycle's cursor reads each entry once, across the two classes.
	var cur PurgeCursor
	var got []string
	for range 4 {
		ts, err := e.f.ExpiredFlows(9000, time.Second, time.Second, 1, &cur)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ids(ts))
	}
	if strings.Join(got, "|") != "bad|ok||" {
		t.Fatalf("ExpiredFlows with a cursor, one at a time: %q", got)
	}
	okFl, badFl := e.flow("ok"), e.flow("bad")
	stale := okFl.FlowTarget()
	stale.FinishedMs++
	run, recFl := e.flow("running"), e.flow("rec")
	r := e.next(Command{Type: CmdPurge, Purge: &Purge{Flows: []PurgeTask{stale, run.FlowTarget(), recFl.FlowTarget()}}})
	if r[0].PurgedFlowCount() != 0 {
		t.Fatalf("purged %v", r[0].PurgedFlows)
	}
	r = e.next(Command{Type: CmdPurge, Purge: &Purge{Flows: []PurgeTask{okFl.FlowTarget(), badFl.FlowTarget()}}})
	if r[0].PurgedFlowCount() != 2 {
		t.Fatalf("purged %v", r[0].PurgedFlows)
	}
	for _, id := range []string{"ok", "bad"} {
		if _, err := e.f.Flow(id); !errors.Is(err, ErrNotFound) {
			t.Fatalf("flow %s after its purge: %v", id, err)
		}
	}
	// Left: the specs of the two flows not purged, no index entry.
	if n := e.rawKeys("ws/"); n != 4 {
		t.Fatalf("%d stage specs left, want 4", n)
	}
	if n := e.rawKeys("wf/"); n != 0 {
		t.Fatalf("%d finished-flow entries left", n)
	}
	if got, _ := e.f.ExpiredFlows(1e9, time.Second, time.Second, 10, nil); len(got) != 0 {
		t.Fatalf("expired after the purge: %v", got)
	}
	// A cancelled flow (recurring, between runs) is finished: listed.
	e.next(Command{Type: CmdFlow, Flow: &FlowSubmit{ID: "rec", Cancel: true, AtMs: 5000}})
	if got, _ := e.f.ExpiredFlows(7000, time.Second, time.Second, 10, nil); ids(got) != "rec" {
		t.Fatalf("after cancelling rec: %v", got)
	}
}

// A stage that finished in a flow still running is kept by a purge, so
// Expired and Finished pass over it (they returned it, and a read of
// nothing but such stages purged nothing); once its flow has ended it is
// returned like any finished task.
func TestExpiredPassesOverStagesOfRunningFlows(t *testing.T) {
	e := &flowEnv{env: newEnv(t)}
	two := FlowSpec{Stages: []FlowStage{stage("A"), stage("B", "A")}}
	e.next(flowCmd("f", two, 1000, 1000))
	a, b := FlowStageID("f", 1, "A"), FlowStageID("f", 1, "B")
	e.finish(a, OutcomeSuccess, "", 1000)
	e.next(submitCmd("plain", spec("h", ""), 1000, 1000), cancelCmd("plain", 1500))
	expired := func() []string {
		fts, err := e.f.Expired(9000, time.Second, time.Second, 10, &PurgeCursor{})
		if err != nil {
			t.Fatal(err)
		}
		return ids(fts)
	}
	finished := func() []string {
		fts, _, err := e.f.Finished(FinishedQuery{BeforeMs: math.MaxInt64}, 10, nil)
		if err != nil {
			t.Fatal(err)
		}
		return ids(fts)
	}
	if got := expired(); !slices.Equal(got, []string{"plain"}) {
		t.Fatalf("Expired while the flow runs: %v, want [plain]", got)
	}
	if got := finished(); !slices.Equal(got, []string{"plain"}) {
		t.Fatalf("Finished while the flow runs: %v, want [plain]", got)
	}
	e.finish(b, OutcomeSuccess, "", 2000)
	want := []string{a, b, "plain"}
	slices.Sort(want)
	if got := expired(); !slices.Equal(got, want) {
		t.Fatalf("Expired after the flow ended: %v, want %v", got, want)
	}
	if got := finished(); !slices.Equal(got, want) {
		t.Fatalf("Finished after the flow ended: %v, want %v", got, want)
	}
}

// ExpiredFlows' cursor, as TestExpiredCursorKeysOfOtherLengths.
func TestExpiredFlowsCursorKeysOfOtherLengths(t *testing.T) {
	e := &flowEnv{env: newEnv(t)}
	one := FlowSpec{Stages: []FlowStage{stage("A")}}
	for _, f := range []struct {
		id string
		at int64
	}{{"a-99", 1000}, {"b-1", 2000}, {"b-19", 2000}, {"b-2", 2000}} {
		e.next(flowCmd(f.id, one, 1000, 1000))
		e.finish(FlowStageID(f.id, 1, "A"), OutcomeSuccess, "", f.at)
	}
	var cur PurgeCursor
	var got []string
	for _, limit := range []int{1, 10, 10} {
		ts, err := e.f.ExpiredFlows(9000, time.Second, time.Second, limit, &cur)
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range ts {
			got = append(got, x.ID)
		}
	}
	if want := []string{"a-99", "b-1", "b-19", "b-2"}; !slices.Equal(got, want) {
		t.Fatalf("cycle read %v, want %v", got, want)
	}
}

// A retry of a stage task whose flow is stored is refused (CodeFlowStage):
// the flow recorded the stage's end and a retried run would not move it.
// Once the flow is purged, the task is a plain task and may be retried.
func TestFlowStageRetryRefused(t *testing.T) {
	e := &flowEnv{env: newEnv(t)}
	e.next(flowCmd("f", FlowSpec{Stages: []FlowStage{stage("A"), stage("B", "A")}}, 1000, 1000))
	e.finish(sid("A"), OutcomePermanent, "", 1000)
	fl := e.flow("f")
	if fl.State != StateFailed {
		t.Fatalf("flow: %+v", fl)
	}
	retry := Command{Type: CmdRetry, Retry: &Retry{ID: sid("A"), AtMs: 2000}}
	if r := e.next(retry); r[0].Code != CodeFlowStage || e.task(sid("A")).State != StateFailed {
		t.Fatalf("retry of a stage of a finished flow: %q, task %s", r[0].Code, e.task(sid("A")).State)
	}
	if r := e.next(Command{Type: CmdPurge, Purge: &Purge{Flows: []PurgeTask{fl.FlowTarget()}}}); r[0].PurgedFlowCount() != 1 {
		t.Fatal("flow not purged")
	}
	if r := e.next(retry); r[0].Code != CodeOK || e.task(sid("A")).State != StateWaiting {
		t.Fatalf("retry once the flow is purged: %q", r[0].Code)
	}
}

// A finished stage task of the current run of a flow still going on is
// not purged (its dependents read its result when they are created);
// once the flow ended it is.
func TestFlowStagePurgeWaitsForTheFlow(t *testing.T) {
	e := &flowEnv{env: newEnv(t)}
	e.next(flowCmd("f", diamond(), 1000, 1000))
	e.finish(sid("A"), OutcomeSuccess, `{"a":1}`, 1000)
	e.finish(sid("B"), OutcomeSuccess, `{"b":2}`, 1100)
	purge := func() bool {
		b := e.task(sid("B"))
		r := e.next(Command{Type: CmdPurge, Purge: &Purge{Tasks: []PurgeTask{{ID: b.ID, Epoch: b.Epoch, FinishedMs: b.FinishedMs}}}})
		return r[0].PurgedCount() == 1
	}
	if purge() {
		t.Fatal("B purged while C runs and D waits for its result")
	}
	e.finish(sid("C"), OutcomeSuccess, `{"c":3}`, 1200)
	var env FlowEnvelope
	if err := json.Unmarshal(e.task(sid("D")).Spec.Payload, &env); err != nil || string(env.Upstream["B"].Result) != `{"b":2}` {
		t.Fatalf("D's envelope %s: %v", e.task(sid("D")).Spec.Payload, err)
	}
	e.finish(sid("D"), OutcomeSuccess, "", 1300)
	if e.flow("f").State != StateSuccess || !purge() {
		t.Fatal("B not purged once the flow ended")
	}
}

// A stage whose envelope, with every upstream result, would make its task
// record larger than badger takes gets the results left out
// (result_omitted): the apply failed on every node, and again at every
// restart, so the cluster never came back (a review: 999 stages answering
// 100 KB, an 87 MB record). An envelope that fits is as it was. The test
// opens badger with its smallest value limit (1 MiB) and the bound to
// match, so that 20 results of 64 KiB are too many.
func TestFlowEnvelopeTooLargeOmitsResults(t *testing.T) {
	defer func(m int) { stageRecordMax = m }(stageRecordMax)
	stageRecordMax = 1<<20 - 64<<10
	dir := t.TempDir()
	db, err := badger.Open(badger.DefaultOptions(dir).WithLogger(nil).WithValueLogFileSize(1 << 20))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	f, err := Open(db)
	if err != nil {
		t.Fatal(err)
	}
	e := &flowEnv{env: &env{t: t, dir: dir, db: db, f: f}}
	var ups []string
	stages := []FlowStage{}
	for i := range 20 {
		n := fmt.Sprintf("u%02d", i)
		ups = append(ups, n)
		stages = append(stages, stage(n))
	}
	stages = append(stages, stage("small", ups[:5]...), stage("join", ups...))
	if r := e.next(flowCmd("f", FlowSpec{Stages: stages}, 1000, 1000)); r[0].Code != CodeOK {
		t.Fatalf("flow: %q", r[0].Code)
	}
	result := strings.Repeat("x", ResultMaxBytes) // not JSON: base64 in the envelope
	for _, n := range ups {
		e.finish(sid(n), OutcomeSuccess, result, 2000)
	}
	env := func(id string) FlowEnvelope {
		t.Helper()
		var env FlowEnvelope
		if err := json.Unmarshal(e.task(id).Spec.Payload, &env); err != nil {
			t.Fatalf("%s's envelope: %v", id, err)
		}
		return env
	}
	for n, u := range env(sid("small")).Upstream {
		if u.State != "SUCCESS" || u.ResultOmitted || len(u.ResultBase64) == 0 {
			t.Fatalf("small's upstream %s: %+v, want its result", n, u.State)
		}
	}
	join := env(sid("join"))
	if len(join.Upstream) != 20 {
		t.Fatalf("join's envelope has %d upstream stages, want 20", len(join.Upstream))
	}
	for n, u := range join.Upstream {
		if u.State != "SUCCESS" || !u.ResultOmitted || len(u.ResultBase64) != 0 || len(u.Result) != 0 {
			t.Fatalf("join's upstream %s: state %s omitted %v, %d bytes: want SUCCESS, omitted", n, u.State, u.ResultOmitted, len(u.ResultBase64)+len(u.Result))
		}
	}
	if string(join.Payload) != `{"n":"join"}` {
		t.Fatalf("join's own payload %s, want kept", join.Payload)
	}
	e.finish(sid("join"), OutcomeSuccess, "", 3000) // the record takes its later writes
}
