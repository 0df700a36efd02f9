package sidecar

import (
	"context"
	"sync"

	"github.com/axsched/ax/raftfsm"
	"github.com/axsched/ax/sidecar/scheduler"
)

// eventQueue takes FSM events from the apply goroutine without ever
// blocking it, and hands them to one consumer in order. It counts the
// pause events among them in pauses (scheduler.Pauses.Queued) before they
// are queued; the consumer counts them handled once it has handed them on.
type eventQueue struct {
	mu     sync.Mutex
	events []raftfsm.Event
	signal chan struct{}
	pauses *scheduler.Pauses
}

func newEventQueue(pauses *scheduler.Pauses) *eventQueue {
	return &eventQueue{signal: make(chan struct{}, 1), pauses: pauses}
}

// Applied implements raftfsm.Observer.
func (q *eventQueue) Applied(_ uint64, evs []raftfsm.Event) {
	q.pauses.Queued(evs)
	q.mu.Lock()
	q.events = append(q.events, evs...)
	q.mu.Unlock()
	select {
	case q.signal <- struct{}{}:
	default:
	}
}

// next blocks until events are queued and returns all of them, or false
// when ctx ends.
func (q *eventQueue) next(ctx context.Context) ([]raftfsm.Event, bool) {
	for {
		q.mu.Lock()
		evs := q.events
		q.events = nil
		q.mu.Unlock()
		if len(evs) > 0 {
			return evs, true
		}
		select {
		case <-ctx.Done():
			return nil, false
		case <-q.signal:
		}
	}
}
