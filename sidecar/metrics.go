package sidecar

import (
	"os"
	"path/filepath"
	"strconv"
	"time"

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

// metrics are one node's Prometheus metrics, on a registry of its own (so
// several nodes can run in one process, as in tests). Task counters that
// the leader decides (retries, dead) are counted by the node that led when
// the outcome committed; attempt counters by the node that ran the attempt.
type metrics struct {
	reg *prometheus.Registry

	lateness        *prometheus.HistogramVec // handler
	attemptDuration *prometheus.HistogramVec // handler
	attempts        *prometheus.CounterVec   // handler, outcome
	retries         *prometheus.CounterVec   // handler
	dead            *prometheus.CounterVec   // handler
	commitLatency   prometheus.Histogram
	entryCommands   prometheus.Histogram
	leaderChanges   prometheus.Counter
	staleFires      prometheus.Counter
	executorLimit   *prometheus.GaugeVec // executor
	executorFlight  *prometheus.GaugeVec // executor
	executorQueue   *prometheus.GaugeVec // executor
}

func newMetrics(n *Node) *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	m.lateness = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "ax_lateness_seconds", Help: "Time from a run's due time to the start of its callback, per handler.", Buckets: latencyBuckets,
	}, []string{"handler"})
	m.attemptDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "ax_attempt_duration_seconds", Help: "Duration of callbacks (attempts) run on this node, per handler.", Buckets: latencyBuckets,
	}, []string{"handler"})
	m.attempts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ax_attempts_total", Help: "Attempts run on this node by outcome: success, failed, timeout, snoozed, permanent, accepted, cancelled.",
	}, []string{"handler", "outcome"})
	m.retries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ax_retries_total", Help: "Failed attempts scheduled for a retry with backoff (counted by the leader).",
	}, []string{"handler"})
	m.dead = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ax_dead_tasks_total", Help: "Tasks that became DEAD after their last attempt failed (counted by the leader).",
	}, []string{"handler"})
	m.commitLatency = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "ax_raft_commit_seconds", Help: "Time from proposing a Raft entry on the leader to its commit and apply.", Buckets: latencyBuckets,
	})
	m.entryCommands = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "ax_raft_entry_commands", Help: "Commands group-committed in each Raft entry this node proposed as leader (submits, fires, completions).",
		Buckets: prometheus.ExponentialBuckets(1, 2, 11),
	})
	m.leaderChanges = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "ax_raft_leader_changes_total", Help: "Times this node won or lost leadership.",
	})
	m.staleFires = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "ax_stale_fires_skipped_total", Help: "Attempts assigned to this node that it did not deliver: their lease had ended before it applied their fire (catching up after a partition).",
	})
	m.executorLimit = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ax_executor_limit", Help: "Concurrency limit of each executor of this node."}, []string{"executor"})
	m.executorFlight = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ax_executor_in_flight", Help: "Callbacks in flight per executor of this node."}, []string{"executor"})
	m.executorQueue = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ax_executor_queue_length", Help: "Attempts waiting for a concurrency slot per executor of this node."}, []string{"executor"})

	stateDesc := prometheus.NewDesc("ax_tasks", "Tasks by state in the replicated store (the same on every caught-up node).", []string{"state"}, nil)
	m.reg.MustRegister(
		m.lateness, m.attemptDuration, m.attempts, m.retries, m.dead, m.commitLatency, m.entryCommands, m.leaderChanges, m.staleFires,
		m.executorLimit, m.executorFlight, m.executorQueue,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		collectorFunc(func(ch chan<- prometheus.Metric) {
			c := n.fsm.Counts()
			for s := raftfsm.StateWaiting; s <= raftfsm.StateCancelled; s++ {
				ch <- prometheus.MustNewConstMetric(stateDesc, prometheus.GaugeValue, float64(c[s]), s.String())
			}
		}, stateDesc),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "ax_raft_applied_index", Help: "Last Raft index applied to badger on this node."},
			func() float64 { return float64(n.fsm.AppliedIndex()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "ax_raft_commit_index", Help: "Raft commit index known to this node."},
			func() float64 { return float64(n.raft.CommitIndex()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "ax_raft_term", Help: "Current Raft term."},
			func() float64 { return float64(n.term()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "ax_raft_leader", Help: "1 when this node is the Raft leader, else 0."},
			func() float64 { return b2f(n.raft.State() == raft.Leader) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "ax_raft_state", Help: "Raft state of this node: 0 follower, 1 candidate, 2 leader, 3 shutdown."},
			func() float64 { return float64(n.raft.State()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "ax_fsm_size_bytes", Help: "Size of the badger state on disk (all files of its directory)."},
			func() float64 { return float64(dirSize(filepath.Join(n.cfg.DataDir, "state"))) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "ax_clock_jumps_total", Help: "Wall-clock jumps detected by the leader's timers (re-armed from stored due times)."},
			func() float64 { return float64(n.leader.clockJumps()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "ax_raft_log_writes_total", Help: "Writes to this node's Raft log (one bolt transaction and fsync each)."},
			func() float64 { return float64(n.logStats.writes.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "ax_raft_log_entries_written_total", Help: "Raft entries written to this node's log; ÷ ax_raft_log_writes_total = entries per fsync."},
			func() float64 { return float64(n.logStats.entries.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "ax_timers", Help: "Timers armed on the leader (due times and leases); 0 on followers."},
			func() float64 { return float64(n.leader.armed()) }),
	)
	circuitDesc := prometheus.NewDesc("ax_circuit_open", "1 when a handler's circuit breaker is open or half-open on the leader (its due runs wait), else 0.", []string{"handler", "state"}, nil)
	m.reg.MustRegister(collectorFunc(func(ch chan<- prometheus.Metric) {
		for _, st := range n.leader.breakers.Snapshot() {
			v := 1.0
			if st.State == engine.BreakerClosed {
				v = 0
			}
			ch <- prometheus.MustNewConstMetric(circuitDesc, prometheus.GaugeValue, v, st.Handler, st.State.String())
		}
	}, circuitDesc))
	readyDesc := prometheus.NewDesc("ax_ready_backlog", "Due runs not yet delivered, per priority: held by the leader (no live executor) or waiting on this node for an executor slot.", []string{"priority"}, nil)
	m.reg.MustRegister(collectorFunc(func(ch chan<- prometheus.Metric) {
		byPrio := n.leader.backlog()
		for p, v := range n.delivery.backlog() {
			byPrio[p] += v
		}
		for p, v := range byPrio {
			ch <- prometheus.MustNewConstMetric(readyDesc, prometheus.GaugeValue, float64(v), strconv.Itoa(p))
		}
	}, readyDesc))
	return m
}

// handler serves the metrics in Prometheus text format through fasthttp.
func (m *metrics) handler() fasthttp.RequestHandler {
	return fasthttpadaptor.NewFastHTTPHandler(promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}))
}

// attempt records a finished attempt run on this node.
func (m *metrics) attempt(handler, outcome string, d time.Duration) {
	m.attempts.WithLabelValues(handler, outcome).Inc()
	if outcome != "cancelled" {
		m.attemptDuration.WithLabelValues(handler).Observe(d.Seconds())
	}
}

// dirSize adds up the sizes of the files in dir (badger keeps a few dozen).
func dirSize(dir string) int64 {
	var total int64
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if fi, err := e.Info(); err == nil && fi.Mode().IsRegular() {
			total += fi.Size()
		}
	}
	return total
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// collectorFunc is a prometheus.Collector from a function.
type collectorFunc2 struct {
	fn   func(chan<- prometheus.Metric)
	desc *prometheus.Desc
}

func collectorFunc(fn func(chan<- prometheus.Metric), desc *prometheus.Desc) prometheus.Collector {
	return collectorFunc2{fn: fn, desc: desc}
}

func (c collectorFunc2) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }
func (c collectorFunc2) Collect(ch chan<- prometheus.Metric) { c.fn(ch) }
