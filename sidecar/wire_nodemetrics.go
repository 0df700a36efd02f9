package sidecar

import (
	"path/filepath"

	"github.com/axsched/ax/sidecar/delivery"
	"github.com/axsched/ax/sidecar/nodemetrics"
	"github.com/axsched/ax/sidecar/raftstore"
)

// The adapters between package nodemetrics (the node's Prometheus
// registry and collectors) and the node's parts it reads at each scrape.

// metricsSources are the node's parts for the gauges; n.raft, n.store,
// n.leader and n.delivery must be set.
func metricsSources(n *Node) nodemetrics.Sources {
	return nodemetrics.Sources{Raft: n.raft, Store: metricsStore{n}, Leader: n.leader, Delivery: metricsDelivery{n.delivery.Delivery},
		Log: metricsLog{n.store}}
}

// metricsStore reads the FSM and the badger directory.
type metricsStore struct{ n *Node }

func (s metricsStore) TaskCounts() []int64  { c := s.n.fsm.Counts(); return c[:] }
func (s metricsStore) AppliedIndex() uint64 { return s.n.fsm.AppliedIndex() }
func (s metricsStore) Size() int64 {
	return raftstore.DirSize(filepath.Join(s.n.cfg.DataDir, "state"))
}

// metricsDelivery reads this node's delivery: its backlog, and the
// handlers whose own circuit is open here.
type metricsDelivery struct{ *delivery.Delivery }

func (d metricsDelivery) OpenCircuits() []string {
	cs := d.Delivery.OpenCircuits()
	hs := make([]string, len(cs))
	for i, c := range cs {
		hs[i] = c.Handler
	}
	return hs
}

// metricsLog reads the Raft log's write counts (raftstore.LogWriteStats)
// and its fsyncs that kept their P (raftstore.Store.LogSyncs).
type metricsLog struct{ st *raftstore.Store }

func (l metricsLog) Writes() uint64    { return l.st.LogStats.Writes.Load() }
func (l metricsLog) Entries() uint64   { return l.st.LogStats.Entries.Load() }
func (l metricsLog) HeldSyncs() uint64 { h, _ := l.st.LogSyncs(); return h }
func (l metricsLog) SlowSyncs() uint64 { _, s := l.st.LogSyncs(); return s }
