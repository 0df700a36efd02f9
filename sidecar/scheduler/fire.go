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

// FireAhead fires at once the WAITING runs due within horizon of now
// that are not parked yet, as a leader does just before it hands
// leadership over (a graceful stop): while the transfer runs, raft refuses
// every proposal, and the new leader fires nothing until it has loaded
// the store, so runs falling due in between would wait for both. Fired
// ahead, each run's attempt is held on its node until its due time (as
// with FireLead), and its lease counts from that time. Runs that cannot
// start now (no capacity, circuit open, handler cap) stay parked, for the
// next leader to load. It returns how many runs it read and parked, and
// returns once their Fires are committed (or failed), or ctx ends; it
// does nothing while this node does not lead or has not loaded its store.
func (l *Scheduler) FireAhead(ctx context.Context, horizon time.Duration) int {
	if !l.Leading() {
		return 0
	}
	now := l.clock.Now()
	fromMs := now.Add(l.cfg.FireLead).UnixMilli() // what the timers have fired already
	var ids []string
	err := l.store.DueBetween(fromMs, now.Add(horizon).UnixMilli(), func(id string, _ int64) bool {
		ids = append(ids, id)
		return true
	})
	if err != nil {
		l.log.Warn().Err(err).Msg("reading the runs due before the hand-over failed; the next leader fires them")
		return 0
	}
	l.mu.Lock()
	kept := ids[:0]
	for _, id := range ids {
		if _, parked := l.parkedIDs[id]; !parked {
			if _, pending := l.pending[id]; !pending {
				kept = append(kept, id)
			}
		}
	}
	l.mu.Unlock()
	return l.fireWithin(ctx, kept, nil, max(horizon, l.cfg.FireLead))
}

// fire reads each due task once and parks its run in its handler's queue
// (park.go), then drains the queues (dispatch): a run that cannot start
// waits there, in memory, until an event wakes its handler. Expired
// leases become Complete(LOST) commands.
func (l *Scheduler) fire(ctx context.Context, due, leases []string) {
	l.fireWithin(ctx, due, leases, l.cfg.FireLead)
}

// fireWithin is fire for the runs due within lead of now (FireLead, or
// FireAhead's horizon); it returns how many runs it parked. It reads and
// parks the runs MaxBatchCommands at a time (one entry of Fires) and
// drains the queues after each such chunk, so that when many runs fall
// due at once the first Fires are proposed after one chunk's reads, not
// after all of them.
func (l *Scheduler) fireWithin(ctx context.Context, due, leases []string, lead time.Duration) int {
	now := l.clock.Now()
	nowMs := now.UnixMilli()
	// An event about a task between its read here and its parking would
	// be undone by parking the copy read before it: reading tells.
	gens := l.startReading(due)
	defer l.endReading(due)
	parked := 0
	chunk := max(l.cfg.MaxBatchCommands, 1)
	for lo := 0; lo < len(due); lo += chunk {
		parked += l.parkDue(ctx, due[lo:min(lo+chunk, len(due))], now, lead, gens)
	}
	var cmds []raftfsm.Command
	for _, id := range leases {
		t, err := l.store.Task(id)
		if err != nil || t.State != raftfsm.StateRunning || t.AwaitingShards() {
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
			return parked
		}
		cmds = cmds[k:]
	}
	return parked
}

// Task copies (Scheduler.copies): the fire path needs each due task as the
// store holds it. The leader sees every change of a task as an FSM event,
// in log order, so for the tasks due within taskCopyHorizon of the event
// it keeps the event's task (payload dropped, like a parked run) and the
// fire takes that copy instead of a store read (a badger read and a
// decode, about a tenth of a node's CPU per task processed). A copy is as
// fresh as the events the scheduler has handled: an event handled while
// the fire reads is counted by startReading like one during a store read
// (the run is not parked from the older copy), one handled after the run
// was parked takes the parked copy out of its queue (OnEvent), a pause
// applied before the drain is waited for (Pauses.await, in dispatch), and
// the FSM checks state, epoch and attempt of every Fire. At most taskCopiesMax
// copies are kept (beyond, the fire reads the store as before).
const (
	taskCopyHorizon = time.Minute
	taskCopiesMax   = 1 << 16
)

// keepCopyLocked keeps t (the task an event left) for the fire path when
// it is WAITING and due within taskCopyHorizon, and drops any older copy
// otherwise; l.mu is held.
func (l *Scheduler) keepCopyLocked(t *raftfsm.Task) {
	_, had := l.copies[t.ID]
	if t.State != raftfsm.StateWaiting || t.DueMs > l.clock.Now().Add(taskCopyHorizon).UnixMilli() || (!had && len(l.copies) >= taskCopiesMax) {
		delete(l.copies, t.ID)
		return
	}
	c := *t
	c.Spec.Payload, c.LastError = nil, ""
	l.copies[t.ID] = &c
}

// parkDue reads the tasks of due (their copies when kept, else from the
// store; marked by startReading, with their event counts in gens), parks the runs still WAITING and due within lead of
// now, in due order, and drains the queues when it parked any (returning
// once their Fires are applied, or failed). It returns how many it parked.
func (l *Scheduler) parkDue(ctx context.Context, due []string, now time.Time, lead time.Duration, gens map[string]int) int {
	nowMs := now.UnixMilli()
	var ts []*raftfsm.Task
	copies := make([]*raftfsm.Task, len(due))
	l.mu.Lock()
	for i, id := range due {
		copies[i] = l.copies[id]
	}
	l.mu.Unlock()
	for i, id := range due {
		l.storeReads.Add(1)
		t := copies[i]
		if t != nil {
			l.copyReads.Add(1)
		} else {
			var err error
			if t, err = l.store.Task(id); err != nil {
				continue
			}
		}
		if t.State != raftfsm.StateWaiting {
			continue
		}
		if t.DueMs > nowMs+lead.Milliseconds() { // re-armed since, or the clock moved back
			if timers := l.currentTimers(); timers != nil {
				l.armDue(timers, id, t.DueMs)
			}
			continue
		}
		ts = append(ts, t)
	}
	if len(ts) == 0 {
		return 0
	}
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
	return len(kept)
}
