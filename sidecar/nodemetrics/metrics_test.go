package nodemetrics

import (
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/valyala/fasthttp"

	"github.com/axsched/ax/engine"
	"github.com/axsched/ax/raftfsm"
)

type fakeRaft struct{ state raft.RaftState }

func (f fakeRaft) CommitIndex() uint64                 { return 42 }
func (f fakeRaft) CurrentTerm() uint64                 { return 7 }
func (f fakeRaft) State() raft.RaftState               { return f.state }
func (fakeStore) AppliedIndex() uint64                 { return 41 }
func (fakeStore) Size() int64                          { return 4096 }
func (f fakeStore) TaskCounts() []int64                { return f.counts }
func (fakeLog) Writes() uint64                         { return 10 }
func (fakeLog) Entries() uint64                        { return 30 }
func (fakeLog) HeldSyncs() uint64                      { return 8 }
func (fakeLog) SlowSyncs() uint64                      { return 1 }
func (f fakeDelivery) Backlog() [engine.Priorities]int { return f.b }
func (fakeDelivery) OpenCircuits() []string            { return []string{"h3"} }

type fakeStore struct{ counts []int64 }
type fakeLog struct{}
type fakeDelivery struct{ b [engine.Priorities]int }

type fakeLeader struct{}

func (fakeLeader) ClockJumps() uint64 { return 2 }
func (fakeLeader) Armed() int         { return 5 }
func (fakeLeader) Circuits() []engine.BreakerStatus {
	return []engine.BreakerStatus{{Handler: "h1", State: engine.BreakerOpen}, {Handler: "h2", State: engine.BreakerClosed}}
}
func (fakeLeader) Backlog() []int { return []int{1, 0, 3, 0, 0} }
func (fakeLeader) ParkedByReason() map[string]map[string]int {
	return map[string]map[string]int{"h1": {"circuit_open": 4}}
}

func watched(t *testing.T, state raft.RaftState) *Metrics {
	t.Helper()
	m := New()
	counts := make([]int64, int(raftfsm.StateCancelled)+1)
	counts[raftfsm.StateWaiting], counts[raftfsm.StateSuccess] = 3, 9
	var b [engine.Priorities]int
	b[2] = 2
	m.Watch(Sources{Raft: fakeRaft{state}, Store: fakeStore{counts}, Leader: fakeLeader{}, Delivery: fakeDelivery{b}, Log: fakeLog{}})
	return m
}

// The gauges read their sources at each scrape: tasks by state, Raft's
// indexes, term and state, the leader's timers, parked runs, circuits,
// and the ready backlog summed over the leader's and delivery's.
func TestWatchReadsSources(t *testing.T) {
	m := watched(t, raft.Leader)
	want := `
# HELP ax_raft_leader 1 when this node is the Raft leader, else 0.
# TYPE ax_raft_leader gauge
ax_raft_leader 1
# HELP ax_raft_commit_index Raft commit index known to this node.
# TYPE ax_raft_commit_index gauge
ax_raft_commit_index 42
# HELP ax_raft_applied_index Last Raft index applied to badger on this node.
# TYPE ax_raft_applied_index gauge
ax_raft_applied_index 41
# HELP ax_raft_term Current Raft term.
# TYPE ax_raft_term gauge
ax_raft_term 7
# HELP ax_raft_state Raft state of this node: 0 follower, 1 candidate, 2 leader, 3 shutdown.
# TYPE ax_raft_state gauge
ax_raft_state 2
# HELP ax_fsm_size_bytes Size of the badger state on disk (all files of its directory).
# TYPE ax_fsm_size_bytes gauge
ax_fsm_size_bytes 4096
# HELP ax_timers Timers armed on the leader (due times and leases); 0 on followers.
# TYPE ax_timers gauge
ax_timers 5
# HELP ax_clock_jumps_total Wall-clock jumps detected by the leader's timers (re-armed from stored due times).
# TYPE ax_clock_jumps_total counter
ax_clock_jumps_total 2
# HELP ax_raft_log_writes_total Writes to this node's Raft log (one WAL append and fsync each).
# TYPE ax_raft_log_writes_total counter
ax_raft_log_writes_total 10
# HELP ax_raft_log_entries_written_total Raft entries written to this node's log; ÷ ax_raft_log_writes_total = entries per fsync.
# TYPE ax_raft_log_entries_written_total counter
ax_raft_log_entries_written_total 30
# HELP ax_raft_log_syncs_held_total Fsyncs of this node's Raft log segments that kept their P (--raft-log-sync auto, while the adaptive controller has the process on one P): no hand-off to another thread; the others went through the Go runtime.
# TYPE ax_raft_log_syncs_held_total counter
ax_raft_log_syncs_held_total 8
# HELP ax_raft_log_slow_held_syncs_total Held fsyncs (ax_raft_log_syncs_held_total) that took 10ms or more; each sends the next minute's fsyncs through the Go runtime.
# TYPE ax_raft_log_slow_held_syncs_total counter
ax_raft_log_slow_held_syncs_total 1
# HELP ax_parked_runs Due runs the leader holds because they cannot start yet, per handler and waiting reason (no_executor, executor_busy, executor_unavailable, circuit_open, handler_limit, paused). 0 series on followers.
# TYPE ax_parked_runs gauge
ax_parked_runs{handler="h1",reason="circuit_open"} 4
# HELP ax_circuit_open 1 when a handler's circuit breaker is open or half-open on the leader (its due runs wait), else 0.
# TYPE ax_circuit_open gauge
ax_circuit_open{handler="h1",state="open"} 1
ax_circuit_open{handler="h2",state="closed"} 0
# HELP ax_node_circuit_open 1 for each handler whose circuit is open on this node, or half-open with its probe out (its own breaker, fed by the callbacks it makes; the leader routes the handler's runs to other nodes meanwhile); no series for the others.
# TYPE ax_node_circuit_open gauge
ax_node_circuit_open{handler="h3"} 1
# HELP ax_ready_backlog Due runs not yet delivered, per priority: held by the leader (no live executor) or waiting on this node for an executor slot.
# TYPE ax_ready_backlog gauge
ax_ready_backlog{priority="0"} 1
ax_ready_backlog{priority="1"} 0
ax_ready_backlog{priority="2"} 5
ax_ready_backlog{priority="3"} 0
ax_ready_backlog{priority="4"} 0
`
	names := []string{"ax_raft_leader", "ax_raft_commit_index", "ax_raft_applied_index", "ax_raft_term", "ax_raft_state",
		"ax_fsm_size_bytes", "ax_timers", "ax_clock_jumps_total", "ax_raft_log_writes_total", "ax_raft_log_entries_written_total",
		"ax_parked_runs", "ax_circuit_open", "ax_node_circuit_open", "ax_ready_backlog"}
	if err := testutil.GatherAndCompare(m.reg, strings.NewReader(want), names...); err != nil {
		t.Fatal(err)
	}
	if err := testutil.GatherAndCompare(m.reg, strings.NewReader(`
# HELP ax_tasks Tasks by state in the replicated store (the same on every caught-up node).
# TYPE ax_tasks gauge
`+tasksLines()), "ax_tasks"); err != nil {
		t.Fatal(err)
	}
	f := watched(t, raft.Follower)
	if v := gauge(t, f, "ax_raft_leader"); v != 0 {
		t.Fatalf("ax_raft_leader on a follower = %v, want 0", v)
	}
}

// tasksLines is ax_tasks's series for watched's counts: 3 WAITING, 9
// SUCCESS, 0 in every other state.
func tasksLines() string {
	var b strings.Builder
	for s := raftfsm.StateWaiting; s <= raftfsm.StateCancelled; s++ {
		v := "0"
		switch s {
		case raftfsm.StateWaiting:
			v = "3"
		case raftfsm.StateSuccess:
			v = "9"
		}
		b.WriteString(`ax_tasks{state="` + s.String() + `"} ` + v + "\n")
	}
	return b.String()
}

func gauge(t *testing.T, m *Metrics, name string) float64 {
	t.Helper()
	mfs, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// The parts' collectors are on the registry; Register adds more and
// refuses a duplicate; Handler serves the text format.
func TestRegisterAndHandler(t *testing.T) {
	m := New()
	m.Attempts.WithLabelValues("h", "success").Inc()
	m.LeaderChanges.Inc()
	extra := prometheus.NewCounter(prometheus.CounterOpts{Name: "ax_extra_total", Help: "x"})
	m.Register(extra)
	func() {
		defer func() {
			if recover() == nil {
				t.Error("Register accepted a duplicate collector")
			}
		}()
		m.Register(extra)
	}()
	var ctx fasthttp.RequestCtx
	ctx.Request.SetRequestURI("/metrics")
	m.Handler()(&ctx)
	body := string(ctx.Response.Body())
	for _, w := range []string{`ax_attempts_total{handler="h",outcome="success"} 1`, "ax_raft_leader_changes_total 1", "ax_extra_total 0", "go_goroutines"} {
		if !strings.Contains(body, w) {
			t.Errorf("metrics page lacks %q", w)
		}
	}
}
