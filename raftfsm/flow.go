package raftfsm

import (
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/axsched/ax/internal/dag"
)

// Flows (docs/DESIGN.md section 19): a flow is a set of stages, each a task
// spec that names the stages it depends on. The FSM decides every
// transition from stage completions, in the apply of the command that ends
// a stage (flow_apply.go), so no leader round trip is needed and nothing
// is lost on a leader change: a stage's task is created (WAITING, due at
// that command's time) in the same transaction as the Complete that made
// its last dependency SUCCESS.
//
// Each stage of flow run n is a real task with id FlowStageID(flow, n,
// stage) ("flow/<flow id>/<n>/<stage>"); the API reserves the "flow/"
// prefix. The flow record ("w/<id>") holds the spec, the current run and,
// per stage, whether its task was created and how it ended.

// FlowStagePrefix starts the id of every stage task.
const FlowStagePrefix = "flow/"

// FlowStagesMax bounds the stages of one flow.
const FlowStagesMax = 1000

var (
	prefixFlow      = []byte("w/")
	prefixFlowStage = []byte("ws/")
)

func flowKey(id string) []byte { return append(append([]byte{}, prefixFlow...), id...) }

// flowStageKey is the key of stage i's FlowStage of flow id, written once
// at submit: "ws/<id length, 2 bytes BE><id><i, 4 bytes BE>". A stage's
// spec is read only when its task is created (and on a resubmit), so the
// flow record rewritten at every stage end stays small.
func flowStageKey(id string, i int) []byte {
	k := append(append([]byte{}, prefixFlowStage...), byte(len(id)>>8), byte(len(id)))
	k = append(k, id...)
	return append(k, byte(i>>24), byte(i>>16), byte(i>>8), byte(i))
}

// FlowStageID is the task id of stage name in run run of flow id.
func FlowStageID(id string, run int, name string) string {
	return FlowStagePrefix + id + "/" + strconv.Itoa(run) + "/" + name
}

// ParseFlowStageID splits a stage task id; ok is false for any other id.
// Stage names hold no "/", so the flow id is everything before the run.
func ParseFlowStageID(taskID string) (flowID string, run int, name string, ok bool) {
	if !strings.HasPrefix(taskID, FlowStagePrefix) {
		return "", 0, "", false
	}
	rest := taskID[len(FlowStagePrefix):]
	i := strings.LastIndexByte(rest, '/')
	if i <= 0 {
		return "", 0, "", false
	}
	name, rest = rest[i+1:], rest[:i]
	j := strings.LastIndexByte(rest, '/')
	if j <= 0 {
		return "", 0, "", false
	}
	run, err := strconv.Atoi(rest[j+1:])
	if err != nil || run < 1 || name == "" {
		return "", 0, "", false
	}
	return rest[:j], run, name, true
}

// FlowStage is one stage of a flow spec.
type FlowStage struct {
	Name string `msgpack:"n"`
	// Spec is the stage task's spec (handler, payload, priority, timeout,
	// attempts, backoff, route key, labels; no schedule, delay or run_at).
	Spec      Spec     `msgpack:"s"`
	DependsOn []string `msgpack:"dp,omitempty"`
	// Continue is on_failure "continue": the stage runs once its
	// dependencies have ended, whatever their states. Otherwise a
	// dependency that does not end SUCCESS cancels it.
	Continue bool `msgpack:"co,omitempty"`
}

// FlowSpec is what the client asked for: two submits of one flow id are
// the same flow when their specs are Equal.
type FlowSpec struct {
	Stages  []FlowStage `msgpack:"st"`
	DelayNs int64       `msgpack:"d,omitempty"`
	RunAtMs int64       `msgpack:"ra,omitempty"`
	// EveryNs makes the flow recurring: a new flow run per slot (first
	// slot the first run's due time, then every EveryNs), never two at
	// once: the slots that pass while a run is unfinished are skipped.
	EveryNs int64 `msgpack:"ev,omitempty"`
	// Cron (in Timezone, "" for UTC) makes the flow recurring on a cron
	// schedule, with the same rule: the next run is at the first slot
	// after both the last run's slot and its end. The FSM reads no clock
	// and parses no cron: the leader computes that slot
	// (Complete.FlowNextSlotMs, Cancel.FlowNextSlotMs).
	Cron     string `msgpack:"cr,omitempty"`
	Timezone string `msgpack:"tz,omitempty"`
}

// Equal reports whether a and b are the same flow spec.
func (a *FlowSpec) Equal(b *FlowSpec) bool {
	if a.DelayNs != b.DelayNs || a.RunAtMs != b.RunAtMs || a.EveryNs != b.EveryNs || a.Cron != b.Cron ||
		a.Timezone != b.Timezone || len(a.Stages) != len(b.Stages) {
		return false
	}
	for i := range a.Stages {
		x, y := &a.Stages[i], &b.Stages[i]
		if x.Name != y.Name || x.Continue != y.Continue || !x.Spec.Equal(y.Spec) || len(x.DependsOn) != len(y.DependsOn) {
			return false
		}
		for j := range x.DependsOn {
			if x.DependsOn[j] != y.DependsOn[j] {
				return false
			}
		}
	}
	return true
}

// FlowSubmit creates a flow, or returns the existing one when the id exists
// with an equal spec (a different spec is CodeConflict). Cancel set instead
// cancels flow ID (its waiting and running stages). The leader fills DueMs
// (RunAt, or its clock plus Delay) and AtMs.
type FlowSubmit struct {
	ID     string   `msgpack:"id"`
	Spec   FlowSpec `msgpack:"s"`
	DueMs  int64    `msgpack:"du"`
	AtMs   int64    `msgpack:"at"`
	Cancel bool     `msgpack:"c,omitempty"`
}

// FlowNode is one stage in a flow record: what moving the flow on needs,
// without the stage's task spec (kept under flowStageKey).
type FlowNode struct {
	Name     string `msgpack:"n"`
	Handler  string `msgpack:"h"`
	Deps     []int  `msgpack:"d,omitempty"` // indexes of the stages it depends on
	Continue bool   `msgpack:"c,omitempty"`
}

// Flow is the stored record of a flow. Times are Unix ms, UTC.
type Flow struct {
	ID string `msgpack:"id"`
	// Spec holds the flow's timing (delay, run_at, every); its Stages are
	// not in the record (flowStageKey): Graph has their names,
	// handlers and dependencies.
	Spec  FlowSpec   `msgpack:"s"`
	Graph []FlowNode `msgpack:"g"`
	Epoch uint64     `msgpack:"e"`
	// State is WAITING while a run is going on or due (the API shows
	// RUNNING once a stage has started), then SUCCESS, FAILED or
	// CANCELLED. A recurring flow is WAITING between runs.
	State State `msgpack:"st"`
	// Run is the current (or last) flow run, from 1; SlotMs its due time.
	Run    int   `msgpack:"rn"`
	SlotMs int64 `msgpack:"sl"`
	// Stages holds, per stage of Graph (same order), the stage of the
	// current run: 0 before its task exists (PENDING), StateWaiting once
	// created (its task has the live state), then how it ended.
	Stages []State `msgpack:"sg"`
	// Order is the stages' indexes in dependency order.
	Order []int `msgpack:"o"`
	// Succeeded and Failed count finished runs; LastRun is the state of
	// the last finished run (0 before one).
	Succeeded  int   `msgpack:"ok,omitempty"`
	Failed     int   `msgpack:"fa,omitempty"`
	LastRun    State `msgpack:"lr,omitempty"`
	CreatedMs  int64 `msgpack:"c"`
	UpdatedMs  int64 `msgpack:"u"`
	FinishedMs int64 `msgpack:"f,omitempty"`
}

// Recurring reports whether the flow starts a run per slot.
func (f *Flow) Recurring() bool { return f.Spec.EveryNs > 0 || f.Spec.Cron != "" }

// cronSpec is the task Spec whose schedule is flow spec s's cron (for
// LeaderInputs.Schedule).
func (s *FlowSpec) cronSpec() *Spec { return &Spec{Cron: s.Cron, Timezone: s.Timezone} }

// FlowOrder checks the dependencies of stages and returns the stages'
// indexes in dependency order (internal/dag, the walk the API's check
// uses too). It fails on duplicate or empty names, an unknown dependency,
// or a cycle, naming the stages involved.
func FlowOrder(stages []FlowStage) ([]int, error) {
	idx := make(map[string]int, len(stages))
	for i, s := range stages {
		if s.Name == "" {
			return nil, errors.New("stage " + strconv.Itoa(i) + ": name required")
		}
		if _, dup := idx[s.Name]; dup {
			return nil, errors.New("duplicate stage name " + strconv.Quote(s.Name))
		}
		idx[s.Name] = i
	}
	for _, s := range stages {
		for _, d := range s.DependsOn {
			if _, ok := idx[d]; !ok {
				return nil, errors.New("stage " + strconv.Quote(s.Name) + " depends on unknown stage " + strconv.Quote(d))
			}
		}
	}
	deps := make([][]int, len(stages))
	for i, s := range stages {
		for _, d := range s.DependsOn {
			deps[i] = append(deps[i], idx[d])
		}
	}
	order, cycle := dag.Order(deps)
	if cycle != nil {
		names := make([]string, len(cycle)+1)
		for k, i := range cycle {
			names[k] = stages[i].Name
		}
		names[len(cycle)] = names[0]
		return nil, errors.New("dependency cycle: " + strings.Join(names, " -> "))
	}
	return order, nil
}

// Flow returns the stored flow id, or ErrNotFound.
func (f *FSM) Flow(id string) (*Flow, error) {
	var fl Flow
	err := f.db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(flowKey(id))
		if errors.Is(err, badger.ErrKeyNotFound) {
			return ErrNotFound
		}
		if err != nil {
			return err
		}
		return item.Value(func(b []byte) error { return decodeRecord(b, &fl) })
	})
	if err != nil {
		return nil, err
	}
	return &fl, nil
}

// Flows returns up to limit flows in id order after id after; more says
// whether there are more.
func (f *FSM) Flows(after string, limit int) (flows []Flow, more bool, err error) {
	err = f.db.View(func(txn *badger.Txn) error {
		opts := badger.DefaultIteratorOptions
		opts.Prefix = prefixFlow
		it := txn.NewIterator(opts)
		defer it.Close()
		for it.Seek(flowKey(after)); it.Valid(); it.Next() {
			id := string(it.Item().Key()[len(prefixFlow):])
			if id == after && after != "" {
				continue
			}
			if len(flows) == limit {
				more = true
				return nil
			}
			var fl Flow
			if err := it.Item().Value(func(b []byte) error { return decodeRecord(b, &fl) }); err != nil {
				return err
			}
			flows = append(flows, fl)
		}
		return nil
	})
	return flows, more, err
}

// FlowDue returns when the first run of a flow of spec s submitted at now
// is due, not rounded: run_at, or now plus the delay; ok is false for a
// cron flow with neither, whose first run is its schedule's first slot
// after now.
func FlowDue(s *FlowSpec, now time.Time) (due time.Time, ok bool) {
	switch {
	case s.RunAtMs != 0:
		return time.UnixMilli(s.RunAtMs), true
	case s.Cron != "" && s.DelayNs == 0:
		return time.Time{}, false
	}
	return now.Add(time.Duration(s.DelayNs)), true
}

// RootHandlers returns the handler of each stage of s without
// dependencies (the stages whose tasks a submit creates), once per stage.
func (s *FlowSpec) RootHandlers() []string {
	var hs []string
	for i := range s.Stages {
		if len(s.Stages[i].DependsOn) == 0 {
			hs = append(hs, s.Stages[i].Spec.Handler)
		}
	}
	return hs
}

// prepareFlow fills the leader's fields of a flow submit or cancel at now:
// the first run is due at run_at, or after the delay, or (a cron flow with
// neither) at its schedule's first slot after now, as for a task.
func prepareFlow(s *FlowSubmit, now time.Time, in LeaderInputs) (p Prepared) {
	s.AtMs = now.UnixMilli()
	if due, ok := FlowDue(&s.Spec, now); ok {
		s.DueMs = CeilMs(due)
		return p
	}
	s.DueMs = s.AtMs
	sched, err := in.Schedule(s.Spec.cronSpec())
	if err != nil {
		p.ScheduleErr = err
		return p
	}
	if slot := sched.Next(now); !slot.IsZero() {
		s.DueMs = CeilMs(slot)
	}
	return p
}

// flowNextSlot is the leader's side of a cron flow's next run, for a
// Complete or Cancel of one of its stage tasks at now (fl is the flow as
// the leader read it, nil for another task): the first slot of its
// schedule after both the current run's slot and now, in case that
// command ends the run. 0 for no cron flow, or when the schedule has no
// further slot (the flow then ends with its run).
func flowNextSlot(fl *Flow, now time.Time, in LeaderInputs) (slotMs int64, p Prepared) {
	if fl == nil || fl.Spec.Cron == "" || fl.State.Terminal() || in.Schedule == nil {
		return 0, p
	}
	sched, err := in.Schedule(fl.Spec.cronSpec())
	if err != nil {
		p.ScheduleErr = err
		return 0, p
	}
	slot := sched.Next(maxTime(now, time.UnixMilli(fl.SlotMs)))
	if slot.IsZero() {
		return 0, p
	}
	return CeilMs(slot), p
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
