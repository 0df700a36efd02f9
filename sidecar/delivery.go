package sidecar

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/axsched/ax/engine"
	"github.com/axsched/ax/ipc"
	"github.com/axsched/ax/raftfsm"
)

// reportTimeout bounds how long a node keeps trying to report an outcome to
// the leader (across elections). Past it the attempt's lease expires on the
// leader, which counts a TIMEOUT and retries.
const reportTimeout = time.Minute

var errAborted = errors.New("attempt aborted: task cancelled or replaced")

// delivery runs the attempts that committed Fire commands assign to this
// node: one callback per attempt, at most DeliveryConcurrency at once per
// executor, and reports each outcome to the leader.
type delivery struct {
	n      *Node
	caller *ipc.Caller

	mu      sync.Mutex
	running map[string]*attemptRun // task id → its attempt running here
	slots   map[string]*slot       // executor name|URL → its concurrency slots
	wg      sync.WaitGroup
	stopped bool
}

type attemptRun struct {
	epoch   uint64
	attempt int
	cancel  context.CancelCauseFunc
}

func newDelivery(n *Node) *delivery {
	return &delivery{
		n: n, caller: ipc.NewCaller(ipc.CallerOptions{}),
		running: map[string]*attemptRun{}, slots: map[string]*slot{},
	}
}

func (d *delivery) inFlight() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.running)
}

// onEvent starts an attempt assigned here, or aborts one that was cancelled,
// replaced, or timed out by the leader.
func (d *delivery) onEvent(ev *raftfsm.Event) {
	t := ev.Task
	if t == nil {
		return
	}
	self := d.n.cfg.NodeID
	if ev.Prev == raftfsm.StateRunning && ev.PrevNode == self && !(t.State == raftfsm.StateRunning && ev.Type == raftfsm.CmdFire) {
		d.abort(t.ID)
	}
	if ev.Type == raftfsm.CmdFire && t.State == raftfsm.StateRunning && t.Node == self {
		d.start(t)
	}
}

func (d *delivery) abort(id string) {
	d.mu.Lock()
	r := d.running[id]
	delete(d.running, id)
	d.mu.Unlock()
	if r != nil {
		r.cancel(errAborted)
	}
}

func (d *delivery) start(t *raftfsm.Task) {
	ctx, cancel := context.WithCancelCause(d.n.ctx)
	r := &attemptRun{epoch: t.Epoch, attempt: t.Attempts, cancel: cancel}
	d.mu.Lock()
	if d.stopped {
		d.mu.Unlock()
		cancel(nil)
		return
	}
	if old := d.running[t.ID]; old != nil {
		old.cancel(errAborted)
	}
	d.running[t.ID] = r
	d.wg.Add(1)
	d.mu.Unlock()
	go func() {
		defer d.wg.Done()
		defer cancel(nil)
		d.run(ctx, t, r)
		d.mu.Lock()
		if d.running[t.ID] == r {
			delete(d.running, t.ID)
		}
		d.mu.Unlock()
	}()
}

// executorFor returns this node's executor for handler, from the
// replicated node record (flags and API registrations alike), or nil.
func (d *delivery) executorFor(handler string) *raftfsm.Executor {
	rec, err := d.n.fsm.Node(d.n.cfg.NodeID)
	if err != nil {
		return nil
	}
	return rec.ExecutorFor(handler)
}

// slot bounds the callbacks in flight to one executor (its
// MaxConcurrency, or Config.DeliveryConcurrency) and decides, when it is
// full, which waiting attempt goes next: engine.ReadyQueue's priorities
// with weighted round robin and a wait budget, FIFO within a priority.
// This is where priorities matter: a due attempt waits here only when its
// executor is saturated.
type slot struct {
	name  string
	m     *metrics
	mu    sync.Mutex
	limit int
	busy  int                      // callbacks in flight
	ready *engine.ReadyQueue       // waiting attempts, by key
	wait  map[string]chan struct{} // key → closed when granted
}

// readyCapacity bounds the attempts one executor queues. Far above any
// sane backlog: backpressure is applied at submit, not here.
const readyCapacity = 10_000_000

func (d *delivery) slot(x *raftfsm.Executor) *slot {
	key := x.Name + "|" + x.URL
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.slots[key]
	if s == nil {
		limit := d.n.cfg.DeliveryConcurrency
		if x.MaxConcurrency > 0 {
			limit = x.MaxConcurrency
		}
		s = &slot{
			name: x.Name, m: d.n.metrics, limit: limit, wait: map[string]chan struct{}{},
			ready: engine.NewReadyQueue(d.n.clock, engine.ReadyOptions{Capacity: readyCapacity}),
		}
		d.slots[key] = s
		d.n.metrics.executorLimit.WithLabelValues(x.Name).Set(float64(limit))
	}
	return s
}

// acquire waits for a free slot for the attempt key of the given priority;
// false when ctx ends first.
func (s *slot) acquire(ctx context.Context, key string, prio int) bool {
	s.mu.Lock()
	if s.busy < s.limit && s.ready.Len() == 0 {
		s.busy++
		s.gauges()
		s.mu.Unlock()
		return true
	}
	ch := make(chan struct{})
	if err := s.ready.Push(key, prio); err != nil {
		// Already queued (cannot happen: keys hold the attempt) or over
		// capacity: wait behind everyone at the lowest priority.
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return false
		case <-time.After(10 * time.Millisecond):
			return s.acquire(ctx, key, prio)
		}
	}
	s.wait[key] = ch
	s.gauges()
	s.mu.Unlock()
	select {
	case <-ch:
		return true
	case <-ctx.Done():
		s.mu.Lock()
		if s.ready.Remove(key) {
			delete(s.wait, key)
			s.gauges()
			s.mu.Unlock()
			return false
		}
		s.mu.Unlock()
		// Granted meanwhile: hand the slot on.
		s.release()
		return false
	}
}

// release frees a slot and grants it to the next waiting attempt.
func (s *slot) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.busy--
	for s.busy < s.limit {
		it, ok := s.ready.Pop()
		if !ok {
			break
		}
		ch := s.wait[it.Key]
		delete(s.wait, it.Key)
		s.busy++
		close(ch)
	}
	s.gauges()
}

// depths returns the waiting attempts by priority.
func (s *slot) depths() [engine.Priorities]int { return s.ready.Depths() }

// gauges updates the executor's metrics; s.mu is held.
func (s *slot) gauges() {
	s.m.executorFlight.WithLabelValues(s.name).Set(float64(s.busy))
	s.m.executorQueue.WithLabelValues(s.name).Set(float64(s.ready.Len()))
}

// backlog returns the attempts waiting for a slot on this node, by priority.
func (d *delivery) backlog() [engine.Priorities]int {
	d.mu.Lock()
	slots := make([]*slot, 0, len(d.slots))
	for _, s := range d.slots {
		slots = append(slots, s)
	}
	d.mu.Unlock()
	var out [engine.Priorities]int
	for _, s := range slots {
		for p, n := range s.depths() {
			out[p] += n
		}
	}
	return out
}

// outcomeLabel names an outcome in ax_attempts_total.
func outcomeLabel(k ipc.OutcomeKind) string {
	switch k {
	case ipc.OutcomeSuccess:
		return "success"
	case ipc.OutcomeAccepted:
		return "accepted"
	case ipc.OutcomeBusy:
		return "snoozed"
	case ipc.OutcomePermanent:
		return "permanent"
	case ipc.OutcomeTimeout:
		return "timeout"
	case ipc.OutcomeCancelled:
		return "cancelled"
	}
	return "failed"
}

func (d *delivery) run(ctx context.Context, t *raftfsm.Task, r *attemptRun) {
	log := d.n.log.With().Str("task_id", t.ID).Int("attempt", t.Attempts).Str("handler", t.Spec.Handler).Logger()
	x := d.executorFor(t.Spec.Handler)
	var out ipc.Outcome
	if x == nil {
		// The executor went away (unregistered) after the leader chose this
		// node: not the task's fault, so a busy answer, not a failed attempt;
		// the leader routes the retry to a node that has one.
		out = ipc.Outcome{Kind: ipc.OutcomeBusy, RetryAfter: time.Second, Error: "node " + d.n.cfg.NodeID + " has no executor for handler " + t.Spec.Handler}
	} else {
		// The Fire was committed up to FireLead before the due time: hold
		// the attempt until then, by this node's clock, so that a run is
		// never delivered early.
		if wait := time.Until(time.UnixMilli(max(t.FiredMs, t.DueMs))); wait > 0 {
			timer := time.NewTimer(wait)
			select {
			case <-timer.C:
			case <-ctx.Done():
				timer.Stop()
				return
			}
		}
		sl := d.slot(x)
		if !sl.acquire(ctx, t.ID+"#"+strconv.FormatUint(r.epoch, 10)+"#"+strconv.Itoa(r.attempt), t.Spec.Priority) {
			return
		}
		start := time.Now()
		d.n.metrics.lateness.WithLabelValues(t.Spec.Handler).Observe(max(0, start.Sub(time.UnixMilli(max(t.FiredMs, t.DueMs))).Seconds()))
		deadline := time.UnixMilli(t.FiredMs).Add(time.Duration(t.Spec.TimeoutNs))
		out = d.caller.Execute(ctx, x.URL, ipc.Callback{
			TaskID: t.ID, Handler: t.Spec.Handler, Attempt: t.Attempts, Run: max(t.Run, 1),
			Deadline: deadline, Payload: t.Spec.Payload,
		})
		sl.release()
		if ctx.Err() != nil {
			out.Kind = ipc.OutcomeCancelled
		}
		d.n.metrics.attempt(t.Spec.Handler, outcomeLabel(out.Kind), out.Duration)
	}
	if ctx.Err() != nil { // aborted (cancel, replace, lease expiry) or stopping: nothing to report
		log.Debug().Str("cause", context.Cause(ctx).Error()).Msg("attempt aborted")
		return
	}
	log.Debug().Str("outcome", out.Kind.String()).Int("status", out.Status).Dur("took", out.Duration).Msg("attempt finished")
	c := &raftfsm.Complete{ID: t.ID, Epoch: r.epoch, Attempt: r.attempt, Error: out.Error}
	switch out.Kind {
	case ipc.OutcomeAccepted:
		// 202: the executor reports through POST /v1/tasks/{id}/result and
		// keeps the lease alive with heartbeats; if it does neither, the
		// lease expires and the leader counts a TIMEOUT.
		return
	case ipc.OutcomeSuccess:
		c.Outcome = raftfsm.OutcomeSuccess
	case ipc.OutcomeBusy:
		c.Outcome = raftfsm.OutcomeBusy
		c.RetryAfterMs = out.RetryAfter.Milliseconds()
	case ipc.OutcomePermanent:
		c.Outcome = raftfsm.OutcomePermanent
	case ipc.OutcomeTimeout:
		c.Outcome = raftfsm.OutcomeTimeout
	default:
		c.Outcome = raftfsm.OutcomeRetryable
	}
	rctx, cancel := context.WithTimeout(d.n.ctx, reportTimeout)
	defer cancel()
	for {
		_, err := d.n.propose(rctx, []raftfsm.Command{{Type: raftfsm.CmdComplete, Complete: c}})
		if err == nil {
			return
		}
		if rctx.Err() != nil {
			log.Warn().Err(err).Msg("could not report the outcome; the lease will expire and the leader retries")
			return
		}
		// No leader for a while (no quorum): keep trying until the
		// report deadline; the report is idempotent.
		select {
		case <-rctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// stop aborts every attempt running here and waits for them.
func (d *delivery) stop() {
	d.mu.Lock()
	d.stopped = true
	for id, r := range d.running {
		r.cancel(errors.New("node stopping"))
		delete(d.running, id)
	}
	d.mu.Unlock()
	d.wg.Wait()
	d.caller.Close()
}
