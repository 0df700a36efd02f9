package freeport

import (
	"net"
	"strconv"
	"testing"
)

func TestPortsAreDistinctBindableAndBelowEphemeral(t *testing.T) {
	top := ephemeralStart()
	seen := map[int]bool{}
	for range 3 {
		ps, err := Ports(50)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ps {
			if p < lowest || p >= top {
				t.Errorf("port %d outside %d–%d", p, lowest, top-1)
			}
			if seen[p] {
				t.Errorf("port %d handed out twice", p)
			}
			seen[p] = true
		}
	}
	a, err := Addrs(1)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", a[0])
	if err != nil {
		t.Fatalf("listen on %s: %v", a[0], err)
	}
	ln.Close()
}

func TestPortsSkipsABoundPort(t *testing.T) {
	ps, err := Ports(1)
	if err != nil {
		t.Fatal(err)
	}
	// Occupy the port the next call would try first.
	mu.Lock()
	p := next
	mu.Unlock()
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
	if err != nil {
		t.Skipf("port %d busy already: %v", p, err)
	}
	defer ln.Close()
	got, err := Ports(1)
	if err != nil {
		t.Fatal(err)
	}
	if got[0] == p || got[0] == ps[0] {
		t.Errorf("Ports returned %d; %d is bound and %d was handed out before", got[0], p, ps[0])
	}
}
