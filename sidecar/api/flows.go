package api

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/axsched/ax/ipc"
	"github.com/axsched/ax/raftfsm"
)

var _ ipc.FlowBackend = (*Backend)(nil)

// flowStore is the flow reads of this node's FSM (*raftfsm.FSM has them),
// found by type assertion so that Store's fakes need not have them.
type flowStore interface {
	Flow(id string) (*raftfsm.Flow, error)
	Flows(after string, limit int) ([]raftfsm.Flow, bool, error)
}

func (b *Backend) flows() (flowStore, error) {
	fs, ok := b.d.Store.(flowStore)
	if !ok {
		return nil, errors.New("flows: the store has no flow reads")
	}
	return fs, nil
}

// SubmitFlow implements ipc.FlowBackend.
func (b *Backend) SubmitFlow(ctx context.Context, spec ipc.FlowSpec) (ipc.Flow, bool, error) {
	fs := raftfsm.FlowSpec{DelayNs: int64(spec.Delay), EveryNs: int64(spec.Every), Cron: spec.Cron, Timezone: spec.Timezone}
	if !spec.RunAt.IsZero() {
		fs.RunAtMs = raftfsm.CeilMs(spec.RunAt)
	}
	for _, st := range spec.Stages {
		s := submitCommand(st.Task).Submit.Spec
		// Every stage task carries the flow's trace context (Spec.Equal
		// ignores it, as for tasks: a resubmit from another trace is
		// the same flow).
		s.TraceParent, s.TraceState = spec.TraceParent, spec.TraceState
		fs.Stages = append(fs.Stages, raftfsm.FlowStage{Name: st.Name, Spec: s, DependsOn: st.DependsOn, Continue: st.Continue})
	}
	res, err := b.d.Proposer.ProposeAPI(ctx, []raftfsm.Command{{Type: raftfsm.CmdFlow, Flow: &raftfsm.FlowSubmit{ID: spec.ID, Spec: fs}}})
	if err != nil {
		return ipc.Flow{}, false, err
	}
	r := res[0]
	switch r.Code {
	case raftfsm.CodeOK:
		return b.flowView(r.Flow), r.Created, nil
	case raftfsm.CodeConflict:
		// The state the flow's reads show (RUNNING once a stage started),
		// not the stored one.
		return ipc.Flow{}, false, ipc.Errorf(ipc.ErrConflict, "flow %q exists with a different spec (state %s)", spec.ID, b.flowView(r.Flow).State)
	default:
		return ipc.Flow{}, false, fmt.Errorf("submit flow %q: unexpected result %q", spec.ID, r.Code)
	}
}

// CancelFlow implements ipc.FlowBackend.
func (b *Backend) CancelFlow(ctx context.Context, id string) (ipc.Flow, error) {
	res, err := b.d.Proposer.ProposeAPI(ctx, []raftfsm.Command{{Type: raftfsm.CmdFlow, Flow: &raftfsm.FlowSubmit{ID: id, Cancel: true}}})
	if err != nil {
		return ipc.Flow{}, err
	}
	switch r := res[0]; r.Code {
	case raftfsm.CodeOK:
		return b.flowView(r.Flow), nil
	case raftfsm.CodeNotFound:
		return ipc.Flow{}, ipc.Errorf(ipc.ErrNotFound, "flow %q not found", id)
	default:
		return ipc.Flow{}, fmt.Errorf("cancel flow %q: unexpected result %q", id, r.Code)
	}
}

// PurgeFlow implements ipc.FlowBackend: it reads the flow (a local read)
// and proposes its purge, which the FSM applies only if the flow is still
// finished as read.
func (b *Backend) PurgeFlow(ctx context.Context, id string) (int, error) {
	b.readOwnWrites(ctx)
	fs, err := b.flows()
	if err != nil {
		return 0, err
	}
	fl, err := fs.Flow(id)
	if errors.Is(err, raftfsm.ErrNotFound) {
		return 0, ipc.Errorf(ipc.ErrNotFound, "flow %q not found", id)
	}
	if err != nil {
		return 0, err
	}
	if !fl.State.Terminal() {
		// The state the flow's reads show (RUNNING once a stage started),
		// not the stored one, as for a conflicting submit.
		return 0, ipc.Errorf(ipc.ErrConflict, "purge: flow %q is %s; only finished flows (SUCCESS, FAILED, CANCELLED) can be purged (cancel it first)", id, b.flowView(fl).State)
	}
	res, err := b.d.Proposer.ProposeAPI(ctx, []raftfsm.Command{{Type: raftfsm.CmdPurge, Purge: &raftfsm.Purge{Flows: []raftfsm.PurgeTask{fl.FlowTarget()}}}})
	if err != nil {
		return 0, err
	}
	if res[0].PurgedFlowCount() != 1 {
		// A finished flow never changes, so only a purge that came first
		// (retention, another call) gets here.
		return 0, ipc.Errorf(ipc.ErrNotFound, "flow %q not found (purged meanwhile)", id)
	}
	return 1, nil
}

// Flow implements ipc.FlowBackend: a local read (readOwnWrites first).
func (b *Backend) Flow(ctx context.Context, id string) (ipc.Flow, error) {
	b.readOwnWrites(ctx)
	fs, err := b.flows()
	if err != nil {
		return ipc.Flow{}, err
	}
	fl, err := fs.Flow(id)
	if errors.Is(err, raftfsm.ErrNotFound) {
		return ipc.Flow{}, ipc.Errorf(ipc.ErrNotFound, "flow %q not found", id)
	}
	if err != nil {
		return ipc.Flow{}, err
	}
	return b.flowView(fl), nil
}

// Flows implements ipc.FlowBackend: a local read (readOwnWrites first).
func (b *Backend) Flows(ctx context.Context, after string, limit int) (ipc.FlowPage, error) {
	b.readOwnWrites(ctx)
	fs, err := b.flows()
	if err != nil {
		return ipc.FlowPage{}, err
	}
	fls, more, err := fs.Flows(after, limit)
	if err != nil {
		return ipc.FlowPage{}, err
	}
	var page ipc.FlowPage
	for i := range fls {
		page.Flows = append(page.Flows, b.flowView(&fls[i]))
	}
	if more && len(fls) > 0 {
		page.NextCursor = fls[len(fls)-1].ID
	}
	return page, nil
}

// flowView converts a stored flow to the API's view, reading the live
// state of its created stages' tasks. A flow still going on is RUNNING
// once one of its current run's stages has started or ended.
func (b *Backend) flowView(fl *raftfsm.Flow) ipc.Flow {
	v := ipc.Flow{
		ID: fl.ID, State: fl.State.String(), Run: fl.Run, RunDueAt: time.UnixMilli(fl.SlotMs).UTC(),
		SucceededRuns: fl.Succeeded, FailedRuns: fl.Failed,
		CreatedAt: time.UnixMilli(fl.CreatedMs).UTC(), UpdatedAt: time.UnixMilli(fl.UpdatedMs).UTC(),
		FinishedAt: msTime(fl.FinishedMs),
	}
	if fl.Spec.EveryNs > 0 {
		v.Every = time.Duration(fl.Spec.EveryNs).String()
	}
	v.Cron, v.Timezone = fl.Spec.Cron, fl.Spec.Timezone
	if fl.LastRun != 0 {
		v.LastRunState = fl.LastRun.String()
	}
	started := false
	for i, st := range fl.Graph {
		sv := ipc.StageView{Name: st.Name, Handler: st.Handler, DependsOn: make([]string, 0, len(st.Deps)), OnFailure: "cancel"}
		for _, d := range st.Deps {
			sv.DependsOn = append(sv.DependsOn, fl.Graph[d].Name)
		}
		if st.Continue {
			sv.OnFailure = "continue"
		}
		id := raftfsm.FlowStageID(fl.ID, fl.Run, st.Name)
		switch s := fl.Stages[i]; s {
		case 0:
			sv.State = "PENDING"
		case raftfsm.StateWaiting:
			sv.State, sv.TaskID = s.String(), id
			if t, err := b.d.Store.Task(id); err == nil {
				sv.State = t.State.String()
				started = started || t.State != raftfsm.StateWaiting || t.Attempts > 0
			}
		default:
			sv.State = s.String()
			started = true
			if t, err := b.d.Store.Task(id); err == nil && t.Epoch != 0 {
				sv.TaskID = id
			}
		}
		v.Stages = append(v.Stages, sv)
	}
	if fl.State == raftfsm.StateWaiting && started {
		v.State = "RUNNING"
	}
	return v
}
