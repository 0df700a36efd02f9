package sidecar

import (
	"context"
	"sync"

	"github.com/hashicorp/raft"
)

// broadcast wakes every waiter at once: changed returns a channel that the
// next notify closes. The zero value is ready to use.
type broadcast struct {
	mu sync.Mutex
	ch chan struct{} // closed at the next notify; nil until asked for
}

// changed returns a channel closed at the next notify after the call. Take
// it before reading the state it guards, so a change in between is not
// missed.
func (b *broadcast) changed() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch == nil {
		b.ch = make(chan struct{})
	}
	return b.ch
}

// notify wakes every waiter.
func (b *broadcast) notify() {
	b.mu.Lock()
	if b.ch != nil {
		close(b.ch)
		b.ch = nil
	}
	b.mu.Unlock()
}

// leaderWatch tells when the Raft leader this node knows of changes, so a
// request forwarded to a leader that has since been replaced (cut off by a
// partition, or stopped) is abandoned at once and sent to the new one,
// instead of hanging until peerTimeout.
type leaderWatch struct{ broadcast }

func newLeaderWatch() *leaderWatch { return &leaderWatch{} }

// run feeds w from Raft's leader observations until ctx ends.
func (w *leaderWatch) run(ctx context.Context, r *raft.Raft) {
	obs := make(chan raft.Observation, 16)
	o := raft.NewObserver(obs, false, func(o *raft.Observation) bool {
		_, ok := o.Data.(raft.LeaderObservation)
		return ok
	})
	r.RegisterObserver(o)
	defer r.DeregisterObserver(o)
	for {
		select {
		case <-ctx.Done():
			return
		case <-obs:
			w.notify()
		}
	}
}

// untilLeaderChanges returns a context that ends with ctx or at the next
// leader change after changed was taken, and its cancel function.
func untilLeaderChanges(ctx context.Context, changed <-chan struct{}) (context.Context, context.CancelFunc) {
	fctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-changed:
			cancel()
		case <-fctx.Done():
		}
	}()
	return fctx, cancel
}
