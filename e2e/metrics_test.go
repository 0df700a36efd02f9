package e2e

import (
	"fmt"
	"strings"
	"testing"

	"github.com/axsched/ax/e2e/harness"
)

// sumPrefix adds up every sample whose name (with labels) starts with p.
func sumPrefix(m map[string]float64, p string) float64 {
	var s float64
	for k, v := range m {
		if strings.HasPrefix(k, p) {
			s += v
		}
	}
	return s
}

// TestMetrics_AfterSmallWorkload runs a few tasks that succeed, fail for
// good, and die after retries on one node, then checks every metric family
// the observability issue asks for, with values that follow from the
// workload: the lateness count equals the callbacks made, and so on.
func TestMetrics_AfterSmallWorkload(t *testing.T) {
	harness.SkipShort(t)
	t.Parallel()
	c := harness.NewCluster(t, harness.WithSize(1), harness.WithBootstrapExpect(1))
	c.WaitReady()
	n := c.Nodes[0]
	var ids []string
	for i := range 5 {
		id := fmt.Sprintf("m-ok-%d", i)
		harness.MustSubmit(t, n, harness.SubmitRequest{ID: id, Handler: "e2e.ok", Delay: "50ms"}, 201)
		ids = append(ids, id)
	}
	harness.MustSubmit(t, n, harness.SubmitRequest{ID: "m-perm", Handler: "e2e.permanent"}, 201)
	harness.MustSubmit(t, n, harness.SubmitRequest{ID: "m-dead", Handler: "e2e.fail", MaxAttempts: 2}, 201)
	harness.MustSubmit(t, n, harness.SubmitRequest{ID: "m-wait", Handler: "e2e.ok", Delay: "5m"}, 201)
	// Beyond the leader's 10-minute load window: stored, not armed.
	harness.MustSubmit(t, n, harness.SubmitRequest{ID: "m-far", Handler: "e2e.ok", Delay: "1h"}, 201)
	for _, id := range ids {
		harness.WaitState(t, n, id, "SUCCESS")
	}
	harness.WaitState(t, n, "m-perm", "FAILED")
	harness.WaitState(t, n, "m-dead", "DEAD")

	m := harness.Scrape(t, n)
	callbacks := float64(len(c.Recorder.All()))
	if callbacks != 5+1+2 {
		t.Fatalf("executor saw %v callbacks, want 8", callbacks)
	}
	checks := []struct {
		name string
		got  float64
		want float64
	}{
		{"lateness count = callbacks", sumPrefix(m, "ax_lateness_seconds_count"), callbacks},
		{"attempt duration count = callbacks", sumPrefix(m, "ax_attempt_duration_seconds_count"), callbacks},
		{"success attempts", m[`ax_attempts_total{handler="e2e.ok",outcome="success"}`], 5},
		{"permanent attempts", m[`ax_attempts_total{handler="e2e.permanent",outcome="permanent"}`], 1},
		{"failed attempts", m[`ax_attempts_total{handler="e2e.fail",outcome="failed"}`], 2},
		{"retries", m[`ax_retries_total{handler="e2e.fail"}`], 1},
		{"dead", m[`ax_dead_tasks_total{handler="e2e.fail"}`], 1},
		{"tasks SUCCESS", m[`ax_tasks{state="SUCCESS"}`], 5},
		{"tasks FAILED", m[`ax_tasks{state="FAILED"}`], 1},
		{"tasks DEAD", m[`ax_tasks{state="DEAD"}`], 1},
		{"tasks WAITING", m[`ax_tasks{state="WAITING"}`], 2},
		{"tasks RUNNING", m[`ax_tasks{state="RUNNING"}`], 0},
		{"leader", m["ax_raft_leader"], 1},
		{"raft state leader", m["ax_raft_state"], 2},
		{"ready backlog", sumPrefix(m, "ax_ready_backlog{"), 0},
		{"in flight", sumPrefix(m, "ax_executor_in_flight{"), 0},
		{"executor queue", sumPrefix(m, "ax_executor_queue_length{"), 0},
		{"clock jumps", m["ax_clock_jumps_total"], 0},
		{"timers: the task inside the load window", m["ax_timers"], 1},
	}
	for _, ck := range checks {
		if ck.got != ck.want {
			t.Errorf("%s: got %v, want %v", ck.name, ck.got, ck.want)
		}
	}
	positive := []string{"ax_raft_term", "ax_raft_applied_index", "ax_raft_commit_index", "ax_fsm_size_bytes",
		"ax_raft_commit_seconds_count", "ax_raft_entry_commands_count", "ax_raft_log_writes_total", "ax_raft_log_entries_written_total", "ax_raft_leader_changes_total", `ax_executor_limit{executor="flag:*"}`}
	for _, name := range positive {
		if m[name] <= 0 {
			t.Errorf("%s = %v, want > 0", name, m[name])
		}
	}
	// p99 lateness must be readable at millisecond resolution: buckets
	// below 5 ms exist.
	if _, ok := m[`ax_lateness_seconds_bucket{handler="e2e.ok",le="0.002"}`]; !ok {
		t.Error("lateness histogram lacks a 2 ms bucket")
	}
	if m["ax_raft_applied_index"] < m["ax_raft_commit_index"] {
		t.Errorf("applied %v < commit %v on a quiet node", m["ax_raft_applied_index"], m["ax_raft_commit_index"])
	}
}
