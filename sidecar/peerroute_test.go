package sidecar

import (
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/axsched/ax/raftfsm"
)

func TestParsePeerRoute(t *testing.T) {
	r, err := ParsePeerRoute("n2=127.0.0.1:7001, 127.0.0.1:7002")
	if err != nil || r != (PeerRoute{NodeID: "n2", RaftAddr: "127.0.0.1:7001", PeerAddr: "127.0.0.1:7002"}) {
		t.Fatalf("got %+v, %v", r, err)
	}
	for _, bad := range []string{"", "n2", "n2=127.0.0.1:7001", "=127.0.0.1:1,127.0.0.1:2", "n2=127.0.0.1:0,127.0.0.1:2", "n2=host,127.0.0.1:2"} {
		if _, err := ParsePeerRoute(bad); err == nil {
			t.Errorf("ParsePeerRoute(%q) accepted", bad)
		}
	}
}

func TestValidatePeerRoutes(t *testing.T) {
	a := PeerRoute{NodeID: "n2", RaftAddr: "127.0.0.1:1", PeerAddr: "127.0.0.1:2"}
	if err := validatePeerRoutes("n1", []PeerRoute{a}); err != nil {
		t.Fatal(err)
	}
	self := a
	self.NodeID = "n1"
	for name, rs := range map[string][]PeerRoute{"self": {self}, "twice": {a, a}} {
		if err := validatePeerRoutes("n1", rs); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// The Raft address provider and the peer API follow the routes; this node
// keeps its own address (raft encodes it into every RPC header).
func TestPeerRoutesDial(t *testing.T) {
	n := &Node{cfg: Config{NodeID: "n1", RaftAddr: "127.0.0.1:10", PeerAddr: "127.0.0.1:11",
		PeerRoutes: []PeerRoute{{NodeID: "n2", RaftAddr: "127.0.0.1:20", PeerAddr: "127.0.0.1:21"}}}}
	p := routeProvider{n}
	if a, err := p.ServerAddr("n1"); err != nil || a != "127.0.0.1:10" {
		t.Errorf("self: %q %v", a, err)
	}
	if a, err := p.ServerAddr(raft.ServerID("n2")); err != nil || a != "127.0.0.1:20" {
		t.Errorf("routed: %q %v", a, err)
	}
	if a := n.routedPeerAddr("n2", "127.0.0.1:99"); a != "127.0.0.1:21" {
		t.Errorf("routed peer addr %q", a)
	}
	if a := n.routedPeerAddr("n3", "127.0.0.1:99"); a != "127.0.0.1:99" {
		t.Errorf("unrouted peer addr %q", a)
	}
}

// A node that applies a Fire naming it after the attempt's lease ended (it
// is catching up after a partition; the leader has counted the attempt as
// lost) does not deliver it.
func TestDeliverySkipsFireWithEndedLease(t *testing.T) {
	n := &Node{cfg: Config{NodeID: "n1"}, log: zerolog.Nop(),
		metrics: &metrics{staleFires: prometheus.NewCounter(prometheus.CounterOpts{Name: "s"})}}
	d := newDelivery(n)
	task := &raftfsm.Task{ID: "t1", State: raftfsm.StateRunning, Node: "n1", Attempts: 1,
		LeaseMs: time.Now().Add(-time.Second).UnixMilli()}
	d.onEvent(&raftfsm.Event{Type: raftfsm.CmdFire, Task: task, Prev: raftfsm.StateWaiting})
	if d.inFlight() != 0 {
		t.Fatalf("an attempt whose lease ended was started")
	}
	if v := testutil.ToFloat64(n.metrics.staleFires); v != 1 {
		t.Fatalf("ax_stale_fires_skipped_total %v, want 1", v)
	}
}
