package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/axsched/ax/e2e/harness"
)

// The report of the chaos test: what the load did, each kill, the RESULT
// lines (lost, early, duplicates against their bound, lateness), examples
// of what went wrong, each node's warnings and errors, and on request a
// copy of the logs (AX_CHAOS_KEEP_LOGS) and a CSV of every callback
// (AX_CHAOS_CSV). It only logs and writes files; the checks fail the test.

// reportTraffic logs what the load did: tasks started and acknowledged,
// the rates, how long the submits took to drain after the stop, and the
// answers and errors it retried.
func reportTraffic(t *testing.T, load *harness.TrafficLoad, r *chaosRun, stopAt time.Time) {
	t.Helper()
	t.Logf("load: %d tasks started in %s (%.0f/s), %d acknowledged (%.0f/s over the load), submits drained %s after the stop; max queue %d",
		len(r.tasks), r.loadTime.Round(time.Millisecond), float64(len(r.tasks))/r.loadTime.Seconds(),
		len(r.acked), float64(len(r.acked))/r.loadTime.Seconds(), time.Since(stopAt).Round(time.Millisecond), load.MaxQueue)
	var kinds []string
	for k, v := range load.ErrKinds {
		kinds = append(kinds, fmt.Sprintf("%s=%d", k, v))
	}
	sort.Strings(kinds)
	t.Logf("retried answers and errors: %s", strings.Join(kinds, ", "))
}

// reportChaos logs the kills and the findings, and writes the files the
// environment asks for.
func reportChaos(t *testing.T, c *harness.Cluster, r *chaosRun, f chaosFindings, testStart time.Time) {
	t.Helper()
	loadStart := r.loadStart
	lat := harness.Summarize(f.lateness)
	t.Logf("kills: %d; per kill:", len(r.kills))
	for _, k := range r.kills {
		ready := "not ready"
		if k.ready > 0 {
			ready = "ready " + k.ready.Round(time.Millisecond).String() + " after its restart"
		}
		t.Logf("  kill %2d at +%6s: %s leader=%-5v running on it %3d at the kill, %3d until its restart; executor in flight %d (+%d answered <1s before); %s",
			k.n, k.at.Sub(loadStart).Round(100*time.Millisecond), k.node, k.wasLeader, k.runningAtKill, len(k.running), k.execInFlight, k.execRecent, ready)
	}
	t.Logf("callbacks per node: %v", harness.CallsPerNode(c.Recorder))
	t.Logf("RESULT lost=%d (of which still pending %d) early=%d duplicates=%d (tasks; %d extra callbacks; %d of them RUNNING on a killed node at its kill) bound=%d (attempts RUNNING on the victims between kill and restart; %d right after the kills; executor in flight or answered <1s before %d) never-answered=%d (in store %d, called back %d)",
		len(f.lost), f.pending, len(f.early), f.dupTasks, f.dupCalls, f.dupExplained, f.inFlightAtKills, f.runningAtKills, f.execInFlightAtKills, len(f.unknown), len(f.unknownInStore), len(f.unknownCalled))
	t.Logf("RESULT lateness of first callbacks (%d acknowledged tasks): p50=%.1fms p99=%.1fms max=%.1fms (%s)",
		lat.N, lat.P50Ms, lat.P99Ms, lat.MaxMs, lat)
	t.Logf("RESULT wall time %s", time.Since(testStart).Round(time.Second))
	for _, l := range f.dupLines[:min(len(f.dupLines), 30)] {
		t.Logf("duplicate: %s", l)
	}
	if len(f.noDue) > 0 {
		t.Logf("%d success replies carried no next_run_at (lateness not measured; early checked against first send + delay), e.g. %s",
			len(f.noDue), strings.Join(f.noDue[:min(len(f.noDue), 5)], ", "))
	}
	byID := map[string]*harness.TrafficTask{}
	for _, ts := range r.tasks {
		byID[ts.ID] = ts
	}
	for _, id := range f.unknown[:min(len(f.unknown), 10)] {
		ts := byID[id]
		t.Logf("never answered: %s after %d tries (last: %s); in store: %v", id, ts.Tries, ts.LastErr, r.final[id].State)
	}
	harness.LogNodeProblems(t, c, loadStart)
	if dir := os.Getenv("AX_CHAOS_KEEP_LOGS"); dir != "" {
		for _, n := range c.Nodes {
			if err := os.WriteFile(filepath.Join(dir, n.ID+".log"), []byte(n.Logs()), 0o644); err != nil {
				t.Errorf("AX_CHAOS_KEEP_LOGS: %v", err)
			}
		}
	}
	if path := os.Getenv("AX_CHAOS_CSV"); path != "" {
		writeChaosCSV(t, path, loadStart, r.tasks, r.kills, c.Recorder)
	}
}

// writeChaosCSV writes one line per callback (task, due, callback time,
// node, attempt; times in ms since the load started) and one per kill, for
// analysis (AX_CHAOS_CSV).
func writeChaosCSV(t *testing.T, path string, loadStart time.Time, tasks []*harness.TrafficTask, kills []*chaosKill, rec *harness.Recorder) {
	var b strings.Builder
	msSince := func(at time.Time) int64 {
		if at.IsZero() {
			return -1
		}
		return at.Sub(loadStart).Milliseconds()
	}
	b.WriteString("kind,id,delay_ms,first_sent_ms,answered_ms,due_ms,call_ms,node,attempt,tries\n")
	for _, k := range kills {
		fmt.Fprintf(&b, "kill,%d,,,,,%d,%s,%v,\n", k.n, msSince(k.at), k.node, k.wasLeader)
	}
	for _, ts := range tasks {
		calls := rec.Calls(ts.ID)
		if len(calls) == 0 {
			fmt.Fprintf(&b, "task,%s,%d,%d,%d,%d,,,,%d\n", ts.ID, ts.Delay.Milliseconds(), msSince(ts.FirstSent), msSince(ts.Answered), msSince(ts.Due), ts.Tries)
		}
		for _, call := range calls {
			fmt.Fprintf(&b, "call,%s,%d,%d,%d,%d,%d,%s,%s,%d\n", ts.ID, ts.Delay.Milliseconds(), msSince(ts.FirstSent), msSince(ts.Answered),
				msSince(ts.Due), msSince(call.At), call.Node, call.Attempt, ts.Tries)
		}
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Errorf("AX_CHAOS_CSV: %v", err)
	}
}
