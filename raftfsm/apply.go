package raftfsm

import (
	"fmt"
	"time"
)

// apply runs one command inside w. It returns an error only for a storage
// failure or an unknown command; a command that does not apply (stale
// attempt, unknown id) is a Result code, not an error.
func apply(w *writer, index uint64, c *Command) (Result, []Event, error) {
	switch c.Type {
	case CmdSubmit:
		if c.Submit == nil {
			return Result{}, nil, fmt.Errorf("submit without body: %w", ErrBadEntry)
		}
		return applySubmit(w, index, c.Submit)
	case CmdCancel:
		if c.Cancel == nil {
			return Result{}, nil, fmt.Errorf("cancel without body: %w", ErrBadEntry)
		}
		res, evs, err := applyCancel(w, c.Cancel)
		if err == nil && len(evs) == 1 {
			evs, err = taskEnded(w, index, evs, c.Cancel.AtMs, c.Cancel.FlowNextSlotMs, false)
		}
		return res, evs, err
	case CmdFire:
		if c.Fire == nil {
			return Result{}, nil, fmt.Errorf("fire without body: %w", ErrBadEntry)
		}
		return applyFire(w, c.Fire)
	case CmdComplete:
		if c.Complete == nil {
			return Result{}, nil, fmt.Errorf("complete without body: %w", ErrBadEntry)
		}
		res, evs, err := applyComplete(w, c.Complete)
		if err == nil && len(evs) == 1 {
			evs, err = taskEnded(w, index, evs, c.Complete.AtMs, c.Complete.FlowNextSlotMs, c.Complete.Alert)
		}
		return res, evs, err
	case CmdNode:
		if c.Node == nil {
			return Result{}, nil, fmt.Errorf("node without body: %w", ErrBadEntry)
		}
		return applyNode(w, c.Node)
	case CmdExecutor:
		if c.Executor == nil {
			return Result{}, nil, fmt.Errorf("executor without body: %w", ErrBadEntry)
		}
		return applyExecutor(w, c.Executor)
	case CmdRetry:
		if c.Retry == nil {
			return Result{}, nil, fmt.Errorf("retry without body: %w", ErrBadEntry)
		}
		return applyRetry(w, c.Retry)
	case CmdLease:
		if c.Lease == nil {
			return Result{}, nil, fmt.Errorf("lease without body: %w", ErrBadEntry)
		}
		return applyLease(w, c.Lease)
	case CmdPurge:
		if c.Purge == nil {
			return Result{}, nil, fmt.Errorf("purge without body: %w", ErrBadEntry)
		}
		return applyPurge(w, c.Purge)
	case CmdPause:
		if c.Pause == nil {
			return Result{}, nil, fmt.Errorf("pause without body: %w", ErrBadEntry)
		}
		return applyPause(w, c.Pause)
	case CmdFlow:
		if c.Flow == nil {
			return Result{}, nil, fmt.Errorf("flow without body: %w", ErrBadEntry)
		}
		return applyFlow(w, index, c.Flow)
	case CmdAlertDone:
		if c.AlertDone == nil {
			return Result{}, nil, fmt.Errorf("alert done without body: %w", ErrBadEntry)
		}
		return applyAlertDone(w, c.AlertDone)
	default:
		return Result{}, nil, fmt.Errorf("command type %d: %w", c.Type, ErrUnknownCommand)
	}
}

// taskEnded follows the one event of an applied Complete or Cancel:
// a sharded task's shards start (shard.go), a cancelled one's shards are
// cancelled, a shard's end is counted in its parent (whose run may end),
// and a flow stage's end moves its flow (flow_apply.go). Each check is a
// field or prefix compare for a plain task. cronNextMs is the command's
// FlowNextSlotMs: a cron flow's next slot, should the stage end its run
// (the leader sets it for a stage task's Complete or Cancel, and for a
// shard's of a sharded stage: FlowOfTask).
func taskEnded(w *writer, index uint64, evs []Event, atMs, cronNextMs int64, alert bool) ([]Event, error) {
	t := evs[0].Task
	switch {
	case t.AwaitingShards() && evs[0].Type == CmdComplete:
		more, err := startShards(w, index, t, atMs)
		return append(evs, more...), err
	case t.State == StateCancelled && evs[0].Prev == StateRunning && t.Shards != nil && t.Shards.Running() > 0:
		p, more, err := cancelRunShards(w, t, atMs)
		evs[0].Task, t = p, p
		evs = append(evs, more...)
		if err != nil {
			return evs, err
		}
	case isShard(t):
		more, err := shardEnded(w, t, atMs, alert)
		if err != nil || len(more) == 0 {
			return evs, err
		}
		evs = append(evs, more...)
		t = more[0].Task // the parent, whose run ended
	}
	if isFlowStage(t) {
		more, err := flowStageEnded(w, index, t, atMs, cronNextMs)
		return append(evs, more...), err
	}
	return evs, nil
}

// putTask stores t and keeps the due, running and finished indexes in step
// with the change from prev (nil when t is new; otherwise the record of
// t.ID as stored). It is the one writer of task records.
func putTask(w *writer, prev, t *Task) error { return putTaskKey(w, prev, t, taskKey(t.ID)) }

// putTaskKey is putTask with t's record key (taskKey(t.ID)) already made:
// a submit makes it once for the id filter's check and the write.
func putTaskKey(w *writer, prev, t *Task, key []byte) error {
	if err := indexFinished(w, prev, t); err != nil {
		return err
	}
	if prev == nil || prev.State != t.State {
		if prev != nil {
			w.count(prev.Spec.Handler, prev.State, -1)
		}
		w.count(t.Spec.Handler, t.State, 1)
	} else if prev.Spec.Handler != t.Spec.Handler { // an overwrite moved it
		w.count(prev.Spec.Handler, prev.State, -1)
		w.count(t.Spec.Handler, t.State, 1)
	}
	if prev != nil {
		switch prev.State {
		case StateWaiting:
			if t.State != StateWaiting || t.DueMs != prev.DueMs {
				if err := w.del(dueKey(prev.DueMs, prev.ID)); err != nil {
					return err
				}
			}
		case StateRunning:
			if t.State != StateRunning {
				if err := w.del(runKey(prev.ID)); err != nil {
					return err
				}
			}
		}
	}
	switch t.State {
	case StateWaiting:
		if prev == nil || prev.State != StateWaiting || prev.DueMs != t.DueMs {
			if err := w.set(dueKey(t.DueMs, t.ID), nil); err != nil {
				return err
			}
		}
	case StateRunning:
		if prev == nil || prev.State != StateRunning {
			if err := w.set(runKey(t.ID), nil); err != nil {
				return err
			}
		}
	}
	if prev == nil && w.f.ids != nil {
		// A new record (prev is always the stored one: putTask is the
		// one writer of task records): its id joins the filter before
		// the transaction takes it; a later command of the same entry or
		// batch finds the pending write by the read. An update adds
		// nothing: the filter grows with ids, not with writes.
		w.f.ids.add(key)
		if r := w.f.rebuild; r != nil {
			r.next.add(key)
		}
	}
	// The task cache keeps the record only when a command is likely to
	// read it soon (taskcache.go): not in a final state, and, when new,
	// not due later than newTaskCacheWithin after its creation.
	keep := !t.State.Terminal() &&
		(prev != nil || t.State != StateWaiting || t.DueMs-t.CreatedMs <= newTaskCacheWithin.Milliseconds())
	return w.putTaskRecord(key, t, prev == nil, keep)
}

// newTaskCacheWithin: a new task is kept in the task cache when it is due
// within this much of its creation (its Fire is likely to find it there:
// the cache holds taskCacheSize records, a few seconds of a busy node's
// writes), or is created in another state than WAITING.
const newTaskCacheWithin = 10 * time.Second

// loadTask returns the stored task id, nil when there is none.
func loadTask(w *writer, id string) (*Task, error) {
	return loadTaskKey(w, taskKey(id))
}

// loadSubmitted is loadTask for the id of a submit, usually new: an id the
// FSM's id filter does not hold is not read (idfilter.go). The other
// commands name stored tasks, for which the filter would only add its
// hashing to the read. It also returns the record's key, for the write
// (putTaskKey).
func loadSubmitted(w *writer, id string) (*Task, []byte, error) {
	key := taskKey(id)
	if ids := w.f.ids; ids != nil && !ids.mayContain(key) {
		return nil, key, nil
	}
	t, err := loadTaskKey(w, key)
	return t, key, err
}

func loadTaskKey(w *writer, key []byte) (*Task, error) {
	if b, ok := w.f.tasks.get(key); ok { // written lately: no badger read
		t := new(Task)
		if err := decodeRecord(b, t); err != nil {
			return nil, err
		}
		return t, nil
	}
	var t *Task // allocated only when the task exists: a submit's usual case is a new id
	ok, err := w.getWith(key, func(b []byte) error {
		t = new(Task)
		return decodeRecord(b, t)
	})
	if err != nil || !ok {
		return nil, err
	}
	return t, nil
}

func applySubmit(w *writer, index uint64, s *Submit) (Result, []Event, error) {
	prev, key, err := loadSubmitted(w, s.ID)
	if err != nil {
		return Result{}, nil, err
	}
	t, res := submitTask(prev, s, index)
	if t == nil {
		return res, nil, nil
	}
	ev := Event{Type: CmdSubmit, Task: t}
	var more []Event
	if prev != nil && !prev.State.Terminal() {
		// The replaced spec's run ends here: its record says so.
		if _, err := historyCancel(w, prev, nil, &Cancel{ID: s.ID, AtMs: s.AtMs}); err != nil {
			return Result{}, nil, err
		}
		if prev.AwaitingShards() { // and its shards with it
			if more, err = cancelShards(w, prev, s.AtMs); err != nil {
				return Result{}, nil, err
			}
		}
	}
	if prev != nil {
		t.HistFirst = prev.HistFirst
		ev.Prev, ev.PrevNode = prev.State, prev.Node
	}
	if err := putTaskKey(w, prev, t, key); err != nil {
		return Result{}, nil, err
	}
	return res, append([]Event{ev}, more...), nil
}

func applyCancel(w *writer, c *Cancel) (Result, []Event, error) {
	ended := 0
	res, evs, err := applyStep(w, c.ID, CmdCancel, func(prev *Task) (*Task, Result, error) {
		t, res := cancelTask(prev, c)
		if t != nil {
			var err error
			if ended, err = historyCancel(w, prev, t, c); err != nil {
				return nil, Result{}, err
			}
		}
		return t, res, nil
	})
	for i := range evs {
		evs[i].RunEnded = ended
	}
	return res, evs, err
}

func applyFire(w *writer, f *Fire) (Result, []Event, error) {
	return applyStep(w, f.ID, CmdFire, func(prev *Task) (*Task, Result, error) {
		t, res := fireTask(prev, f)
		if t != nil {
			if err := historyFire(w, prev, t, f); err != nil {
				return nil, Result{}, err
			}
		}
		return t, res, nil
	})
}

func applyComplete(w *writer, c *Complete) (Result, []Event, error) {
	ended, alerted := 0, false
	res, evs, err := applyStep(w, c.ID, CmdComplete, func(prev *Task) (*Task, Result, error) {
		t, res, err := completeTask(prev, c)
		if t != nil && err == nil {
			ended, err = historyComplete(w, prev, t, c)
		}
		// A shard's dead run leaves no alert of its own: its parent's
		// run, which it makes DEAD, leaves one (shardEnded).
		if t != nil && err == nil && c.Alert && prev.Spec.ShardTotal == 0 {
			if state, ok := runEndsFailed(prev, c); ok {
				err, alerted = addAlert(w, prev, c, state), true
			}
		}
		return t, res, err
	})
	for i := range evs {
		evs[i].Outcome = c.Outcome
		evs[i].Alert = alerted
		evs[i].RunEnded = ended
		if ended != 0 && c.reported() {
			evs[i].EndedBy = evs[i].PrevNode
		}
	}
	return res, evs, err
}

// reported reports whether c carries the delivering node's report of the
// call (proposed by that node), not a decision of the leader (a timeout,
// a lost node) or an app's reported result.
func (c *Complete) reported() bool {
	return c.Executor != "" || c.AppliedMs != 0 || c.StartedMs != 0
}

// applyNode stores a node's record as the node states it at start. The
// executors it registered through the API are kept; those from its flags
// are replaced by the ones in n.
func applyNode(w *writer, n *Node) (Result, []Event, error) {
	var prev Node
	found, err := w.get(nodeKey(n.ID), &prev)
	if err != nil {
		return Result{}, nil, err
	}
	rec := *n
	rec.Executors = nil
	for _, e := range n.Executors {
		e.FromFlag = true
		rec.Executors = append(rec.Executors, e)
	}
	if found {
		for _, e := range prev.Executors {
			if !e.FromFlag {
				rec.Executors = append(rec.Executors, e)
			}
		}
	}
	if err := w.putRecord(nodeKey(rec.ID), &rec); err != nil {
		return Result{}, nil, err
	}
	return Result{}, []Event{{Type: CmdNode, Node: &rec}}, nil
}

func applyExecutor(w *writer, c *ExecutorChange) (Result, []Event, error) {
	var n Node
	found, err := w.get(nodeKey(c.Node), &n)
	if err != nil {
		return Result{}, nil, err
	}
	if !found {
		return Result{Code: CodeNotFound}, nil, nil
	}
	kept := n.Executors[:0:0]
	removed := false
	for _, e := range n.Executors {
		if e.Name == c.Executor.Name {
			removed = true
			continue
		}
		kept = append(kept, e)
	}
	if c.Remove && !removed {
		return Result{Code: CodeNotFound}, nil, nil
	}
	if !c.Remove {
		x := c.Executor
		x.FromFlag = false
		kept = append(kept, x)
	}
	n.Executors, n.UpdateMs = kept, c.AtMs
	if err := w.putRecord(nodeKey(n.ID), &n); err != nil {
		return Result{}, nil, err
	}
	return Result{Created: !removed}, []Event{{Type: CmdExecutor, Node: &n}}, nil
}

func applyRetry(w *writer, r *Retry) (Result, []Event, error) {
	return applyStep(w, r.ID, CmdRetry, func(prev *Task) (*Task, Result, error) {
		t, res := retryTask(prev, r)
		if t != nil && isFlowStage(prev) {
			if refuse, err := flowStageTaskRetry(w, prev); err != nil || refuse {
				return nil, Result{Code: CodeFlowStage, Task: prev}, err
			}
		}
		if t != nil && isShard(prev) {
			if parent, _, _, ok := ParseShardID(prev.ID); ok {
				p, err := loadTask(w, parent)
				if err != nil || p != nil {
					return nil, Result{Code: CodeShard, Task: prev}, err
				}
			}
		}
		return t, res, nil
	})
}

func applyLease(w *writer, l *Lease) (Result, []Event, error) {
	return applyStep(w, l.ID, CmdLease, func(prev *Task) (*Task, Result, error) {
		t, res := leaseTask(prev, l)
		return t, res, nil
	})
}

// applyStep applies one lifecycle transition (lifecycle.go) to the stored
// task id: CodeNotFound when there is none; otherwise step's Result, and
// when step returns a new task, that task stored and one event of type typ.
func applyStep(w *writer, id string, typ CommandType, step func(prev *Task) (*Task, Result, error)) (Result, []Event, error) {
	prev, err := loadTask(w, id)
	if err != nil {
		return Result{}, nil, err
	}
	if prev == nil {
		return Result{Code: CodeNotFound}, nil, nil
	}
	t, res, err := step(prev)
	if err != nil || t == nil {
		return res, nil, err
	}
	if err := putTask(w, prev, t); err != nil {
		return Result{}, nil, err
	}
	return res, []Event{{Type: typ, Task: t, Prev: prev.State, PrevNode: prev.Node}}, nil
}
