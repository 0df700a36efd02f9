package alert

import (
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/axsched/ax/clients/go/axapi"
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
