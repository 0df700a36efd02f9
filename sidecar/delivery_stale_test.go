package sidecar

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/axsched/ax/raftfsm"
	"github.com/axsched/ax/sidecar/nodemetrics"
)

// A node that applies a Fire naming it after the attempt's lease ended (it
// is catching up after a partition; the leader has counted the attempt as
// lost) does not deliver it.
func TestDeliverySkipsFireWithEndedLease(t *testing.T) {
	n := &Node{cfg: Config{NodeID: "n1"}, log: zerolog.Nop(),
		metrics: &nodemetrics.Metrics{StaleFires: prometheus.NewCounter(prometheus.CounterOpts{Name: "s"})}}
	d := newDelivery(n)
	task := &raftfsm.Task{ID: "t1", State: raftfsm.StateRunning, Node: "n1", Attempts: 1,
		LeaseMs: time.Now().Add(-time.Second).UnixMilli()}
	d.OnEvent(&raftfsm.Event{Type: raftfsm.CmdFire, Task: task, Prev: raftfsm.StateWaiting})
	if d.InFlight() != 0 {
		t.Fatalf("an attempt whose lease ended was started")
	}
	if v := testutil.ToFloat64(n.metrics.StaleFires); v != 1 {
		t.Fatalf("ax_stale_fires_skipped_total %v, want 1", v)
	}
}
