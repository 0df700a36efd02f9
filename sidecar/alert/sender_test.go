package alert

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/axsched/ax/clients/go/axapi"
	"github.com/axsched/ax/engine"
	"github.com/axsched/ax/raftfsm"
)

// TestBackoff: 1 s after the first failure, doubling, capped at 1 min.
func TestBackoff(t *testing.T) {
	s := New(Config{URL: "unix:///x.sock"}, Deps{})
	var got []time.Duration
	var w time.Duration
	for range 9 {
		w = s.next(w)
		got = append(got, w)
	}
	want := []time.Duration{1, 2, 4, 8, 16, 32, 60, 60, 60}
	for i := range want {
		if got[i] != want[i]*time.Second {
			t.Fatalf("backoff %v, want %v s", got, want)
		}
	}
}

// goneStore has no task and no run record: the task was purged.
type goneStore struct{ Store }

func (goneStore) Task(string) (*raftfsm.Task, error)          { return nil, raftfsm.ErrNotFound }
func (goneStore) Run(string, int) (*raftfsm.RunRecord, error) { return nil, raftfsm.ErrNotFound }
func (goneStore) AlertStats() (raftfsm.AlertMeta, error)      { return raftfsm.AlertMeta{}, nil }
func (goneStore) Alerts(uint64, int) ([]raftfsm.Alert, error) { return nil, nil }

// TestBodyOfPurgedTask: an alert whose task was purged is still sent
// with its own fields, without task and run record.
func TestBodyOfPurgedTask(t *testing.T) {
	s := New(Config{URL: "unix:///x.sock"}, Deps{Store: goneStore{}, Log: zerolog.Nop(),
		TaskView: func(*raftfsm.Task) axapi.Task { t.Fatal("TaskView called"); return axapi.Task{} },
		RunView:  func(*raftfsm.Task, *raftfsm.RunRecord) axapi.Run { t.Fatal("RunView called"); return axapi.Run{} }})
	a := raftfsm.Alert{Seq: 3, TaskID: "t", Run: 2, Handler: "h", State: raftfsm.StateFailed, FinishedMs: 1_700_000_000_000, Error: "http 400"}
	b := s.body(&a)
	if b.ID != "t/2" || b.TaskID != "t" || b.Handler != "h" || b.Run != 2 || b.State != "FAILED" || b.Error != "http 400" ||
		!b.FinishedAt.Equal(time.UnixMilli(1_700_000_000_000)) || b.Task != nil || b.RunRecord != nil {
		t.Fatalf("body %+v", b)
	}
}

// fakeAlerts is a Store of pending alerts, a Proposer that deletes them
// (CmdAlertDone) and a Poster that answers by alert id.
type fakeAlerts struct {
	goneStore
	mu      sync.Mutex
	pending []raftfsm.Alert
	status  map[string]int // alert id → answer (absent: 200)
	posted  []string
}

func (f *fakeAlerts) Alerts(after uint64, limit int) ([]raftfsm.Alert, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []raftfsm.Alert
	for _, a := range f.pending {
		if a.Seq > after && len(out) < limit {
			out = append(out, a)
		}
	}
	return out, nil
}

func (f *fakeAlerts) Propose(_ context.Context, cmds []raftfsm.Command) ([]raftfsm.Result, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range cmds {
		for i, a := range f.pending {
			if c.AlertDone != nil && a.Seq == c.AlertDone.Seq {
				f.pending = append(f.pending[:i], f.pending[i+1:]...)
				break
			}
		}
	}
	return make([]raftfsm.Result, len(cmds)), nil
}

func (f *fakeAlerts) PostAlert(_ context.Context, _ string, h http.Header, _ []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	id := h.Get(axapi.HeaderAlertID)
	f.posted = append(f.posted, id)
	if st, ok := f.status[id]; ok {
		return st, nil
	}
	return 200, nil
}

// add makes alerts of run 1 of these tasks pending, with the next seqs.
func (f *fakeAlerts) add(tasks ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, id := range tasks {
		var seq uint64 = 1
		if n := len(f.pending); n > 0 {
			seq = f.pending[n-1].Seq + 1
		}
		f.pending = append(f.pending, raftfsm.Alert{Seq: seq, TaskID: id, Run: 1, Handler: "h", State: raftfsm.StateDead})
	}
}

// startFakeSender runs a sender over f on a fake clock until the test
// ends, and returns the clock.
func startFakeSender(t *testing.T, f *fakeAlerts) *engine.FakeClock {
	t.Helper()
	clock := engine.NewFakeClock(time.Unix(1_700_000_000, 0))
	s := New(Config{URL: "unix:///x.sock"}, Deps{Store: f, Proposer: f, Poster: f, Clock: clock, Log: zerolog.Nop(),
		TaskView: func(*raftfsm.Task) axapi.Task { return axapi.Task{} },
		RunView:  func(*raftfsm.Task, *raftfsm.RunRecord) axapi.Run { return axapi.Run{} }})
	s.Start(context.Background())
	t.Cleanup(s.Stop)
	return clock
}

func (f *fakeAlerts) state() (pending, posted []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, a := range f.pending {
		pending = append(pending, a.ID())
	}
	return pending, append([]string(nil), f.posted...)
}

// TestOneRefusedAlertHoldsUpNoOther: the webhook refuses the oldest alert
// for good (413); the later ones are delivered all the same, and the
// refused one stays pending and is tried again after the backoff. When
// the webhook fails two in a row with a 503 (it is down), the round stops
// there (a refusal before them, a/1's 413, is not counted).
func TestOneRefusedAlertHoldsUpNoOther(t *testing.T) {
	f := &fakeAlerts{status: map[string]int{"a/1": 413}}
	f.add("a", "b", "c")
	clock := startFakeSender(t, f)

	clock.BlockUntil(1) // the backoff after the round
	pending, posted := f.state()
	if strings.Join(pending, ",") != "a/1" || strings.Join(posted, ",") != "a/1,b/1,c/1" {
		t.Fatalf("pending %v, posted %v; want a/1 pending, posted a/1,b/1,c/1", pending, posted)
	}
	// After the backoff it is tried again (and still refused).
	clock.Advance(time.Second)
	clock.BlockUntil(1)
	if _, posted = f.state(); len(posted) != 4 || posted[3] != "a/1" {
		t.Fatalf("posted %v after the backoff, want a/1 tried a second time", posted)
	}

	// The webhook down: two failures (not refusals) end the round.
	f.mu.Lock()
	f.status["d/1"], f.status["e/1"] = 503, 503
	f.pending = append(f.pending,
		raftfsm.Alert{Seq: 4, TaskID: "d", Run: 1, Handler: "h", State: raftfsm.StateDead},
		raftfsm.Alert{Seq: 5, TaskID: "e", Run: 1, Handler: "h", State: raftfsm.StateDead},
		raftfsm.Alert{Seq: 6, TaskID: "g", Run: 1, Handler: "h", State: raftfsm.StateDead})
	f.posted = nil
	f.mu.Unlock()
	clock.Advance(time.Minute)
	clock.BlockUntil(1)
	pending, posted = f.state()
	if strings.Join(posted, ",") != "a/1,d/1,e/1" || strings.Join(pending, ",") != "a/1,d/1,e/1,g/1" {
		t.Fatalf("webhook down: posted %v, pending %v; want a/1,d/1,e/1 tried and all four pending", posted, pending)
	}
}

// TestRefusedAlertsHoldUpNoOther: the webhook refuses the two oldest
// alerts for good (a 413 and a 400); the later ones are delivered all the
// same: refusals say the webhook is up, so they do not end the round as
// a webhook that is down does. The refused ones stay pending and are tried
// again after the backoff.
func TestRefusedAlertsHoldUpNoOther(t *testing.T) {
	f := &fakeAlerts{status: map[string]int{"a/1": 413, "b/1": 400}}
	f.add("a", "b", "c", "d")
	clock := startFakeSender(t, f)

	clock.BlockUntil(1)
	pending, posted := f.state()
	if strings.Join(pending, ",") != "a/1,b/1" || strings.Join(posted, ",") != "a/1,b/1,c/1,d/1" {
		t.Fatalf("pending %v, posted %v; want a/1,b/1 pending, posted a/1,b/1,c/1,d/1", pending, posted)
	}
	clock.Advance(time.Second)
	clock.BlockUntil(1)
	if _, posted = f.state(); strings.Join(posted[4:], ",") != "a/1,b/1" {
		t.Fatalf("posted %v after the backoff, want a/1,b/1 tried again", posted)
	}
}

// TestManyRefusedAlertsHoldUpNoOther: more refused alerts than one read
// of the store (batch) still hold up none after them: a round goes on
// to the next batch.
func TestManyRefusedAlertsHoldUpNoOther(t *testing.T) {
	f := &fakeAlerts{status: map[string]int{}}
	var ids []string
	for i := range batch + 6 {
		id := fmt.Sprintf("r%03d", i)
		ids = append(ids, id)
		f.status[id+"/1"] = 413
	}
	f.add(append(ids, "ok")...)
	clock := startFakeSender(t, f)

	clock.BlockUntil(1)
	pending, posted := f.state()
	if len(pending) != batch+6 || strings.Contains(strings.Join(pending, ","), "ok/1") || len(posted) != batch+7 || posted[batch+6] != "ok/1" {
		t.Fatalf("%d pending (ok/1 among them: %v), %d posted, last %q; want %d refused pending and ok/1 delivered in the first round",
			len(pending), strings.Contains(strings.Join(pending, ","), "ok/1"), len(posted), posted[len(posted)-1], batch+6)
	}
}

// TestWrongWebhookEndsTheRound: a 404 (or 401, 403) answers every alert
// alike: it is not a refusal of one, so two of them end the round, as a
// webhook that is down does, instead of POSTing every pending alert at
// each backoff.
func TestWrongWebhookEndsTheRound(t *testing.T) {
	for _, status := range []int{404, 401, 403} {
		f := &fakeAlerts{status: map[string]int{}}
		var ids []string
		for i := range 10 {
			id := fmt.Sprintf("x%d", i)
			ids = append(ids, id)
			f.status[id+"/1"] = status
		}
		f.add(ids...)
		clock := startFakeSender(t, f)
		clock.BlockUntil(1)
		if _, posted := f.state(); len(posted) != 2 {
			t.Errorf("status %d: %d POSTs in the first round, want 2", status, len(posted))
		}
	}
	for status, want := range map[int]bool{400: true, 409: true, 413: true, 422: true, 404: false, 401: false, 403: false, 405: false, 408: false, 429: false, 500: false, 503: false} {
		if refusal(status) != want {
			t.Errorf("refusal(%d) = %v, want %v", status, !want, want)
		}
	}
}
