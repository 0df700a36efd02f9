package forward

import (
	"context"
	"testing"

	"github.com/axsched/ax/sidecar/raftstore"
)

func TestLeaderWatchEndsForwardOnChange(t *testing.T) {
	w := raftstore.NewLeaderWatch()
	before := w.Changed()
	var cc changeContexts
	ctx, cancel := cc.untilLeaderChanges(context.Background(), before)
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
	var cc changeContexts
	ctx, cancel := cc.untilLeaderChanges(parent, w.Changed())
	defer cancel()
	stop()
	<-ctx.Done()
	w.Notify() // no waiter left: nothing blocks
}

// The forwards to one leader share the context of its channel; a forward
// begun after a change gets the new channel's, live until the next one.
func TestChangeContextsPerLeader(t *testing.T) {
	w := raftstore.NewLeaderWatch()
	var cc changeContexts
	first := w.Changed()
	if cc.of(first) != cc.of(first) {
		t.Fatal("two forwards to one leader got two contexts")
	}
	a, cancelA := cc.untilLeaderChanges(context.Background(), first)
	defer cancelA()
	w.Notify()
	<-a.Done()
	b, cancelB := cc.untilLeaderChanges(context.Background(), w.Changed())
	defer cancelB()
	select {
	case <-b.Done():
		t.Fatal("a forward begun after the change ended with the old leader's context")
	default:
	}
	w.Notify()
	<-b.Done()
}
