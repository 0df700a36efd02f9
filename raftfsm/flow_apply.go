package raftfsm

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/axsched/ax/clients/go/axapi"
)

// applyFlow applies a FlowSubmit: a new flow, a resubmit, or a cancel.
func applyFlow(w *writer, index uint64, s *FlowSubmit) (Result, []Event, error) {
	var prev Flow
	found, err := w.get(flowKey(s.ID), &prev)
	if err != nil {
		return Result{}, nil, err
	}
	if s.Cancel {
		if !found {
			return Result{Code: CodeNotFound}, nil, nil
		}
		return cancelFlow(w, &prev, s.AtMs)
	}
	if found {
		same, err := sameFlowSpec(w, &prev, &s.Spec)
		if err != nil {
			return Result{}, nil, err
		}
		if same {
			return Result{Flow: &prev}, nil, nil
		}
		return Result{Code: CodeConflict, Flow: &prev}, nil, nil
	}
	order, err := FlowOrder(s.Spec.Stages)
	if err != nil || len(s.Spec.Stages) == 0 || len(s.Spec.Stages) > FlowStagesMax {
		// The API refuses such a spec; one that got here anyway changes
		// nothing.
		return Result{Code: CodeState}, nil, nil
	}
	fl := &Flow{
		ID: s.ID, Epoch: index, State: StateWaiting, Run: 1, SlotMs: s.DueMs,
		Spec: FlowSpec{DelayNs: s.Spec.DelayNs, RunAtMs: s.Spec.RunAtMs, EveryNs: s.Spec.EveryNs,
			Cron: s.Spec.Cron, Timezone: s.Spec.Timezone},
		Stages: make([]State, len(s.Spec.Stages)), Order: order, CreatedMs: s.AtMs, UpdatedMs: s.AtMs,
	}
	byName := make(map[string]int, len(s.Spec.Stages))
	for i := range s.Spec.Stages {
		byName[s.Spec.Stages[i].Name] = i
	}
	fl.Graph = make([]FlowNode, len(s.Spec.Stages))
	for i := range s.Spec.Stages {
		st := &s.Spec.Stages[i]
		n := FlowNode{Name: st.Name, Handler: st.Spec.Handler, Continue: st.Continue}
		for _, d := range st.DependsOn {
			n.Deps = append(n.Deps, byName[d])
		}
		fl.Graph[i] = n
		if err := w.putRecord(flowStageKey(s.ID, i), st); err != nil {
			return Result{}, nil, err
		}
	}
	evs, err := advanceFlow(w, index, fl, s.DueMs, s.AtMs, 0)
	if err != nil {
		return Result{}, nil, err
	}
	if err := putFlow(w, fl); err != nil {
		return Result{}, nil, err
	}
	return Result{Created: true, Flow: fl}, evs, nil
}

// sameFlowSpec reports whether spec is the spec fl was created with.
func sameFlowSpec(w *writer, fl *Flow, spec *FlowSpec) (bool, error) {
	if len(spec.Stages) != len(fl.Graph) {
		return false, nil
	}
	stored := fl.Spec
	stored.Stages = make([]FlowStage, len(fl.Graph))
	for i := range stored.Stages {
		if _, err := w.get(flowStageKey(fl.ID, i), &stored.Stages[i]); err != nil {
			return false, err
		}
	}
	return stored.Equal(spec), nil
}

// isFlowStage reports whether t is a stage task that has just ended: the
// only tasks flowStageEnded looks at. It costs a prefix compare for all
// other tasks.
func isFlowStage(t *Task) bool {
	return t != nil && strings.HasPrefix(t.ID, FlowStagePrefix) && t.State.Terminal()
}

// flowStageEnded records that stage task t ended (in the apply of the
// Complete or Cancel that ended it) and moves its flow on: the stages whose
// dependencies are now done are created, due at atMs, those a failure
// cancels are CANCELLED, and a run whose stages have all ended ends the
// flow (or, for a recurring flow, starts its next run). A stage is
// recorded once: a later end of the same task (a retried stage) or of a
// task of an older run changes nothing. cronNextMs is the command's
// FlowNextSlotMs: a cron flow's next slot, should its run end.
func flowStageEnded(w *writer, index uint64, t *Task, atMs, cronNextMs int64) ([]Event, error) {
	id, run, name, ok := ParseFlowStageID(t.ID)
	if !ok {
		return nil, nil
	}
	var fl Flow
	found, err := w.get(flowKey(id), &fl)
	if err != nil || !found || fl.Run != run || fl.State.Terminal() {
		return nil, err
	}
	i := stageIndex(&fl, name)
	if i < 0 || fl.Stages[i] != StateWaiting {
		return nil, nil
	}
	fl.Stages[i] = t.State
	fl.UpdatedMs = atMs
	evs, err := advanceFlow(w, index, &fl, atMs, atMs, cronNextMs)
	if err != nil {
		return nil, err
	}
	return evs, putFlow(w, &fl)
}

// flowStageTaskRetry reports whether a retry of stage task t (terminal) is
// refused: whenever its flow is stored. The flow recorded the stage's end
// when the task ended (or the task is of an earlier run, or the flow has
// ended), so a retried run would change nothing in it: the flow view would
// go on showing the old end, and its dependents would not run again. A
// stage task whose flow was purged is a plain task and may be retried.
func flowStageTaskRetry(w *writer, t *Task) (bool, error) {
	id, _, _, ok := ParseFlowStageID(t.ID)
	if !ok {
		return false, nil
	}
	var fl Flow
	return w.get(flowKey(id), &fl)
}

func stageIndex(fl *Flow, name string) int {
	for i := range fl.Graph {
		if fl.Graph[i].Name == name {
			return i
		}
	}
	return -1
}

// advanceFlow walks the pending stages of fl's current run in dependency
// order: a stage whose dependencies all ended SUCCESS (or, with Continue,
// ended at all) gets its task, due at dueMs; a stage with a dependency
// that ended otherwise is CANCELLED unless it has Continue. When every
// stage has ended, the run ends (endFlowRun, with cronNextMs).
func advanceFlow(w *writer, index uint64, fl *Flow, dueMs, atMs, cronNextMs int64) ([]Event, error) {
	var evs []Event
	for _, i := range fl.Order {
		if fl.Stages[i] != 0 {
			continue
		}
		st := &fl.Graph[i]
		done, ok := true, true
		for _, d := range st.Deps {
			switch s := fl.Stages[d]; {
			case !s.Terminal():
				done = false
			case s != StateSuccess:
				ok = false
			}
		}
		switch {
		case !ok && !st.Continue:
			fl.Stages[i] = StateCancelled
		case done:
			ev, err := createStage(w, index, fl, i, dueMs, atMs)
			if err != nil {
				return nil, err
			}
			fl.Stages[i] = StateWaiting
			evs = append(evs, ev)
		}
	}
	for _, s := range fl.Stages {
		if !s.Terminal() {
			return evs, nil
		}
	}
	more, err := endFlowRun(w, index, fl, atMs, cronNextMs)
	return append(evs, more...), err
}

// endFlowRun ends the current run of fl, whose stages have all ended:
// SUCCESS when all succeeded, FAILED otherwise. A recurring flow then
// starts its next run at its next slot after atMs (slots passed during
// the run are skipped: runs never overlap, and missed ones do not catch
// up). For a cron flow that slot is cronNextMs, the leader's (the FSM
// parses no cron); one that is not after both the run's slot and atMs
// (0: the schedule has no further slot, or the leader could not read the
// flow) ends the flow with this run, as a recurring task's schedule ends.
func endFlowRun(w *writer, index uint64, fl *Flow, atMs, cronNextMs int64) ([]Event, error) {
	result := StateSuccess
	for _, s := range fl.Stages {
		if s != StateSuccess {
			result = StateFailed
		}
	}
	if result == StateSuccess {
		fl.Succeeded++
	} else {
		fl.Failed++
	}
	fl.LastRun, fl.UpdatedMs = result, atMs
	var next int64
	switch {
	case fl.Spec.Cron != "":
		if cronNextMs > max(fl.SlotMs, atMs) {
			next = cronNextMs
		}
	case fl.Spec.EveryNs > 0:
		every := fl.Spec.EveryNs / 1e6
		next = fl.SlotMs + every
		if next <= atMs {
			next += ((atMs-next)/every + 1) * every
		}
	}
	if next == 0 {
		fl.State, fl.FinishedMs = result, atMs
		return nil, nil
	}
	fl.Run++
	fl.SlotMs = next
	clear(fl.Stages)
	return advanceFlow(w, index, fl, next, atMs, 0)
}

// cancelFlow cancels fl: its pending stages become CANCELLED, its waiting
// and running stage tasks are cancelled in this apply, and the flow is
// CANCELLED (a recurring flow starts no further run).
func cancelFlow(w *writer, fl *Flow, atMs int64) (Result, []Event, error) {
	if fl.State.Terminal() {
		return Result{Flow: fl}, nil, nil
	}
	var evs []Event
	for i, s := range fl.Stages {
		switch s {
		case 0:
			fl.Stages[i] = StateCancelled
		case StateWaiting:
			id := FlowStageID(fl.ID, fl.Run, fl.Graph[i].Name)
			prev, err := loadTask(w, id)
			if err != nil {
				return Result{}, nil, err
			}
			fl.Stages[i] = StateCancelled
			if prev == nil {
				continue
			}
			c := &Cancel{ID: id, AtMs: atMs}
			t, _ := cancelTask(prev, c)
			if t == nil { // ended already
				fl.Stages[i] = prev.State
				continue
			}
			ended, err := historyCancel(w, prev, t, c)
			if err != nil {
				return Result{}, nil, err
			}
			if err := putTask(w, prev, t); err != nil {
				return Result{}, nil, err
			}
			evs = append(evs, Event{Type: CmdCancel, Task: t, Prev: prev.State, PrevNode: prev.Node, RunEnded: ended})
			if prev.AwaitingShards() { // a sharded stage: its shards go too
				p, more, err := cancelRunShards(w, t, atMs)
				if err != nil {
					return Result{}, nil, err
				}
				evs[len(evs)-1].Task = p
				evs = append(evs, more...)
			}
		}
	}
	fl.State, fl.FinishedMs, fl.UpdatedMs = StateCancelled, atMs, atMs
	if err := putFlow(w, fl); err != nil {
		return Result{}, nil, err
	}
	return Result{Flow: fl}, evs, nil
}

// createStage stores the task of stage i of fl's current run, WAITING,
// due at dueMs. A stage with dependencies gets its payload in an envelope
// with their results (upstreamEnvelope).
func createStage(w *writer, index uint64, fl *Flow, i int, dueMs, atMs int64) (Event, error) {
	var st FlowStage
	found, err := w.get(flowStageKey(fl.ID, i), &st)
	if err != nil {
		return Event{}, err
	}
	if !found {
		return Event{}, fmt.Errorf("flow %q stage %d: no spec: %w", fl.ID, i, ErrBadEntry)
	}
	id := FlowStageID(fl.ID, fl.Run, st.Name)
	spec := st.Spec
	if len(fl.Graph[i].Deps) > 0 {
		p, err := upstreamEnvelope(w, fl, i, &st, false)
		if err != nil {
			return Event{}, err
		}
		spec.Payload, spec.PayloadBase64 = p, false
	}
	prev, err := loadTask(w, id)
	if err != nil {
		return Event{}, err
	}
	t := &Task{
		ID: id, Spec: spec, Epoch: index, State: StateWaiting, DueMs: dueMs,
		Run: 1, CreatedMs: atMs, UpdatedMs: atMs,
	}
	if len(fl.Graph[i].Deps) > 0 && len(spec.Payload) > stageRecordMax/2 {
		if b, err := encodeRecord(t); err != nil {
			return Event{}, err
		} else if len(b) > stageRecordMax {
			// badger refuses a value over MaxValueBytes: the apply
			// failed here on every node, and again at every restart,
			// so the cluster never came back (a review: 999 stages
			// answering 100 KB, an 87 MB record). Only then are the
			// results left out, so every record a version without this
			// check could store (and then fire and complete) is stored
			// byte for byte as it did.
			if t.Spec.Payload, err = upstreamEnvelope(w, fl, i, &st, true); err != nil {
				return Event{}, err
			}
		}
	}
	ev := Event{Type: CmdSubmit, Task: t}
	if prev != nil { // not made by flows (the API reserves the prefix)
		t.RunBase, t.HistFirst, t.Paused = prev.RunNumber(), prev.HistFirst, prev.Paused
		ev.Prev, ev.PrevNode = prev.State, prev.Node
	}
	if err := putTask(w, prev, t); err != nil {
		return Event{}, err
	}
	return ev, nil
}

// FlowEnvelope and UpstreamStage are the wire form of a dependent
// stage's payload, defined once in axapi (the executors' contract).
type (
	FlowEnvelope  = axapi.FlowEnvelope
	UpstreamStage = axapi.UpstreamStage
)

// stageRecordMax bounds the record of a stage task made with its
// dependencies' results in its envelope (createStage): badger's value
// limit, less room for what the stage's later writes add to it (its node,
// times, an attempt's error). A variable for tests.
var stageRecordMax = MaxValueBytes - 64<<10

// upstreamEnvelope builds the payload of stage i of fl, which has
// dependencies: st's own payload and, per upstream stage, its state and
// (from its run record) its result; with omit, every result is left out
// (ResultOmitted set where there was one).
func upstreamEnvelope(w *writer, fl *Flow, i int, st *FlowStage, omit bool) ([]byte, error) {
	env := FlowEnvelope{Upstream: make(map[string]UpstreamStage, len(fl.Graph[i].Deps))}
	if len(st.Spec.Payload) > 0 {
		if st.Spec.PayloadBase64 || !json.Valid(st.Spec.Payload) {
			env.PayloadBase64 = base64.StdEncoding.EncodeToString(st.Spec.Payload)
		} else {
			env.Payload = st.Spec.Payload
		}
	}
	for _, j := range fl.Graph[i].Deps {
		d := fl.Graph[j].Name
		u := UpstreamStage{State: fl.Stages[j].String()}
		t, err := loadTask(w, FlowStageID(fl.ID, fl.Run, d))
		if err != nil {
			return nil, err
		}
		if t != nil && t.HistRun == t.RunNumber() && t.State == StateSuccess {
			var r RunRecord
			found, err := w.get(historyKey(t.ID, t.HistRun), &r)
			if err != nil {
				return nil, err
			}
			if found && len(r.Result) > 0 && omit {
				u.ResultOmitted = true
			} else if found && len(r.Result) > 0 {
				if r.ResultBinary || r.ResultTruncated || !json.Valid(r.Result) {
					u.ResultBase64 = base64.StdEncoding.EncodeToString(r.Result)
				} else {
					u.Result = r.Result
				}
				u.ResultTruncated = r.ResultTruncated
			}
		}
		env.Upstream[d] = u
	}
	return json.Marshal(env)
}
