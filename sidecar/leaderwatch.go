package sidecar

import (
	"context"
	"sync"

	"github.com/hashicorp/raft"
)

// leaderWatch tells when the Raft leader this node knows of changes, so a
// request forwarded to a leader that has since been replaced (cut off by a
// partition, or stopped) is abandoned at once and sent to the new one,
// instead of hanging until peerTimeout.
type leaderWatch struct {
	mu sync.Mutex
	ch chan struct{} // closed at the next change
}

func newLeaderWatch() *leaderWatch { return &leaderWatch{ch: make(chan struct{})} }

// changed returns a channel closed at the next leader change after the
// call. Take it before reading the leader, so a change in between is not
// missed.
func (w *leaderWatch) changed() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ch
}

// notify signals a leader change to every waiter.
func (w *leaderWatch) notify() {
	w.mu.Lock()
	close(w.ch)
	w.ch = make(chan struct{})
	w.mu.Unlock()
}

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
