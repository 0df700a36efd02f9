package sidecar

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

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
	queued  map[string]int         // handler → attempts waiting for a slot
	// self caches this node's record (its executors); nil after it
	// changes (node, executor and restore events), read again on use.
	self *raftfsm.Node
	down map[string]downState // executor name|URL → unreachable lately
	// resumed holds the attempts started from a snapshot install
	// (resumeAfterRestore) whose Fire may still come as an event: that
	// event must not start them a second time.
	resumed map[attemptKey]struct{}
	wg      sync.WaitGroup
	stopped bool
}

// attemptKey names one attempt of a task.
type attemptKey struct {
	id      string
	epoch   uint64
	attempt int
}

type attemptRun struct {
	epoch   uint64
	attempt int
	cancel  context.CancelCauseFunc
	timeout time.Duration
	// leaseMs is the attempt's lease as this node last knew it (Unix ms);
	// renewLeases extends it while the attempt waits for a slot.
	leaseMs atomic.Int64
	// startMs is when its callback started (Unix ms); 0 while it waits.
	startMs atomic.Int64
}

func newDelivery(n *Node) *delivery {
	// One idle connection per slot of a full executor, so that callbacks
	// ending together (a burst's first round trips run in lockstep) put
	// their connections back instead of closing those beyond the
	// default 64 and dialling again for the next calls.
	idle := max(n.cfg.DeliveryConcurrency, ipc.MaxIdleConnsPerExecutorDefault)
	return &delivery{
		n: n, caller: ipc.NewCaller(ipc.CallerOptions{MaxIdleConnsPerExecutor: idle}),
		running: map[string]*attemptRun{}, slots: map[string]*slot{}, queued: map[string]int{}, down: map[string]downState{},
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
	if ev.Restored || (ev.Node != nil && ev.Node.ID == d.n.cfg.NodeID) {
		d.mu.Lock()
		d.self = nil // this node's record changed: read it again
		d.mu.Unlock()
	}
	if ev.Restored {
		d.resumeAfterRestore()
	}
	t := ev.Task
	if t == nil {
		return
	}
	self := d.n.cfg.NodeID
	if ev.Prev == raftfsm.StateRunning && ev.PrevNode == self {
		switch {
		case ev.Type == raftfsm.CmdLease && t.State == raftfsm.StateRunning && t.Node == self:
			// A heartbeat or lease renewal of an attempt running here: it
			// goes on, with its new lease.
			d.mu.Lock()
			if r := d.running[t.ID]; r != nil && r.epoch == t.Epoch && r.attempt == t.Attempts {
				r.leaseMs.Store(t.LeaseMs)
			}
			d.mu.Unlock()
		case t.State == raftfsm.StateRunning && ev.Type == raftfsm.CmdFire:
			// A new attempt replaces this node's (start handles it).
		default:
			d.abort(t.ID) // cancelled, replaced, completed or timed out
		}
	}
	if ev.Type == raftfsm.CmdFire && t.State == raftfsm.StateRunning && t.Node == self {
		if leaseEnded(t, time.Now().UnixMilli()) {
			// The attempt's lease had ended before this node applied its
			// Fire: a node catching up after a partition replays Fires the
			// leader has long counted as lost and retried elsewhere (the
			// next entries say so). Delivering it would only duplicate the
			// retry; the leader's lease timer covers it if not retried yet.
			d.n.log.Debug().Str("task_id", t.ID).Int("attempt", t.Attempts).Time("lease", time.UnixMilli(t.LeaseMs)).
				Msg("not delivering an attempt whose lease ended before its fire was applied here")
			d.n.metrics.staleFires.Inc()
			return
		}
		d.mu.Lock()
		k := attemptKey{t.ID, t.Epoch, t.Attempts}
		_, resumed := d.resumed[k]
		delete(d.resumed, k)
		d.mu.Unlock()
		if resumed {
			return // already started from the snapshot that held this Fire
		}
		d.start(t)
	}
}

// leaseEnded reports whether the lease of t's attempt had ended at nowMs
// (Unix ms): the leader counts such an attempt lost and retries it, so
// this node must not start it.
func leaseEnded(t *raftfsm.Task, nowMs int64) bool {
	return t.LeaseMs > 0 && nowMs >= t.LeaseMs
}

// resumeAfterRestore brings the attempts running here in line with a
// just-installed snapshot. It starts those the snapshot says run on this
// node and whose lease has not ended: their Fire was
// inside the snapshot, so no event started them, and without this they
// would wait out their lease (timeout + grace) before the leader retried
// them elsewhere. The store may already hold entries applied after the
// snapshot; a Fire event still to come for an attempt started here is
// skipped (resumed).
func (d *delivery) resumeAfterRestore() {
	self := d.n.cfg.NodeID
	var ts []*raftfsm.Task
	if err := d.n.fsm.Running(func(t *raftfsm.Task) bool {
		if t.Node == self {
			ts = append(ts, t)
		}
		return true
	}); err != nil {
		d.n.log.Warn().Err(err).Msg("reading the attempts of an installed snapshot failed; their leases will expire")
		return
	}
	// Attempts running here that the snapshot no longer has running here
	// (cancelled, timed out or replaced inside it) are aborted: the
	// events that would have aborted them were folded into the snapshot.
	current := make(map[attemptKey]bool, len(ts))
	for _, t := range ts {
		current[attemptKey{t.ID, t.Epoch, t.Attempts}] = true
	}
	d.mu.Lock()
	d.resumed = map[attemptKey]struct{}{}
	var stale []string
	for id, r := range d.running {
		if !current[attemptKey{id, r.epoch, r.attempt}] {
			stale = append(stale, id)
		}
	}
	d.mu.Unlock()
	for _, id := range stale {
		d.abort(id)
	}
	nowMs := time.Now().UnixMilli()
	started := 0
	for _, t := range ts {
		if leaseEnded(t, nowMs) {
			continue // the leader's lease timer retries it
		}
		d.mu.Lock()
		r := d.running[t.ID]
		running := r != nil && r.epoch == t.Epoch && r.attempt == t.Attempts
		if !running {
			d.resumed[attemptKey{t.ID, t.Epoch, t.Attempts}] = struct{}{}
		}
		d.mu.Unlock()
		if !running {
			d.start(t)
			started++
		}
	}
	if started > 0 {
		d.n.log.Info().Int("attempts", started).Msg("started the attempts of an installed snapshot that run on this node")
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
	r := &attemptRun{epoch: t.Epoch, attempt: t.Attempts, cancel: cancel, timeout: time.Duration(t.Spec.TimeoutNs)}
	r.leaseMs.Store(t.LeaseMs)
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

// executorsFor returns this node's executors for handler, from the
// replicated node record (flags and API registrations alike), best match
// first, those marked down (unreachable lately) last.
func (d *delivery) executorsFor(handler string) []*raftfsm.Executor {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.self == nil { // read once after each change, not per attempt
		rec, err := d.n.fsm.Node(d.n.cfg.NodeID)
		if err != nil {
			return nil
		}
		d.self = rec
	}
	xs := d.self.ExecutorsFor(handler)
	now := time.Now()
	var up, down []*raftfsm.Executor
	for _, x := range xs {
		if st, ok := d.down[x.Name+"|"+x.URL]; ok && now.Before(st.until) {
			down = append(down, x)
		} else {
			up = append(up, x)
		}
	}
	return append(up, down...)
}

// downState is an executor that could not be reached.
type downState struct {
	since, until time.Time
	dropped      bool
}

// Executors that cannot be reached are tried last for downFor; an
// API-registered one unreachable for staleExecutorAfter is unregistered
// (its app died without unregistering).
const (
	downFor            = 5 * time.Second
	staleExecutorAfter = time.Minute
)

// markDown notes that executor x could not be reached, and unregisters it
// when that has lasted staleExecutorAfter (never one from a flag).
func (d *delivery) markDown(x *raftfsm.Executor) {
	key := x.Name + "|" + x.URL
	now := time.Now()
	d.mu.Lock()
	st, ok := d.down[key]
	if !ok || now.Sub(st.until) > staleExecutorAfter {
		st = downState{since: now} // first failure, or an old streak
	}
	st.until = now.Add(downFor)
	drop := !x.FromFlag && !st.dropped && now.Sub(st.since) >= staleExecutorAfter
	st.dropped = st.dropped || drop
	d.down[key] = st
	d.mu.Unlock()
	if !drop {
		return
	}
	d.n.log.Warn().Str("executor", x.Name).Str("url", x.URL).Msg("executor unreachable for a minute: unregistering it")
	go func() {
		ctx, cancel := context.WithTimeout(d.n.ctx, 10*time.Second)
		defer cancel()
		if _, err := d.n.propose(ctx, []raftfsm.Command{{Type: raftfsm.CmdExecutor, Executor: &raftfsm.ExecutorChange{
			Node: d.n.cfg.NodeID, Executor: raftfsm.Executor{Name: x.Name}, Remove: true}}}); err != nil {
			d.n.log.Warn().Err(err).Str("executor", x.Name).Msg("unregistering an unreachable executor failed")
		}
	}()
}

// markUp forgets that x was unreachable.
func (d *delivery) markUp(x *raftfsm.Executor) {
	d.mu.Lock()
	delete(d.down, x.Name+"|"+x.URL)
	d.mu.Unlock()
}

// deliver runs one callback of the attempt on executor x, within its
// concurrency slot; false when ctx ended first (nothing to report).
func (d *delivery) deliver(ctx context.Context, t *raftfsm.Task, r *attemptRun, x *raftfsm.Executor) (ipc.Outcome, bool) {
	sl := d.slot(x)
	d.queue(t.Spec.Handler, 1)
	tok, ok := sl.acquire(ctx, t.ID+"#"+strconv.FormatUint(r.epoch, 10)+"#"+strconv.Itoa(r.attempt), t.Spec.Priority)
	d.queue(t.Spec.Handler, -1)
	if !ok {
		return ipc.Outcome{}, false
	}
	start := time.Now()
	r.startMs.Store(start.UnixMilli())
	// Lateness: from the run's due time (not from the Fire: a late timer
	// or a slow commit is lateness too).
	d.n.metrics.lateness.WithLabelValues(t.Spec.Handler).Observe(max(0, start.Sub(time.UnixMilli(t.DueMs)).Seconds()))
	// The attempt's timeout counts from its start, not from the Fire: it
	// may have waited for a slot (its lease was renewed meanwhile).
	deadline := start.Add(time.Duration(t.Spec.TimeoutNs))
	out := d.caller.Execute(ctx, x.URL, ipc.Callback{
		TaskID: t.ID, Handler: t.Spec.Handler, Attempt: t.Attempts, Run: t.RunNumber(),
		Deadline: deadline, Payload: t.Spec.Payload,
	})
	if ctx.Err() != nil {
		out.Kind = ipc.OutcomeCancelled
	}
	sl.release(tok, out)
	if !out.Unreachable {
		d.markUp(x)
	}
	d.n.metrics.attempt(t.Spec.Handler, outcomeLabel(out.Kind), out.Duration)
	return out, true
}

// slot bounds the callbacks in flight to one executor with an adaptive
// limit (engine.Limiter: between the executor's MinConcurrency and
// MaxConcurrency, default LimiterMin and Config.DeliveryConcurrency; equal
// bounds give a fixed limit) and decides, when it is full, which waiting
// attempt goes next: engine.ReadyQueue's priorities with weighted round
// robin and a wait budget, FIFO within a priority. This is where priorities
// matter: a due attempt waits here only when its executor is saturated.
type slot struct {
	name  string
	m     *metrics
	lim   *engine.Limiter
	mu    sync.Mutex
	ready *engine.ReadyQueue            // waiting attempts, by key
	wait  map[string]chan *engine.Token // key → receives its token when granted
}

// readyCapacity bounds the attempts one executor queues. Far above any
// sane backlog: backpressure is applied at submit, not here.
const readyCapacity = 10_000_000

// LimiterMinDefault is the lowest concurrency an executor's adaptive limit
// goes down to, unless its registration says otherwise.
const LimiterMinDefault = 4

func (d *delivery) slot(x *raftfsm.Executor) *slot {
	key := x.Name + "|" + x.URL
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.slots[key]
	if s != nil {
		return s
	}
	maxC := d.n.cfg.DeliveryConcurrency
	if x.MaxConcurrency > 0 {
		maxC = x.MaxConcurrency
	}
	minC := d.n.cfg.DeliveryMinConcurrency
	if x.MinConcurrency > 0 {
		minC = x.MinConcurrency
	}
	minC = min(minC, maxC)
	name := x.Name
	log := d.n.log
	m := d.n.metrics
	s = &slot{
		name: name, m: m, wait: map[string]chan *engine.Token{},
		ready: engine.NewReadyQueue(d.n.clock, engine.ReadyOptions{Capacity: readyCapacity}),
	}
	// A wider latency margin (1.5× the baseline before easing down) than
	// the limiter's default: on a busy 2-core host callbacks slow by
	// 10–20 % under load with no harm done. Slow start is the limiter's
	// (×8 per round trip, up to the demand), which seed 004's burst needs
	// to have the limit at 200 two round trips after the first answers
	// (ax bench burst).
	s.lim = engine.NewLimiter(d.n.clock, engine.LimiterOptions{Min: minC, Max: maxC, GrowTolerance: 1.5, OnChange: func(old, new int, reason string) {
		m.executorLimit.WithLabelValues(name).Set(float64(new))
		log.Debug().Str("executor", name).Int("from", old).Int("to", new).Str("reason", reason).Msg("concurrency limit changed")
	}})
	m.executorLimit.WithLabelValues(name).Set(float64(s.lim.Limit()))
	d.slots[key] = s
	go s.loop(d.n.ctx)
	return s
}

// loop grants slots when the limiter says one was freed or its limit rose.
func (s *slot) loop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.lim.Changed():
			s.grant()
		}
	}
}

// acquire waits for a slot for the attempt key of the given priority and
// returns its token; false when ctx ends first.
func (s *slot) acquire(ctx context.Context, key string, prio int) (*engine.Token, bool) {
	s.mu.Lock()
	if s.ready.Len() == 0 {
		s.lim.Observe(0)
		if tok, ok := s.lim.TryAcquire(); ok {
			s.gauges()
			s.mu.Unlock()
			return tok, true
		}
	}
	ch := make(chan *engine.Token, 1)
	for s.ready.Push(key, prio) != nil {
		// Already queued (cannot happen: keys name the attempt) or over
		// capacity: wait and try again.
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, false
		case <-time.After(10 * time.Millisecond):
		}
		s.mu.Lock()
	}
	s.wait[key] = ch
	s.lim.Observe(s.ready.Len())
	s.gauges()
	s.mu.Unlock()
	s.grant() // a slot may have been freed meanwhile
	select {
	case tok := <-ch:
		return tok, true
	case <-ctx.Done():
		s.mu.Lock()
		if s.ready.Remove(key) {
			delete(s.wait, key)
			s.lim.Observe(s.ready.Len())
			s.gauges()
			s.mu.Unlock()
			return nil, false
		}
		s.mu.Unlock()
		// Granted meanwhile: give the slot back.
		(<-ch).Done(engine.LimitDropped, 0)
		s.grant()
		return nil, false
	}
}

// grant hands free slots to the waiting attempts, by priority.
func (s *slot) grant() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.ready.Len() > 0 {
		tok, ok := s.lim.TryAcquire()
		if !ok {
			break
		}
		it, _ := s.ready.Pop()
		ch := s.wait[it.Key]
		delete(s.wait, it.Key)
		ch <- tok
	}
	s.lim.Observe(s.ready.Len())
	s.gauges()
}

// release reports how the attempt that held tok ended and frees its slot.
func (s *slot) release(tok *engine.Token, out ipc.Outcome) {
	tok.Done(limitOutcome(out.Kind), out.Duration)
	s.grant()
}

// limitOutcome maps a callback's outcome to the limiter's: a 429/503 is
// busy, a time-out or a connection error a time-out (the executor is
// overloaded or gone), a 5xx a failure; any other answer measures latency.
func limitOutcome(k ipc.OutcomeKind) engine.LimitOutcome {
	switch k {
	case ipc.OutcomeBusy:
		return engine.LimitBusy
	case ipc.OutcomeTimeout:
		return engine.LimitTimeout
	case ipc.OutcomeRetryable:
		return engine.LimitFailure
	case ipc.OutcomeCancelled:
		return engine.LimitDropped
	}
	return engine.LimitSuccess
}

// depths returns the waiting attempts by priority.
func (s *slot) depths() [engine.Priorities]int { return s.ready.Depths() }

// gauges updates the executor's metrics; s.mu is held.
func (s *slot) gauges() {
	s.m.executorFlight.WithLabelValues(s.name).Set(float64(s.lim.InFlight()))
	s.m.executorQueue.WithLabelValues(s.name).Set(float64(s.ready.Len()))
}

// queue counts attempts of handler waiting for a slot.
func (d *delivery) queue(handler string, delta int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.queued[handler] += delta
	if d.queued[handler] <= 0 {
		delete(d.queued, handler)
	}
}

// queuedByHandler copies the per-handler counts for a load report.
func (d *delivery) queuedByHandler() map[string]int {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.queued) == 0 {
		return nil
	}
	out := make(map[string]int, len(d.queued))
	for h, n := range d.queued {
		out[h] = n
	}
	return out
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
	// The attempt's fields go on each event rather than into a sub-logger:
	// zerolog's Logger.With allocates a 500-byte context per call, about
	// 6 % of the node's CPU in the first seconds of ax bench burst, for
	// attempts that mostly log nothing. An event of a disabled level is nil, which ignores them.
	log := func(e *zerolog.Event) *zerolog.Event {
		return e.Str("task_id", t.ID).Int("attempt", t.Attempts).Str("handler", t.Spec.Handler)
	}
	var out ipc.Outcome
	xs := d.executorsFor(t.Spec.Handler)
	if len(xs) == 0 {
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
		// Best executor first; one that cannot be reached at all (a crashed
		// app's registration) is marked down and the next one is tried, in
		// the same attempt: the callback never reached the first.
		for i, x := range xs {
			var ok bool
			out, ok = d.deliver(ctx, t, r, x)
			if !ok {
				return
			}
			if !out.Unreachable {
				break
			}
			d.markDown(x)
			if i+1 < len(xs) {
				log(d.n.log.Warn()).Str("executor", x.Name).Str("url", x.URL).Str("error", out.Error).Msg("executor unreachable; trying the next one for the handler")
			}
		}
	}
	if ctx.Err() != nil { // aborted (cancel, replace, lease expiry) or stopping: nothing to report
		log(d.n.log.Debug()).Str("cause", context.Cause(ctx).Error()).Msg("attempt aborted")
		return
	}
	log(d.n.log.Debug()).Str("outcome", out.Kind.String()).Int("status", out.Status).Dur("took", out.Duration).Msg("attempt finished")
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
			log(d.n.log.Warn()).Err(err).Msg("could not report the outcome; the lease will expire and the leader retries")
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

// renewInterval is how often a node renews the leases of its attempts that
// still wait for an executor slot.
const renewInterval = time.Second

// renewLeases keeps alive the leases of attempts assigned to this node
// that wait for an executor slot (or whose callback is still running): the
// leader gives an attempt timeout + grace from its Fire, and without
// renewal an attempt queued behind a saturated executor would be timed out
// and fired again (a duplicate, and a lost attempt). Every renewInterval,
// the attempts whose lease ends within grace/2 + renewInterval get one
// batched heartbeat (CmdLease) to now + timeout + grace, in entries of at
// most MaxBatchCommands.
func (d *delivery) renewLeases(ctx context.Context) {
	t := time.NewTicker(renewInterval)
	defer t.Stop()
	grace := d.n.cfg.LeaseGrace
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		var cmds []raftfsm.Command
		var runs []*attemptRun
		d.mu.Lock()
		for id, r := range d.running {
			// Renew only leases about to expire (a waiting attempt, or a
			// callback that runs long): one Raft write per timeout at most.
			if time.UnixMilli(r.leaseMs.Load()).Before(now.Add(grace/2 + renewInterval)) {
				cmds = append(cmds, raftfsm.Command{Type: raftfsm.CmdLease, Lease: &raftfsm.Lease{ID: id, Attempt: r.attempt}})
				runs = append(runs, r)
			}
		}
		d.mu.Unlock()
		if len(cmds) == 0 {
			continue
		}
		for len(cmds) > 0 {
			k := min(len(cmds), d.n.cfg.MaxBatchCommands)
			rctx, cancel := context.WithTimeout(ctx, renewInterval*5)
			res, err := d.n.propose(rctx, cmds[:k])
			cancel()
			if err != nil {
				d.n.log.Warn().Err(err).Int("attempts", k).Msg("renewing leases of queued attempts failed")
				break
			}
			for i, r := range res {
				if r.Code == raftfsm.CodeOK && r.Task != nil {
					runs[i].leaseMs.Store(r.Task.LeaseMs)
				}
			}
			cmds, runs = cmds[k:], runs[k:]
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
