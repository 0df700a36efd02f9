package raftfsm

import (
	"fmt"
	"strconv"
	"strings"
)

// Shards (docs/DESIGN.md section 20): a task whose spec has Shards runs
// each run as N shard tasks. The run's first step is an ordinary attempt
// of the task (the parent), delivered and retried as any: in count mode
// the delivering node answers it at once with Shards.Count, in ask mode
// it asks the executor (POST axapi.ShardsPath) and reports the count it
// answered. The Complete that carries the count (Complete.ShardCount)
// leaves the parent RUNNING, with no node and no lease, and creates, in
// the same apply, its shard tasks: ShardID(parent, run, i), i in [0, N),
// each with the parent's spec but for its schedule, and the shard's
// index and total in Spec.ShardIndex and Spec.ShardTotal. Every end of a
// shard task (a Complete or Cancel that makes it terminal) is counted in
// the parent's ShardRun in the apply that ends it; when the last one
// ends, the parent's run ends: SUCCESS when all shards succeeded, DEAD
// otherwise, and the parent goes on as after any run end (its next run,
// retention, a flow stage's end).

// ShardPrefix starts the id of every shard task; task submits may not use
// it.
const ShardPrefix = "shard/"

// ShardsMax bounds the shards of one run.
const ShardsMax = 1024

// Shards is how a task's runs are split: Count shards per run, or, with
// Ask, as many as the executor answers, at most Max.
type Shards struct {
	Count int  `msgpack:"c,omitempty"`
	Ask   bool `msgpack:"a,omitempty"`
	Max   int  `msgpack:"m,omitempty"`
}

// Bound returns the number of shards a run gets when the count asked
// (the executor's answer, or Count) is n: n clamped to [1, Max] in ask
// mode, [1, ShardsMax] always.
func (s *Shards) Bound(n int) int {
	if s.Ask && s.Max > 0 {
		n = min(n, s.Max)
	}
	return max(1, min(n, ShardsMax))
}

// ShardRun is a parent task's progress through the shards of its current
// (or last) run: Total shards, how many ended SUCCESS and how many ended
// otherwise (DEAD, FAILED, CANCELLED). Ended has bit i set once shard i
// was counted, so that a shard ending again (retried by hand) is counted
// once. NextSlotMs and NextDueMs are the next run of a recurring parent,
// decided by the leader when the shards started (Complete.NextSlotMs).
type ShardRun struct {
	Total      int    `msgpack:"t"`
	Succeeded  int    `msgpack:"s,omitempty"`
	Failed     int    `msgpack:"f,omitempty"`
	Ended      []byte `msgpack:"e,omitempty"`
	NextSlotMs int64  `msgpack:"ns,omitempty"`
	NextDueMs  int64  `msgpack:"nd,omitempty"`
}

// Running returns the shards not ended yet.
func (r *ShardRun) Running() int { return r.Total - r.Succeeded - r.Failed }

// AwaitingShards reports whether t is a parent whose current run waits
// for its shard tasks: RUNNING with shards not all ended. Such a task has
// no node and no lease; no Complete or Lease applies to it.
func (t *Task) AwaitingShards() bool {
	return t.State == StateRunning && t.Shards != nil && t.Shards.Running() > 0
}

// ShardID is the task id of shard index of run run (Task.RunNumber) of
// task parent.
func ShardID(parent string, run, index int) string {
	return ShardPrefix + parent + "/" + strconv.Itoa(run) + "/" + strconv.Itoa(index)
}

// ParseShardID splits a shard task id; ok is false for any other id.
func ParseShardID(id string) (parent string, run, index int, ok bool) {
	if !strings.HasPrefix(id, ShardPrefix) {
		return "", 0, 0, false
	}
	rest := id[len(ShardPrefix):]
	i := strings.LastIndexByte(rest, '/')
	if i <= 0 {
		return "", 0, 0, false
	}
	index, err := strconv.Atoi(rest[i+1:])
	if err != nil || index < 0 || index >= ShardsMax {
		return "", 0, 0, false
	}
	rest = rest[:i]
	j := strings.LastIndexByte(rest, '/')
	if j <= 0 {
		return "", 0, 0, false
	}
	run, err = strconv.Atoi(rest[j+1:])
	if err != nil || run < 1 {
		return "", 0, 0, false
	}
	return rest[:j], run, index, true
}

// FlowOfTask returns the id of the flow whose run a Complete or Cancel of
// task id may end: the flow of a stage task, or of the stage a shard task
// belongs to (its parent's run ends with its last shard, and with it the
// stage). The leader reads that flow to prepare the command (a cron
// flow's next slot, Complete.FlowNextSlotMs). ok is false for other ids.
func FlowOfTask(id string) (flowID string, ok bool) {
	if parent, _, _, isShard := ParseShardID(id); isShard {
		id = parent
	}
	flowID, _, _, ok = ParseFlowStageID(id)
	return flowID, ok
}

// ShardRouteKey is the route key of shard index: the leader's rendezvous
// hash of it spreads a run's shards over the nodes that run the handler.
func ShardRouteKey(index int) string { return "shard/" + strconv.Itoa(index) }

// isShard reports whether t is a shard task that has just ended: the only
// tasks shardEnded looks at (a prefix compare for all others).
func isShard(t *Task) bool {
	return t != nil && t.Spec.ShardTotal > 0 && t.State.Terminal() && strings.HasPrefix(t.ID, ShardPrefix)
}

// startShards creates the shard tasks of p's current run (p just became
// AwaitingShards), WAITING, due at atMs; index is the entry's Raft index
// (their epoch).
func startShards(w *writer, index uint64, p *Task, atMs int64) ([]Event, error) {
	n := p.Shards.Total
	evs := make([]Event, 0, n)
	for i := 0; i < n; i++ {
		spec := p.Spec
		spec.Shards = nil
		spec.ShardIndex, spec.ShardTotal = i, n
		spec.Cron, spec.Timezone, spec.EveryNs, spec.Repeats, spec.UntilMs = "", "", 0, 0, 0
		spec.DelayNs, spec.RunAtMs = 0, 0
		spec.RouteKey = ShardRouteKey(i)
		id := ShardID(p.ID, p.RunNumber(), i)
		prev, err := loadTask(w, id)
		if err != nil {
			return nil, err
		}
		t := &Task{
			ID: id, Spec: spec, Epoch: index, State: StateWaiting, DueMs: atMs,
			Run: 1, CreatedMs: atMs, UpdatedMs: atMs,
		}
		ev := Event{Type: CmdSubmit, Task: t}
		if prev != nil { // not made by shards (the API reserves the prefix)
			if !prev.State.Terminal() {
				if _, err := historyCancel(w, prev, nil, &Cancel{ID: id, AtMs: atMs}); err != nil {
					return nil, err
				}
			}
			t.RunBase, t.HistFirst = prev.RunNumber(), prev.HistFirst
			ev.Prev, ev.PrevNode = prev.State, prev.Node
		}
		if err := putTask(w, prev, t); err != nil {
			return nil, err
		}
		evs = append(evs, ev)
	}
	return evs, nil
}

// shardEnded counts the end of shard task s (in the apply of the Complete
// or Cancel that ended it) in its parent's ShardRun and, when it was the
// last, ends the parent's run. A shard is counted once; a shard of an
// older run, or of a parent no longer waiting for shards, changes nothing.
// The events are the parent's, when its run ended. alert (the ending
// Complete's Alert: the leader has a dead-run webhook) makes a DEAD run
// leave a pending alert (alert.go), as a Complete that ends a run DEAD
// does.
func shardEnded(w *writer, s *Task, atMs int64, alert bool) ([]Event, error) {
	parentID, run, i, ok := ParseShardID(s.ID)
	if !ok {
		return nil, nil
	}
	prev, err := loadTask(w, parentID)
	if err != nil || prev == nil || !prev.AwaitingShards() || prev.RunNumber() != run || i >= prev.Shards.Total {
		return nil, err
	}
	if len(prev.Shards.Ended) > i/8 && prev.Shards.Ended[i/8]&(1<<(i%8)) != 0 {
		return nil, nil
	}
	p := *prev
	sr := *prev.Shards
	sr.Ended = make([]byte, (sr.Total+7)/8)
	copy(sr.Ended, prev.Shards.Ended)
	sr.Ended[i/8] |= 1 << (i % 8)
	p.Shards = &sr
	p.UpdatedMs = atMs
	if s.State == StateSuccess {
		sr.Succeeded++
	} else {
		sr.Failed++
		if p.LastError == "" {
			why := s.LastError
			if why == "" {
				why = s.State.String()
			}
			p.LastError = truncateUTF8(fmt.Sprintf("shard %d: %s", i, why), RunErrorMaxBytes)
		}
	}
	if sr.Running() > 0 {
		return nil, putTask(w, prev, &p)
	}
	// The run's last shard: the run ends.
	p.FinishedMs, p.LeaseMs, p.DueMs = atMs, 0, 0
	out := OutcomeSuccess
	if sr.Failed == 0 {
		p.State, p.LastError = StateSuccess, ""
	} else {
		p.State, out = StateDead, OutcomeRetryable
		if p.Spec.Recurring() && sr.NextSlotMs != 0 {
			p.FailedRuns++
		}
	}
	end := &Complete{ID: p.ID, Epoch: p.Epoch, Attempt: p.Attempts, Outcome: out, Error: p.LastError,
		NextSlotMs: sr.NextSlotMs, NextDueMs: sr.NextDueMs, AtMs: atMs}
	toNextRun(&p, end)
	ended, err := historyShardsEnded(w, prev, &p, atMs)
	if err != nil {
		return nil, err
	}
	ev := Event{Type: CmdComplete, Task: &p, Prev: StateRunning, Outcome: out, RunEnded: ended}
	if alert && sr.Failed > 0 {
		if err := addAlert(w, prev, end, StateDead); err != nil {
			return nil, err
		}
		ev.Alert = true
	}
	if err := putTask(w, prev, &p); err != nil {
		return nil, err
	}
	return []Event{ev}, nil
}

// cancelShards cancels the shard tasks of p's current run that have not
// ended (p waits for them, and is cancelled or replaced in this apply).
func cancelShards(w *writer, p *Task, atMs int64) ([]Event, error) {
	var evs []Event
	for i := 0; i < p.Shards.Total; i++ {
		id := ShardID(p.ID, p.RunNumber(), i)
		prev, err := loadTask(w, id)
		if err != nil {
			return nil, err
		}
		if prev == nil || prev.State.Terminal() {
			continue
		}
		c := &Cancel{ID: id, AtMs: atMs}
		t, _ := cancelTask(prev, c)
		ended, err := historyCancel(w, prev, t, c)
		if err != nil {
			return nil, err
		}
		if err := putTask(w, prev, t); err != nil {
			return nil, err
		}
		evs = append(evs, Event{Type: CmdCancel, Task: t, Prev: prev.State, PrevNode: prev.Node, RunEnded: ended})
	}
	return evs, nil
}

// cancelRunShards cancels the unfinished shards of t's current run (t was
// just cancelled, by its own Cancel or its flow's, and is stored counting
// them running) and stores t again with them counted as ended, failed (a
// cancelled shard counts as failed, as in shardEnded), so that its view
// shows no shard running. It returns t as stored and the shards' events.
func cancelRunShards(w *writer, t *Task, atMs int64) (*Task, []Event, error) {
	evs, err := cancelShards(w, t, atMs)
	if err != nil {
		return t, evs, err
	}
	p := *t
	sr := *t.Shards
	sr.Ended = make([]byte, (sr.Total+7)/8)
	for i := 0; i < sr.Total; i++ {
		sr.Ended[i/8] |= 1 << (i % 8)
	}
	sr.Failed = sr.Total - sr.Succeeded
	p.Shards = &sr
	return &p, evs, putTask(w, t, &p)
}

// historyShardsEnded closes the record of prev's run (waiting for its
// shards) as t ended it, with the shards' counts, and returns its run
// number (0 without history).
func historyShardsEnded(w *writer, prev, t *Task, atMs int64) (int, error) {
	if !runHistory(prev) {
		return 0, nil
	}
	r, key, err := loadRun(w, prev)
	if err != nil {
		return 0, err
	}
	r.State, r.FinishedMs = StateSuccess, atMs
	if t.Shards.Failed > 0 {
		r.State = StateDead
	}
	r.Shards, r.ShardsSucceeded, r.ShardsFailed = t.Shards.Total, t.Shards.Succeeded, t.Shards.Failed
	t.HistRun = r.Run
	return r.Run, w.putRecord(key, &r)
}
