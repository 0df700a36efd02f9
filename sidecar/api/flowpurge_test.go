package api

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/axsched/ax/raftfsm"
)

// DELETE /v1/flows/{id}?purge=true on a flow whose stage has started says
// the state its reads show (RUNNING), as the 409 of a conflicting submit
// does, not the stored WAITING that GET /v1/flows/{id} never shows then.
func TestPurgeOfARunningFlowNamesTheStateItsReadsShow(t *testing.T) {
	e := newEnv(t)
	now := e.clock.Now().UnixMilli()
	spec := raftfsm.Spec{Handler: "h", TimeoutNs: int64(time.Minute), MaxAttempts: 3}
	if r := e.apply(raftfsm.Command{Type: raftfsm.CmdFlow, Flow: &raftfsm.FlowSubmit{ID: "f", DueMs: now, AtMs: now,
		Spec: raftfsm.FlowSpec{Stages: []raftfsm.FlowStage{{Name: "a", Spec: spec}}}}}); r[0].Code != raftfsm.CodeOK {
		t.Fatalf("flow submit: %+v", r[0])
	}
	a := e.task(raftfsm.FlowStageID("f", 1, "a"))
	e.apply(raftfsm.Command{Type: raftfsm.CmdFire, Fire: &raftfsm.Fire{ID: a.ID, Epoch: a.Epoch, Attempt: 1, Node: "a",
		AtMs: now, LeaseMs: now + 60_000}})
	ctx := context.Background()
	v, err := e.b.Flow(ctx, "f")
	if err != nil || v.State != "RUNNING" {
		t.Fatalf("GET the flow: %s %v, want RUNNING", v.State, err)
	}
	_, err = e.b.PurgeFlow(ctx, "f")
	if codeOf(err) != "conflict" || !strings.Contains(err.Error(), `flow "f" is RUNNING`) {
		t.Fatalf("purge of the running flow: %v (%s), want a conflict saying it is RUNNING", err, codeOf(err))
	}
}
