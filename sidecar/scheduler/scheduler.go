package scheduler

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/axsched/ax/engine"
	"github.com/axsched/ax/raftfsm"
)

// Config is what the scheduler reads of the node's configuration. The
// wire (sidecar/wire_scheduler.go) fills it from sidecar.Config with its
// defaults applied.
type Config struct {
	// NodeID is this node's id: its own capacity is read directly, and it
	// is live without load reports.
	NodeID string
	// LoadWindow is how far ahead of now due timers are armed; later
	// tasks stay in the store until the window reaches them.
	LoadWindow time.Duration
	// FireLead is how long before its due time a run's Fire is proposed
	// (the delivering node holds the attempt until the due time).
	FireLead time.Duration
	// LeaseGrace is added to a task's timeout to make its attempt's lease.
	LeaseGrace time.Duration
	// HistoryRuns bounds the run records per task; it goes into every Fire
	// (raftfsm.Fire.HistoryRuns: 0 the FSM's default, negative none).
	HistoryRuns int
	// Routing is RoutingLeastLoaded (also ""), RoutingRoundRobin or
	// RoutingHash.
	Routing string
	// HandlerLimits caps the RUNNING attempts per handler cluster-wide
	// (0 or absent: no cap).
	HandlerLimits map[string]int
	// MaxBatchCommands bounds the commands of one proposal (at least 1).
	MaxBatchCommands int
	// DeliveryConcurrency is an executor's max_concurrency when it names
	// none (at least 1); DeliveryMinConcurrency its limiter's starting
	// limit when it names none.
	DeliveryConcurrency, DeliveryMinConcurrency int
	// BreakerFailures and BreakerCoolDown configure the per-handler
	// circuit breakers (engine.BreakerOptions).
	BreakerFailures int
	BreakerCoolDown time.Duration
	// Liveness is how recent a node's last load report must be (by Wall)
	// for it to get attempts.
	Liveness time.Duration
}

// Store is what the scheduler reads from the FSM (*raftfsm.FSM has it).
type Store interface {
	// Task returns task id (raftfsm.ErrNotFound when absent).
	Task(id string) (*raftfsm.Task, error)
	// DueBetween calls fn for every WAITING task due in (fromMs, toMs].
	DueBetween(fromMs, toMs int64, fn func(id string, dueMs int64) bool) error
	// Running calls fn for every RUNNING task.
	Running(fn func(t *raftfsm.Task) bool) error
	// Nodes returns every node record.
	Nodes() ([]raftfsm.Node, error)
	// PausedHandlers returns the paused handlers, sorted.
	PausedHandlers() ([]string, error)
}

// Proposer commits commands through Raft and returns their results, one
// per command; an error means none or only some may have committed.
type Proposer interface {
	Propose(ctx context.Context, cmds []raftfsm.Command) ([]raftfsm.Result, error)
}

// ProposerFunc is a Proposer from a function.
type ProposerFunc func(ctx context.Context, cmds []raftfsm.Command) ([]raftfsm.Result, error)

// Propose calls f.
func (f ProposerFunc) Propose(ctx context.Context, cmds []raftfsm.Command) ([]raftfsm.Result, error) {
	return f(ctx, cmds)
}

// Raft is what the scheduler needs of the Raft node.
type Raft interface {
	// Barrier blocks until every entry of earlier terms is applied, at
	// most timeout.
	Barrier(timeout time.Duration) error
	// CurrentTerm is the Raft term this node is in.
	CurrentTerm() uint64
	// CommitIndex is the leader's commit index.
	CommitIndex() uint64
}

// Membership filters node records to the members of the Raft
// configuration (a removed node's record stays in the store). It may
// filter in place: it is given a copy.
type Membership interface {
	Members(nodes []raftfsm.Node) []raftfsm.Node
}

// Drain tells which nodes are stopping (they get no new attempts) and
// hears what their load reports say.
type Drain interface {
	// IsDraining reports whether node id (this node or another) drains.
	IsDraining(id string) bool
	// NoteDraining records node id's load report: draining or not.
	NoteDraining(id string, draining bool)
}

// LocalCapacity reads this node's executors and their load (its
// delivery), once per drain.
type LocalCapacity interface {
	Capacity() []ExecutorLoad
}

// Counters are the node's metrics the scheduler counts in (the node
// keeps and registers the collectors).
type Counters interface {
	// Dead counts a task of handler that became DEAD.
	Dead(handler string)
	// Retry counts an attempt of handler that failed and will be retried.
	Retry(handler string)
}

// Deps is what the scheduler is given by the node. Store, Proposer and
// Clock are required; the rest may be nil (a unit test's leader: no Raft,
// every node a member, none draining, no local delivery, no pauses, nothing counted).
type Deps struct {
	Store    Store
	Proposer Proposer
	Raft     Raft
	Members  Membership
	Drain    Drain
	Local    LocalCapacity
	// Pauses is the node's set of paused handlers (nil: none); a due run
	// is paused when its task or its handler is.
	Pauses   *Pauses
	Counters Counters
	Log      zerolog.Logger
	// Clock drives the timers and judges due times and leases.
	Clock engine.Clock
	// Wall judges the nodes' load reports and executor unavailability,
	// which the nodes stamp with their wall clocks. Nil: engine.RealClock().
	Wall engine.Clock
}

// Timer keys: "d|<id>" fires a WAITING task at its due time; "l|<id>" ends
// a RUNNING attempt whose lease expired; "w|" loads the next stretch of
// the load window; "c|<handler>" is the handler's circuit half-opening.
const (
	dueKeyPrefix     = "d|"
	leaseKeyPrefix   = "l|"
	windowKey        = "w|"
	circuitKeyPrefix = "c|"
	// windowRetry is how soon a failed window load is tried again.
	windowRetry = time.Second
	// catchUpSlack is how far behind the leader's commit index a node may
	// be (at its last report) and still get attempts.
	catchUpSlack = 200
	// barrierTimeout bounds the barrier at the start of a term.
	barrierTimeout = 10 * time.Second
)

// Scheduler is the work only the leader does: it keeps a timer per
// WAITING task (its due time) and per RUNNING attempt (its lease), and
// turns fired timers into Fire and Complete(LOST) commands. Everything
// it decides is checked again against the FSM when the timer fires, so a
// stale timer is harmless; the FSM checks it once more when the command
// applies, so a deposed leader's late command changes nothing. Create it
// with New; Start and Stop begin and end a term.
type Scheduler struct {
	cfg      Config
	store    Store
	proposer Proposer
	raft     Raft
	members  Membership
	drain    Drain
	local    LocalCapacity
	pauses   *Pauses
	counters Counters
	log      zerolog.Logger
	clock    engine.Clock
	wall     engine.Clock

	mu       sync.Mutex
	timers   *engine.Timers // nil unless leading
	loaded   bool           // this term's barrier has passed and its store load is done
	cancel   context.CancelFunc
	done     chan struct{}
	lastSeen map[string]time.Time // node id → last load report (Wall)
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
	unwritable     map[string]bool   // node ids whose last report said their storage is unavailable
	// running counts RUNNING attempts per handler, runningIDs their tasks
	// (the cluster-wide per-handler cap).
	running    map[string]int
	runningIDs map[string]string
	// oneOff holds the RUNNING attempts of tasks that are not recurring
	// (by task id: the attempt's epoch and number), for RunningOneOff.
	oneOff map[string]attemptRef
	// copies holds, for WAITING tasks due soon, the task as the last FSM
	// event about it left it (payload dropped): what the fire path would
	// read from the store (fire.go, taskCopyHorizon).
	copies map[string]*raftfsm.Task
	// breakers is the circuit breaker per handler; probes holds, per task
	// id, the breaker attempt of its fired attempt (a task has at most one
	// RUNNING), ended when the attempt leaves RUNNING (reportProbe) or
	// does not start after all.
	breakers *engine.Breakers
	probes   map[string]*probe
	// lastSuccessMs is, per handler, the latest UpdatedMs of a task whose
	// attempt succeeded, as this node applied them, leading or not
	// (noteSuccess): a retry failing again after it does not count
	// against the circuit (reportProbe). Guarded by successMu.
	successMu     sync.Mutex
	lastSuccessMs map[string]int64
	jumps         uint64 // clock jumps of earlier terms' timers
	// horizonMs is the end of the load window (Unix ms): every WAITING
	// task due at or before it has a timer; later ones stay in the store
	// until loadWindow reaches them.
	// Written under mu (with the timers check), read without it.
	horizonMs atomic.Int64

	// Parked runs (park.go): due runs that cannot start wait in memory
	// in a queue per handler, woken by the events that can unpark them.
	queues    map[string]*handlerQueue
	parkedIDs map[string]string // task id → handler of its parked run
	dirty     map[string]bool   // handlers to drain at the next dispatch
	wakeCh    chan struct{}
	// pending holds the Fires proposed and not yet applied (by task id),
	// pendingBy counts them per handler, transit per node and handler.
	pending      map[string]pendingFire
	pendingBy    map[string]int
	transit      map[string]map[string]int
	transitTotal map[string]int
	// since counts, per node and handler, the attempts assigned to the
	// node since its last load report less those that ended there since
	// (sinceTotal: over all handlers); the report's slot counts plus these
	// are what the node holds.
	since      map[string]map[string]int
	sinceTotal map[string]int
	// execLoads is each node's executors at its last load report.
	execLoads map[string][]ExecutorLoad
	// reading holds the tasks fire is reading from the store, with a
	// count of the events about them since (park.go, startReading).
	reading map[string]*readMark
	// nodeCircuits is, per node id (this node's included), the handlers
	// whose circuit its last load report had open there: handler → Unix
	// ms (the node's clock) when the node takes their attempts again.
	nodeCircuits map[string]map[string]int64
	// selfLoads is this node's executors, read at the start of a drain.
	selfLoads []ExecutorLoad
	// nodesCache holds the member node records until a node or executor
	// event (nodesOK false); nodesGen counts those events.
	nodesCache []raftfsm.Node
	nodesOK    bool
	nodesGen   uint64
	// paused, when set, says whether a due run is paused (by its task or
	// its handler): it is then parked with reason paused until
	// resumeHandler or resumeTask. It is called with l.mu held and with
	// a copy of the task without payload; it must not call back into the
	// scheduler. Nil: nothing is ever paused.
	paused func(t *raftfsm.Task) bool
	// caught is CaughtUp's channel: open from New and after every Stop,
	// closed once a term's barrier has returned (caughtClosed), in the
	// Raft term caughtTerm (read before that barrier).
	caught       chan struct{}
	caughtTerm   uint64
	caughtClosed bool
	// caughtFast is caughtTerm+1 while caught is closed (0 otherwise),
	// so that CaughtUp answers the common case, a leader long caught up,
	// without the scheduler's mutex (it is asked once per proposal of a
	// Complete).
	caughtFast atomic.Uint64
	// dispatches counts drains, storeReads the due tasks the fire path
	// read (from the store, or their kept copy; once per due run: parked
	// runs are not re-read), copyReads those of them that were copies.
	dispatches, storeReads, copyReads atomic.Uint64
}

// New returns a scheduler that is not leading (Start begins a term).
func New(cfg Config, d Deps) *Scheduler {
	if d.Wall == nil {
		d.Wall = engine.RealClock()
	}
	l := &Scheduler{cfg: cfg, store: d.Store, proposer: d.Proposer, raft: d.Raft, members: d.Members, drain: d.Drain, local: d.Local,
		pauses: d.Pauses, counters: d.Counters, log: d.Log, clock: d.Clock, wall: d.Wall,
		lastSeen: map[string]time.Time{}, due: map[string]dueRun{}, dueByHandler: map[string]int{}, queued: map[string]map[string]int{},
		load: map[string]int{}, assigned: map[string]int{}, applied: map[string]uint64{}, unwritable: map[string]bool{}, running: map[string]int{}, runningIDs: map[string]string{}, oneOff: map[string]attemptRef{}, copies: map[string]*raftfsm.Task{},
		probes:        map[string]*probe{},
		lastSuccessMs: map[string]int64{},
		queues:        map[string]*handlerQueue{}, parkedIDs: map[string]string{}, dirty: map[string]bool{}, wakeCh: make(chan struct{}, 1),
		pending: map[string]pendingFire{}, pendingBy: map[string]int{}, transit: map[string]map[string]int{}, transitTotal: map[string]int{},
		since: map[string]map[string]int{}, sinceTotal: map[string]int{},
		execLoads: map[string][]ExecutorLoad{}, nodeCircuits: map[string]map[string]int64{}, reading: map[string]*readMark{}, caught: make(chan struct{})}
	l.breakers = l.newBreakers()
	l.setPauses(d.Pauses)
	return l
}

// setPauses makes p the paused handlers (nil: nothing is paused): a due
// run waits while its task or its handler is paused.
func (l *Scheduler) setPauses(p *Pauses) {
	l.pauses, l.paused = p, nil
	if p != nil {
		l.paused = func(t *raftfsm.Task) bool { return t.Paused || p.Paused(t.Spec.Handler) }
	}
}

// Start begins leading: it waits for the barrier (and then closes
// CaughtUp's channel), arms timers from the store and runs them until
// Stop (or ctx ends). Events that arrive while it loads are armed too
// (arming is idempotent). It returns at once.
func (l *Scheduler) Start(parent context.Context) {
	l.mu.Lock()
	if l.timers != nil {
		l.mu.Unlock()
		return
	}
	ctx, cancel := context.WithCancel(parent)
	timers := engine.NewTimers(l.clock, engine.TimersOptions{})
	l.timers, l.cancel, l.done = timers, cancel, make(chan struct{})
	l.horizonMs.Store(math.MinInt64) // nothing loaded yet; onEvent arms nothing
	done := l.done
	l.nodesOK, l.nodesCache = false, nil
	l.nodesGen++
	l.mu.Unlock()

	go func() {
		defer close(done)
		dispatched := make(chan struct{})
		go func() {
			defer close(dispatched)
			l.dispatchLoop(ctx)
		}()
		defer func() { <-dispatched }()
		// Barrier: every entry of earlier terms is applied before we read
		// the store, so the scan sees all committed tasks.
		var term uint64
		if l.raft != nil {
			// The term is read before the barrier: a barrier that passes in
			// a later term (leadership lost and won again meanwhile) is
			// then taken for this one's, and CaughtUp opens again.
			term = l.raft.CurrentTerm()
			if err := l.raft.Barrier(barrierTimeout); err != nil {
				l.log.Warn().Err(err).Msg("barrier after election failed; not firing")
				return
			}
		}
		l.caughtUp(timers, term)
		waiting, err := l.loadWindow(timers)
		running := 0
		if err == nil {
			err = l.store.Running(func(t *raftfsm.Task) bool {
				l.trackRunning(t)
				if !t.AwaitingShards() {
					timers.Arm(leaseKeyPrefix+t.ID, time.UnixMilli(t.LeaseMs))
				}
				running++
				return true
			})
		}
		if err != nil {
			l.log.Error().Err(err).Msg("loading timers from the store failed")
			return
		}
		l.log.Info().Int("waiting", waiting).Int("running", running).Dur("window", l.cfg.LoadWindow).Msg("leader armed timers from the store")
		l.mu.Lock()
		if l.timers == timers { // not stopped meanwhile
			l.loaded = true
		}
		l.mu.Unlock()
		timers.Run(ctx, func(batch []engine.Expired) { l.fired(ctx, batch) })
	}()
}

// Stop ends leading and drops every timer; it returns once the term's
// goroutines have ended.
func (l *Scheduler) Stop() {
	l.mu.Lock()
	cancel, done := l.cancel, l.done
	if l.timers != nil {
		l.jumps += l.timers.Stats().ClockJumps
	}
	l.timers, l.cancel, l.done, l.loaded = nil, nil, nil, false
	if l.caughtClosed {
		l.caught, l.caughtClosed = make(chan struct{}), false
		l.caughtFast.Store(0)
	}
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
	clear(l.oneOff)
	clear(l.copies)
	clear(l.queues)
	clear(l.parkedIDs)
	clear(l.dirty)
	clear(l.pending)
	clear(l.pendingBy)
	clear(l.transit)
	clear(l.transitTotal)
	clear(l.since)
	clear(l.sinceTotal)
	l.mu.Unlock()
	for _, p := range probes {
		p.attempt.Abandon()
	}
	if cancel != nil {
		cancel()
		<-done
	}
}

// CaughtUp returns a channel that is closed while this node, as leader of
// its current Raft term, has applied every entry committed before the
// term: its barrier after the election has returned (Start). It is open
// before the first Start, from each Stop until the next term's barrier
// returns, for good in a term whose barrier failed, and as soon as Raft
// is in another term than the one the barrier passed in (a lost and won
// again leadership whose Stop and Start are still on their way). The
// leader's proposer holds the commands whose Prepare reads the store
// until it is closed (raftstore.ProposerConfig.CaughtUp). A channel taken
// while open is the one the next barrier to pass closes. Safe for
// concurrent use; it allocates only when it opens a new channel.
func (l *Scheduler) CaughtUp() <-chan struct{} {
	var term uint64
	if l.raft != nil {
		term = l.raft.CurrentTerm()
	}
	if f := l.caughtFast.Load(); f != 0 && f-1 == term {
		return closedChan
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.caughtClosed && l.raft != nil && term != l.caughtTerm {
		l.caught, l.caughtClosed = make(chan struct{}), false
		l.caughtFast.Store(0)
	}
	return l.caught
}

// closedChan is what CaughtUp returns while caught up (any closed
// channel would do).
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// caughtUp closes CaughtUp's channel for the term read before its
// barrier, unless the term of timers was stopped meanwhile.
func (l *Scheduler) caughtUp(timers *engine.Timers, term uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.timers != timers || l.caughtClosed {
		return
	}
	close(l.caught)
	l.caughtClosed, l.caughtTerm = true, term
	l.caughtFast.Store(term + 1)
}

func (l *Scheduler) currentTimers() *engine.Timers {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.timers
}

// Leading reports whether this node serves as leader: a term is started
// (between Start and Stop), its barrier has passed (every entry of earlier
// terms is applied to the store) and the store's due tasks are armed.
// The API's readiness and strong reads rely on the barrier.
func (l *Scheduler) Leading() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.timers != nil && l.loaded
}

// ClockJumps counts the wall-clock jumps the leader's timers detected,
// over every term this node led.
func (l *Scheduler) ClockJumps() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	j := l.jumps
	if l.timers != nil {
		j += l.timers.Stats().ClockJumps
	}
	return j
}

// Armed returns how many timers the leader has armed (0 when not
// leading), the load window's own timer not counted.
func (l *Scheduler) Armed() int {
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

// Circuits returns the state of every handler's circuit breaker.
func (l *Scheduler) Circuits() []engine.BreakerStatus { return l.breakers.Snapshot() }
