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
