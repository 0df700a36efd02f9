package raftfsm

import (
	"fmt"
	"reflect"
	"slices"
	"testing"
)

func TestSubmitCreatesWaitingTask(t *testing.T) {
	e := newEnv(t)
	r := e.apply1(7, submitCmd("order|42", spec("order.timeout", `{"id":42}`), 5000, 1000))
	if r.Code != CodeOK || !r.Created || r.Task == nil {
		t.Fatalf("result %+v, want created", r)
	}
	want := Task{
		ID: "order|42", Spec: spec("order.timeout", `{"id":42}`), Epoch: 7, State: StateWaiting,
		DueMs: 5000, CreatedMs: 1000, UpdatedMs: 1000,
	}
	if got := e.task("order|42"); !taskEqual(*got, want) {
		t.Fatalf("stored %+v\nwant   %+v", got, want)
	}
	if !taskEqual(*r.Task, want) {
		t.Fatalf("result task %+v\nwant        %+v", r.Task, want)
	}
	if got := e.due(); !slices.Equal(got, []dueEntry{{"order|42", 5000}}) {
		t.Fatalf("due %v", got)
	}
	if got := e.running(); len(got) != 0 {
		t.Fatalf("running %v", got)
	}
	if e.f.AppliedIndex() != 7 {
		t.Fatalf("applied %d", e.f.AppliedIndex())
	}
	e.checkIndexes()
}

func TestSubmitSameSpecIsIdempotent(t *testing.T) {
	e := newEnv(t)
	e.apply1(1, submitCmd("a", spec("h", "p"), 5000, 1000))
	before := e.dump()
	// Same spec, other due and time: the leader recomputes those; the task
	// stays as it was.
	r := e.apply1(2, submitCmd("a", spec("h", "p"), 9000, 2000))
	if r.Code != CodeOK || r.Created {
		t.Fatalf("result %+v, want existing", r)
	}
	if r.Task == nil || r.Task.Epoch != 1 || r.Task.DueMs != 5000 || r.Task.CreatedMs != 1000 {
		t.Fatalf("result task %+v, want the original", r.Task)
	}
	e.assertUnchanged(before)
	if e.f.AppliedIndex() != 2 {
		t.Fatalf("applied %d", e.f.AppliedIndex())
	}
	e.checkIndexes()
}

func TestSubmitNilAndEmptyPayloadAreTheSameSpec(t *testing.T) {
	e := newEnv(t)
	s := spec("h", "")
	s.Payload = nil
	e.apply1(1, submitCmd("a", s, 5000, 1000))
	s.Payload = []byte{}
	if r := e.apply1(2, submitCmd("a", s, 5000, 1000)); r.Code != CodeOK || r.Created {
		t.Fatalf("result %+v", r)
	}
}

func TestSubmitDifferentSpecConflicts(t *testing.T) {
	base := spec("h", "p")
	variants := map[string]func(*Spec){
		"handler":        func(s *Spec) { s.Handler = "h2" },
		"payload":        func(s *Spec) { s.Payload = []byte("q") },
		"payload_base64": func(s *Spec) { s.PayloadBase64 = true },
		"delay":          func(s *Spec) { s.DelayNs = 1 },
		"run_at":         func(s *Spec) { s.RunAtMs = 1 },
		"priority":       func(s *Spec) { s.Priority = 0 },
		"timeout":        func(s *Spec) { s.TimeoutNs = 1 },
		"max_attempts":   func(s *Spec) { s.MaxAttempts = 9 },
	}
	for name, change := range variants {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			e.apply1(1, submitCmd("a", base, 5000, 1000))
			before := e.dump()
			other := base
			other.Payload = slices.Clone(base.Payload)
			change(&other)
			r := e.apply1(2, submitCmd("a", other, 6000, 2000))
			if r.Code != CodeConflict || r.Created {
				t.Fatalf("result %+v, want conflict", r)
			}
			if r.Task == nil || !r.Task.Spec.Equal(base) || r.Task.Epoch != 1 {
				t.Fatalf("conflict result task %+v, want the stored one", r.Task)
			}
			e.assertUnchanged(before)
			e.checkIndexes()
		})
	}
}

func TestSubmitOverwriteReplaces(t *testing.T) {
	e := newEnv(t)
	e.apply1(1, submitCmd("a", spec("h", "p"), 5000, 1000))
	r := e.apply1(2, overwriteCmd("a", spec("h", "new"), 8000, 2000))
	if r.Code != CodeOK || !r.Created {
		t.Fatalf("result %+v, want created", r)
	}
	got := e.task("a")
	if got.Epoch != 2 || string(got.Spec.Payload) != "new" || got.DueMs != 8000 || got.State != StateWaiting ||
		got.CreatedMs != 2000 {
		t.Fatalf("stored %+v", got)
	}
	if d := e.due(); !slices.Equal(d, []dueEntry{{"a", 8000}}) {
		t.Fatalf("due %v, the old due key must be gone", d)
	}
	e.checkIndexes()

	// Overwrite with the same spec still replaces (new epoch).
	r = e.apply1(3, overwriteCmd("a", spec("h", "new"), 8000, 3000))
	if !r.Created || e.task("a").Epoch != 3 {
		t.Fatalf("result %+v, stored %+v", r, e.task("a"))
	}
	e.checkIndexes()
}

func TestSubmitOverwriteRunningTask(t *testing.T) {
	e := newEnv(t)
	rec := &recorder{}
	e.f.SetObserver(rec)
	e.apply1(1, submitCmd("a", spec("h", "p"), 5000, 1000))
	e.apply1(2, fireCmd("a", 1, 1, "n1", 5000, 40000))
	e.apply1(3, overwriteCmd("a", spec("h", "q"), 9000, 6000))
	got := e.task("a")
	if got.State != StateWaiting || got.Epoch != 3 || got.Attempts != 0 || got.Node != "" || got.LeaseMs != 0 {
		t.Fatalf("stored %+v", got)
	}
	e.checkIndexes()
	last := rec.calls[len(rec.calls)-1]
	if ev := last.events[0]; ev.Type != CmdSubmit || ev.Prev != StateRunning || ev.PrevNode != "n1" {
		t.Fatalf("event %+v: the node running the old task must learn of the overwrite", ev)
	}
	// Reports about the replaced task's attempt cannot touch the new one.
	before := e.dump()
	if r := e.apply1(4, completeCmd("a", 1, 1, OutcomeSuccess, "", 0, 7000)); r.Code != CodeStale {
		t.Fatalf("complete of old epoch: %+v", r)
	}
	if r := e.apply1(5, fireCmd("a", 1, 1, "n2", 9000, 49000)); r.Code != CodeStale {
		t.Fatalf("fire of old epoch: %+v", r)
	}
	e.assertUnchanged(before)
	if r := e.apply1(6, fireCmd("a", 3, 1, "n2", 9000, 49000)); r.Code != CodeOK || r.Task.State != StateRunning {
		t.Fatalf("fire of new epoch: %+v", r)
	}
	e.checkIndexes()
}

// An overwrite starts a new run number (RunNumber, sent as Ax-Run): an
// executor de-duplicating on (id, run, attempt) must not drop the new
// spec's first attempt as a repeat of the replaced task's (run 1, attempt
// 1). The spec's own run count (Run, what repeats limits) starts again at
// 1. RunBase survives a snapshot and a restart.
func TestSubmitOverwriteStartsNewRun(t *testing.T) {
	e := newEnv(t)
	type key struct{ run, attempt int }
	deliveredKey := func(id string) key {
		tk := e.task(id)
		return key{tk.RunNumber(), tk.Attempts}
	}
	// SUCCEEDED: delivered as (run 1, attempt 1).
	e.apply1(1, submitCmd("done", spec("h", "p"), 5000, 1000))
	e.apply1(2, fireCmd("done", 1, 1, "n1", 5000, 40000))
	first := deliveredKey("done")
	e.apply1(3, completeCmd("done", 1, 1, OutcomeSuccess, "", 0, 6000))
	r := e.apply1(4, overwriteCmd("done", spec("h", "v2"), 9000, 7000))
	if !r.Created || r.Task.RunNumber() != 2 || r.Task.Run != 1 {
		t.Fatalf("overwrite of a SUCCESS task: %+v", r.Task)
	}
	e.apply1(5, fireCmd("done", 4, 1, "n1", 9000, 49000))
	if got := deliveredKey("done"); got == first || got != (key{2, 1}) {
		t.Fatalf("delivery after overwrite has key %+v, the first delivery had %+v", got, first)
	}

	// RUNNING: the old attempt may still be in flight.
	e.apply1(6, submitCmd("busy", spec("h", "p"), 5000, 1000))
	e.apply1(7, fireCmd("busy", 6, 1, "n1", 5000, 40000))
	e.apply1(8, overwriteCmd("busy", spec("h", "v2"), 9000, 7000))
	e.apply1(9, fireCmd("busy", 8, 1, "n2", 9000, 49000))
	if got := deliveredKey("busy"); got != (key{2, 1}) {
		t.Fatalf("delivery after overwriting a RUNNING task: %+v, want run 2 attempt 1", got)
	}

	// Every overwrite moves on, also from a later run of a recurring task
	// and over a task that has not run yet.
	rec := Spec{Handler: "h", Priority: 2, TimeoutNs: 30e9, MaxAttempts: 3, EveryNs: 60e9, Repeats: 5}
	e.apply1(10, Command{Type: CmdSubmit, Submit: &Submit{ID: "rec", Spec: rec, DueMs: 5000, SlotMs: 5000, AtMs: 1000}})
	e.apply1(11, fireCmd("rec", 10, 1, "n1", 5000, 40000))
	c := completeCmd("rec", 10, 1, OutcomeSuccess, "", 0, 6000)
	c.Complete.NextSlotMs, c.Complete.NextDueMs = 65000, 65000
	e.apply1(12, c)
	if tk := e.task("rec"); tk.Run != 2 || tk.RunNumber() != 2 {
		t.Fatalf("recurring task after its first run: %+v", tk)
	}
	e.apply1(13, overwriteCmd("rec", spec("h", "v2"), 90000, 7000))
	e.apply1(14, overwriteCmd("rec", spec("h", "v3"), 90000, 8000))
	if tk := e.task("rec"); tk.Run != 1 || tk.RunBase != 3 || tk.RunNumber() != 4 {
		t.Fatalf("after two overwrites of run 2: %+v, want Run 1, RunBase 3 (Ax-Run 4)", tk)
	}
	e.checkIndexes()

	stream := persist(t, e.snapshot())
	e.reopen()
	if tk := e.task("rec"); tk.RunNumber() != 4 {
		t.Fatalf("after a restart: %+v", tk)
	}
	other := newEnv(t)
	if err := other.restore(stream); err != nil {
		t.Fatal(err)
	}
	if tk := other.task("rec"); tk.RunNumber() != 4 || tk.Run != 1 {
		t.Fatalf("after a restore: %+v", tk)
	}
}

func TestSubmitOverTerminalTask(t *testing.T) {
	e := newEnv(t)
	e.apply1(1, submitCmd("a", spec("h", "p"), 5000, 1000))
	e.apply1(2, fireCmd("a", 1, 1, "n1", 5000, 40000))
	e.apply1(3, completeCmd("a", 1, 1, OutcomeSuccess, "", 0, 6000))
	r := e.apply1(4, submitCmd("a", spec("h", "p"), 9000, 7000))
	if r.Code != CodeOK || r.Created || r.Task.State != StateSuccess {
		t.Fatalf("same spec over a finished task: %+v", r)
	}
	if r := e.apply1(5, submitCmd("a", spec("h", "q"), 9000, 7000)); r.Code != CodeConflict {
		t.Fatalf("other spec over a finished task: %+v", r)
	}
	e.checkIndexes()
}

func TestFire(t *testing.T) {
	e := newEnv(t)
	e.apply1(1, submitCmd("a", spec("h", "p"), 5000, 1000))
	e.apply1(2, submitCmd("b", spec("h", "p"), 6000, 1000))
	r := e.apply1(3, fireCmd("a", 1, 1, "n1", 5001, 35001))
	if r.Code != CodeOK || r.Created {
		t.Fatalf("result %+v", r)
	}
	got := e.task("a")
	want := Task{
		ID: "a", Spec: spec("h", "p"), Epoch: 1, State: StateRunning, Attempts: 1, DueMs: 5000,
		Node: "n1", FiredMs: 5001, LeaseMs: 35001, CreatedMs: 1000, UpdatedMs: 5001,
	}
	if !taskEqual(*got, want) {
		t.Fatalf("stored %+v\nwant   %+v", got, want)
	}
	if d := e.due(); !slices.Equal(d, []dueEntry{{"b", 6000}}) {
		t.Fatalf("due %v", d)
	}
	if rn := e.running(); !slices.Equal(rn, []string{"a"}) {
		t.Fatalf("running %v", rn)
	}
	e.checkIndexes()
}

func TestFireStale(t *testing.T) {
	e := newEnv(t)
	e.apply1(1, submitCmd("w", spec("h", "p"), 5000, 1000))
	e.apply1(2, submitCmd("r", spec("h", "p"), 5000, 1000))
	e.apply1(3, fireCmd("r", 2, 1, "n1", 5000, 40000))
	e.apply1(4, submitCmd("done", spec("h", "p"), 5000, 1000))
	e.apply1(5, cancelCmd("done", 2000))
	cases := map[string]Command{
		"wrong epoch":             fireCmd("w", 2, 1, "n1", 5000, 40000),
		"attempt too high":        fireCmd("w", 1, 2, "n1", 5000, 40000),
		"attempt zero":            fireCmd("w", 1, 0, "n1", 5000, 40000),
		"running, same attempt":   fireCmd("r", 2, 1, "n2", 5000, 40000),
		"running, next attempt":   fireCmd("r", 2, 2, "n2", 5000, 40000),
		"terminal":                fireCmd("done", 4, 1, "n1", 5000, 40000),
		"terminal, wrong attempt": fireCmd("done", 4, 3, "n1", 5000, 40000),
	}
	idx := uint64(10)
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			before := e.dump()
			idx++
			r := e.apply1(idx, c)
			if r.Code != CodeStale || r.Task == nil || r.Task.ID != c.Fire.ID {
				t.Fatalf("result %+v, want stale with the stored task", r)
			}
			e.assertUnchanged(before)
			if e.f.AppliedIndex() != idx {
				t.Fatalf("applied %d, want %d: a stale command is still an applied entry", e.f.AppliedIndex(), idx)
			}
		})
	}
	if r := e.apply1(99, fireCmd("nope", 1, 1, "n1", 5000, 40000)); r.Code != CodeNotFound || r.Task != nil {
		t.Fatalf("unknown id: %+v", r)
	}
	e.checkIndexes()
}

func TestCompleteOutcomes(t *testing.T) {
	type want struct {
		state    State
		attempts int
		snoozes  int
		due      int64
		lastErr  string
		finished int64
		heldBy   Outcome // the outcome that handed the attempt back
	}
	cases := []struct {
		name     string
		attempt  int // attempt being completed (fired 1..attempt, failing the ones before)
		outcome  Outcome
		errMsg   string
		retryDue int64
		want     want
	}{
		{"success", 1, OutcomeSuccess, "", 0, want{StateSuccess, 1, 0, 0, "", 9000, 0}},
		{"permanent", 1, OutcomePermanent, "400 bad order", 0, want{StateFailed, 1, 0, 0, "400 bad order", 9000, 0}},
		{"retryable below max", 1, OutcomeRetryable, "500", 12000, want{StateWaiting, 1, 0, 12000, "500", 0, 0}},
		{"retryable at max", 3, OutcomeRetryable, "500", 12000, want{StateDead, 3, 0, 0, "500", 9000, 0}},
		{"timeout below max", 2, OutcomeTimeout, "deadline", 12000, want{StateWaiting, 2, 0, 12000, "deadline", 0, 0}},
		{"timeout at max", 3, OutcomeTimeout, "deadline", 12000, want{StateDead, 3, 0, 0, "deadline", 9000, 0}},
		{"busy", 1, OutcomeBusy, "", 12000, want{StateWaiting, 0, 1, 12000, "", 0, OutcomeBusy}},
		{"busy on a later attempt", 2, OutcomeBusy, "", 12000, want{StateWaiting, 1, 1, 12000, "earlier", 0, OutcomeBusy}},
		{"unavailable", 1, OutcomeUnavailable, "connect: connection refused", 12000, want{StateWaiting, 0, 0, 12000, "", 0, OutcomeUnavailable}},
		{"unavailable on a later attempt", 2, OutcomeUnavailable, "refused", 12000, want{StateWaiting, 1, 0, 12000, "earlier", 0, OutcomeUnavailable}},
		{"unavailable at max attempts", 3, OutcomeUnavailable, "refused", 12000, want{StateWaiting, 2, 0, 12000, "earlier", 0, OutcomeUnavailable}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.apply1(1, submitCmd("a", spec("h", "p"), 5000, 1000))
			idx := uint64(1)
			for a := 1; a < tc.attempt; a++ {
				idx++
				e.apply1(idx, fireCmd("a", 1, a, "n1", 5000, 40000))
				idx++
				e.apply1(idx, completeCmd("a", 1, a, OutcomeRetryable, "earlier", 6000, 5500))
			}
			idx++
			e.apply1(idx, fireCmd("a", 1, tc.attempt, "n1", 6000, 40000))
			idx++
			r := e.apply1(idx, completeCmd("a", 1, tc.attempt, tc.outcome, tc.errMsg, tc.retryDue, 9000))
			if r.Code != CodeOK {
				t.Fatalf("result %+v", r)
			}
			got := e.task("a")
			w := tc.want
			if got.State != w.state || got.Attempts != w.attempts || got.Snoozes != w.snoozes || got.DueMs != w.due ||
				got.LastError != w.lastErr || got.FinishedMs != w.finished || got.UpdatedMs != 9000 || got.LeaseMs != 0 || got.HeldBy != w.heldBy {
				t.Fatalf("stored %+v\nwant %+v", got, w)
			}
			if !taskEqual(*r.Task, *got) {
				t.Fatalf("result task %+v differs from stored %+v", r.Task, got)
			}
			e.checkIndexes()
			// The next attempt number is Attempts+1 whatever happened.
			if w.state == StateWaiting {
				before := e.dump()
				if r := e.apply1(idx+1, fireCmd("a", 1, w.attempts+2, "n2", 13000, 50000)); r.Code != CodeStale {
					t.Fatalf("fire skipping an attempt number: %+v", r)
				}
				e.assertUnchanged(before)
				r := e.apply1(idx+2, fireCmd("a", 1, w.attempts+1, "n2", 13000, 50000))
				if r.Code != CodeOK || r.Task.State != StateRunning || r.Task.Attempts != w.attempts+1 || r.Task.HeldBy != 0 {
					t.Fatalf("refire: %+v", r)
				}
				e.checkIndexes()
			}
		})
	}
}

func TestBusyReusesAttemptNumber(t *testing.T) {
	e := newEnv(t)
	e.apply1(1, submitCmd("a", spec("h", "p"), 5000, 1000))
	idx := uint64(1)
	for i := 1; i <= 5; i++ {
		idx++
		if r := e.apply1(idx, fireCmd("a", 1, 1, "n1", 5000, 40000)); r.Code != CodeOK {
			t.Fatalf("fire %d: %+v", i, r)
		}
		idx++
		e.apply1(idx, completeCmd("a", 1, 1, OutcomeBusy, "", 5000+int64(i)*100, 5050))
	}
	got := e.task("a")
	if got.Snoozes != 5 || got.Attempts != 0 || got.State != StateWaiting || got.DueMs != 5500 {
		t.Fatalf("stored %+v", got)
	}
	// Busy answers never exhaust the attempts: three failures still do.
	for a := 1; a <= 3; a++ {
		idx++
		e.apply1(idx, fireCmd("a", 1, a, "n1", 6000, 40000))
		idx++
		e.apply1(idx, completeCmd("a", 1, a, OutcomeRetryable, "500", 7000, 6500))
	}
	if got := e.task("a"); got.State != StateDead || got.Attempts != 3 || got.Snoozes != 5 {
		t.Fatalf("stored %+v", got)
	}
	e.checkIndexes()
}

func TestCompleteStale(t *testing.T) {
	e := newEnv(t)
	e.apply1(1, submitCmd("a", spec("h", "p"), 5000, 1000))
	e.apply1(2, fireCmd("a", 1, 1, "n1", 5000, 40000))
	e.apply1(3, completeCmd("a", 1, 1, OutcomeRetryable, "500", 6000, 5500))
	e.apply1(4, fireCmd("a", 1, 2, "n2", 6000, 40000))
	e.apply1(5, submitCmd("w", spec("h", "p"), 5000, 1000))
	e.apply1(6, submitCmd("d", spec("h", "p"), 5000, 1000))
	e.apply1(7, fireCmd("d", 6, 1, "n1", 5000, 40000))
	e.apply1(8, completeCmd("d", 6, 1, OutcomeSuccess, "", 0, 5500))
	cases := map[string]Command{
		"old attempt":         completeCmd("a", 1, 1, OutcomeSuccess, "", 0, 7000),
		"old attempt retried": completeCmd("a", 1, 1, OutcomeRetryable, "late", 9000, 7000),
		"future attempt":      completeCmd("a", 1, 3, OutcomeSuccess, "", 0, 7000),
		"wrong epoch":         completeCmd("a", 5, 2, OutcomeSuccess, "", 0, 7000),
		"task waiting":        completeCmd("w", 5, 0, OutcomeSuccess, "", 0, 7000),
		"task waiting busy":   completeCmd("w", 5, 0, OutcomeBusy, "", 9000, 7000),
		"duplicate report":    completeCmd("d", 6, 1, OutcomePermanent, "x", 0, 7000),
	}
	idx := uint64(10)
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			before := e.dump()
			idx++
			r := e.apply1(idx, c)
			if r.Code != CodeStale || r.Task == nil {
				t.Fatalf("result %+v, want stale", r)
			}
			e.assertUnchanged(before)
		})
	}
	if r := e.apply1(99, completeCmd("nope", 1, 1, OutcomeSuccess, "", 0, 7000)); r.Code != CodeNotFound {
		t.Fatalf("unknown id: %+v", r)
	}
	// The current attempt still completes.
	if r := e.apply1(100, completeCmd("a", 1, 2, OutcomeSuccess, "", 0, 8000)); r.Code != CodeOK || r.Task.State != StateSuccess {
		t.Fatalf("current attempt: %+v", r)
	}
	e.checkIndexes()
}

func TestCancel(t *testing.T) {
	e := newEnv(t)
	rec := &recorder{}
	e.f.SetObserver(rec)
	e.apply(1,
		submitCmd("w", spec("h", "p"), 5000, 1000),
		submitCmd("r", spec("h", "p"), 5000, 1000),
		submitCmd("s", spec("h", "p"), 5000, 1000),
		submitCmd("f", spec("h", "p"), 5000, 1000),
		submitCmd("x", spec("h", "p"), 5000, 1000),
	)
	e.apply(2, fireCmd("r", 1, 1, "n1", 5000, 40000), fireCmd("s", 1, 1, "n1", 5000, 40000),
		fireCmd("f", 1, 1, "n1", 5000, 40000))
	e.apply(3, completeCmd("s", 1, 1, OutcomeSuccess, "", 0, 5500),
		completeCmd("f", 1, 1, OutcomePermanent, "400", 0, 5500), cancelCmd("x", 4000))

	r := e.apply1(4, cancelCmd("w", 6000))
	if r.Code != CodeOK || r.Task.State != StateCancelled || r.Task.FinishedMs != 6000 || r.Task.DueMs != 0 {
		t.Fatalf("cancel waiting: %+v", r)
	}
	if ev := rec.calls[len(rec.calls)-1].events; len(ev) != 1 || ev[0].Prev != StateWaiting || ev[0].Type != CmdCancel {
		t.Fatalf("events %+v", ev)
	}
	r = e.apply1(5, cancelCmd("r", 6000))
	if r.Code != CodeOK || r.Task.State != StateCancelled || r.Task.LeaseMs != 0 {
		t.Fatalf("cancel running: %+v", r)
	}
	if ev := rec.calls[len(rec.calls)-1].events; len(ev) != 1 || ev[0].Prev != StateRunning || ev[0].PrevNode != "n1" {
		t.Fatalf("events %+v: the running node must be told", ev)
	}
	if d := e.due(); len(d) != 0 {
		t.Fatalf("due %v", d)
	}
	if rn := e.running(); len(rn) != 0 {
		t.Fatalf("running %v", rn)
	}
	e.checkIndexes()

	calls := len(rec.calls)
	for i, id := range []string{"s", "f", "x", "w"} {
		before := e.dump()
		prev := e.task(id)
		r := e.apply1(uint64(10+i), cancelCmd(id, 9000))
		if r.Code != CodeOK || r.Task == nil || !taskEqual(*r.Task, *prev) {
			t.Fatalf("cancel terminal %q: %+v", id, r)
		}
		e.assertUnchanged(before)
	}
	if len(rec.calls) != calls {
		t.Fatalf("cancelling terminal tasks produced events: %+v", rec.calls[calls:])
	}
	if r := e.apply1(20, cancelCmd("nope", 9000)); r.Code != CodeNotFound || r.Task != nil {
		t.Fatalf("cancel unknown: %+v", r)
	}
	e.checkIndexes()
}

func TestNodes(t *testing.T) {
	e := newEnv(t)
	if ns := e.nodes(); len(ns) != 0 {
		t.Fatalf("nodes %v", ns)
	}
	n1 := Node{ID: "n1", RaftAddr: "10.0.0.1:7000", PeerAddr: "10.0.0.1:7001", Executors: flagExec("order.timeout"), UpdateMs: 1}
	n2 := Node{ID: "n2", RaftAddr: "10.0.0.2:7000", PeerAddr: "10.0.0.2:7001", Executors: flagExec("*"), UpdateMs: 2}
	rs := e.apply(1, nodeCmd(n1), nodeCmd(n2))
	for _, r := range rs {
		if r.Code != CodeOK {
			t.Fatalf("result %+v", r)
		}
	}
	ns := e.nodes()
	if len(ns) != 2 || !nodeEqual(ns[0], n1) || !nodeEqual(ns[1], n2) {
		t.Fatalf("nodes %+v", ns)
	}
	// A later record replaces the node's.
	n1b := n1
	n1b.Executors, n1b.UpdateMs = nil, 3
	e.apply1(2, nodeCmd(n1b))
	ns = e.nodes()
	if len(ns) != 2 || !nodeEqual(ns[0], n1b) || !nodeEqual(ns[1], n2) {
		t.Fatalf("nodes %+v", ns)
	}
	// Node records do not show up as tasks.
	e.noTask("n1")
	e.checkIndexes()
}

func TestNodeRuns(t *testing.T) {
	n := &Node{Executors: flagExec("order.timeout", "mail.send")}
	for h, want := range map[string]bool{
		"order.timeout": true, "mail.send": true, "order": false, "order.timeout.x": false, "": false, "*": false,
	} {
		if got := n.Runs(h); got != want {
			t.Errorf("Runs(%q) = %v", h, got)
		}
	}
	all := &Node{Executors: flagExec("*")}
	if !all.Runs("anything") || !all.Runs("") {
		t.Error(`"*" must match every handler`)
	}
	if (&Node{}).Runs("h") {
		t.Error("a node without handlers runs nothing")
	}
}

func TestOpaqueIDs(t *testing.T) {
	ids := []string{"order|42", "a@b", "A/B", "a", "ab", "abc", "a/", "a|", "задача-1", "日本語", "🚀", "t/x", "d/y", "r/z",
		"a\x00b", "a b", "%2F"}
	e := newEnv(t)
	var cmds []Command
	for i, id := range ids {
		// Same due for all, so the due keys differ only in the id.
		cmds = append(cmds, submitCmd(id, spec("h", fmt.Sprint("payload-", i)), 5000, 1000))
	}
	e.apply(1, cmds...)
	for i, id := range ids {
		if got := e.task(id); got.ID != id || string(got.Spec.Payload) != fmt.Sprint("payload-", i) {
			t.Fatalf("task %q: %+v", id, got)
		}
	}
	want := make([]string, len(ids))
	copy(want, ids)
	slices.Sort(want)
	var gotIDs []string
	for _, d := range e.due() {
		if d.DueMs != 5000 {
			t.Fatalf("due entry %+v", d)
		}
		gotIDs = append(gotIDs, d.ID)
	}
	if !slices.Equal(gotIDs, want) {
		t.Fatalf("due ids %q\nwant    %q", gotIDs, want)
	}
	e.checkIndexes()

	// Moving "a" must not touch "ab" or "abc", and the other way round.
	e.apply1(2, fireCmd("a", 1, 1, "n1", 5000, 40000))
	e.apply1(3, cancelCmd("ab", 6000))
	e.apply1(4, fireCmd("abc", 1, 1, "n1", 5000, 40000))
	e.apply1(5, completeCmd("abc", 1, 1, OutcomeRetryable, "500", 7000, 6000))
	for id, st := range map[string]State{"a": StateRunning, "ab": StateCancelled, "abc": StateWaiting, "a/": StateWaiting, "a|": StateWaiting} {
		if got := e.task(id).State; got != st {
			t.Errorf("task %q state %v, want %v", id, got, st)
		}
	}
	if rn := e.running(); !slices.Equal(rn, []string{"a"}) {
		t.Fatalf("running %q", rn)
	}
	e.checkIndexes()
	e.noTask("")
	e.noTask("a\x00")
}

func TestDueOrderAndBound(t *testing.T) {
	e := newEnv(t)
	e.apply(1,
		submitCmd("late", spec("h", "p"), 1<<40, 0),
		submitCmd("c", spec("h", "p"), 3000, 0),
		submitCmd("b", spec("h", "p"), 2000, 0),
		submitCmd("a2", spec("h", "p"), 2000, 0),
		submitCmd("z", spec("h", "p"), 0, 0),
		submitCmd("y", spec("h", "p"), 255, 0),
		submitCmd("x", spec("h", "p"), 256, 0),
	)
	collect := func(until int64, max int) []dueEntry {
		var out []dueEntry
		if err := e.f.Due(until, func(id string, due int64) bool {
			out = append(out, dueEntry{id, due})
			return len(out) < max
		}); err != nil {
			t.Fatal(err)
		}
		return out
	}
	all := []dueEntry{{"z", 0}, {"y", 255}, {"x", 256}, {"a2", 2000}, {"b", 2000}, {"c", 3000}, {"late", 1 << 40}}
	if got := collect(1<<62, 100); !slices.Equal(got, all) {
		t.Fatalf("all: %v", got)
	}
	if got := collect(2000, 100); !slices.Equal(got, all[:5]) {
		t.Fatalf("until 2000: %v", got)
	}
	if got := collect(1999, 100); !slices.Equal(got, all[:3]) {
		t.Fatalf("until 1999: %v", got)
	}
	if got := collect(-1, 100); len(got) != 0 {
		t.Fatalf("until -1: %v", got)
	}
	if got := collect(1<<62, 2); !slices.Equal(got, all[:2]) {
		t.Fatalf("stop early: %v", got)
	}
	// DueBetween is (after, until]: the window the leader loads next.
	between := func(after, until int64) []dueEntry {
		var out []dueEntry
		if err := e.f.DueBetween(after, until, func(id string, due int64) bool {
			out = append(out, dueEntry{id, due})
			return true
		}); err != nil {
			t.Fatal(err)
		}
		return out
	}
	if got := between(255, 2000); !slices.Equal(got, all[2:5]) {
		t.Fatalf("(255, 2000]: %v", got)
	}
	if got := between(0, 255); !slices.Equal(got, all[1:2]) {
		t.Fatalf("(0, 255]: %v", got)
	}
	if got := between(-1, 0); !slices.Equal(got, all[:1]) {
		t.Fatalf("(-1, 0]: %v", got)
	}
	if got := between(3000, 1<<62); !slices.Equal(got, all[6:]) {
		t.Fatalf("(3000, ∞): %v", got)
	}
	if got := between(2000, 2000); len(got) != 0 {
		t.Fatalf("(2000, 2000]: %v", got)
	}
	// Running stops when fn returns false too.
	e.apply(2, fireCmd("a2", 1, 1, "n", 1, 2), fireCmd("b", 1, 1, "n", 1, 2))
	n := 0
	if err := e.f.Running(func(*Task) bool { n++; return false }); err != nil || n != 1 {
		t.Fatalf("Running stop early: n=%d err=%v", n, err)
	}
}

func TestSeveralCommandsInOneEntry(t *testing.T) {
	e := newEnv(t)
	rec := &recorder{}
	e.f.SetObserver(rec)
	n := Node{ID: "n1", Executors: flagExec("*")}
	rs := e.apply(5,
		submitCmd("a", spec("h", "p"), 5000, 1000),
		submitCmd("b", spec("h", "p"), 5000, 1000),
		submitCmd("a", spec("h", "p"), 5000, 1000),     // idempotent repeat: no event
		submitCmd("b", spec("h", "other"), 5000, 1000), // conflict: no event
		fireCmd("a", 5, 1, "n1", 5000, 40000),
		fireCmd("a", 5, 1, "n1", 5000, 40000), // stale: no event
		completeCmd("a", 5, 1, OutcomeRetryable, "500", 7000, 5500),
		fireCmd("a", 5, 2, "n1", 7000, 40000),
		completeCmd("a", 5, 2, OutcomeSuccess, "", 0, 7500),
		cancelCmd("b", 8000),
		cancelCmd("zz", 8000),
		nodeCmd(n),
	)
	type short struct {
		code    string
		created bool
		state   State
	}
	want := []short{
		{CodeOK, true, StateWaiting},
		{CodeOK, true, StateWaiting},
		{CodeOK, false, StateWaiting},
		{CodeConflict, false, StateWaiting},
		{CodeOK, false, StateRunning},
		{CodeStale, false, StateRunning},
		{CodeOK, false, StateWaiting},
		{CodeOK, false, StateRunning},
		{CodeOK, false, StateSuccess},
		{CodeOK, false, StateCancelled},
		{CodeNotFound, false, 0},
		{CodeOK, false, 0},
	}
	for i, r := range rs {
		got := short{r.Code, r.Created, 0}
		if r.Task != nil {
			got.state = r.Task.State
		}
		if got != want[i] {
			t.Errorf("result %d: %+v, want %+v", i, got, want[i])
		}
	}
	if len(rec.calls) != 1 || rec.calls[0].index != 5 {
		t.Fatalf("observer calls %+v, want one for entry 5", rec.calls)
	}
	type evShort struct {
		typ      CommandType
		id       string
		state    State
		prev     State
		prevNode string
	}
	var gotEv []evShort
	for _, ev := range rec.calls[0].events {
		s := evShort{typ: ev.Type, prev: ev.Prev}
		if ev.Prev == StateRunning {
			// PrevNode is only meaningful when an attempt was running.
			s.prevNode = ev.PrevNode
		}
		if ev.Task != nil {
			s.id, s.state = ev.Task.ID, ev.Task.State
		}
		if ev.Node != nil {
			s.id = "node:" + ev.Node.ID
		}
		gotEv = append(gotEv, s)
	}
	wantEv := []evShort{
		{CmdSubmit, "a", StateWaiting, 0, ""},
		{CmdSubmit, "b", StateWaiting, 0, ""},
		{CmdFire, "a", StateRunning, StateWaiting, ""},
		{CmdComplete, "a", StateWaiting, StateRunning, "n1"},
		{CmdFire, "a", StateRunning, StateWaiting, ""},
		{CmdComplete, "a", StateSuccess, StateRunning, "n1"},
		{CmdCancel, "b", StateCancelled, StateWaiting, ""},
		{CmdNode, "node:n1", 0, 0, ""},
	}
	if !slices.Equal(gotEv, wantEv) {
		t.Fatalf("events\n%+v\nwant\n%+v", gotEv, wantEv)
	}
	// Each event carries its own copy of the task as it was at that step.
	if ev := rec.calls[0].events[2]; ev.Task.Attempts != 1 || ev.Task.State != StateRunning {
		t.Fatalf("fire event task %+v", ev.Task)
	}
	if got := e.task("a"); got.State != StateSuccess || got.Attempts != 2 {
		t.Fatalf("a: %+v", got)
	}
	e.checkIndexes()
}

func TestObserver(t *testing.T) {
	e := newEnv(t)
	var seen []State
	obs := observerFunc(func(index uint64, events []Event) {
		// Called after the entry is in badger.
		if e.f.AppliedIndex() != index {
			t.Errorf("observer at %d sees applied %d", index, e.f.AppliedIndex())
		}
		for _, ev := range events {
			if ev.Task != nil {
				tk, err := e.f.Task(ev.Task.ID)
				if err != nil {
					t.Errorf("observer: %v", err)
					continue
				}
				seen = append(seen, tk.State)
			}
		}
	})
	e.f.SetObserver(obs)
	e.apply1(1, submitCmd("a", spec("h", "p"), 5000, 1000))
	e.apply1(2, fireCmd("a", 1, 1, "n1", 5000, 40000))
	e.apply1(3, fireCmd("a", 1, 1, "n1", 5000, 40000)) // stale: no call
	e.f.StoreConfiguration(4, raftConfiguration())     // no call
	e.f.SetObserver(nil)
	e.apply1(5, completeCmd("a", 1, 1, OutcomeSuccess, "", 0, 6000))
	if !slices.Equal(seen, []State{StateWaiting, StateRunning}) {
		t.Fatalf("seen %v", seen)
	}
	// Skipped entries are not reported either.
	e.f.SetObserver(obs)
	if out := e.applyEntry(2, submitCmd("b", spec("h", "p"), 5000, 1000)); out != nil {
		t.Fatalf("replayed entry returned %v", out)
	}
	if len(seen) != 2 {
		t.Fatalf("seen %v", seen)
	}
}

type observerFunc func(uint64, []Event)

func (f observerFunc) Applied(i uint64, ev []Event) { f(i, ev) }

func TestStateAndOutcomeNames(t *testing.T) {
	names := map[State]string{StateWaiting: "WAITING", StateRunning: "RUNNING", StateSuccess: "SUCCESS", StateDead: "DEAD",
		StateFailed: "FAILED", StateCancelled: "CANCELLED", 0: "State(0)", 42: "State(42)"}
	for s, want := range names {
		if s.String() != want {
			t.Errorf("%d: %q", s, s.String())
		}
	}
	for s, want := range map[State]bool{StateWaiting: false, StateRunning: false, StateSuccess: true, StateDead: true,
		StateFailed: true, StateCancelled: true} {
		if s.Terminal() != want {
			t.Errorf("%v.Terminal() = %v", s, !want)
		}
	}
	outs := map[Outcome]string{OutcomeSuccess: "success", OutcomeRetryable: "retryable", OutcomePermanent: "permanent",
		OutcomeTimeout: "timeout", OutcomeBusy: "busy", OutcomeLost: "lost", OutcomeUnavailable: "unavailable", 0: "Outcome(0)", 9: "Outcome(9)"}
	for o, want := range outs {
		if o.String() != want {
			t.Errorf("%d: %q", o, o.String())
		}
	}
}

func taskEqual(a, b Task) bool {
	return a.ID == b.ID && a.Spec.Equal(b.Spec) && a.Epoch == b.Epoch && a.State == b.State && a.Attempts == b.Attempts &&
		a.Snoozes == b.Snoozes && a.DueMs == b.DueMs && a.Node == b.Node && a.FiredMs == b.FiredMs &&
		a.LeaseMs == b.LeaseMs && a.LastError == b.LastError && a.CreatedMs == b.CreatedMs &&
		a.UpdatedMs == b.UpdatedMs && a.FinishedMs == b.FinishedMs
}

func nodeEqual(a, b Node) bool {
	return a.ID == b.ID && a.RaftAddr == b.RaftAddr && a.PeerAddr == b.PeerAddr && reflect.DeepEqual(a.Executors, b.Executors) &&
		a.UpdateMs == b.UpdateMs
}

// flagExec returns the executors of a node started with --executor flags
// for the handler patterns hs.
func flagExec(hs ...string) []Executor {
	if len(hs) == 0 {
		return nil
	}
	return []Executor{{Name: "flag", Handlers: hs, URL: "unix:///x.sock", FromFlag: true}}
}
