package sidecar

import (
	"context"
	"errors"
	"net"
	"testing"
)

func TestLeaderWatchEndsForwardOnChange(t *testing.T) {
	w := newLeaderWatch()
	before := w.changed()
	ctx, cancel := untilLeaderChanges(context.Background(), before)
	defer cancel()
	select {
	case <-ctx.Done():
		t.Fatal("forward context ended before any leader change")
	default:
	}
	w.notify()
	<-ctx.Done() // ends at the change (the test hangs, and times out, if not)
	if ctx.Err() != context.Canceled {
		t.Fatalf("err %v", ctx.Err())
	}
	// A channel taken after the change waits for the next one.
	after := w.changed()
	select {
	case <-after:
		t.Fatal("a change before changed() was taken ended the new wait")
	default:
	}
	w.notify()
	<-after
}

func TestLeaderWatchParentEnds(t *testing.T) {
	w := newLeaderWatch()
	parent, stop := context.WithCancel(context.Background())
	ctx, cancel := untilLeaderChanges(parent, w.changed())
	defer cancel()
	stop()
	<-ctx.Done()
	w.notify() // no waiter left: nothing blocks
}

// A peer call to a node that accepts but never answers (a leader cut off
// by a partition) ends when its context does, not at peerTimeout.
func TestPeerCallEndsWithContext(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c // hold it open, say nothing
		}
	}()
	p := newPeerClient("")
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, _, err := p.do(ctx, "POST", ln.Addr().String(), peerPathPropose, "application/msgpack", []byte{0x90})
		errc <- err
	}()
	c := <-accepted
	defer c.Close()
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("peer call ended with %v, want context.Canceled", err)
	}
}
