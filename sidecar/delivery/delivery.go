package delivery

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/axsched/ax/clients/go/axapi"
	"github.com/axsched/ax/engine"
	"github.com/axsched/ax/ipc"
	"github.com/axsched/ax/raftfsm"
	"github.com/axsched/ax/sidecar/delivery/callback"
)

// reportTimeout bounds how long a node keeps trying to report an outcome to
// the leader (across elections). Past it the attempt's lease expires on the
// leader, which counts a TIMEOUT and retries.
const reportTimeout = time.Minute

var errAborted = errors.New("attempt aborted: task cancelled or replaced")

// Delivery runs the attempts that committed Fire commands assign to this
// node: one callback per attempt, at most Config.Concurrency at once per
// executor, and reports each outcome to the leader.
type Delivery struct {
	cfg      Config
	ctx      context.Context
	proposer Proposer
	store    Store
	clock    engine.Clock
	retry    engine.Clock // Deps.RetryClock
	log      zerolog.Logger
	m        *Metrics
	pauses   Pauses  // nil: none
	catchUp  CatchUp // nil: no wait
	caller   *callback.Caller
	reports  *reportBatcher
	circ     *circuits // this node's circuit breakers (breaker.go)

	mu      sync.Mutex
	running map[string]*attemptRun // task id → its attempt running here
	slots   map[string]*slot       // executor name|URL → its concurrency slots
	queued  map[string]int         // handler → attempts waiting for a slot
	// self caches this node's record (its executors); nil after it
	// changes (node, executor and restore events), read again on use.
	self *raftfsm.Node
	// forHandler caches self.ExecutorsFor by handler (read only: shared
	// by the attempts), for the record forSelf; at most forHandlerMax.
	forSelf    *raftfsm.Node
	forHandler map[string][]*raftfsm.Executor
	down       map[string]downState // executor name|URL → unreachable lately
	// resumed holds the attempts started from a snapshot install
	// (resumeAfterRestore) whose Fire may still come as an event: that
	// event must not start them a second time.
	resumed map[attemptKey]struct{}
	// orphans are Deps.Orphans: never started here.
	orphans map[attemptKey]struct{}
	wg      sync.WaitGroup
	stopped bool
	// draining is set by BeginDrain (drain.go): attempts not started are
	// handed back; drainCtx ends then. active counts attempt goroutines.
	draining    bool
	drainCtx    context.Context
	drainCancel context.CancelFunc
	active      atomic.Int64

	// unregisterStale, when set (tests), replaces proposing the removal of
	// an executor unavailable for staleExecutorAfter.
	unregisterStale func(*raftfsm.Executor)
}

// attemptKey names one attempt of a task. The run is part of it: each
// run of a task (a recurring task's next one, a re-run after DEAD or
// FAILED) numbers its attempts from 1 again under the same epoch.
type attemptKey struct {
	id      string
	epoch   uint64
	run     int
	attempt int
}

// keyOf names the attempt t is running.
func keyOf(t *raftfsm.Task) attemptKey { return attemptKey{t.ID, t.Epoch, t.Run, t.Attempts} }

type attemptRun struct {
	epoch   uint64
	run     int // raftfsm.Task.Run
	attempt int
	handler string
	cancel  context.CancelCauseFunc
	timeout time.Duration
	// leaseMs is the attempt's lease as this node last knew it (Unix ms);
	// RenewLeases extends it while the attempt waits for a slot.
	leaseMs atomic.Int64
	// startMs is when its callback started (Unix ms); 0 while it waits.
	startMs atomic.Int64
	// appliedAt is when this node applied the attempt's Fire; callStart
	// when its (last) callback began and execName to which executor: the
	// run record's facts (raftfsm.Complete), written and read by the
	// attempt's goroutine only.
	appliedAt time.Time
	callStart time.Time
	execName  string
	// wait is the context the attempt waits in before its callback starts
	// (for its due time, a slot, a probe): it also ends when the node
	// begins to drain (drain.go), or when endWait is called (the
	// handler's circuit opened here: wakeCircuit).
	wait    context.Context
	endWait func()
	// behind is set when the attempt's Fire applied while this node was
	// behind the leader (catchUpTarget), catchUpTo is the index it must
	// then have applied before the callback (0: the first one known).
	behind    bool
	catchUpTo uint64
	// paused is set when a pause of the attempt's task applies here
	// before its callback started (OnEvent); pausedBack when the attempt
	// was found paused and is to be handed back (pausedNow).
	paused, pausedBack atomic.Bool
	// circuitDueMs is set (Unix ms) when the attempt is to be handed back
	// because its handler's circuit is open on this node (breaker.go):
	// due again then.
	circuitDueMs atomic.Int64
}

// is reports whether r is the attempt t is running (its epoch, run and
// attempt).
func (r *attemptRun) is(t *raftfsm.Task) bool {
	return r.epoch == t.Epoch && r.run == t.Run && r.attempt == t.Attempts
}

// waitCtx returns the context r waits in: r.wait, or ctx when it has none
// (an attempt not started by delivery.start, in tests).
func (r *attemptRun) waitCtx(ctx context.Context) context.Context {
	if r.wait != nil {
		return r.wait
	}
	return ctx
}

// New returns the delivery of node deps.Config.NodeID. Its attempts and
// reports end with deps.Context; Stop aborts them and waits.
func New(deps Deps) *Delivery {
	// One idle connection per slot of a full executor, so that callbacks
	// ending together (a burst's first round trips run in lockstep) put
	// their connections back instead of closing those beyond the
	// default 64 and dialling again for the next calls.
	idle := max(deps.Config.Concurrency, callback.MaxIdleConnsPerExecutorDefault)
	clock := deps.Clock
	if clock == nil {
		clock = engine.RealClock()
	}
	retry := deps.RetryClock
	if retry == nil {
		retry = clock
	}
	ctx := deps.Context
	if ctx == nil {
		ctx = context.Background()
	}
	d := &Delivery{
		cfg: deps.Config, ctx: ctx, proposer: deps.Proposer, store: deps.Store, clock: clock, retry: retry, log: deps.Log, m: deps.Metrics,
		pauses: deps.Pauses, catchUp: deps.CatchUp,
		caller:  callback.NewCaller(callback.CallerOptions{MaxIdleConnsPerExecutor: idle, Clock: clock}),
		running: map[string]*attemptRun{}, slots: map[string]*slot{}, queued: map[string]int{}, down: map[string]downState{},
	}
	d.circ = d.newCircuits(deps.Config)
	for _, o := range deps.Orphans {
		if d.orphans == nil {
			d.orphans = map[attemptKey]struct{}{}
		}
		d.orphans[attemptKey{o.ID, o.Epoch, o.Run, o.Attempt}] = struct{}{}
	}
	d.drainCtx, d.drainCancel = context.WithCancel(context.Background())
	d.reports = &reportBatcher{max: deps.Config.MaxBatchCommands, base: ctx, timeout: reportTimeout,
		propose: func(ctx context.Context, cmds []raftfsm.Command) error {
			_, err := d.proposer.Propose(ctx, cmds)
			return err
		}}
	return d
}

// InFlight returns the attempts running on this node (waiting for their
// due time or a slot, or in their callback).
func (d *Delivery) InFlight() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.running)
}

// OnEvent starts an attempt assigned here, or aborts one that was cancelled,
// replaced, or timed out by the leader. Events come in log order, from one
// goroutine.
func (d *Delivery) OnEvent(ev *raftfsm.Event) {
	if ev.Restored || (ev.Node != nil && ev.Node.ID == d.cfg.NodeID) {
		d.mu.Lock()
		d.self = nil // this node's record changed: read it again
		d.mu.Unlock()
		d.pruneExecutors(ev.Node)
	}
	if ev.Restored {
		d.resumeAfterRestore()
	}
	t := ev.Task
	if t == nil {
		return
	}
	if ev.Type == raftfsm.CmdPause && ev.Pause != nil {
		// A pause of the task: its attempt waiting here (its due time, a
		// slot, a probe) does not start, pausedNow hands it back; a resume
		// before then lets it start after all.
		d.mu.Lock()
		if r := d.running[t.ID]; r != nil && r.is(t) {
			r.paused.Store(ev.Pause.Paused)
		}
		d.mu.Unlock()
		return
	}
	self := d.cfg.NodeID
	if ev.Prev == raftfsm.StateRunning && ev.PrevNode == self {
		switch {
		case ev.Type == raftfsm.CmdLease && t.State == raftfsm.StateRunning && t.Node == self:
			// A heartbeat or lease renewal of an attempt running here: it
			// goes on, with its new lease.
			d.mu.Lock()
			if r := d.running[t.ID]; r != nil && r.is(t) {
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
		if leaseEnded(t, d.clock.Now().UnixMilli()) {
			// The attempt's lease had ended before this node applied its
			// Fire: a node catching up after a partition replays Fires the
			// leader has long counted as lost and retried elsewhere (the
			// next entries say so). Delivering it would only duplicate the
			// retry; the leader's lease timer covers it if not retried yet.
			d.log.Debug().Str("task_id", t.ID).Func(traceField(t)).Int("attempt", t.Attempts).Time("lease", time.UnixMilli(t.LeaseMs)).
				Msg("not delivering an attempt whose lease ended before its fire was applied here")
			d.m.StaleFires.Inc()
			return
		}
		d.mu.Lock()
		k := keyOf(t)
		_, resumed := d.resumed[k]
		delete(d.resumed, k)
		d.mu.Unlock()
		if resumed {
			return // already started from the snapshot that held this Fire
		}
		d.start(t, ev.Index)
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
func (d *Delivery) resumeAfterRestore() {
	self := d.cfg.NodeID
	var ts []*raftfsm.Task
	if err := d.store.Running(func(t *raftfsm.Task) bool {
		if t.Node == self {
			ts = append(ts, t)
		}
		return true
	}); err != nil {
		d.log.Warn().Err(err).Msg("reading the attempts of an installed snapshot failed; their leases will expire")
		return
	}
	// Attempts running here that the snapshot no longer has running here
	// (cancelled, timed out or replaced inside it) are aborted: the
	// events that would have aborted them were folded into the snapshot.
	current := make(map[attemptKey]bool, len(ts))
	for _, t := range ts {
		current[keyOf(t)] = true
	}
	d.mu.Lock()
	d.resumed = map[attemptKey]struct{}{}
	var stale []string
	for id, r := range d.running {
		if !current[attemptKey{id, r.epoch, r.run, r.attempt}] {
			stale = append(stale, id)
		}
	}
	d.mu.Unlock()
	for _, id := range stale {
		d.abort(id)
	}
	nowMs := d.clock.Now().UnixMilli()
	started := 0
	for _, t := range ts {
		if leaseEnded(t, nowMs) {
			continue // the leader's lease timer retries it
		}
		if _, orphan := d.orphans[keyOf(t)]; orphan {
			// This node's previous process ran it (it may have called the
			// executor) and Register reports it lost: the leader retries it.
			continue
		}
		d.mu.Lock()
		r := d.running[t.ID]
		running := r != nil && r.is(t)
		if !running {
			d.resumed[keyOf(t)] = struct{}{}
		}
		d.mu.Unlock()
		if !running {
			d.start(t, 0)
			started++
		}
	}
	if started > 0 {
		d.log.Info().Int("attempts", started).Msg("started the attempts of an installed snapshot that run on this node")
	}
}

func (d *Delivery) abort(id string) {
	d.mu.Lock()
	r := d.running[id]
	delete(d.running, id)
	d.mu.Unlock()
	if r != nil {
		r.cancel(errAborted)
	}
}

// start starts attempt t, whose state is as of Raft index index (its
// Fire's; 0 for an attempt read from an installed snapshot).
func (d *Delivery) start(t *raftfsm.Task, index uint64) {
	ctx, cancel := context.WithCancelCause(d.ctx)
	r := &attemptRun{epoch: t.Epoch, run: t.Run, attempt: t.Attempts, handler: t.Spec.Handler, cancel: cancel,
		timeout: time.Duration(t.Spec.TimeoutNs), appliedAt: d.clock.Now()}
	r.behind, r.catchUpTo = d.catchUpTarget(index)
	r.leaseMs.Store(t.LeaseMs)
	wctx, wend, wstop := d.waitContext(ctx)
	r.wait, r.endWait = wctx, wend
	d.mu.Lock()
	if d.stopped {
		d.mu.Unlock()
		wstop()
		cancel(nil)
		return
	}
	if old := d.running[t.ID]; old != nil {
		old.cancel(errAborted)
	}
	d.running[t.ID] = r
	d.wg.Add(1)
	d.active.Add(1)
	d.mu.Unlock()
	go func() {
		defer d.wg.Done()
		defer d.active.Add(-1)
		defer cancel(nil)
		defer wstop()
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
func (d *Delivery) executorsFor(handler string) []*raftfsm.Executor {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.self == nil { // read once after each change, not per attempt
		rec, err := d.store.Node(d.cfg.NodeID)
		if err != nil {
			return nil
		}
		d.self = rec
	}
	if d.forSelf != d.self { // the record changed: the matches too
		d.forSelf, d.forHandler = d.self, map[string][]*raftfsm.Executor{}
	}
	xs, ok := d.forHandler[handler]
	if !ok {
		xs = d.self.ExecutorsFor(handler)
		if len(d.forHandler) < forHandlerMax {
			d.forHandler[handler] = xs
		}
	}
	if len(d.down) == 0 {
		return xs // none down: the order stands
	}
	now := d.clock.Now()
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

// forHandlerMax bounds the handlers whose executors Delivery keeps
// matched (executorsFor).
const forHandlerMax = 4096

// downState is an executor that was unavailable (the request could not be
// given to it, see raftfsm.OutcomeUnavailable): THE record, in Delivery.down,
// that it is unavailable until its next probe, which the node's load
// report tells the leader. No callback is started to it before until
// (its next probe); a call that reaches it (any answer) ends the record
// (markUp).
type downState struct {
	// since is when the streak of unavailability began; until is the
	// next probe time.
	since, until time.Time
	// backoff is the wait before the next probe: ProbeBackoffMin after
	// the first failure, doubled by each failed probe up to
	// ProbeBackoffMax.
	backoff time.Duration
	// overloaded: the last failure was overload (the executor is there
	// but did not take the connection: EAGAIN, a slow connect); else it
	// is absent (refused, no socket file).
	overloaded bool
	dropped    bool
	// wake is closed when the executor answers again (markUp), waking the
	// attempts that wait on this node for its next probe.
	wake chan struct{}
}

// An unavailable executor is probed again after a backoff from
// ProbeBackoffMin doubling to ProbeBackoffMax, reset by any answer; an
// API-registered one unavailable for staleExecutorAfter is unregistered
// (its app died without unregistering).
const (
	ProbeBackoffMin    = 100 * time.Millisecond
	ProbeBackoffMax    = 5 * time.Second
	staleExecutorAfter = time.Minute
)

// markDown notes that executor x was unavailable (overloaded or absent)
// and sets its next probe time: the backoff doubles when the failed call
// was a probe (made at or after the last probe time), and stays for calls
// that were already under way. It unregisters x when the streak has
// lasted staleExecutorAfter (never one from a flag).
func (d *Delivery) markDown(x *raftfsm.Executor, overloaded bool) {
	key := x.Name + "|" + x.URL
	now := d.clock.Now()
	d.mu.Lock()
	st, ok := d.down[key]
	if !ok || now.Sub(st.until) > staleExecutorAfter {
		st = downState{since: now, wake: make(chan struct{})} // first failure, or an old streak
	}
	if !now.Before(st.until) {
		st.backoff = min(max(2*st.backoff, ProbeBackoffMin), ProbeBackoffMax)
		st.until = now.Add(st.backoff)
	}
	st.overloaded = overloaded
	drop := !x.FromFlag && !st.dropped && now.Sub(st.since) >= staleExecutorAfter
	st.dropped = st.dropped || drop
	d.down[key] = st
	d.mu.Unlock()
	if !drop {
		return
	}
	d.log.Warn().Str("executor", x.Name).Str("url", x.URL).Msg("executor unreachable for a minute: unregistering it")
	if d.unregisterStale != nil {
		d.unregisterStale(x)
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(d.ctx, 10*time.Second)
		defer cancel()
		if _, err := d.proposer.Propose(ctx, []raftfsm.Command{{Type: raftfsm.CmdExecutor, Executor: &raftfsm.ExecutorChange{
			Node: d.cfg.NodeID, Executor: raftfsm.Executor{Name: x.Name}, Remove: true}}}); err != nil {
			d.log.Warn().Err(err).Str("executor", x.Name).Msg("unregistering an unreachable executor failed")
		}
	}()
}

// markUp forgets that x was unavailable (it answered), which resets its
// probe backoff and wakes the attempts waiting for it.
func (d *Delivery) markUp(x *raftfsm.Executor) {
	d.mu.Lock()
	if len(d.down) == 0 {
		d.mu.Unlock()
		return
	}
	key := x.Name + "|" + x.URL
	st, ok := d.down[key]
	delete(d.down, key)
	d.mu.Unlock()
	if ok && st.wake != nil {
		close(st.wake)
	}
}

// deliver runs one callback of the attempt on executor x, within its
// concurrency slot; false when ctx or the attempt's wait ended first, or
// when it is not to be called (paused, or its handler's circuit open on
// this node: r says so, and run hands it back).
// tried is false when x was found unavailable (markDown) once the slot
// was granted: no callback was started, and out is OutcomeUnavailable.
func (d *Delivery) deliver(ctx context.Context, t *raftfsm.Task, r *attemptRun, x *raftfsm.Executor) (out callback.Outcome, ok, tried bool) {
	if d.circuitOpen(t, r) {
		// The handler's circuit is open on this node: back to the
		// leader without queueing for a slot (run hands it back).
		return callback.Outcome{}, false, false
	}
	sl := d.slot(x)
	d.queue(t.Spec.Handler, 1)
	wctx := r.waitCtx(ctx)
	tok, ok := sl.acquire(wctx, t.ID+"#"+strconv.FormatUint(r.epoch, 10)+"#"+strconv.Itoa(r.attempt), t.Spec.Priority)
	d.queue(t.Spec.Handler, -1)
	if !ok {
		return callback.Outcome{}, false, false
	}
	if wctx.Err() != nil {
		// Draining (or aborted) just as the slot was granted: the
		// callback does not start.
		tok.Done(engine.LimitDropped, 0)
		sl.grant()
		return callback.Outcome{}, false, false
	}
	if st, down := d.downUntil(x); down {
		// Found unavailable while this attempt waited for the slot: wait
		// for its next probe instead of adding to its overload.
		tok.Done(engine.LimitDropped, 0)
		sl.grant()
		return st.outcome(x, d.clock.Now()), true, false
	}
	if d.pausedNow(ctx, t, r) {
		// Paused while it waited for the slot: the slot goes to the next.
		tok.Done(engine.LimitDropped, 0)
		sl.grant()
		return callback.Outcome{}, false, false
	}
	ba, allowed := d.allowCall(t, r)
	if !allowed {
		// The handler's circuit is open on this node (or its probe is
		// out): not called, handed back by run; the slot goes to the next.
		tok.Done(engine.LimitDropped, 0)
		sl.grant()
		return callback.Outcome{}, false, false
	}
	start := d.clock.Now()
	r.callStart, r.execName = start, x.Name
	if r.startMs.Swap(start.UnixMilli()) == 0 {
		// Lateness: from the run's due time (not from the Fire: a late
		// timer or a slow commit is lateness too), once per attempt.
		d.m.late(t.Spec.Handler, start.Sub(time.UnixMilli(t.DueMs)))
	}
	// The attempt's timeout counts from its start, not from the Fire: it
	// may have waited for a slot (its lease was renewed meanwhile).
	deadline := start.Add(time.Duration(t.Spec.TimeoutNs))
	out = d.caller.Execute(ctx, x.URL, callback.Callback{
		TaskID: t.ID, Handler: t.Spec.Handler, Attempt: t.Attempts, Run: t.RunNumber(),
		Deadline: deadline, Payload: t.Spec.Payload, MaxIdleConns: sl.maxC,
		TraceParent: t.Spec.TraceParent, TraceState: t.Spec.TraceState,
		ShardIndex: t.Spec.ShardIndex, ShardTotal: t.Spec.ShardTotal, Path: shardsPath(t),
	})
	if ctx.Err() != nil {
		out.Kind = raftfsm.OutcomeCancelled
	}
	d.endCall(ba, t, out) // before the slot goes to the next attempt
	sl.release(tok, out)
	if out.Kind != raftfsm.OutcomeUnavailable && out.Kind != raftfsm.OutcomeCancelled {
		d.markUp(x)
	}
	d.m.attempt(t.Spec.Handler, out.Kind.MetricLabel(), out.Duration)
	if sl.orphan.Load() {
		d.pruneExecutors(nil) // its executor was unregistered meanwhile
	}
	return out, true, true
}

// slot bounds the callbacks in flight to one executor with an adaptive
// limit (engine.Limiter: between the executor's MinConcurrency and
// MaxConcurrency, default Config.MinConcurrency and Config.Concurrency; equal
// bounds give a fixed limit) and decides, when it is full, which waiting
// attempt goes next: engine.ReadyQueue's priorities with weighted round
// robin and a wait budget, FIFO within a priority. This is where priorities
// matter: a due attempt waits here only when its executor is saturated.
type slot struct {
	name  string
	m     *Metrics
	clock engine.Clock
	lim   *engine.Limiter
	mu    sync.Mutex
	ready *engine.ReadyQueue            // waiting attempts, by key
	wait  map[string]chan *engine.Token // key → receives its token when granted

	// minC and maxC are the limiter's bounds, from the executor's
	// registration (d.mu); a registration with other bounds changes them.
	minC, maxC int
	// stop ends the slot's loop when the slot is dropped; orphan is set
	// when its executor was unregistered while the slot was busy.
	stop   context.CancelFunc
	orphan atomic.Bool
	// gmu orders the writes of the slot's metric series with their
	// deletion: once dropped, the slot writes none (a late grant or limit
	// change would bring a deleted series back).
	gmu     sync.Mutex
	dropped bool
	// flightG and queueG are the slot's series of ExecutorFlight and
	// ExecutorQueue, looked up once (not per grant: a hash of the label
	// and a map lookup each); written only while !dropped.
	flightG, queueG prometheus.Gauge
	// parked is the share of its handlers' runs the leader holds back as
	// executor_busy (SetParked, load.go): backlog the limiter sees with its own.
	parked atomic.Int64
}

// readyCapacity bounds the attempts one executor queues. Far above any
// sane backlog: backpressure is applied at submit, not here.
const readyCapacity = 10_000_000

// LimiterMinDefault is the lowest concurrency an executor's adaptive limit
// goes down to, unless its registration says otherwise.
const LimiterMinDefault = 4

func (d *Delivery) slot(x *raftfsm.Executor) *slot {
	key := x.Name + "|" + x.URL
	minC, maxC := d.bounds(x)
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.slots[key]
	if s != nil {
		if s.minC != minC || s.maxC != maxC {
			d.rebound(s, minC, maxC)
		}
		return s
	}
	name := x.Name
	log := d.log
	m := d.m
	s = &slot{
		name: name, m: m, clock: d.clock, wait: map[string]chan *engine.Token{}, minC: minC, maxC: maxC,
		ready:   engine.NewReadyQueue(d.clock, engine.ReadyOptions{Capacity: readyCapacity}),
		flightG: m.ExecutorFlight.WithLabelValues(name), queueG: m.ExecutorQueue.WithLabelValues(name),
	}
	// A wider latency margin (1.5× the baseline before easing down) than
	// the limiter's default: on a busy 2-core host callbacks slow by
	// 10–20 % under load with no harm done. Slow start is the limiter's
	// (×8 per round trip, up to the demand), which the burst benchmark needs
	// to have the limit at 200 two round trips after the first answers
	// (ax bench burst).
	s.lim = engine.NewLimiter(d.clock, engine.LimiterOptions{Min: minC, Max: maxC, GrowTolerance: 1.5, OnChange: func(old, new int, reason string) {
		s.gmu.Lock()
		if !s.dropped {
			m.ExecutorLimit.WithLabelValues(name).Set(float64(new))
		}
		s.gmu.Unlock()
		log.Debug().Str("executor", name).Int("from", old).Int("to", new).Str("reason", reason).Msg("concurrency limit changed")
	}})
	m.ExecutorLimit.WithLabelValues(name).Set(float64(s.lim.Limit()))
	d.slots[key] = s
	ctx, cancel := context.WithCancel(d.ctx)
	s.stop = cancel
	go s.loop(ctx)
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
		s.observe(0)
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
		timer := s.clock.NewTimer(10 * time.Millisecond)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil, false
		case <-timer.C():
		}
		s.mu.Lock()
	}
	s.wait[key] = ch
	s.observe(s.ready.Len())
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
			s.observe(s.ready.Len())
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
	s.observe(s.ready.Len())
	s.gauges()
}

// release reports how the attempt that held tok ended and frees its slot.
func (s *slot) release(tok *engine.Token, out callback.Outcome) {
	// The executor's service time, not Duration: a connect that waited
	// for a full accept queue is not the executor being slow.
	tok.Done(limitSignal(out), out.Service)
	s.grant()
}

// limitSignal maps a callback's outcome to the limiter's signal: a 429/503 is
// busy, an executor that did not take the connection overload, a time-out
// a time-out, a 5xx or a connection error after the request was sent a
// failure, an absent executor or a cancel nothing; any other answer
// measures latency.
func limitSignal(out callback.Outcome) engine.LimitSignal {
	switch out.Kind {
	case raftfsm.OutcomeUnavailable:
		if out.Overloaded {
			return engine.LimitOverload
		}
		return engine.LimitDropped
	case raftfsm.OutcomeBusy:
		return engine.LimitBusy
	case raftfsm.OutcomeTimeout:
		return engine.LimitTimeout
	case raftfsm.OutcomeRetryable:
		return engine.LimitFailure
	case raftfsm.OutcomeCancelled:
		return engine.LimitDropped
	}
	return engine.LimitSuccess
}

// depths returns the waiting attempts by priority.
func (s *slot) depths() [engine.Priorities]int { return s.ready.Depths() }

// gauges updates the executor's metrics; s.mu is held.
func (s *slot) gauges() {
	s.gmu.Lock()
	defer s.gmu.Unlock()
	if s.dropped {
		return
	}
	s.flightG.Set(float64(s.lim.InFlight()))
	s.queueG.Set(float64(s.ready.Len()))
}

// queue counts attempts of handler waiting for a slot.
func (d *Delivery) queue(handler string, delta int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.queued[handler] += delta
	if d.queued[handler] <= 0 {
		delete(d.queued, handler)
	}
}

// QueuedByHandler copies the per-handler counts for a load report.
func (d *Delivery) QueuedByHandler() map[string]int {
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

// Backlog returns the attempts waiting for a slot on this node, by priority.
func (d *Delivery) Backlog() [engine.Priorities]int {
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

// pausedNow reports whether attempt r of t must not start because its
// task or its handler is paused, as this node knows once it has handed on
// the pause events it applied before (Pauses.Await); it then marks r to
// be handed back (pausedBack). The leader holds a paused run back before
// its Fire; this catches the pauses that apply after it, while the
// attempt waits here for its due time (the Fire goes FireLead early) or a
// slot. Without Deps.Pauses it reports false.
func (d *Delivery) pausedNow(ctx context.Context, t *raftfsm.Task, r *attemptRun) bool {
	if d.pauses == nil {
		return false
	}
	d.pauses.Await(ctx)
	// t.Paused: the Fire applied to a task already paused (proposed as the
	// pause applied; the FSM checks state, epoch and attempt, not the
	// pause), so no later pause event marks the attempt.
	if t.Paused || r.paused.Load() || d.pauses.Paused(t.Spec.Handler) {
		r.pausedBack.Store(true)
		return true
	}
	return false
}

func (d *Delivery) run(ctx context.Context, t *raftfsm.Task, r *attemptRun) {
	// The attempt's fields go on each event rather than into a sub-logger:
	// zerolog's Logger.With allocates a 500-byte context per call, about
	// 6 % of the node's CPU in the first seconds of ax bench burst, for
	// attempts that mostly log nothing. An event of a disabled level is nil, which ignores them.
	log := func(e *zerolog.Event) *zerolog.Event {
		if e == nil {
			return nil // disabled: not even the trace id is computed
		}
		return e.Str("task_id", t.ID).Str("trace_id", traceID(t)).Int("attempt", t.Attempts).Str("handler", t.Spec.Handler)
	}
	var out callback.Outcome
	xs := d.executorsFor(t.Spec.Handler)
	if d.isDraining() {
		// Assigned here after this node began to stop: back to the
		// leader at once (it routes it elsewhere).
		d.handBack(t, r)
		return
	}
	if len(xs) == 0 {
		// The executor went away (unregistered) after the leader chose this
		// node: not the task's fault, so a busy answer, not a failed attempt;
		// the leader routes the retry to a node that has one.
		out = callback.Outcome{Kind: raftfsm.OutcomeBusy, RetryAfter: time.Second, Error: "node " + d.cfg.NodeID + " has no executor for handler " + t.Spec.Handler}
	} else {
		// The Fire was committed up to FireLead before the due time: hold
		// the attempt until then, by this node's clock, so that a run is
		// never delivered early.
		if wait := time.UnixMilli(max(t.FiredMs, t.DueMs)).Sub(d.clock.Now()); wait > 0 {
			timer := d.clock.NewTimer(wait)
			select {
			case <-timer.C():
			case <-r.waitCtx(ctx).Done():
				timer.Stop()
				if ctx.Err() == nil { // draining, or its circuit opened here: hand it back
					d.handBack(t, r)
				}
				return
			}
		}
		if r.behind && !d.stillHere(ctx, t, r) {
			return
		}
		if d.pausedNow(ctx, t, r) {
			d.handBack(t, r)
			return
		}
		if sh := t.Spec.Shards; sh != nil && !sh.Ask {
			// Count mode: the run's first step needs no callback; its
			// Complete starts the shards.
			c := &raftfsm.Complete{ID: t.ID, Epoch: r.epoch, Attempt: r.attempt, Outcome: raftfsm.OutcomeSuccess, ShardCount: sh.Count}
			r.callStart = d.clock.Now() // the run's start, for its record
			r.facts(c, t, callback.Outcome{Kind: raftfsm.OutcomeSuccess})
			d.report(c, t)
			return
		}
		var ok bool
		if out, ok = d.deliverAvailable(ctx, t, r, xs, log); !ok {
			if ctx.Err() == nil && (r.pausedBack.Load() || r.circuitDueMs.Load() != 0 || r.waitCtx(ctx).Err() != nil) {
				// Paused, its circuit open here, or draining, before its
				// callback started.
				d.handBack(t, r)
			}
			return
		}
	}
	if ctx.Err() != nil { // aborted (cancel, replace, lease expiry) or stopping: nothing to report
		log(d.log.Debug()).Str("cause", context.Cause(ctx).Error()).Msg("attempt aborted")
		return
	}
	log(d.log.Debug()).Str("outcome", out.Kind.String()).Int("status", out.Status).Dur("took", out.Duration).Msg("attempt finished")
	c := &raftfsm.Complete{ID: t.ID, Epoch: r.epoch, Attempt: r.attempt, Error: out.Error}
	r.facts(c, t, out)
	switch out.Kind {
	case raftfsm.OutcomeAccepted:
		// 202: the executor reports through POST /v1/tasks/{id}/result and
		// keeps the lease alive with heartbeats; if it does neither, the
		// lease expires and the leader counts a TIMEOUT.
		return
	case raftfsm.OutcomeSuccess:
		c.Outcome = raftfsm.OutcomeSuccess
		if t.Spec.Shards != nil { // ask mode: the body is the count
			n, err := ParseShardCount(out.Body)
			if err != nil {
				c.Outcome, c.Error = raftfsm.OutcomeRetryable, err.Error()
				break
			}
			c.ShardCount = t.Spec.Shards.Bound(n)
		}
	case raftfsm.OutcomeBusy:
		c.Outcome = raftfsm.OutcomeBusy
		c.RetryAfterMs = out.RetryAfter.Milliseconds()
	case raftfsm.OutcomePermanent:
		c.Outcome = raftfsm.OutcomePermanent
	case raftfsm.OutcomeTimeout:
		c.Outcome = raftfsm.OutcomeTimeout
	case raftfsm.OutcomeUnavailable:
		// Absent (deliverAvailable keeps overloaded ones here): back to
		// the leader, not counted, due again at the next probe.
		c.Outcome = raftfsm.OutcomeUnavailable
		c.RetryAfterMs = max(out.RetryAfter, ProbeBackoffMin).Milliseconds()
	default:
		c.Outcome = raftfsm.OutcomeRetryable
	}
	d.report(c, t)
}

// shardsPath is the path of t's callback: ShardsPath for a sharded task
// in ask mode (its run's first step asks the count), "" otherwise.
func shardsPath(t *raftfsm.Task) string {
	if sh := t.Spec.Shards; sh != nil && sh.Ask {
		return callback.ShardsPath
	}
	return ""
}

// ParseShardCount reads an executor's answer to the shard-count question:
// a JSON object {"count": n}, n a JSON number of an integer value >= 1
// (3, 3.0 and 3e0 are 3: JSON has one number type, and an executor's
// encoder may write a whole float so), read as a float64 as JSON
// decoders read numbers (so 3.0000000000000001 is 3) and returned as at
// most math.MaxInt32 (the caller bounds it by the task's max). Other keys
// are ignored. Anything else is an error (the attempt failed: it is
// retried with the task's backoff): a body that is not such an object, no
// count, a count that is not a number (null, "3"), not an integer (3.5),
// below 1 or beyond a float64 (1e400), and count twice
// ({"count":3,"count":4}, or "Count" beside "count", which encoding/json
// matches too), which is ambiguous: the decoder kept the last one
// (ipc.CheckDuplicateKeys, as for the API's bodies).
func ParseShardCount(body []byte) (int, error) {
	if err := ipc.CheckDuplicateKeys(body); err != nil {
		return 0, fmt.Errorf("shards answer: want {\"count\": n}: %v", err)
	}
	var a struct {
		Count json.RawMessage `json:"count"`
	}
	if err := json.Unmarshal(body, &a); err != nil {
		return 0, fmt.Errorf("shards answer: want {\"count\": n}: %v", err)
	}
	if len(a.Count) == 0 || string(a.Count) == "null" {
		return 0, errors.New(`shards answer: want {"count": n}, no count`)
	}
	lit := string(a.Count)
	if c := lit[0]; c != '-' && (c < '0' || c > '9') {
		return 0, fmt.Errorf(`shards answer: want {"count": n}, count must be a JSON number, got %s`, clipLiteral(lit))
	}
	n, err := strconv.ParseFloat(lit, 64) // a valid JSON number: Unmarshal checked it
	switch {
	case err != nil:
		return 0, fmt.Errorf("shards answer: count %s: out of range", clipLiteral(lit))
	case n != math.Trunc(n):
		return 0, fmt.Errorf("shards answer: count %s: not an integer", clipLiteral(lit))
	case n < 1:
		return 0, fmt.Errorf("shards answer: count must be at least 1, got %s", clipLiteral(lit))
	}
	return int(min(n, math.MaxInt32)), nil // the caller bounds it by the max
}

// clipLiteral cuts a JSON literal of an executor's answer for a message.
func clipLiteral(lit string) string {
	if len(lit) > 32 {
		return lit[:32] + "..."
	}
	return lit
}

// facts fills in c what only this node knows of the attempt, for its run
// record (raftfsm.RunRecord): the executor, the HTTP status, when the Fire
// was applied here, the call's start, end and length, its wait for a slot
// (queue: from the apply, or the Fire's start time if later, to the call)
// and for a connection, and a success's body as the result. A call that
// did not reach an executor (OutcomeUnavailable) has no start: the run's
// start and lateness come from the first call that did.
func (r *attemptRun) facts(c *raftfsm.Complete, t *raftfsm.Task, out callback.Outcome) {
	c.Executor, c.HTTPStatus = r.execName, out.Status
	if !r.appliedAt.IsZero() {
		c.AppliedMs = r.appliedAt.UnixMilli()
	}
	if !r.callStart.IsZero() && out.Kind != raftfsm.OutcomeUnavailable {
		c.StartedMs = r.callStart.UnixMilli()
		c.EndedMs = r.callStart.Add(out.Duration).UnixMilli()
		c.DurationNs = int64(out.Duration)
		from := r.appliedAt
		if fired := time.UnixMilli(max(t.FiredMs, t.DueMs)); fired.After(from) {
			from = fired // held here until its due time: not queueing
		}
		c.QueueNs = max(0, int64(r.callStart.Sub(from)))
		c.ConnectNs = int64(out.Connect)
	}
	if out.Kind == raftfsm.OutcomeSuccess && len(out.Body) > 0 {
		c.Result, c.ResultBinary = EncodeResult(out.Body)
		c.ResultTruncated = out.BodyTruncated
	}
}

// EncodeResult returns a result body as stored: JSON text as it is
// (binary false), any other bytes as they are with binary true (the API
// shows them in base64). JSON text is UTF-8 (RFC 8259 section 8.1), which
// json.Valid does not check: {"a":"\xff"} is binary, or the task's view
// and its runs would splice it in raw and not be JSON.
func EncodeResult(body []byte) (stored []byte, binary bool) {
	return body, !utf8.Valid(body) || !json.Valid(body)
}

// traceID is the trace id of t's callbacks, in hex, for log lines
// (axapi.TraceOf).
func traceID(t *raftfsm.Task) string {
	id, _ := axapi.TraceOf(t.Spec.TraceParent, t.ID)
	return hex.EncodeToString(id[:])
}

// traceField adds trace_id to an enabled log event.
func traceField(t *raftfsm.Task) func(*zerolog.Event) {
	return func(e *zerolog.Event) { e.Str("trace_id", traceID(t)) }
}

// report proposes an attempt's outcome until it commits (through
// elections: the leader at the time takes it) or reportTimeout passes, or
// the node stops. Reports that meet go in one proposal (reportBatcher).
func (d *Delivery) report(c *raftfsm.Complete, t *raftfsm.Task) {
	rctx, cancel := context.WithTimeout(d.ctx, reportTimeout)
	defer cancel()
	for {
		err := d.reports.submit(rctx, raftfsm.Command{Type: raftfsm.CmdComplete, Complete: c})
		if err == nil {
			return
		}
		if rctx.Err() != nil {
			d.log.Warn().Str("task_id", t.ID).Func(traceField(t)).Int("attempt", c.Attempt).Err(err).Msg("could not report the outcome; the lease will expire and the leader retries")
			return
		}
		// No leader for a while (no quorum): keep trying until the
		// report deadline; the report is idempotent.
		timer := d.retry.NewTimer(200 * time.Millisecond)
		select {
		case <-rctx.Done():
			timer.Stop()
		case <-timer.C():
		}
	}
}

// renewInterval is how often a node renews the leases of its attempts that
// still wait for an executor slot.
const renewInterval = time.Second

// RenewLeases keeps alive the leases of attempts assigned to this node
// that wait for an executor slot (or whose callback is still running): the
// leader gives an attempt timeout + grace from its Fire, and without
// renewal an attempt queued behind a saturated executor would be timed out
// and fired again (a duplicate, and a lost attempt). Every renewInterval,
// the attempts whose lease ends within grace/2 + renewInterval get one
// batched heartbeat (CmdLease) to now + timeout + grace, in entries of at
// most MaxBatchCommands.
func (d *Delivery) RenewLeases(ctx context.Context) {
	t := d.clock.NewTimer(renewInterval)
	defer t.Stop()
	grace := d.cfg.LeaseGrace
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		t.Reset(renewInterval)
		now := d.clock.Now()
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
			k := min(len(cmds), d.cfg.MaxBatchCommands)
			rctx, cancel := context.WithTimeout(ctx, renewInterval*5)
			res, err := d.proposer.Propose(rctx, cmds[:k])
			cancel()
			if err != nil {
				d.log.Warn().Err(err).Int("attempts", k).Msg("renewing leases of queued attempts failed")
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

// Stop aborts every attempt running here and waits for them.
func (d *Delivery) Stop() {
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
