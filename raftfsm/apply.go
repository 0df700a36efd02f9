package raftfsm

import "fmt"

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
		n := *c.Node
		if err := w.putRecord(nodeKey(n.ID), &n); err != nil {
			return Result{}, nil, err
		}
		return Result{}, []Event{{Type: CmdNode, Node: &n}}, nil
	default:
		return Result{}, nil, fmt.Errorf("command type %d: %w", c.Type, ErrUnknownCommand)
	}
}

// putTask stores t and keeps the due and running indexes in step with the
// change from prev (nil when t is new).
func putTask(w *writer, prev, t *Task) error {
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
		CreatedMs: s.AtMs, UpdatedMs: s.AtMs,
	}
	ev := Event{Type: CmdSubmit, Task: t}
	if prev != nil {
		ev.Prev, ev.PrevNode = prev.State, prev.Node
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
	if prev.State != StateRunning || prev.Epoch != c.Epoch || prev.Attempts != c.Attempt {
		return Result{Code: CodeStale, Task: prev}, nil, nil
	}
	t := *prev
	t.UpdatedMs, t.LeaseMs = c.AtMs, 0
	switch c.Outcome {
	case OutcomeSuccess:
		t.State, t.FinishedMs, t.LastError = StateSuccess, c.AtMs, ""
	case OutcomePermanent:
		t.State, t.FinishedMs, t.LastError = StateFailed, c.AtMs, c.Error
	case OutcomeBusy:
		// A busy answer is not a failed attempt: the same attempt number is
		// delivered again at RetryDueMs.
		t.State, t.DueMs, t.Snoozes = StateWaiting, c.RetryDueMs, t.Snoozes+1
		t.Attempts--
	case OutcomeRetryable, OutcomeTimeout:
		t.LastError = c.Error
		if t.Attempts >= t.Spec.MaxAttempts {
			t.State, t.FinishedMs = StateDead, c.AtMs
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
	return Result{Task: &t}, []Event{{Type: CmdComplete, Task: &t, Prev: prev.State, PrevNode: prev.Node}}, nil
}
