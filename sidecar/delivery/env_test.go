package delivery

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/axsched/ax/internal/fsmtest"
	"github.com/axsched/ax/raftfsm"
)

// testFSM opens an empty FSM in a temporary directory.
func testFSM(t *testing.T) *raftfsm.FSM { return fsmtest.Open(t) }

// applyEntry applies cmds to f as the Raft entry at index.
func applyEntry(t *testing.T, f *raftfsm.FSM, index uint64, cmds ...raftfsm.Command) []raftfsm.Result {
	t.Helper()
	return fsmtest.Apply(t, f, index, cmds...)
}

// testMetrics returns unregistered collectors shaped like the node's.
func testMetrics() *Metrics {
	return &Metrics{
		Lateness:        prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "ax_lateness_seconds"}, []string{"handler"}),
		AttemptDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "ax_attempt_duration_seconds"}, []string{"handler"}),
		Attempts:        prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ax_attempts_total"}, []string{"handler", "outcome"}),
		StaleFires:      prometheus.NewCounter(prometheus.CounterOpts{Name: "ax_stale_fires_skipped_total"}),
		ExecutorLimit:   prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ax_executor_limit"}, []string{"executor"}),
		ExecutorFlight:  prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ax_executor_in_flight"}, []string{"executor"}),
		ExecutorQueue:   prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ax_executor_queue_length"}, []string{"executor"}),
	}
}

// waitUntil polls cond (every 2 ms, up to 30 s) for what real goroutines
// and sockets do.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(30 * time.Second); !cond(); {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// A node that applies a Fire naming it after the attempt's lease ended (it
// is catching up after a partition; the leader has counted the attempt as
// lost) does not deliver it.
func TestDeliverySkipsFireWithEndedLease(t *testing.T) {
	m := &Metrics{StaleFires: prometheus.NewCounter(prometheus.CounterOpts{Name: "s"})}
	d := New(Deps{Config: Config{NodeID: "n1"}, Log: zerolog.Nop(), Metrics: m})
	task := &raftfsm.Task{ID: "t1", State: raftfsm.StateRunning, Node: "n1", Attempts: 1,
		LeaseMs: time.Now().Add(-time.Second).UnixMilli()}
	d.OnEvent(&raftfsm.Event{Type: raftfsm.CmdFire, Task: task, Prev: raftfsm.StateWaiting})
	if d.InFlight() != 0 {
		t.Fatalf("an attempt whose lease ended was started")
	}
	if v := testutil.ToFloat64(m.StaleFires); v != 1 {
		t.Fatalf("ax_stale_fires_skipped_total %v, want 1", v)
	}
}
