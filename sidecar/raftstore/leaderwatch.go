package raftstore

import (
	"context"
	"sync"

	"github.com/hashicorp/raft"
)

// Broadcast wakes every waiter at once: Changed returns a channel that the
// next Notify closes. The zero value is ready to use.
type Broadcast struct {
	mu sync.Mutex
	ch chan struct{} // closed at the next notify; nil until asked for
}

// Changed returns a channel closed at the next Notify after the call. Take
// it before reading the state it guards, so a change in between is not
// missed.
func (b *Broadcast) Changed() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch == nil {
		b.ch = make(chan struct{})
	}
	return b.ch
}

// Notify wakes every waiter.
func (b *Broadcast) Notify() {
	b.mu.Lock()
	if b.ch != nil {
		close(b.ch)
		b.ch = nil
	}
	b.mu.Unlock()
}

// LeaderWatch tells when the Raft leader this node knows of changes, so a
// request forwarded to a leader that has since been replaced (cut off by a
// partition, or stopped) is abandoned at once and sent to the new one,
// instead of hanging until the peer API's timeout (sidecar/forward).
type LeaderWatch struct{ Broadcast }

// NewLeaderWatch returns a watch that Run feeds.
func NewLeaderWatch() *LeaderWatch { return &LeaderWatch{} }

// Run feeds w from Raft's leader observations until ctx ends.
func (w *LeaderWatch) Run(ctx context.Context, r *raft.Raft) { w.Observe(r)(ctx) }

// Observe registers w's observer on r at once and returns the loop that
// feeds w from it until ctx ends (and then deregisters it): a leader
// change after Observe returns is seen, whenever the loop starts.
func (w *LeaderWatch) Observe(r *raft.Raft) func(ctx context.Context) {
	obs := make(chan raft.Observation, 16)
	o := raft.NewObserver(obs, false, func(o *raft.Observation) bool {
		_, ok := o.Data.(raft.LeaderObservation)
		return ok
	})
	r.RegisterObserver(o)
	return func(ctx context.Context) {
		defer r.DeregisterObserver(o)
		for {
			select {
			case <-ctx.Done():
				return
			case <-obs:
				w.Notify()
			}
		}
	}
}
