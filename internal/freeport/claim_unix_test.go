//go:build unix

package freeport

import (
	"os"
	"syscall"
	"testing"
)

// lockOther takes port p's claim through a descriptor of its own, as
// another process would; nil when it is held already.
func lockOther(t *testing.T, p int) *os.File {
	t.Helper()
	f, err := lockClaim(p)
	switch {
	case err == syscall.EWOULDBLOCK:
		return nil
	case err != nil:
		t.Skipf("no claim file: %v", err)
	}
	return f
}

// A port handed out stays claimed: another process cannot take it.
func TestPortsClaimsAcrossProcesses(t *testing.T) {
	ps, err := Ports(1)
	if err != nil {
		t.Fatal(err)
	}
	if f := lockOther(t, ps[0]); f != nil {
		f.Close()
		t.Fatalf("port %d handed out, yet another process could claim it", ps[0])
	}
}

// A port another process has claimed is skipped, even though it is not
// bound (the window between its pick and its bind).
func TestPortsSkipsAPortClaimedElsewhere(t *testing.T) {
	mu.Lock()
	if next == 0 {
		mu.Unlock()
		if _, err := Ports(1); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
	}
	p := next
	mu.Unlock()
	f := lockOther(t, p)
	if f == nil {
		t.Skipf("port %d claimed already", p)
	}
	defer f.Close()
	got, err := Ports(1)
	if err != nil {
		t.Fatal(err)
	}
	if got[0] == p {
		t.Fatalf("Ports returned %d, which another process claimed", p)
	}
}
