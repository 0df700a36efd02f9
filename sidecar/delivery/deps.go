package delivery

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/axsched/ax/engine"
	"github.com/axsched/ax/raftfsm"
)

// Proposer commits commands through Raft: the node's group commit, which
// forwards to the leader. Propose returns one Result per command, or an
// error when the commands were not committed (no leader, ctx ended,
// storage down).
type Proposer interface {
	Propose(ctx context.Context, cmds []raftfsm.Command) ([]raftfsm.Result, error)
}

// Store is what delivery reads of the replicated state (a *raftfsm.FSM).
type Store interface {
	// Node returns node id's record (its executors).
	Node(id string) (*raftfsm.Node, error)
	// Running calls fn for each RUNNING task until fn returns false.
	Running(fn func(*raftfsm.Task) bool) error
	// Task returns the task with id (raftfsm.ErrNotFound when there is
	// none): read before the callback of an attempt whose Fire this node
	// applied while catching up (CatchUp).
	Task(id string) (*raftfsm.Task, error)
}

// CatchUp is what delivery asks of the node about how far it is behind
// the leader. A follower that replays the log (restarted, or rejoined
// under its old id with an empty data dir) applies Fires of attempts that
// an earlier life of this node already ran and reported: their Complete
// follows later in the log. An attempt whose Fire applies while the node
// is behind the leader's last known commit index waits, before its
// callback, until the node has applied that index, and is delivered only
// if the task is still running here in that attempt.
type CatchUp interface {
	// LeaderCommit returns the index this node must have applied to have
	// caught up with the leader (the leader's commit index at the last
	// load report), 0 while none is known, and a channel closed when it
	// next changes.
	LeaderCommit() (uint64, <-chan struct{})
	// AppliedIndex is the last index this node has applied; AppliedCh is
	// closed when it next moves.
	AppliedIndex() uint64
	AppliedCh() <-chan struct{}
	// IsLeader reports whether this node leads (a leader replays nothing
	// another node committed after it: no wait).
	IsLeader() bool
}

// Pauses is what delivery asks of the node's pause state
// (scheduler.Pauses): whether a handler is paused, and a wait for the
// pause events this node has applied but not yet handed to delivery's
// OnEvent (a task's pause reaches its attempt there).
type Pauses interface {
	Paused(handler string) bool
	Await(ctx context.Context) bool
}

// Config is delivery's part of the node's configuration.
type Config struct {
	// NodeID is this node's id: the attempts whose Fire names it run here.
	NodeID string
	// Concurrency is an executor's default MaxConcurrency (the node's
	// --delivery-concurrency), MinConcurrency its default MinConcurrency.
	Concurrency, MinConcurrency int
	// LeaseGrace is what the leader adds to an attempt's timeout for its
	// lease; leases about to end within LeaseGrace/2 are renewed.
	LeaseGrace time.Duration
	// MaxBatchCommands bounds the commands of one proposal (lease renewals).
	MaxBatchCommands int
	// BreakerFailures, BreakerCoolDown and BreakerProbeTimeout configure
	// this node's own circuit breakers (breaker.go; engine.BreakerOptions):
	// how many failed callbacks of a handler in a row open its circuit
	// here, how long it then stays open before one probe may go, and how
	// long that probe may stay out without an outcome. 0 selects the
	// engine's defaults (5, 30 s, 5 min); negative values count as 0. The
	// node gives the leader's settings (--breaker-failures,
	// --breaker-cooldown).
	BreakerFailures     int
	BreakerCoolDown     time.Duration
	BreakerProbeTimeout time.Duration
}

// Metrics are the collectors delivery writes (registered by the node).
type Metrics struct {
	// Lateness is ax_lateness_seconds (label handler): from a run's due
	// time to the start of its first callback.
	Lateness *prometheus.HistogramVec
	// AttemptDuration (handler) and Attempts (handler, outcome) count the
	// callbacks and how long they took.
	AttemptDuration *prometheus.HistogramVec
	Attempts        *prometheus.CounterVec
	// StaleFires counts the Fires not delivered because their lease had
	// ended before they were applied here.
	StaleFires prometheus.Counter
	// ExecutorLimit, ExecutorFlight and ExecutorQueue (label executor) are
	// each executor's concurrency limit, callbacks in flight and attempts
	// waiting for a slot.
	ExecutorLimit, ExecutorFlight, ExecutorQueue *prometheus.GaugeVec

	// series caches the per-handler series of the attempts' metrics (a
	// WithLabelValues per attempt hashed the labels three times); they
	// are never deleted. At most seriesMax handlers are kept.
	seriesMu sync.Mutex
	series   map[string]*handlerSeries
}

// handlerSeries is one handler's series of Lateness, AttemptDuration and
// Attempts (by outcome label).
type handlerSeries struct {
	lateness, duration prometheus.Observer
	mu                 sync.Mutex
	attempts           map[string]prometheus.Counter
}

// seriesMax bounds the handlers whose series Metrics keeps.
const seriesMax = 4096

// handler returns h's series, looked up once.
func (m *Metrics) handler(h string) *handlerSeries {
	m.seriesMu.Lock()
	defer m.seriesMu.Unlock()
	if s := m.series[h]; s != nil {
		return s
	}
	s := &handlerSeries{lateness: m.Lateness.WithLabelValues(h), duration: m.AttemptDuration.WithLabelValues(h), attempts: map[string]prometheus.Counter{}}
	if m.series == nil || len(m.series) >= seriesMax {
		m.series = map[string]*handlerSeries{}
	}
	m.series[h] = s
	return s
}

// late observes the lateness of an attempt of handler h.
func (m *Metrics) late(h string, d time.Duration) {
	m.handler(h).lateness.Observe(max(0, d.Seconds()))
}

// attempt counts one attempt of handler ending with outcome (a label of
// ax_attempts_total) after d. The labels that are no attempt: unavailable
// (no request reached the executor, or handed back unstarted) and
// circuit_open (handed back unstarted, its circuit open on this node).
func (m *Metrics) attempt(handler, outcome string, d time.Duration) {
	s := m.handler(handler)
	s.mu.Lock()
	c := s.attempts[outcome]
	if c == nil {
		c = m.Attempts.WithLabelValues(handler, outcome)
		s.attempts[outcome] = c
	}
	s.mu.Unlock()
	c.Inc()
	if outcome != "cancelled" && outcome != "circuit_open" { // circuit_open: no call
		s.duration.Observe(d.Seconds())
	}
}

// Deps is what New needs from the node.
type Deps struct {
	Config Config
	// Context is the node's lifetime: attempts, slots and reports end
	// with it. Nil means context.Background().
	Context  context.Context
	Proposer Proposer
	Store    Store
	// Clock gives delivery's times and timers; nil means engine.RealClock().
	Clock engine.Clock
	// RetryClock times the pauses between tries of an outcome report
	// while no leader takes it (an election, on Raft's real time); nil
	// means Clock.
	RetryClock engine.Clock
	Log        zerolog.Logger
	Metrics    *Metrics
	// Pauses is the node's pause state; nil: nothing is ever paused here
	// (the leader still holds paused runs back).
	Pauses Pauses
	// Orphans are the attempts the store said run on this node when it
	// started (the node lists them at start): the previous process was delivering
	// them and this one reports them lost (cluster.Register), so they are
	// never started here, not even from an installed snapshot that still
	// has them running here.
	Orphans []Orphan
	// CatchUp, when set, holds the attempts whose Fire applied while this
	// node was behind the leader until it caught up (see CatchUp); nil: no
	// wait.
	CatchUp CatchUp
}

// Orphan names an attempt the store said ran on this node when it started
// (Deps.Orphans). The run is part of it: each run of a task (a recurring
// task's next run, a re-run after DEAD or FAILED) numbers its attempts
// from 1 again under the same epoch, and a later run's attempt given to
// this node is this process's to deliver.
type Orphan struct {
	ID      string
	Epoch   uint64
	Run     int // raftfsm.Task.Run
	Attempt int
}
