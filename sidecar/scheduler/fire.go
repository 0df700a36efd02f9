package scheduler

import (
	"context"
	"sort"
	"strings"
	"time"

	"github.com/axsched/ax/engine"
	"github.com/axsched/ax/raftfsm"
)

// fired handles one batch of expired timers. Proposing waits for a commit,
// so it runs off the timer goroutine.
func (l *Scheduler) fired(ctx context.Context, batch []engine.Expired) {
	var due, leases []string
	for _, e := range batch {
		if e.Key == windowKey {
			go l.refill()
		} else if h, ok := strings.CutPrefix(e.Key, circuitKeyPrefix); ok {
			l.wake(h) // the circuit half-opens: a probe may go
		} else if id, ok := strings.CutPrefix(e.Key, dueKeyPrefix); ok {
			due = append(due, id)
		} else if id, ok := strings.CutPrefix(e.Key, leaseKeyPrefix); ok {
			leases = append(leases, id)
		}
	}
	go l.fire(ctx, due, leases)
}

// fire reads each due task once and parks its run in its handler's queue
// (park.go), then drains the queues (dispatch): a run that cannot start
// waits there, in memory, until an event wakes its handler. Expired
// leases become Complete(LOST) commands.
func (l *Scheduler) fire(ctx context.Context, due, leases []string) {
	now := l.clock.Now()
	nowMs := now.UnixMilli()
	var ts []*raftfsm.Task
	// An event about a task between its read here and its parking would
	// be undone by parking the copy read before it: reading tells.
	gens := l.startReading(due)
	defer l.endReading(due)
	for _, id := range due {
		l.storeReads.Add(1)
		t, err := l.store.Task(id)
		if err != nil || t.State != raftfsm.StateWaiting {
			continue
		}
		if t.DueMs > nowMs+l.cfg.FireLead.Milliseconds() { // re-armed since, or the clock moved back
			if timers := l.currentTimers(); timers != nil {
				l.armDue(timers, id, t.DueMs)
			}
			continue
		}
		ts = append(ts, t)
	}
	if len(ts) > 0 {
		// Parked in due order: the queue is FIFO within a priority.
		sort.SliceStable(ts, func(i, j int) bool { return ts[i].DueMs < ts[j].DueMs })
		l.mu.Lock()
		kept := ts[:0]
		if l.timers != nil {
			for _, t := range ts {
				if r := l.reading[t.ID]; r != nil && r.gen == gens[t.ID] {
					l.enqueueLocked(t, now)
					kept = append(kept, t)
				} // else changed meanwhile: its event re-armed its timer
			}
		}
		l.mu.Unlock()
		for _, t := range kept {
			l.park(t.ID, t.Spec.Handler, t.Spec.Priority)
		}
		l.dispatch(ctx)
	}
	var cmds []raftfsm.Command
	for _, id := range leases {
		t, err := l.store.Task(id)
		if err != nil || t.State != raftfsm.StateRunning {
			continue
		}
		if t.LeaseMs > nowMs {
			l.rearm(leaseKeyPrefix+id, time.UnixMilli(t.LeaseMs))
			continue
		}
		cmds = append(cmds, raftfsm.Command{Type: raftfsm.CmdComplete, Complete: &raftfsm.Complete{
			ID: id, Epoch: t.Epoch, Attempt: t.Attempts, Outcome: raftfsm.OutcomeLost,
			Error: "lease expired: no outcome from node " + t.Node + " within timeout + grace",
		}})
	}
	for len(cmds) > 0 {
		k := min(len(cmds), max(l.cfg.MaxBatchCommands, 1))
		if _, err := l.proposer.Propose(ctx, cmds[:k]); err != nil {
			if ctx.Err() == nil {
				l.log.Warn().Err(err).Int("commands", k).Msg("proposing expired leases failed")
			}
			return
		}
		cmds = cmds[k:]
	}
}
