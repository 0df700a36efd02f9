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
		return applyCancel(w, c.Cancel)
	case CmdFire:
		if c.Fire == nil {
			return Result{}, nil, fmt.Errorf("fire without body: %w", ErrBadEntry)
		}
		return applyFire(w, c.Fire)
	case CmdComplete:
		if c.Complete == nil {
			return Result{}, nil, fmt.Errorf("complete without body: %w", ErrBadEntry)
		}
		return applyComplete(w, c.Complete)
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
	default:
		return Result{}, nil, fmt.Errorf("command type %d: %w", c.Type, ErrUnknownCommand)
	}
}

// putTask stores t and keeps the due and running indexes in step with the
// change from prev (nil when t is new).
func putTask(w *writer, prev, t *Task) error {
	if prev == nil || prev.State != t.State {
		if prev != nil {
			w.count(prev.State, -1)
		}
		w.count(t.State, 1)
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
	return w.putRecord(taskKey(t.ID), t)
}

func loadTask(w *writer, id string) (*Task, error) {
	var t Task
	ok, err := w.get(taskKey(id), &t)
	if err != nil || !ok {
		return nil, err
	}
	return &t, nil
}

func applySubmit(w *writer, index uint64, s *Submit) (Result, []Event, error) {
	prev, err := loadTask(w, s.ID)
	if err != nil {
		return Result{}, nil, err
	}
	if prev != nil {
		if prev.Spec.Equal(s.Spec) && !s.Overwrite {
			return Result{Task: prev}, nil, nil
		}
		if !s.Overwrite {
			return Result{Code: CodeConflict, Task: prev}, nil, nil
		}
	}
	t := &Task{
		ID: s.ID, Spec: s.Spec, Epoch: index, State: StateWaiting, DueMs: s.DueMs,
		Run: 1, SlotMs: s.SlotMs, CreatedMs: s.AtMs, UpdatedMs: s.AtMs,
	}
	ev := Event{Type: CmdSubmit, Task: t}
	if prev != nil {
		ev.Prev, ev.PrevNode = prev.State, prev.Node
		// The new spec starts a new run after the replaced task's latest
		// one, even if that run was never delivered (a busy answer leaves
		// no attempt counted): an executor de-duplicating on (id, run,
		// attempt) must not take its first attempt for an old delivery.
		t.RunBase = prev.RunNumber()
	}
	if err := putTask(w, prev, t); err != nil {
		return Result{}, nil, err
	}
	return Result{Created: true, Task: t}, []Event{ev}, nil
}

func applyCancel(w *writer, c *Cancel) (Result, []Event, error) {
	prev, err := loadTask(w, c.ID)
	if err != nil {
		return Result{}, nil, err
	}
	if prev == nil {
		return Result{Code: CodeNotFound}, nil, nil
	}
	if prev.State.Terminal() {
		return Result{Task: prev}, nil, nil
	}
	t := *prev
	t.State, t.DueMs, t.LeaseMs = StateCancelled, 0, 0
	t.UpdatedMs, t.FinishedMs = c.AtMs, c.AtMs
	if err := putTask(w, prev, &t); err != nil {
		return Result{}, nil, err
	}
	return Result{Task: &t}, []Event{{Type: CmdCancel, Task: &t, Prev: prev.State, PrevNode: prev.Node}}, nil
}

func applyFire(w *writer, f *Fire) (Result, []Event, error) {
	prev, err := loadTask(w, f.ID)
	if err != nil {
		return Result{}, nil, err
	}
	if prev == nil {
		return Result{Code: CodeNotFound}, nil, nil
	}
	if prev.State != StateWaiting || prev.Epoch != f.Epoch || prev.Attempts != f.Attempt-1 {
		return Result{Code: CodeStale, Task: prev}, nil, nil
	}
	t := *prev
	t.State, t.Attempts, t.Node = StateRunning, f.Attempt, f.Node
	t.FiredMs, t.LeaseMs, t.UpdatedMs = f.AtMs, f.LeaseMs, f.AtMs
	if err := putTask(w, prev, &t); err != nil {
		return Result{}, nil, err
	}
	return Result{Task: &t}, []Event{{Type: CmdFire, Task: &t, Prev: prev.State, PrevNode: prev.Node}}, nil
}

func applyComplete(w *writer, c *Complete) (Result, []Event, error) {
	prev, err := loadTask(w, c.ID)
	if err != nil {
		return Result{}, nil, err
	}
	if prev == nil {
		return Result{Code: CodeNotFound}, nil, nil
	}
	if prev.State != StateRunning || (c.Epoch != 0 && prev.Epoch != c.Epoch) || prev.Attempts != c.Attempt {
		return Result{Code: CodeStale, Task: prev}, nil, nil
	}
	t := *prev
	t.UpdatedMs, t.LeaseMs = c.AtMs, 0
	switch c.Outcome {
	case OutcomeSuccess:
		t.State, t.FinishedMs, t.LastError = StateSuccess, c.AtMs, ""
		nextRun(&t, c)
	case OutcomePermanent:
		t.State, t.FinishedMs, t.LastError = StateFailed, c.AtMs, c.Error
	case OutcomeBusy:
		// A busy answer is not a failed attempt: the same attempt number is
		// delivered again at RetryDueMs.
		t.State, t.DueMs, t.Snoozes = StateWaiting, c.RetryDueMs, t.Snoozes+1
		t.Attempts--
	case OutcomeRetryable, OutcomeTimeout, OutcomeLost:
		t.LastError = c.Error
		if t.Attempts >= t.Spec.MaxAttempts {
			t.State, t.FinishedMs = StateDead, c.AtMs
			if t.Spec.Recurring() && c.NextSlotMs != 0 {
				t.FailedRuns++
			}
			nextRun(&t, c)
		} else {
			t.State, t.DueMs = StateWaiting, c.RetryDueMs
		}
	default:
		return Result{}, nil, fmt.Errorf("outcome %d: %w", c.Outcome, ErrBadEntry)
	}
	if t.State != StateWaiting {
		t.DueMs = 0
	}
	if err := putTask(w, prev, &t); err != nil {
		return Result{}, nil, err
	}
	return Result{Task: &t}, []Event{{Type: CmdComplete, Task: &t, Prev: prev.State, PrevNode: prev.Node, Outcome: c.Outcome}}, nil
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
	prev, err := loadTask(w, r.ID)
	if err != nil {
		return Result{}, nil, err
	}
	if prev == nil {
		return Result{Code: CodeNotFound}, nil, nil
	}
	if prev.State != StateDead && prev.State != StateFailed {
		return Result{Code: CodeState, Task: prev}, nil, nil
	}
	t := *prev
	// A re-run is a new run: (id, run, attempt) stays unique, so an
	// executor that de-duplicates on it does not drop the re-run.
	t.State, t.Attempts, t.DueMs, t.Run = StateWaiting, 0, r.AtMs, max(t.Run, 1)+1
	t.UpdatedMs, t.FinishedMs, t.LeaseMs = r.AtMs, 0, 0
	if err := putTask(w, prev, &t); err != nil {
		return Result{}, nil, err
	}
	return Result{Task: &t}, []Event{{Type: CmdRetry, Task: &t, Prev: prev.State, PrevNode: prev.Node}}, nil
}

func applyLease(w *writer, l *Lease) (Result, []Event, error) {
	prev, err := loadTask(w, l.ID)
	if err != nil {
		return Result{}, nil, err
	}
	if prev == nil {
		return Result{Code: CodeNotFound}, nil, nil
	}
	if prev.State != StateRunning || prev.Attempts != l.Attempt {
		return Result{Code: CodeStale, Task: prev}, nil, nil
	}
	t := *prev
	t.LeaseMs = max(prev.LeaseMs, l.AtMs+time.Duration(prev.Spec.TimeoutNs).Milliseconds()+l.GraceMs)
	t.UpdatedMs = l.AtMs
	if err := putTask(w, prev, &t); err != nil {
		return Result{}, nil, err
	}
	return Result{Task: &t}, []Event{{Type: CmdLease, Task: &t, Prev: prev.State, PrevNode: prev.Node}}, nil
}

// nextRun moves a recurring task whose run ended (SUCCESS or DEAD) to its
// next run when the leader gave one: WAITING, due at NextDueMs, attempts
// reset. A one-off task, or a schedule that ended (NextSlotMs 0), keeps
// its terminal state.
func nextRun(t *Task, c *Complete) {
	if !t.Spec.Recurring() || c.NextSlotMs == 0 {
		return
	}
	t.State, t.DueMs, t.SlotMs = StateWaiting, c.NextDueMs, c.NextSlotMs
	t.Run++
	t.Attempts, t.FinishedMs = 0, 0
}
