package scheduler

import (
	"context"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/axsched/ax/engine"
	"github.com/axsched/ax/raftfsm"
)

// Pause and resume: a paused handler or task keeps its runs WAITING; the
// leader does not fire them (reason "paused") and re-arms them when a
// resume applies. A running attempt is not interrupted. The pause is
// replicated (raftfsm.CmdPause): every node keeps the paused handlers in
// memory (Pauses), kept in step by the FSM's events (OnPauseEvent), so
// the leader's check costs no store read.

// Pauses is the set of paused handlers, copied on write (a pause is
// rare; the leader reads it for every run it fires). The zero value is
// an empty set, safe for concurrent use.
//
// It also counts the pause events the FSM has applied (Queued) and those
// the node has handed to the scheduler (Handled): the node answers a pause
// once it is applied, but hands its event to the scheduler afterwards, on
// its event goroutine. Until then the scheduler's kept copy of the task,
// a run it parked, and this set still say "not paused", so a drain in
// between would fire a run its client has just paused. The scheduler's
// drain (dispatch) first waits for the pause events applied before it
// (await), which costs nothing while none is in between.
type Pauses struct {
	handlers atomic.Pointer[map[string]bool]

	queued, handled atomic.Uint64 // pause events applied, and handed to the scheduler
	mu              sync.Mutex
	progress        chan struct{} // closed when handled moves, while a drain waits
}

// pauseAwaitLimit bounds a drain's wait for pause events not yet handed
// to the scheduler (Pauses.await). Past it the drain goes on as if they
// had not applied (the node's event goroutine is stuck: the FSM's checks
// still hold, and a pause may then let one run start).
const pauseAwaitLimit = time.Second

// pauseEvents counts the events of evs a drain must not overtake: pauses
// (of a handler or a task; a resume only holds a run a little longer)
// and a restore, which may bring pauses with it.
func pauseEvents(evs []raftfsm.Event) uint64 {
	var n uint64
	for i := range evs {
		if ev := &evs[i]; ev.Restored || (ev.Type == raftfsm.CmdPause && ev.Pause != nil && ev.Pause.Paused) {
			n++
		}
	}
	return n
}

// Queued records the pause events among evs, which the FSM has just
// applied; the node calls it from its FSM observer, before the
// application answers the pause's client and before the events reach the
// scheduler.
func (c *Pauses) Queued(evs []raftfsm.Event) {
	if n := pauseEvents(evs); n > 0 {
		c.queued.Add(n)
	}
}

// Handled records the pause events among evs as handed to the scheduler
// (OnPauseEvent and OnEvent have run for each); evs are events passed to
// Queued before.
func (c *Pauses) Handled(evs []raftfsm.Event) {
	n := pauseEvents(evs)
	if n == 0 {
		return
	}
	c.mu.Lock()
	c.handled.Add(n)
	if c.progress != nil {
		close(c.progress)
		c.progress = nil
	}
	c.mu.Unlock()
}

// Await is await with its usual limit (a second): delivery calls it
// before it starts a callback, so that a pause this node applied before
// is seen (delivery.Pauses).
func (c *Pauses) Await(ctx context.Context) bool { return c.await(ctx, pauseAwaitLimit) }

// await returns once every pause event queued before the call is
// handled, ctx ends, or limit passes (false then).
func (c *Pauses) await(ctx context.Context, limit time.Duration) bool {
	target := c.queued.Load()
	if c.handled.Load() >= target {
		return true
	}
	timer := time.NewTimer(limit)
	defer timer.Stop()
	for {
		c.mu.Lock()
		if c.handled.Load() >= target {
			c.mu.Unlock()
			return true
		}
		if c.progress == nil {
			c.progress = make(chan struct{})
		}
		ch := c.progress
		c.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		case <-timer.C:
			return false
		}
	}
}

// Load reads the paused handlers from the store (f.PausedHandlers).
func (c *Pauses) Load(f interface{ PausedHandlers() ([]string, error) }) error {
	names, err := f.PausedHandlers()
	if err != nil {
		return err
	}
	m := make(map[string]bool, len(names))
	for _, h := range names {
		m[h] = true
	}
	c.handlers.Store(&m)
	return nil
}

// Paused reports whether handler is paused.
func (c *Pauses) Paused(handler string) bool {
	m := c.handlers.Load()
	return m != nil && (*m)[handler]
}

// set records handler as paused or not.
func (c *Pauses) set(handler string, paused bool) {
	for {
		old := c.handlers.Load()
		m := map[string]bool{}
		if old != nil {
			for k := range *old {
				m[k] = true
			}
		}
		if paused {
			m[handler] = true
		} else {
			delete(m, handler)
		}
		if c.handlers.CompareAndSwap(old, &m) {
			return
		}
	}
}

// snapshot returns the paused handlers.
func (c *Pauses) snapshot() map[string]bool {
	if m := c.handlers.Load(); m != nil {
		return *m
	}
	return nil
}

// OnPauseEvent keeps Deps.Pauses in step with an applied change and wakes
// the runs a resume unparks. The node calls it before OnEvent, so that a
// run fired after the resume sees it. Without Deps.Pauses it does
// nothing.
func (l *Scheduler) OnPauseEvent(ev *raftfsm.Event) {
	c := l.pauses
	if c == nil {
		return
	}
	if ev.Restored {
		before := c.snapshot()
		if err := c.Load(l.store); err != nil {
			l.log.Error().Err(err).Msg("reading the paused handlers after a restore failed")
		}
		for h := range before {
			if !c.Paused(h) {
				l.resumeHandler(h)
			}
		}
		return
	}
	if ev.Type == raftfsm.CmdPause && ev.Pause != nil {
		p := ev.Pause
		if ev.Task == nil {
			c.set(p.Handler, p.Paused)
			if p.Paused {
				// Runs already parked for another reason become paused
				// at the next drain, not when they reach the head.
				l.wake(p.Handler)
			} else {
				l.resumeHandler(p.Handler)
			}
			l.log.Info().Str("handler", p.Handler).Bool("paused", p.Paused).Msg("handler pause changed")
			return
		}
		if !p.Paused {
			l.resumeTask(ev.Task.ID)
		}
		return
	}
}

// resumeHandler wakes the paused runs of handler: those the pause hook no
// longer holds go back to the queue. (OnPauseEvent calls it on a handler
// resume.)
func (l *Scheduler) resumeHandler(handler string) {
	l.mu.Lock()
	q := l.queues[handler]
	if q == nil {
		l.mu.Unlock()
		return
	}
	var back []*parkedRun
	for _, pr := range q.runs {
		if pr.paused && (l.paused == nil || !l.paused(pr.t)) {
			back = append(back, pr)
		}
	}
	// In the order they were parked (due order), by priority level: by
	// park sequence, since runs parked in the same instant (one fired
	// batch) share their since.
	sort.Slice(back, func(i, j int) bool { return back[i].seq < back[j].seq })
	for _, pr := range back {
		pr.paused = false
		q.paused--
		_ = q.rq.Push(pr.t.ID, min(max(pr.t.Spec.Priority, 0), engine.PriorityLowest))
	}
	if len(back) > 0 {
		l.dirty[handler] = true
	}
	l.mu.Unlock()
	l.signal()
}

// resumeTask wakes task id's run if it is parked as paused and the pause
// hook no longer holds it.
func (l *Scheduler) resumeTask(id string) {
	l.mu.Lock()
	h, ok := l.parkedIDs[id]
	q := l.queues[h]
	if !ok || q == nil {
		l.mu.Unlock()
		return
	}
	pr := q.runs[id]
	if pr != nil && pr.paused && (l.paused == nil || !l.paused(pr.t)) {
		pr.paused = false
		q.paused--
		_ = q.rq.Push(id, min(max(pr.t.Spec.Priority, 0), engine.PriorityLowest))
		l.dirty[h] = true
	}
	l.mu.Unlock()
	l.signal()
}
