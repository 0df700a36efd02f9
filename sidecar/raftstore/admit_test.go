package raftstore

import (
	"errors"
	"testing"
	"time"

	"github.com/axsched/ax/engine"
	"github.com/axsched/ax/raftfsm"
)

// A submit of an existing id without overwrite adds no run, so a full
// backlog does not refuse it: the FSM answers it 200 (same spec, a client
// retrying after a lost reply) or 409. A new id, or an overwrite, is still
// refused with *BacklogError.
func TestAdmitLetsResubmitOfExistingIDThroughFullBacklog(t *testing.T) {
	backlog := fakeBacklog{"q": 5} // q1..q5 due now, no executor
	stored := map[string]*raftfsm.Task{}
	for _, id := range []string{"q1", "q2", "q3", "q4", "q5"} {
		stored[id] = &raftfsm.Task{ID: id, Spec: raftfsm.Spec{Handler: "q"}, State: raftfsm.StateWaiting, Run: 1}
	}
	p := NewProposer(ProposerConfig{BacklogLimit: 5, Backlog: backlog, Clock: engine.RealClock(),
		Task: func(id string) *raftfsm.Task { return stored[id] }})
	submit := func(id string, overwrite bool) []raftfsm.Command {
		return []raftfsm.Command{{Type: raftfsm.CmdSubmit, Submit: &raftfsm.Submit{ID: id, Spec: raftfsm.Spec{Handler: "q"}, Overwrite: overwrite}}}
	}

	if _, err := p.admit(submit("q1", false)); err != nil {
		t.Fatalf("re-submit of q1 with a full backlog: %v, want it admitted (the FSM answers 200)", err)
	}
	var be *BacklogError
	if _, err := p.admit(submit("q6", false)); !errors.As(err, &be) || be.Depth != 5 || be.Limit != 5 {
		t.Fatalf("new id q6: %v, want *BacklogError 5/5", err)
	}
	if _, err := p.admit(submit("q1", true)); !errors.As(err, &be) {
		t.Fatalf("overwrite of q1: %v, want *BacklogError (it adds a run)", err)
	}
	// A later submit is not counted at all.
	later := submit("q7", false)
	later[0].Submit.Spec.DelayNs = int64(time.Hour)
	if _, err := p.admit(later); err != nil {
		t.Fatalf("submit due in an hour: %v", err)
	}
}

// fakeBacklog is the leader's backlog count per handler.
type fakeBacklog map[string]int

func (b fakeBacklog) Depth(handler string) int { return b[handler] }

// A flow submit due now counts one run per root stage against its
// handler's backlog (the stages with dependencies come later): over the
// bound it is refused with *BacklogError like a task submit, unless the
// flow exists already (a resubmit adds nothing); a flow due later, a cron
// flow waiting for its first slot and a flow cancel are not counted.
func TestAdmitCountsFlowRootStages(t *testing.T) {
	backlog := fakeBacklog{"q": 3}
	stored := map[string]*raftfsm.Flow{"old": {ID: "old"}}
	p := NewProposer(ProposerConfig{BacklogLimit: 5, Backlog: backlog, Clock: engine.RealClock(),
		Flow: func(id string) *raftfsm.Flow { return stored[id] }})
	stage := func(name, handler string, deps ...string) raftfsm.FlowStage {
		return raftfsm.FlowStage{Name: name, Spec: raftfsm.Spec{Handler: handler}, DependsOn: deps}
	}
	flow := func(id string, stages ...raftfsm.FlowStage) []raftfsm.Command {
		return []raftfsm.Command{{Type: raftfsm.CmdFlow, Flow: &raftfsm.FlowSubmit{ID: id, Spec: raftfsm.FlowSpec{Stages: stages}}}}
	}
	// Two roots on q (3 + 2 = 5: at the bound, admitted with a warning),
	// a dependent stage on q not counted.
	w, err := p.admit(flow("f1", stage("a", "q"), stage("b", "q"), stage("c", "q", "a", "b")))
	if err != nil || w[0] != "5/5" {
		t.Fatalf("two roots with room for two: %v, warnings %v", err, w)
	}
	var be *BacklogError
	if _, err := p.admit(flow("f2", stage("a", "q"), stage("b", "q"), stage("c", "q"))); !errors.As(err, &be) || be.Handler != "q" || be.Depth != 5 || be.Limit != 5 {
		t.Fatalf("three roots with room for two: %v, want *BacklogError 5/5", err)
	}
	// Roots of other handlers, and a task submit in the same entry.
	mixed := append(flow("f3", stage("a", "r"), stage("b", "q"), stage("c", "q")),
		raftfsm.Command{Type: raftfsm.CmdSubmit, Submit: &raftfsm.Submit{ID: "t", Spec: raftfsm.Spec{Handler: "q"}}})
	if _, err := p.admit(mixed); !errors.As(err, &be) || be.Handler != "q" || be.Depth != 5 {
		t.Fatalf("flow and submit in one entry: %v, want the submit refused at 5/5", err)
	}
	backlog["q"] = 5
	if _, err := p.admit(flow("old", stage("a", "q"))); err != nil {
		t.Fatalf("resubmit of a stored flow with a full backlog: %v", err)
	}
	later := flow("f4", stage("a", "q"))
	later[0].Flow.Spec.DelayNs = int64(time.Hour)
	cron := flow("f5", stage("a", "q"))
	cron[0].Flow.Spec.Cron = "0 3 * * *"
	cancel := []raftfsm.Command{{Type: raftfsm.CmdFlow, Flow: &raftfsm.FlowSubmit{ID: "f1", Cancel: true}}}
	for name, cmds := range map[string][]raftfsm.Command{"due in an hour": later, "cron": cron, "cancel": cancel} {
		if _, err := p.admit(cmds); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
}
