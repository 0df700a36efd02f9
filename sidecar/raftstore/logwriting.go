package raftstore

import "sync"

// LogWriting tells whether this node's Raft log is being written: from the
// start of a StoreLogs call to its return (raft makes them on its main
// goroutine, one at a time: the leader's writes of new entries, a
// follower's of replicated ones). The zero value is ready: no write.
//
// The single node's proposer holds new entries while the leader writes
// (ProposerConfig.LogWrites): hashicorp/raft's leader loop, back from a
// write, picks at random between the commit it just made and the entries
// queued meanwhile, and when it takes the entries first the commit waits
// for their write and fsync before the FSM sees it (measured: 40 % of
// commits reached the FSM more than 100 µs after their write ended, one
// write later; docs/perf/README.md, "The leader loop's coin").
type LogWriting struct {
	mu   sync.Mutex
	busy bool
	idle chan struct{} // closed when the write in progress ends; nil when none is
}

// closedChan is the channel Idle returns while no write is in progress.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// begin marks a write started.
func (w *LogWriting) begin() {
	w.mu.Lock()
	w.busy = true
	w.idle = nil // made by the first Idle that waits
	w.mu.Unlock()
}

// end marks the write ended and wakes those waiting for it.
func (w *LogWriting) end() {
	w.mu.Lock()
	w.busy = false
	if w.idle != nil {
		close(w.idle)
		w.idle = nil
	}
	w.mu.Unlock()
}

// Idle returns a channel that is closed when no write is in progress: at
// once (an already closed channel) when none is, else when the current
// one ends.
func (w *LogWriting) Idle() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.busy {
		return closedChan
	}
	if w.idle == nil {
		w.idle = make(chan struct{})
	}
	return w.idle
}
