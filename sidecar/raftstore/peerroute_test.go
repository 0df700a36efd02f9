package raftstore

import (
	"testing"

	"github.com/hashicorp/raft"
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
	if err := ValidatePeerRoutes("n1", []PeerRoute{a}); err != nil {
		t.Fatal(err)
	}
	self := a
	self.NodeID = "n1"
	for name, rs := range map[string][]PeerRoute{"self": {self}, "twice": {a, a}} {
		if err := ValidatePeerRoutes("n1", rs); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// The Raft address provider and the peer API follow the routes; this node
// keeps its own address (raft encodes it into every RPC header).
func TestPeerRoutesDial(t *testing.T) {
	routes := []PeerRoute{{NodeID: "n2", RaftAddr: "127.0.0.1:20", PeerAddr: "127.0.0.1:21"}}
	p := routeProvider{self: "n1", selfAddr: "127.0.0.1:10", routes: routes}
	if a, err := p.ServerAddr("n1"); err != nil || a != "127.0.0.1:10" {
		t.Errorf("self: %q %v", a, err)
	}
	if a, err := p.ServerAddr(raft.ServerID("n2")); err != nil || a != "127.0.0.1:20" {
		t.Errorf("routed: %q %v", a, err)
	}
	if a := RoutedPeerAddr(routes, "n2", "127.0.0.1:99"); a != "127.0.0.1:21" {
		t.Errorf("routed peer addr %q", a)
	}
	if a := RoutedPeerAddr(routes, "n3", "127.0.0.1:99"); a != "127.0.0.1:99" {
		t.Errorf("unrouted peer addr %q", a)
	}
}
