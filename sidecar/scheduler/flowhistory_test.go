package scheduler

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/axsched/ax/raftfsm"
)

// A flow passes each stage's result to the stages after it from the
// stage task's run record. With the run history off (--history-runs -1)
// the leader still has a flow stage's record kept (its Fire carries a
// bound of 1), so the next stage's envelope holds the result; a plain
// task's Fire keeps the node's -1 (no record).
func TestFlowStageKeepsItsResultWithHistoryOff(t *testing.T) {
	e := newParkEnv(t)
	e.l.cfg.HistoryRuns = -1
	e.executor("a", 5)
	now := e.clock.Now().UnixMilli()
	spec := raftfsm.Spec{Handler: "h", Priority: 2, TimeoutNs: int64(time.Second), MaxAttempts: 3}
	if r := e.apply(raftfsm.Command{Type: raftfsm.CmdFlow, Flow: &raftfsm.FlowSubmit{ID: "f", DueMs: now, AtMs: now,
		Spec: raftfsm.FlowSpec{Stages: []raftfsm.FlowStage{
			{Name: "a", Spec: spec},
			{Name: "b", Spec: spec, DependsOn: []string{"a"}},
		}}}}); r.Code != raftfsm.CodeOK {
		t.Fatalf("flow submit: %+v", r)
	}
	e.due(2, "plain")
	a := raftfsm.FlowStageID("f", 1, "a")
	e.timers.Cancel(dueKeyPrefix + a)
	e.l.fire(e.ctx, []string{a}, nil)
	ta := e.task(a)
	if ta.State != raftfsm.StateRunning {
		t.Fatalf("stage a after its fire: %s, want RUNNING", ta.State)
	}
	e.apply(raftfsm.Command{Type: raftfsm.CmdComplete, Complete: &raftfsm.Complete{
		ID: a, Epoch: ta.Epoch, Attempt: ta.Attempts, Outcome: raftfsm.OutcomeSuccess, AtMs: now,
		StartedMs: now, EndedMs: now, Result: []byte(`{"rows":42}`)}})

	b := e.task(raftfsm.FlowStageID("f", 1, "b"))
	var env raftfsm.FlowEnvelope
	if err := json.Unmarshal(b.Spec.Payload, &env); err != nil {
		t.Fatalf("stage b's payload %q: %v", b.Spec.Payload, err)
	}
	if got := string(env.Upstream["a"].Result); got != `{"rows":42}` {
		t.Fatalf("stage b's envelope %s: upstream a's result %q, want {\"rows\":42} (history off lost it)", b.Spec.Payload, got)
	}
	if p := e.task("plain"); p.State != raftfsm.StateRunning || p.RunFiredMs != 0 {
		t.Fatalf("plain task with history off: %s, run fired at %d, want RUNNING with no run record started", p.State, p.RunFiredMs)
	}
}
