package nodemetrics

import (
	"strconv"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"

	"github.com/axsched/ax/engine"
	"github.com/axsched/ax/raftfsm"
)

// latencyBuckets are fine enough to read a p99 of a few milliseconds and
// wide enough for a task that waited minutes for an executor (seconds).
var latencyBuckets = []float64{
	0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075,
	0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300,
}

// Metrics are one node's Prometheus metrics, on a registry of its own (so
// several nodes can run in one process, as in tests). Task counters that
// the leader decides (retries, dead) are counted by the node that led when
// the outcome committed; attempt counters by the node that ran the attempt.
//
// The collectors below are written by the node's parts (delivery,
// raftstore's group commit, the scheduler's counters, the leadership
// watch); the gauges that read the node's state at each scrape are added
// by Watch.
type Metrics struct {
	reg *prometheus.Registry

	Lateness        *prometheus.HistogramVec // handler
	AttemptDuration *prometheus.HistogramVec // handler
	Attempts        *prometheus.CounterVec   // handler, outcome
	Retries         *prometheus.CounterVec   // handler
	Dead            *prometheus.CounterVec   // handler
	CommitLatency   prometheus.Histogram
	EntryCommands   prometheus.Histogram
	Gathers         *prometheus.CounterVec
	LeaderChanges   prometheus.Counter
	StaleFires      prometheus.Counter
	ExecutorLimit   *prometheus.GaugeVec // executor
	ExecutorFlight  *prometheus.GaugeVec // executor
	ExecutorQueue   *prometheus.GaugeVec // executor
}

// New returns the node's metrics on a new registry, with the Go runtime's
// and the process's collectors.
func New() *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry()}
	m.Lateness = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "ax_lateness_seconds", Help: "Time from a run's due time to the start of its callback, per handler.", Buckets: latencyBuckets,
	}, []string{"handler"})
	m.AttemptDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "ax_attempt_duration_seconds", Help: "Duration of callbacks (attempts) run on this node, per handler.", Buckets: latencyBuckets,
	}, []string{"handler"})
	m.Attempts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ax_attempts_total", Help: "Attempts run on this node by outcome: success, failed, timeout, snoozed, permanent, accepted, cancelled; unavailable and circuit_open count attempts not called (the executor unreachable, or handed back unstarted: its handler's circuit open on this node for circuit_open).",
	}, []string{"handler", "outcome"})
	m.Retries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ax_retries_total", Help: "Failed attempts scheduled for a retry with backoff (counted by the leader).",
	}, []string{"handler"})
	m.Dead = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ax_dead_tasks_total", Help: "Tasks that became DEAD after their last attempt failed (counted by the leader).",
	}, []string{"handler"})
	m.CommitLatency = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "ax_raft_commit_seconds", Help: "Time from proposing a Raft entry on the leader to its commit and apply.", Buckets: latencyBuckets,
	})
	m.EntryCommands = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "ax_raft_entry_commands", Help: "Commands group-committed in each Raft entry this node proposed as leader (submits, fires, completions).",
		Buckets: prometheus.ExponentialBuckets(1, 2, 11),
	})
	m.Gathers = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ax_raft_gather_waits_total", Help: "Raft entries the leader held open for the callers the entry before answered (--gather-wait), by how the wait ended: full (they came back, or the entry filled), gap (they stopped coming), timeout (--gather-wait passed), other (a fire or another command came, and went at once).",
	}, []string{"end"})
	m.LeaderChanges = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "ax_raft_leader_changes_total", Help: "Times this node won or lost leadership.",
	})
	m.StaleFires = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "ax_stale_fires_skipped_total", Help: "Attempts assigned to this node that it did not deliver: their lease had ended before it applied their fire (catching up after a partition), or the log it replayed had already ended them (a node back under its id with an empty data dir).",
	})
	m.ExecutorLimit = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ax_executor_limit", Help: "Concurrency limit of each executor of this node."}, []string{"executor"})
	m.ExecutorFlight = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ax_executor_in_flight", Help: "Callbacks in flight per executor of this node."}, []string{"executor"})
	m.ExecutorQueue = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ax_executor_queue_length", Help: "Attempts waiting for a concurrency slot per executor of this node."}, []string{"executor"})
	m.reg.MustRegister(
		m.Lateness, m.AttemptDuration, m.Attempts, m.Retries, m.Dead, m.CommitLatency, m.EntryCommands, m.Gathers, m.LeaderChanges, m.StaleFires,
		m.ExecutorLimit, m.ExecutorFlight, m.ExecutorQueue,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return m
}

// Raft is what the gauges read of this node's Raft (*raft.Raft).
type Raft interface {
	CommitIndex() uint64
	CurrentTerm() uint64
	State() raft.RaftState
}

// Store is what the gauges read of the replicated store.
type Store interface {
	// TaskCounts returns the number of tasks per state, indexed by
	// raftfsm.State (from StateWaiting to StateCancelled).
	TaskCounts() []int64
	// AppliedIndex is the last Raft index applied to badger.
	AppliedIndex() uint64
	// Size is the size in bytes of the badger state on disk.
	Size() int64
}

// Leader is what the gauges read of the leader's scheduler (its values
// are zero, its maps empty, on a follower).
type Leader interface {
	ClockJumps() uint64
	// Armed is the number of timers armed (due times and leases).
	Armed() int
	Circuits() []engine.BreakerStatus
	// Backlog is the due runs the leader holds, per priority.
	Backlog() []int
	// ParkedByReason is the parked runs per handler and waiting reason.
	ParkedByReason() map[string]map[string]int
}

// Delivery is what the gauges read of this node's delivery.
type Delivery interface {
	// Backlog is the attempts waiting here for an executor slot, per
	// priority.
	Backlog() [engine.Priorities]int
	// OpenCircuits is the handlers whose circuit is open on this node
	// (its own breaker: their attempts are handed back uncalled), sorted.
	OpenCircuits() []string
}

// LogStats is what the counters read of this node's Raft log.
type LogStats interface {
	// Writes is the writes to the log (one bolt transaction and fsync
	// each); Entries the entries written.
	Writes() uint64
	Entries() uint64
	// HeldSyncs is the log's fsyncs that kept their P (raftstore's
	// --raft-log-sync auto), SlowSyncs the held disk calls (those fsyncs,
	// the log's writes, the data dir's statfs) that took 10 ms or more
	// (each sends the next minute's through the Go runtime).
	HeldSyncs() uint64
	SlowSyncs() uint64
}

// Sources are the node's parts the gauges read at each scrape.
type Sources struct {
	Raft     Raft
	Store    Store
	Leader   Leader
	Delivery Delivery
	Log      LogStats
}

// Watch registers the gauges and collectors that read src at each scrape
// (tasks by state, Raft indexes and state, the leader's timers, parked
// runs, circuits and backlog, the Raft log's writes). Call it once, when
// every part of src is built.
func (m *Metrics) Watch(src Sources) {
	stateDesc := prometheus.NewDesc("ax_tasks", "Tasks by state in the replicated store (the same on every caught-up node).", []string{"state"}, nil)
	m.reg.MustRegister(
		collectorFunc(func(ch chan<- prometheus.Metric) {
			c := src.Store.TaskCounts()
			for s := raftfsm.StateWaiting; s <= raftfsm.StateCancelled; s++ {
				ch <- prometheus.MustNewConstMetric(stateDesc, prometheus.GaugeValue, float64(c[s]), s.String())
			}
		}, stateDesc),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "ax_raft_applied_index", Help: "Last Raft index applied to badger on this node."},
			func() float64 { return float64(src.Store.AppliedIndex()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "ax_raft_commit_index", Help: "Raft commit index known to this node."},
			func() float64 { return float64(src.Raft.CommitIndex()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "ax_raft_term", Help: "Current Raft term."},
			func() float64 { return float64(src.Raft.CurrentTerm()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "ax_raft_leader", Help: "1 when this node is the Raft leader, else 0."},
			func() float64 { return b2f(src.Raft.State() == raft.Leader) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "ax_raft_state", Help: "Raft state of this node: 0 follower, 1 candidate, 2 leader, 3 shutdown."},
			func() float64 { return float64(src.Raft.State()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "ax_fsm_size_bytes", Help: "Size of the badger state on disk (all files of its directory)."},
			func() float64 { return float64(src.Store.Size()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "ax_clock_jumps_total", Help: "Wall-clock jumps detected by the leader's timers (re-armed from stored due times)."},
			func() float64 { return float64(src.Leader.ClockJumps()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "ax_raft_log_writes_total", Help: "Writes to this node's Raft log (one WAL append and fsync each)."},
			func() float64 { return float64(src.Log.Writes()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "ax_raft_log_entries_written_total", Help: "Raft entries written to this node's log; ÷ ax_raft_log_writes_total = entries per fsync."},
			func() float64 { return float64(src.Log.Entries()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "ax_raft_log_syncs_held_total", Help: "Fsyncs of this node's Raft log segments that kept their P (--raft-log-sync auto, while the adaptive controller has the process on one P): no hand-off to another thread; the others went through the Go runtime."},
			func() float64 { return float64(src.Log.HeldSyncs()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "ax_raft_log_slow_held_syncs_total", Help: "Held disk calls (--raft-log-sync auto, on one P: the Raft log's fsyncs, counted in ax_raft_log_syncs_held_total, and its writes, and the data dir's statfs) that took 10ms or more; each sends the next minute's through the Go runtime."},
			func() float64 { return float64(src.Log.SlowSyncs()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "ax_timers", Help: "Timers armed on the leader (due times and leases); 0 on followers."},
			func() float64 { return float64(src.Leader.Armed()) }),
	)
	parkedDesc := prometheus.NewDesc("ax_parked_runs", "Due runs the leader holds because they cannot start yet, per handler and waiting reason (no_executor, executor_busy, executor_unavailable, circuit_open, handler_limit, paused). 0 series on followers.", []string{"handler", "reason"}, nil)
	m.reg.MustRegister(collectorFunc(func(ch chan<- prometheus.Metric) {
		for h, m := range src.Leader.ParkedByReason() {
			for r, c := range m {
				ch <- prometheus.MustNewConstMetric(parkedDesc, prometheus.GaugeValue, float64(c), h, r)
			}
		}
	}, parkedDesc))
	circuitDesc := prometheus.NewDesc("ax_circuit_open", "1 when a handler's circuit breaker is open or half-open on the leader (its due runs wait), else 0.", []string{"handler", "state"}, nil)
	m.reg.MustRegister(collectorFunc(func(ch chan<- prometheus.Metric) {
		for _, st := range src.Leader.Circuits() {
			v := 1.0
			if st.State == engine.BreakerClosed {
				v = 0
			}
			ch <- prometheus.MustNewConstMetric(circuitDesc, prometheus.GaugeValue, v, st.Handler, st.State.String())
		}
	}, circuitDesc))
	nodeCircuitDesc := prometheus.NewDesc("ax_node_circuit_open", "1 for each handler whose circuit is open on this node, or half-open with its probe out (its own breaker, fed by the callbacks it makes; the leader routes the handler's runs to other nodes meanwhile); no series for the others.", []string{"handler"}, nil)
	m.reg.MustRegister(collectorFunc(func(ch chan<- prometheus.Metric) {
		for _, h := range src.Delivery.OpenCircuits() {
			ch <- prometheus.MustNewConstMetric(nodeCircuitDesc, prometheus.GaugeValue, 1, h)
		}
	}, nodeCircuitDesc))
	readyDesc := prometheus.NewDesc("ax_ready_backlog", "Due runs not yet delivered, per priority: held by the leader (no live executor) or waiting on this node for an executor slot.", []string{"priority"}, nil)
	m.reg.MustRegister(collectorFunc(func(ch chan<- prometheus.Metric) {
		byPrio := src.Leader.Backlog()
		for p, v := range src.Delivery.Backlog() {
			byPrio[p] += v
		}
		for p, v := range byPrio {
			ch <- prometheus.MustNewConstMetric(readyDesc, prometheus.GaugeValue, float64(v), strconv.Itoa(p))
		}
	}, readyDesc))
}

// Register adds collectors of the node's parts (the snapshot gate's, the
// retention's) to the registry; it panics, as prometheus.MustRegister
// does, on a duplicate.
func (m *Metrics) Register(cs ...prometheus.Collector) { m.reg.MustRegister(cs...) }

// Handler serves the metrics in Prometheus text format through fasthttp.
func (m *Metrics) Handler() fasthttp.RequestHandler {
	return fasthttpadaptor.NewFastHTTPHandler(promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}))
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// collector is a prometheus.Collector from a function.
type collector struct {
	fn   func(chan<- prometheus.Metric)
	desc *prometheus.Desc
}

func collectorFunc(fn func(chan<- prometheus.Metric), desc *prometheus.Desc) prometheus.Collector {
	return collector{fn: fn, desc: desc}
}

func (c collector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }
func (c collector) Collect(ch chan<- prometheus.Metric) { c.fn(ch) }
