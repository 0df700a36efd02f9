package scheduler

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/axsched/ax/engine"
	"github.com/axsched/ax/raftfsm"
)

// parkedRun is a due run that could not start, held in memory with what
// its Fire needs: the task as it was read when it became due or changed
// (payload and last error dropped). A Fire built from a stale copy is
// harmless: the FSM checks epoch and attempt.
type parkedRun struct {
	t      *raftfsm.Task
	since  time.Time // when it was parked (waiting_since)
	seq    uint64    // park order within its handler's queue (handlerQueue.seq)
	paused bool      // held aside (not in the ready queue) until resumed
}

// handlerQueue is one handler's parked runs: those that may start, in an
// engine.ReadyQueue (priority with weighted round robin and the wait
// budget, then park order, which is due order: runs are parked when their
// due timer fires, a batch sorted by due time), and the paused ones
// aside. The runs that may start share one reason: the one that held
// back the head of the queue, since every other run would meet it too.
type handlerQueue struct {
	rq     *engine.ReadyQueue
	runs   map[string]*parkedRun // queued and paused
	paused int                   // runs with paused set
	reason string                // why the queue's head waits; "" while draining
	until  time.Time             // circuit_open, executor_unavailable: when that may end
	seq    uint64                // the last parkedRun.seq given out
	// nodes: the reason is the nodes' (placeLocked's), not the leader's
	// breaker or cap: load reports and executor changes wake the queue
	// (a circuit_open so given waits for the nodes' circuits, which a
	// report can show closed or a new node can make moot).
	nodes bool
}

// pendingFire is a Fire proposed by this leader and not yet applied: it
// holds a unit of its node's capacity and of its handler's cap.
type pendingFire struct{ node, handler string }

// readMark is a task being read by fire: gen counts the events about it
// since, refs the fire calls reading it.
type readMark struct{ gen, refs int }

// startReading marks ids as being read and returns their event counts.
func (l *Scheduler) startReading(ids []string) map[string]int {
	gens := make(map[string]int, len(ids))
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, id := range ids {
		r := l.reading[id]
		if r == nil {
			r = &readMark{}
			l.reading[id] = r
		}
		r.refs++
		gens[id] = r.gen
	}
	return gens
}

// endReading ends startReading.
func (l *Scheduler) endReading(ids []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, id := range ids {
		if r := l.reading[id]; r != nil {
			if r.refs--; r.refs <= 0 {
				delete(l.reading, id)
			}
		}
	}
}

// enqueueLocked parks the due run of t (read from the store) in its
// handler's queue, replacing an older copy; l.mu is held.
func (l *Scheduler) enqueueLocked(t *raftfsm.Task, now time.Time) {
	l.dequeueLocked(t.ID)
	h := t.Spec.Handler
	q := l.queues[h]
	if q == nil {
		q = &handlerQueue{rq: engine.NewReadyQueue(l.clock, engine.ReadyOptions{Capacity: -1}), runs: map[string]*parkedRun{}}
		l.queues[h] = q
	}
	c := *t
	c.Spec.Payload, c.LastError = nil, ""
	q.seq++
	pr := &parkedRun{t: &c, since: now, seq: q.seq}
	q.runs[t.ID] = pr
	l.parkedIDs[t.ID] = h
	if err := q.rq.Push(t.ID, min(max(t.Spec.Priority, 0), engine.PriorityLowest)); err != nil {
		// Cannot happen (dequeued above, unbounded, priority clamped).
		delete(q.runs, t.ID)
		delete(l.parkedIDs, t.ID)
		return
	}
	l.dirty[h] = true
}

// dequeueLocked drops the parked run of task id, if any; l.mu is held.
func (l *Scheduler) dequeueLocked(id string) {
	h, ok := l.parkedIDs[id]
	if !ok {
		return
	}
	delete(l.parkedIDs, id)
	q := l.queues[h]
	if q == nil {
		return
	}
	if pr := q.runs[id]; pr != nil {
		delete(q.runs, id)
		if pr.paused {
			q.paused--
		} else {
			q.rq.Remove(id)
		}
	}
	if len(q.runs) == 0 {
		delete(l.queues, h)
	}
}

// wake marks handler's parked runs for another look and signals the
// dispatcher. It never blocks.
func (l *Scheduler) wake(handler string) {
	l.mu.Lock()
	_, ok := l.queues[handler]
	if ok {
		l.dirty[handler] = true
	}
	l.mu.Unlock()
	if ok { // nothing parked: nothing to drain
		l.signal()
	}
}

// wakeExecutorWaits wakes every handler whose runs wait for an executor
// (an executor registered or changed, a node reported).
func (l *Scheduler) wakeExecutorWaits(match func(handler string) bool) {
	l.mu.Lock()
	any := false
	for h, q := range l.queues {
		if (executorReason(q.reason) || q.nodes) && (match == nil || match(h)) {
			l.dirty[h] = true
			any = true
		}
	}
	l.mu.Unlock()
	if any {
		l.signal()
	}
}

func (l *Scheduler) signal() {
	select {
	case l.wakeCh <- struct{}{}:
	default:
	}
}

// dispatchLoop drains the woken handlers' queues until ctx ends (one per
// term). Wakes that arrive while a drain's Fires commit are served
// together by the next drain.
func (l *Scheduler) dispatchLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.wakeCh:
		}
		l.dispatch(ctx)
	}
}

// dispatch starts what it can of the woken handlers' parked runs, in
// queue order, and proposes their Fires; it returns once they are
// applied (or failed).
func (l *Scheduler) dispatch(ctx context.Context) {
	l.dispatches.Add(1)
	// A pause applied before this drain may not have reached the parked
	// runs, the kept copies and the pause set yet (Pauses): wait for it,
	// so that no run is fired after its pause was answered.
	if l.pauses != nil && !l.pauses.Await(ctx) && ctx.Err() == nil {
		l.log.Warn().Dur("waited", pauseAwaitLimit).Msg("pause events not handed to the scheduler in time; draining without them")
	}
	nodes := l.nodes()
	now := l.clock.Now()
	var self []ExecutorLoad
	if l.local != nil {
		self = l.local.Capacity() // once per drain, not per run
	}
	l.mu.Lock()
	l.selfLoads = self
	if l.timers == nil {
		clear(l.dirty)
		l.mu.Unlock()
		return
	}
	var cmds []raftfsm.Command
	var probes []*probe
	for h := range l.dirty {
		delete(l.dirty, h)
		cmds, probes = l.drainLocked(h, nodes, now, cmds, probes)
	}
	l.mu.Unlock()
	l.proposeFires(ctx, cmds, probes)
}

// drainLocked pops handler's parked runs while they can start and appends
// their Fires; the first that cannot start goes back to the head of the
// queue and its reason becomes the queue's. When the circuit half-opens
// and the head is a retry (its run has a failed attempt), the probe is
// the first run in queue order that may start and has no failed attempt
// yet, if there is one: a task its executor fails every time would
// otherwise probe, fail and reopen the circuit cool-down after cool-down,
// while the healthy runs parked behind it waited. l.mu is held.
func (l *Scheduler) drainLocked(h string, nodes []raftfsm.Node, now time.Time, cmds []raftfsm.Command, probes []*probe) ([]raftfsm.Command, []*probe) {
	q := l.queues[h]
	if q == nil {
		return cmds, probes
	}
	nowMs := now.UnixMilli()
	// Every run queued while the queue was blocked waited for its reason:
	// each one this drain starts carries it in its Fire (parked_reason),
	// not only the first (the queue's reason is cleared once one starts).
	heldFor := q.reason
	// The half-open circuit's probe, allowed while a retry headed the
	// queue: held for that head when no fresh run may probe instead.
	var heldProbe *engine.BreakerAttempt
	lookedFresh := false
	for {
		var (
			pr           *parkedRun
			reason, node string
			until        time.Time
			ba           *engine.BreakerAttempt
			pausedNow    bool
			wantFresh    bool
			placed       bool // reason is placeLocked's
		)
		// The head is taken only if it can start (or is paused): one that
		// cannot stays the head, and its level keeps its turn.
		_, taken, ok := q.rq.PopIf(func(it engine.ReadyItem) bool {
			if pr = q.runs[it.Key]; pr == nil {
				return true // cannot happen: dropped below
			}
			t := pr.t
			if l.paused != nil && l.paused(t) {
				pausedNow = true
				return true
			}
			if limit := l.cfg.HandlerLimits[h]; limit > 0 && l.running[h]+l.pendingBy[h] >= limit {
				reason = ReasonHandlerLimit
				return false
			}
			if heldProbe != nil {
				ba, heldProbe = heldProbe, nil
			} else {
				var err error
				if ba, err = l.breakers.AllowAttempt(h); err != nil {
					reason = ReasonCircuitOpen
					var open *engine.CircuitOpenError
					if errors.As(err, &open) {
						until = open.Until // zero while a half-open probe is out
					}
					return false
				}
				if ba.Probe() && t.Attempts > 0 && !lookedFresh {
					// A retry would probe: a fresh run does if one may
					// (below, as the queue cannot be read from here).
					wantFresh = true
					return false
				}
			}
			avoid := ""
			if t.Attempts > 0 {
				avoid = t.Node // a retry goes elsewhere when it can
			}
			if node, reason, until = l.placeLocked(nodes, h, avoid, t.Spec.RouteKey, now); node == "" {
				ba.Abandon() // no attempt: says nothing of the handler
				placed = true
				return false
			}
			return true
		})
		if !ok {
			q.reason, q.until, q.nodes = "", time.Time{}, false
			break
		}
		if wantFresh {
			lookedFresh = true
			if pr = l.freshRunLocked(q); pr == nil {
				heldProbe = ba // none: the retry at the head probes
				continue
			}
			if node, reason, until = l.placeLocked(nodes, h, "", pr.t.Spec.RouteKey, now); node == "" {
				ba.Abandon() // no attempt: says nothing of the handler
				l.blockLocked(q, h, reason, until, true)
				break
			}
			q.rq.Remove(pr.t.ID) // out of turn: its level's turn is not spent
			taken = true
		}
		if !taken {
			l.blockLocked(q, h, reason, until, placed)
			break
		}
		if pr == nil {
			continue
		}
		t := pr.t
		if pausedNow {
			pr.paused = true
			q.paused++
			continue
		}
		parked := heldFor
		if nonCompeting(q.reason) {
			// The queue waited for something other than capacity: from
			// now on its runs compete, and the wait budget counts anew.
			q.restamp()
		}
		q.reason, q.until, q.nodes = "", time.Time{}, false
		delete(q.runs, t.ID)
		delete(l.parkedIDs, t.ID)
		l.pending[t.ID] = pendingFire{node, h}
		l.pendingBy[h]++
		l.transitCount(node, h, 1)
		if node != l.cfg.NodeID {
			l.sinceCount(node, h, 1)
		}
		p := newProbe(t, ba)
		if old := l.probes[t.ID]; old != nil {
			old.attempt.Abandon()
		}
		l.probes[t.ID] = p
		probes = append(probes, p)
		// The attempt starts at the due time, or now when late; the node
		// that delivers waits for it (see fireAt).
		startMs := max(nowMs, t.DueMs)
		cmds = append(cmds, raftfsm.Command{Type: raftfsm.CmdFire, Fire: &raftfsm.Fire{
			ID: t.ID, Epoch: t.Epoch, Attempt: t.Attempts + 1, Node: node, AtMs: startMs,
			LeaseMs:     startMs + (time.Duration(t.Spec.TimeoutNs) + l.cfg.LeaseGrace).Milliseconds(),
			HistoryRuns: fireHistoryRuns(l.cfg.HistoryRuns, t.ID), ParkedReason: parked,
		}})
	}
	if heldProbe != nil {
		heldProbe.Abandon() // the queue emptied or blocked before its head took it
	}
	if len(q.runs) == 0 {
		delete(l.queues, h)
	}
	return cmds, probes
}

// freshRunLocked returns the first of q's parked runs, in queue order,
// that may start now (not paused) and has no failed attempt in its
// current run (Attempts 0), or nil if there is none. It reads the queue
// up to that run (all of it when there is none): drainLocked calls it
// only when a half-open circuit's probe would go to a retry, that is once
// per cool-down, and again at each drain while the probe cannot be
// placed (its breaker attempt is then abandoned); never with the circuit
// closed. l.mu is held.
func (l *Scheduler) freshRunLocked(q *handlerQueue) *parkedRun {
	it, ok := q.rq.Find(func(it engine.ReadyItem) bool {
		pr := q.runs[it.Key]
		return pr != nil && pr.t.Attempts == 0 && (l.paused == nil || !l.paused(pr.t))
	})
	if !ok {
		return nil
	}
	return q.runs[it.Key]
}

// blockLocked records why handler's queue waits (placed: the reason is
// placeLocked's) and arms the one wake-up a time can bring: the circuit's
// half-open instant (the leader's breaker's, or the earliest end of the
// nodes' circuits). Every other reason ends with an event (a report, a
// completion, an executor change, a resume). l.mu is held.
func (l *Scheduler) blockLocked(q *handlerQueue, h, reason string, until time.Time, placed bool) {
	q.reason, q.until, q.nodes = reason, until, placed
	if reason == ReasonCircuitOpen && !until.IsZero() && l.timers != nil {
		l.timers.Arm(circuitKeyPrefix+h, until)
	}
}

// restamp puts every queued run back with a fresh queue time, keeping
// each level's order.
func (q *handlerQueue) restamp() {
	var items []engine.ReadyItem
	for {
		it, ok := q.rq.Pop()
		if !ok {
			break
		}
		items = append(items, it)
	}
	for _, it := range items {
		_ = q.rq.Push(it.Key, it.Priority)
	}
}

// transitCount adds d to the Fires in transit to node for handler; l.mu
// is held.
func (l *Scheduler) transitCount(node, h string, d int) {
	m := l.transit[node]
	if m == nil {
		m = map[string]int{}
		l.transit[node] = m
	}
	if m[h] += d; m[h] <= 0 {
		delete(m, h)
	}
	if len(m) == 0 {
		delete(l.transit, node)
	}
	if l.transitTotal[node] += d; l.transitTotal[node] <= 0 {
		delete(l.transitTotal, node)
	}
}

// settleFire ends the pending state of task id's Fire (it applied, or it
// will not); l.mu is held. It reports the handler, "" if none was pending.
func (l *Scheduler) settleFireLocked(id string) string {
	pf, ok := l.pending[id]
	if !ok {
		return ""
	}
	delete(l.pending, id)
	if l.pendingBy[pf.handler]--; l.pendingBy[pf.handler] <= 0 {
		delete(l.pendingBy, pf.handler)
	}
	l.transitCount(pf.node, pf.handler, -1)
	return pf.handler
}

// proposeFires commits the drained runs' Fires in entries of at most
// MaxBatchCommands (a flood of runs due at one instant must not make one
// huge entry).
func (l *Scheduler) proposeFires(ctx context.Context, cmds []raftfsm.Command, probes []*probe) {
	settle := func(i int) {
		l.mu.Lock()
		h := l.settleFireLocked(cmds[i].Fire.ID)
		l.mu.Unlock()
		l.dropProbe(probes[i])
		if h != "" {
			l.wake(h) // its unit of capacity is free again
		}
	}
	batch := max(l.cfg.MaxBatchCommands, 1)
	for len(cmds) > 0 {
		k := min(len(cmds), batch)
		results, err := l.proposer.Propose(ctx, cmds[:k])
		if err != nil {
			// Leadership was lost or raft failed: the next leader re-arms
			// from the store, so nothing is lost. These Fires may or may
			// not commit, the rest will not: end their breaker attempts
			// with no outcome (an attempt that starts anyway runs
			// without one).
			if ctx.Err() == nil {
				l.log.Warn().Err(err).Int("commands", k).Msg("proposing fires failed")
			}
			for i := range cmds {
				settle(i)
			}
			return
		}
		for i, r := range results {
			if r.Code != raftfsm.CodeOK { // a stale Fire: no attempt started
				settle(i)
			}
		}
		cmds, probes = cmds[k:], probes[k:]
	}
}

// attemptRef names one attempt of a task: its epoch and number.
type attemptRef struct {
	epoch   uint64
	attempt int
}

// trackRunning keeps the per-handler count of RUNNING attempts, and the
// RUNNING attempts of one-off tasks (RunningOneOff).
func (l *Scheduler) trackRunning(t *raftfsm.Task) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if t.State == raftfsm.StateRunning && !t.Spec.Recurring() {
		l.oneOff[t.ID] = attemptRef{t.Epoch, t.Attempts}
	} else {
		delete(l.oneOff, t.ID)
	}
	h, was := l.runningIDs[t.ID]
	// A sharded task waiting for its shards holds no slot: its shards do.
	is := t.State == raftfsm.StateRunning && !t.AwaitingShards()
	switch {
	case is && !was:
		l.runningIDs[t.ID] = t.Spec.Handler
		l.running[t.Spec.Handler]++
	case !is && was:
		delete(l.runningIDs, t.ID)
		if l.running[h]--; l.running[h] <= 0 {
			delete(l.running, h)
		}
	}
}

// sinceCount adds d to the attempts of handler h that node holds beyond
// its last load report (d < 0: one ended there); l.mu is held. The
// counts may go below zero (an attempt that ended had not reached a slot
// at the report): placeLocked reads them clamped.
func (l *Scheduler) sinceCount(node, h string, d int) {
	m := l.since[node]
	if m == nil {
		m = map[string]int{}
		l.since[node] = m
	}
	m[h] += d
	l.sinceTotal[node] += d
}

// dueRun is a run in Scheduler.due.
type dueRun struct {
	handler  string
	priority int
}

func (l *Scheduler) park(id, handler string, prio int) {
	l.mu.Lock()
	if old, ok := l.due[id]; ok {
		l.dueCount(old.handler, -1)
	}
	l.due[id] = dueRun{handler, prio}
	l.dueCount(handler, 1)
	l.mu.Unlock()
}

func (l *Scheduler) unpark(id string) {
	l.mu.Lock()
	if old, ok := l.due[id]; ok {
		l.dueCount(old.handler, -1)
		delete(l.due, id)
	}
	l.mu.Unlock()
}

// dueCount keeps dueByHandler in step with due; l.mu is held.
func (l *Scheduler) dueCount(handler string, d int) {
	if l.dueByHandler[handler] += d; l.dueByHandler[handler] <= 0 {
		delete(l.dueByHandler, handler)
	}
}

// Depth returns the backlog of handler: its due runs not yet fired, plus
// the attempts waiting for an executor slot on every node (from their last
// load reports).
func (l *Scheduler) Depth(handler string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.dueByHandler[handler] // O(1): admission runs for every submit
	for _, q := range l.queued {
		n += q[handler]
	}
	return n
}

// Backlog counts the runs this leader holds due but undelivered, by
// priority (index 0 … 4).
func (l *Scheduler) Backlog() []int {
	out := make([]int, 5)
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range l.due {
		if r.priority >= 0 && r.priority < len(out) {
			out[r.priority]++
		}
	}
	return out
}

// runningOf counts the RUNNING attempts of handler (for Config.HandlerLimits).
func (l *Scheduler) runningOf(handler string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.running[handler]
}

// RunningOneOff reports whether attempt number attempt of epoch epoch of
// task id is RUNNING and the task is not recurring, as this leader last
// applied (its FSM events, in log order). false when it does not know
// (another attempt, a recurring task, not leading or not loaded yet).
// The Preparer asks it to skip the store read of a successful Complete,
// which needs the stored task only for a recurring task's next run.
func (l *Scheduler) RunningOneOff(id string, epoch uint64, attempt int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	r, ok := l.oneOff[id]
	return ok && r.epoch == epoch && r.attempt == attempt
}

// fireHistoryRuns is the bound on run records a Fire of task id carries:
// the node's --history-runs, but at least 1 for a flow stage, since the
// stages after it get its result from its run record (raftfsm's
// upstreamEnvelope reads it when it creates them): with the history off
// (-1) every flow would pass its stages' results on as nothing. Only the
// command's value changes, so every node, of any version, applies it the
// same way.
func fireHistoryRuns(bound int, id string) int {
	if bound < 0 && strings.HasPrefix(id, raftfsm.FlowStagePrefix) {
		return 1
	}
	return bound
}
