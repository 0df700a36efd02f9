package sidecar

import (
	"context"
	"errors"
	"sync"
	"time"

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
	sems    map[string]chan struct{}
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
		running: map[string]*attemptRun{}, sems: map[string]chan struct{}{},
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

// executorFor returns the URL of this node's executor for handler, from
// the replicated node record (flags and API registrations alike).
func (d *delivery) executorFor(handler string) string {
	rec, err := d.n.fsm.Node(d.n.cfg.NodeID)
	if err != nil {
		return ""
	}
	if x := rec.ExecutorFor(handler); x != nil {
		return x.URL
	}
	return ""
}

func (d *delivery) sem(url string) chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.sems[url]
	if s == nil {
		s = make(chan struct{}, d.n.cfg.DeliveryConcurrency)
		d.sems[url] = s
	}
	return s
}

func (d *delivery) run(ctx context.Context, t *raftfsm.Task, r *attemptRun) {
	log := d.n.log.With().Str("task_id", t.ID).Int("attempt", t.Attempts).Str("handler", t.Spec.Handler).Logger()
	url := d.executorFor(t.Spec.Handler)
	var out ipc.Outcome
	if url == "" {
		out = ipc.Outcome{Kind: ipc.OutcomeRetryable, Error: "node " + d.n.cfg.NodeID + " has no executor for handler " + t.Spec.Handler}
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
		sem := d.sem(url)
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		deadline := time.UnixMilli(t.FiredMs).Add(time.Duration(t.Spec.TimeoutNs))
		out = d.caller.Execute(ctx, url, ipc.Callback{
			TaskID: t.ID, Handler: t.Spec.Handler, Attempt: t.Attempts, Run: 1,
			Deadline: deadline, Payload: t.Spec.Payload,
		})
		<-sem
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
	if _, err := d.n.propose(rctx, []raftfsm.Command{{Type: raftfsm.CmdComplete, Complete: c}}); err != nil {
		log.Warn().Err(err).Msg("could not report the outcome; the lease will expire and the leader retries")
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
