package sidecar

import (
	"context"
	"errors"
	"hash/fnv"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/axsched/ax/engine"
	"github.com/axsched/ax/raftfsm"
)

// Timer keys: "d|<id>" fires a WAITING task at its due time; "l|<id>" ends
// a RUNNING attempt whose lease expired; "w|" loads the next stretch of
// the load window.
const (
	dueKeyPrefix   = "d|"
	leaseKeyPrefix = "l|"
	windowKey      = "w|"
	// windowRetry is how soon a failed window load is tried again.
	windowRetry = time.Second
	// noExecutorRetry is how long a due task with no live executor node
	// waits before the leader looks again.
	noExecutorRetry = 500 * time.Millisecond
	// catchUpSlack is how far behind the leader's commit index a node may
	// be (at its last report) and still get attempts.
	catchUpSlack = 200
	// handlerCapRetry is how soon a due task held back by its handler's
	// cluster-wide cap is looked at again.
	handlerCapRetry = 50 * time.Millisecond
)

// leaderState is the work only the leader does: it keeps a timer per
// WAITING task (its due time) and per RUNNING attempt (its lease), and
// turns fired timers into Fire and Complete(TIMEOUT) commands. Everything
// it decides is checked again against the FSM when the timer fires, so a
// stale timer is harmless; the FSM checks it once more when the command
// applies, so a deposed leader's late command changes nothing.
type leaderState struct {
	n *Node

	mu       sync.Mutex
	timers   *engine.Timers // nil unless leading
	cancel   context.CancelFunc
	done     chan struct{}
	lastSeen map[string]time.Time // node id → last load report
	rr       uint64
	// due holds the runs that are due (or within FireLead of it) but not
	// yet fired: waiting for a live executor, or for their Fire to
	// commit. With the nodes' queued reports it is the handler backlog
	// that submits are admitted against (backpressure).
	due          map[string]dueRun
	dueByHandler map[string]int            // len(due) per handler
	queued       map[string]map[string]int // node id → handler → attempts waiting for an executor slot
	// load is each node's callbacks in flight and queued at its last
	// report; assigned, the attempts given to it since (least_loaded).
	load, assigned map[string]int
	applied        map[string]uint64 // node id → applied index at its last report
	// running counts RUNNING attempts per handler, runningIDs their tasks
	// (the cluster-wide per-handler cap).
	running    map[string]int
	runningIDs map[string]string
	// breakers is the circuit breaker per handler; probes holds, per task
	// id, the breaker attempt of its fired attempt (a task has at most one
	// RUNNING), ended when the attempt leaves RUNNING (reportProbe) or
	// does not start after all.
	breakers *engine.Breakers
	probes   map[string]*probe
	jumps    uint64 // clock jumps of earlier terms' timers
	// horizonMs is the end of the load window (Unix ms): every WAITING
	// task due at or before it has a timer; later ones stay in the store
	// until loadWindow reaches them (DESIGN §4 step 2).
	// Written under mu (with the timers check), read without it.
	horizonMs atomic.Int64
}

func newLeaderState(n *Node) *leaderState {
	return &leaderState{n: n, lastSeen: map[string]time.Time{}, due: map[string]dueRun{}, dueByHandler: map[string]int{}, queued: map[string]map[string]int{},
		load: map[string]int{}, assigned: map[string]int{}, applied: map[string]uint64{}, running: map[string]int{}, runningIDs: map[string]string{},
		breakers: newBreakers(n), probes: map[string]*probe{}}
}

// start begins leading: it arms timers from the store and runs them until
// stop. Events that arrive while it loads are armed too (arming is
// idempotent).
func (l *leaderState) start(parent context.Context) {
	l.mu.Lock()
	if l.timers != nil {
		l.mu.Unlock()
		return
	}
	ctx, cancel := context.WithCancel(parent)
	timers := engine.NewTimers(l.n.clock, engine.TimersOptions{})
	l.timers, l.cancel, l.done = timers, cancel, make(chan struct{})
	l.horizonMs.Store(math.MinInt64) // nothing loaded yet; onEvent arms nothing
	done := l.done
	l.mu.Unlock()

	go func() {
		defer close(done)
		// Barrier: every entry of earlier terms is applied before we read
		// the store, so the scan sees all committed tasks.
		if err := l.n.raft.Barrier(10 * time.Second).Error(); err != nil {
			l.n.log.Warn().Err(err).Msg("barrier after election failed; not firing")
			return
		}
		waiting, err := l.loadWindow(timers)
		running := 0
		if err == nil {
			err = l.n.fsm.Running(func(t *raftfsm.Task) bool {
				l.trackRunning(t)
				timers.Arm(leaseKeyPrefix+t.ID, time.UnixMilli(t.LeaseMs))
				running++
				return true
			})
		}
		if err != nil {
			l.n.log.Error().Err(err).Msg("loading timers from the store failed")
			return
		}
		l.n.log.Info().Int("waiting", waiting).Int("running", running).Dur("window", l.n.cfg.LoadWindow).Msg("leader armed timers from the store")
		timers.Run(ctx, func(batch []engine.Expired) { l.fired(ctx, batch) })
	}()
}

// stop ends leading and drops every timer.
func (l *leaderState) stop() {
	l.mu.Lock()
	cancel, done := l.cancel, l.done
	if l.timers != nil {
		l.jumps += l.timers.Stats().ClockJumps
	}
	l.timers, l.cancel, l.done = nil, nil, nil
	clear(l.due)
	clear(l.dueByHandler)
	// Their outcomes will commit in another term, if at all: abandon
	// them, or a probe among them would hold its handler half-open.
	probes := make([]*probe, 0, len(l.probes))
	for _, p := range l.probes {
		probes = append(probes, p)
	}
	clear(l.probes)
	clear(l.running)
	clear(l.runningIDs)
	l.mu.Unlock()
	for _, p := range probes {
		p.attempt.Abandon()
	}
	if cancel != nil {
		cancel()
		<-done
	}
}

// loadWindow extends the load window to now + LoadWindow: it arms the
// WAITING tasks due after the old horizon and up to the new one (at
// start, every task due up to it, overdue ones included) and arms the
// next load for half a window before the new horizon. The horizon moves
// before the store is read, so a task applied meanwhile is armed either
// by onEvent (applied after the move) or by the scan (applied before it:
// the scan's read view is newer). A timer armed from a view that is
// already stale is harmless: fire checks every task again. It returns
// how many tasks it armed.
func (l *leaderState) loadWindow(timers *engine.Timers) (int, error) {
	now := l.n.clock.Now()
	l.mu.Lock()
	if l.timers != timers { // stopped leading meanwhile
		l.mu.Unlock()
		return 0, nil
	}
	from := l.horizonMs.Load()
	to := max(from, now.Add(l.n.cfg.LoadWindow).UnixMilli())
	l.horizonMs.Store(to)
	l.mu.Unlock()
	armed := 0
	err := l.n.fsm.DueBetween(from, to, func(id string, dueMs int64) bool {
		timers.Arm(dueKeyPrefix+id, l.fireAt(dueMs))
		armed++
		return true
	})
	if err != nil {
		// Load the same stretch again soon; what was armed stays armed.
		l.mu.Lock()
		if l.timers == timers && l.horizonMs.Load() == to {
			l.horizonMs.Store(from)
		}
		l.mu.Unlock()
		timers.Arm(windowKey, now.Add(windowRetry))
		return armed, err
	}
	timers.Arm(windowKey, time.UnixMilli(to).Add(-l.n.cfg.LoadWindow/2))
	return armed, nil
}

// armDue arms the due timer of a WAITING task if its due time is inside
// the load window, and drops it otherwise (the window will reach it).
func (l *leaderState) armDue(timers *engine.Timers, id string, dueMs int64) {
	if dueMs <= l.horizonMs.Load() {
		timers.Arm(dueKeyPrefix+id, l.fireAt(dueMs))
	} else {
		timers.Cancel(dueKeyPrefix + id)
	}
}

func (l *leaderState) currentTimers() *engine.Timers {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.timers
}

// onEvent keeps the timers in step with an applied change.
func (l *leaderState) onEvent(ev *raftfsm.Event) {
	if ev.Task == nil {
		return
	}
	timers := l.currentTimers()
	if timers == nil {
		return
	}
	t := ev.Task
	if ev.Prev == raftfsm.StateRunning && (ev.Type != raftfsm.CmdLease) {
		// The attempt ended (or was cancelled / replaced): report it to
		// the handler's circuit breaker.
		l.reportProbe(t, ev)
	}
	if ev.Type == raftfsm.CmdComplete {
		switch {
		case t.State == raftfsm.StateDead:
			l.n.metrics.dead.WithLabelValues(t.Spec.Handler).Inc()
		case t.State == raftfsm.StateWaiting && ev.Outcome != raftfsm.OutcomeBusy && ev.Outcome != raftfsm.OutcomeSuccess:
			l.n.metrics.retries.WithLabelValues(t.Spec.Handler).Inc()
		}
	}
	l.trackRunning(t)
	if t.State == raftfsm.StateWaiting && t.DueMs <= time.Now().Add(l.n.cfg.FireLead).UnixMilli() {
		l.park(t.ID, t.Spec.Handler, t.Spec.Priority)
	} else {
		l.unpark(t.ID)
	}
	switch t.State {
	case raftfsm.StateWaiting:
		timers.Cancel(leaseKeyPrefix + t.ID)
		l.armDue(timers, t.ID, t.DueMs)
	case raftfsm.StateRunning:
		timers.Cancel(dueKeyPrefix + t.ID)
		timers.Arm(leaseKeyPrefix+t.ID, time.UnixMilli(t.LeaseMs))
	default:
		timers.Cancel(dueKeyPrefix + t.ID)
		timers.Cancel(leaseKeyPrefix + t.ID)
	}
}

// report records a node's load report.
func (l *leaderState) report(r loadReport) {
	l.mu.Lock()
	l.lastSeen[r.ID] = time.Now()
	l.queued[r.ID] = r.Queued
	q := 0
	for _, n := range r.Queued {
		q += n
	}
	l.load[r.ID], l.assigned[r.ID] = r.InFlight+q, 0
	l.applied[r.ID] = r.Applied
	l.mu.Unlock()
}

// fired handles one batch of expired timers. Proposing waits for a commit,
// so it runs off the timer goroutine.
func (l *leaderState) fired(ctx context.Context, batch []engine.Expired) {
	var due, leases []string
	for _, e := range batch {
		if e.Key == windowKey {
			go l.refill()
		} else if id, ok := strings.CutPrefix(e.Key, dueKeyPrefix); ok {
			due = append(due, id)
		} else if id, ok := strings.CutPrefix(e.Key, leaseKeyPrefix); ok {
			leases = append(leases, id)
		}
	}
	go l.fire(ctx, due, leases)
}

func (l *leaderState) fire(ctx context.Context, due, leases []string) {
	n := l.n
	now := n.clock.Now()
	nowMs := now.UnixMilli()
	nodes, err := n.fsm.Nodes()
	if err != nil {
		n.log.Error().Err(err).Msg("reading nodes failed")
	}
	nodes = n.members(nodes)
	var cmds []raftfsm.Command
	var probes []*probe       // per command: the Fire's breaker attempt
	fired := map[string]int{} // per handler, in this batch
	for _, id := range due {
		t, err := n.fsm.Task(id)
		if err != nil || t.State != raftfsm.StateWaiting {
			continue
		}
		if t.DueMs > nowMs+l.n.cfg.FireLead.Milliseconds() { // re-armed since, or the clock moved back
			if timers := l.currentTimers(); timers != nil {
				l.armDue(timers, id, t.DueMs)
			}
			continue
		}
		avoid := ""
		if t.Attempts > 0 {
			avoid = t.Node // a retry goes elsewhere when it can
		}
		if limit := n.cfg.HandlerLimits[t.Spec.Handler]; limit > 0 && l.runningOf(t.Spec.Handler)+fired[t.Spec.Handler] >= limit {
			// The handler's cluster-wide cap is reached: wait for a slot.
			l.park(id, t.Spec.Handler, t.Spec.Priority)
			l.rearm(dueKeyPrefix+id, now.Add(handlerCapRetry))
			continue
		}
		ba, cerr := l.breakers.AllowAttempt(t.Spec.Handler)
		if cerr != nil {
			// The handler's circuit is open: the run waits (not fails)
			// until the cool-down ends and a probe decides.
			var open *engine.CircuitOpenError
			retry := now.Add(noExecutorRetry)
			if errors.As(cerr, &open) && !open.Until.IsZero() {
				retry = open.Until
			}
			l.park(id, t.Spec.Handler, t.Spec.Priority)
			l.rearm(dueKeyPrefix+id, retry)
			continue
		}
		node := l.pick(nodes, t.Spec.Handler, avoid, t.Spec.RouteKey, now)
		if node == "" {
			ba.Abandon() // no attempt: says nothing of the handler
			n.log.Debug().Str("task_id", id).Str("handler", t.Spec.Handler).Msg("no live executor for handler; waiting")
			l.park(id, t.Spec.Handler, t.Spec.Priority)
			l.rearm(dueKeyPrefix+id, now.Add(noExecutorRetry))
			continue
		}
		fired[t.Spec.Handler]++
		p := &probe{id: id, epoch: t.Epoch, run: t.Run, attempt: ba}
		l.setProbe(p)
		probes = append(probes, p)
		// The attempt starts at the due time, or now when late; the node
		// that delivers waits for it (see fireAt).
		startMs := max(nowMs, t.DueMs)
		cmds = append(cmds, raftfsm.Command{Type: raftfsm.CmdFire, Fire: &raftfsm.Fire{
			ID: id, Epoch: t.Epoch, Attempt: t.Attempts + 1, Node: node, AtMs: startMs,
			LeaseMs: startMs + (time.Duration(t.Spec.TimeoutNs) + n.cfg.LeaseGrace).Milliseconds(),
		}})
	}
	for _, id := range leases {
		t, err := n.fsm.Task(id)
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
		probes = append(probes, nil)
	}
	// In entries of at most MaxBatchCommands: a flood of runs due at one
	// instant must not make one huge entry.
	for len(cmds) > 0 {
		k := min(len(cmds), n.cfg.MaxBatchCommands)
		results, err := n.proposer.propose(ctx, cmds[:k])
		if err != nil {
			// Leadership was lost or raft failed: the next leader re-arms
			// from the store, so nothing is lost. These Fires may or may
			// not commit, the rest will not: end their breaker attempts
			// with no outcome (an attempt that starts anyway runs
			// without one).
			if ctx.Err() == nil {
				n.log.Warn().Err(err).Int("commands", k).Msg("proposing fired timers failed")
			}
			for _, p := range probes {
				l.dropProbe(p)
			}
			return
		}
		for i, r := range results {
			if r.Code != raftfsm.CodeOK { // a stale Fire: no attempt started
				l.dropProbe(probes[i])
			}
		}
		cmds, probes = cmds[k:], probes[k:]
	}
}

// refill loads the next stretch of the load window (the windowKey timer).
func (l *leaderState) refill() {
	timers := l.currentTimers()
	if timers == nil {
		return
	}
	n, err := l.loadWindow(timers)
	if err != nil {
		l.n.log.Error().Err(err).Msg("loading the next window of tasks failed; retrying")
		return
	}
	l.n.log.Debug().Int("armed", n).Msg("leader loaded the next window of tasks")
}

// fireAt is when the leader proposes the Fire of a run due at dueMs:
// FireLead before it, so that the Raft commit of the Fire (a few
// milliseconds, more under load) happens before the due time instead of
// adding to the lateness. The delivering node holds the attempt until the
// due time by its own clock, so a run is still never delivered early.
func (l *leaderState) fireAt(dueMs int64) time.Time {
	return time.UnixMilli(dueMs).Add(-l.n.cfg.FireLead)
}

func (l *leaderState) rearm(key string, at time.Time) {
	if timers := l.currentTimers(); timers != nil {
		timers.Arm(key, at)
	}
}

// Routing modes (Config.Routing); a task with a route_key is always
// routed by hash.
const (
	RoutingLeastLoaded = "least_loaded"
	RoutingRoundRobin  = "round_robin"
	RoutingHash        = "hash"
)

// pick chooses the node for an attempt of handler among the live nodes
// that have an executor for it. A node is live when it is this node or it
// reported within nodeLiveness; right after an election the other nodes
// count only once their first report arrives (within reportInterval), so
// a dead former leader never gets an attempt.
//
// A node whose executor is saturated for the handler (attempts waiting for
// a slot in its last report) is skipped while another is not (seed 000's
// resource watermark), and a retry avoids the node whose attempt failed
// (avoid): its executor may be the cause. Among the rest:
//
//   - routeKey != "": rendezvous (highest random weight) hashing of the key
//     over the candidates, so one key goes to one node while membership is
//     stable, and only the keys of a node that leaves move (Thaler and
//     Ravishankar, 1998);
//   - least_loaded (default): the fewest callbacks in flight and queued by
//     the last report, plus attempts assigned since;
//   - round_robin: in turn.
func (l *leaderState) pick(nodes []raftfsm.Node, handler, avoid, routeKey string, now time.Time) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var live []string
	for i := range nodes {
		nd := &nodes[i]
		if !nd.Runs(handler) {
			continue
		}
		seen, ok := l.lastSeen[nd.ID]
		if nd.ID == l.n.cfg.NodeID || (ok && now.Sub(seen) < nodeLiveness) {
			live = append(live, nd.ID)
		}
	}
	drop := func(keep func(string) bool) {
		var kept []string
		for _, id := range live {
			if keep(id) {
				kept = append(kept, id)
			}
		}
		if len(kept) > 0 {
			live = kept
		}
	}
	if avoid != "" {
		drop(func(id string) bool { return id != avoid })
	}
	// A node that is still catching up (just restarted) would deliver late:
	// skip it while another can run the handler.
	if commit := l.commitIndex(); commit > 0 {
		drop(func(id string) bool {
			return id == l.n.cfg.NodeID || l.applied[id]+catchUpSlack >= commit
		})
	}
	drop(func(id string) bool { return l.queued[id][handler] == 0 })
	if len(live) == 0 {
		return ""
	}
	var chosen string
	switch {
	case routeKey != "" || l.n.cfg.Routing == RoutingHash:
		key := routeKey
		if key == "" {
			key = handler
		}
		var best uint64
		for _, id := range live {
			h := fnv.New64a()
			h.Write([]byte(key))
			h.Write([]byte{0})
			h.Write([]byte(id))
			if w := h.Sum64(); chosen == "" || w > best {
				chosen, best = id, w
			}
		}
	case l.n.cfg.Routing == RoutingRoundRobin:
		l.rr++
		chosen = live[l.rr%uint64(len(live))]
	default: // least loaded; ties in turn
		l.rr++
		bestLoad := -1
		for k := range live {
			id := live[(int(l.rr)+k)%len(live)]
			load := l.load[id] + l.assigned[id]
			if bestLoad < 0 || load < bestLoad {
				chosen, bestLoad = id, load
			}
		}
	}
	l.assigned[chosen]++
	return chosen
}

// memberView is the leader's view of one member, for GET /v1/cluster.
type memberView struct {
	Reachable     bool   `json:"reachable"`
	LastContactMs int64  `json:"last_contact_ms"`
	AppliedIndex  uint64 `json:"applied_index"`
}

// commitIndex is Raft's commit index (0 without Raft, in unit tests).
func (l *leaderState) commitIndex() uint64 {
	if l.n.raft == nil {
		return 0
	}
	return l.n.raft.CommitIndex()
}

// running counts the RUNNING attempts of handler (for Config.HandlerLimits).
func (l *leaderState) runningOf(handler string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.running[handler]
}

// probe is the breaker attempt of a fired attempt of task id, in
// leaderState.probes, with the task's epoch and run when it was fired.
type probe struct {
	id      string
	epoch   uint64
	run     int
	attempt *engine.BreakerAttempt
}

// setProbe records p as the breaker attempt of the attempt of task p.id
// being fired. A probe still recorded for the task belongs to no RUNNING
// attempt (the task was WAITING when read): it is abandoned.
func (l *leaderState) setProbe(p *probe) {
	l.mu.Lock()
	old := l.probes[p.id]
	l.probes[p.id] = p
	l.mu.Unlock()
	if old != nil {
		old.attempt.Abandon()
	}
}

// dropProbe abandons p, the breaker attempt of a Fire that did not
// apply, unless it is already gone (p nil, or reported).
func (l *leaderState) dropProbe(p *probe) {
	if p == nil {
		return
	}
	l.mu.Lock()
	if l.probes[p.id] == p {
		delete(l.probes, p.id)
	}
	l.mu.Unlock()
	p.attempt.Abandon() // ignored if already ended
}

// reportProbe tells the handler's breaker how the attempt that just left
// RUNNING (ev: Prev is RUNNING, t is the task after ev) ended: a failed or
// timed-out attempt counts as a failure; a success, a permanent (4xx)
// answer, a busy answer, a lost lease, a cancel or an overwrite does not.
// The probe is found by task id, since a task has one RUNNING attempt at
// most: by its attempt number it could not be, as a recurring task's next
// run starts at attempt 0 and an overwrite starts a new task. A recorded
// probe that is not that attempt's (another epoch or run) is abandoned.
func (l *leaderState) reportProbe(t *raftfsm.Task, ev *raftfsm.Event) {
	l.mu.Lock()
	p := l.probes[t.ID]
	delete(l.probes, t.ID)
	l.mu.Unlock()
	if p == nil {
		return
	}
	// The ended attempt's epoch and run, as ev tells them: an overwrite
	// ended the replaced task's attempt (another epoch), and a completed
	// run of a recurring task may have moved on to the next run.
	mine := true
	switch ev.Type {
	case raftfsm.CmdSubmit:
		mine = p.epoch != t.Epoch
	case raftfsm.CmdComplete:
		mine = p.epoch == t.Epoch && (p.run == t.Run || p.run == t.Run-1 && t.State == raftfsm.StateWaiting && t.Attempts == 0)
	case raftfsm.CmdCancel:
		mine = p.epoch == t.Epoch && p.run == t.Run
	}
	if !mine {
		p.attempt.Abandon()
		return
	}
	failed := ev.Type == raftfsm.CmdComplete && (ev.Outcome == raftfsm.OutcomeRetryable || ev.Outcome == raftfsm.OutcomeTimeout)
	p.attempt.Done(!failed)
}

// newBreakers makes the leader's per-handler circuit breakers; state
// changes are logged and counted.
func newBreakers(n *Node) *engine.Breakers {
	return engine.NewBreakers(n.clock, engine.BreakerOptions{
		ConsecutiveFailures: n.cfg.BreakerFailures,
		CoolDown:            n.cfg.BreakerCoolDown,
		OnStateChange: func(handler string, from, to engine.BreakerState) {
			n.log.Warn().Str("handler", handler).Str("from", from.String()).Str("to", to.String()).Msg("circuit breaker state changed")
		},
	})
}

// trackRunning keeps the per-handler count of RUNNING attempts.
func (l *leaderState) trackRunning(t *raftfsm.Task) {
	l.mu.Lock()
	defer l.mu.Unlock()
	h, was := l.runningIDs[t.ID]
	is := t.State == raftfsm.StateRunning
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

// dueRun is a run in leaderState.due.
type dueRun struct {
	handler  string
	priority int
}

func (l *leaderState) park(id, handler string, prio int) {
	l.mu.Lock()
	if old, ok := l.due[id]; ok {
		l.dueCount(old.handler, -1)
	}
	l.due[id] = dueRun{handler, prio}
	l.dueCount(handler, 1)
	l.mu.Unlock()
}

func (l *leaderState) unpark(id string) {
	l.mu.Lock()
	if old, ok := l.due[id]; ok {
		l.dueCount(old.handler, -1)
		delete(l.due, id)
	}
	l.mu.Unlock()
}

// dueCount keeps dueByHandler in step with due; l.mu is held.
func (l *leaderState) dueCount(handler string, d int) {
	if l.dueByHandler[handler] += d; l.dueByHandler[handler] <= 0 {
		delete(l.dueByHandler, handler)
	}
}

// depth returns the backlog of handler: its due runs not yet fired, plus
// the attempts waiting for an executor slot on every node (from their last
// load reports).
func (l *leaderState) depth(handler string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.dueByHandler[handler] // O(1): admission runs for every submit
	for _, q := range l.queued {
		n += q[handler]
	}
	return n
}

// backlog counts the runs this leader holds due but undelivered, by
// priority (index 0 … 4).
func (l *leaderState) backlog() []int {
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

// clockJumps counts the wall-clock jumps the leader's timers detected,
// over every term this node led.
func (l *leaderState) clockJumps() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	j := l.jumps
	if l.timers != nil {
		j += l.timers.Stats().ClockJumps
	}
	return j
}

// armed returns how many timers the leader has armed (0 when not leading).
func (l *leaderState) armed() int {
	t := l.currentTimers()
	if t == nil {
		return 0
	}
	n := t.Len()
	if _, ok := t.Due(windowKey); ok {
		n-- // the window's own refill timer is not a task's
	}
	return n
}
