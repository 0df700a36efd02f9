package sidecar

import (
	"testing"
	"time"
)

// waitUntil polls cond (every 2 ms, up to 30 s: in-process clusters
// bootstrap within it) for what real goroutines, sockets and Raft do.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(30 * time.Second); !cond(); {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}
