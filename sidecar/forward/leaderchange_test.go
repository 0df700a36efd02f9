package forward

import (
	"context"
	"testing"

	"github.com/axsched/ax/sidecar/raftstore"
)

func TestLeaderWatchEndsForwardOnChange(t *testing.T) {
	w := raftstore.NewLeaderWatch()
	before := w.Changed()
	ctx, cancel := untilLeaderChanges(context.Background(), before)
	defer cancel()
	select {
	case <-ctx.Done():
		t.Fatal("forward context ended before any leader change")
	default:
	}
	w.Notify()
	<-ctx.Done() // ends at the change (the test hangs, and times out, if not)
	if ctx.Err() != context.Canceled {
		t.Fatalf("err %v", ctx.Err())
	}
	// A channel taken after the change waits for the next one.
	after := w.Changed()
	select {
	case <-after:
		t.Fatal("a change before changed() was taken ended the new wait")
	default:
	}
	w.Notify()
	<-after
}

func TestLeaderWatchParentEnds(t *testing.T) {
	w := raftstore.NewLeaderWatch()
	parent, stop := context.WithCancel(context.Background())
	ctx, cancel := untilLeaderChanges(parent, w.Changed())
	defer cancel()
	stop()
	<-ctx.Done()
	w.Notify() // no waiter left: nothing blocks
}
