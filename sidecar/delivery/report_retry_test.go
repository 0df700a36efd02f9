package delivery

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/axsched/ax/engine"
	"github.com/axsched/ax/raftfsm"
)

// failingProposer fails its first n proposals (no leader), then commits.
type failingProposer struct {
	n     int32
	calls atomic.Int32
}

func (p *failingProposer) Propose(context.Context, []raftfsm.Command) ([]raftfsm.Result, error) {
	if p.calls.Add(1) <= p.n {
		return nil, errors.New("no leader")
	}
	return []raftfsm.Result{{}}, nil
}

// An outcome report that finds no leader is tried again after a pause on
// Deps.RetryClock, not on Deps.Clock: with a fake Clock that stands still
// (sidecartest) and the real clock for retries, the report still commits
// once a leader takes it.
func TestReportRetriesOnTheRetryClock(t *testing.T) {
	p := &failingProposer{n: 2}
	fake := engine.NewFakeClock(time.Now())
	d := New(Deps{Config: Config{NodeID: "n1"}, Proposer: p, Clock: fake, RetryClock: engine.RealClock(), Log: zerolog.Nop(), Metrics: testMetrics()})
	done := make(chan struct{})
	go func() {
		defer close(done)
		d.report(&raftfsm.Complete{ID: "t", Attempt: 1}, &raftfsm.Task{ID: "t"})
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("the report did not commit with the fake clock standing still (%d proposals)", p.calls.Load())
	}
	if got := p.calls.Load(); got != 3 {
		t.Errorf("%d proposals, want 3 (two refused, then committed)", got)
	}
}
