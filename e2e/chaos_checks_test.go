package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/axsched/ax/e2e/harness"
)

// The checks of the chaos test, run once the load and the kills are over:
// every node is ready again, every acknowledged task ends SUCCESS (lost),
// no callback comes before its due time (early) or carries another body,
// no submit gets a final refusal, no callback names an id never submitted
// (phantoms), and no more tasks are called back twice than attempts were
// RUNNING on the killed nodes (duplicates).

// chaosRun is what the load and the kills left, read by the checks and
// the report.
type chaosRun struct {
	loadStart time.Time
	loadTime  time.Duration           // from loadStart to the end of generation
	tasks     []*harness.TrafficTask  // every task the load started
	acked     []*harness.TrafficTask  // those with a success reply
	kills     []*chaosKill            // in order
	final     map[string]harness.Task // the store after the settle, by id
	rec       *harness.Recorder       // every callback
}

// checkLoadRate fails the test when the load started fewer than 200
// submits a second (the acceptance's floor).
func checkLoadRate(t *testing.T, r *chaosRun) {
	t.Helper()
	if rate := float64(len(r.tasks)) / r.loadTime.Seconds(); rate < 200 {
		t.Errorf("the load started only %.0f submits/s, the acceptance wants at least 200", rate)
	}
}

// checkRejoined fails the test for every node not ready within
// chaosRejoinTimeout after the chaos (they must come back by themselves).
func checkRejoined(t *testing.T, c *harness.Cluster, clients map[string]*harness.Client) {
	t.Helper()
	readyDeadline := time.Now().Add(chaosRejoinTimeout)
	for _, n := range c.Nodes {
		if d := harness.WaitReadyWithin(clients[n.ID], time.Until(readyDeadline)); d == 0 {
			t.Errorf("%s is not ready %s after the chaos (running: %v)", n.ID, chaosRejoinTimeout, n.Running())
		}
	}
}

// settleChaos waits, up to chaosSettleTimeout, for every acknowledged task
// to be called back, then to read SUCCESS through the leader, and sets
// r.final to the last listing of the store.
func settleChaos(t *testing.T, c *harness.Cluster, clients map[string]*harness.Client, r *chaosRun) {
	t.Helper()
	settleStart := time.Now()
	settleDeadline := settleStart.Add(chaosSettleTimeout)
	ackedIDs := make([]string, len(r.acked))
	for i, ts := range r.acked {
		ackedIDs[i] = ts.ID
	}
	ctx, cancel := context.WithDeadline(context.Background(), settleDeadline)
	short := c.Recorder.WaitCalls(ctx, ackedIDs, 1)
	cancel()
	calledBackIn := time.Since(settleStart)
	final := map[string]harness.Task{}
	var notSuccess []string
	var reader string
	for {
		cl, id := harness.ReaderClient(c, clients)
		reader = id
		lctx, lcancel := context.WithTimeout(context.Background(), 20*time.Second)
		all, err := harness.ListTasks(lctx, cl, "")
		lcancel()
		if err == nil {
			final = map[string]harness.Task{}
			for _, task := range all {
				final[task.ID] = task
			}
			notSuccess = notSuccess[:0]
			for _, ts := range r.acked {
				if final[ts.ID].State != "SUCCESS" {
					notSuccess = append(notSuccess, ts.ID)
				}
			}
			if len(notSuccess) == 0 {
				break
			}
		} else {
			t.Logf("listing tasks through %s: %v", id, err)
		}
		if time.Now().After(settleDeadline) {
			break
		}
		time.Sleep(time.Second)
	}
	r.final = final
	t.Logf("settled: callbacks of acknowledged tasks %s after the load (%d still without one), SUCCESS check %s after (read through %s, %d tasks in the store)",
		calledBackIn.Round(time.Millisecond), len(short), time.Since(settleStart).Round(time.Millisecond), reader, len(final))
}

// chaosFindings is what checkChaos found: each list holds one line per
// offending task or callback.
type chaosFindings struct {
	lost, early, badBody, refused, phantoms []string
	// unknown: submits never answered with success (their outcome is
	// unknown), of which inStore are in the store and called were called
	// back.
	unknown, unknownInStore, unknownCalled []string
	noDue                                  []string // success replies without next_run_at
	lateness                               []time.Duration
	pending                                int // lost tasks still WAITING or RUNNING
	dupTasks, dupCalls, dupExplained       int // tasks called back twice; extra callbacks; those RUNNING on a victim
	dupLines                               []string
	// The bound on duplicates: attempts RUNNING on the victims between a
	// kill and its restart (inFlightAtKills), of which seen right after
	// the kills; callbacks in flight or just answered on the victims'
	// executors.
	inFlightAtKills, runningAtKills, execInFlightAtKills int
}

// checkChaos compares every task of r with its callbacks and its final
// state. It only computes; chaosFindings.assert fails the test.
func checkChaos(r *chaosRun) chaosFindings {
	var f chaosFindings
	byID := map[string]*harness.TrafficTask{}
	for _, ts := range r.tasks {
		byID[ts.ID] = ts
	}
	for _, k := range r.kills {
		f.inFlightAtKills += len(k.running)
		f.runningAtKills += k.runningAtKill
		f.execInFlightAtKills += k.execInFlight + k.execRecent
	}
	killedRunning := func(id string) int {
		for _, k := range r.kills {
			if k.running[id] {
				return k.n
			}
		}
		return 0
	}
	for _, call := range r.rec.All() {
		if byID[call.TaskID] == nil {
			f.phantoms = append(f.phantoms, call.TaskID)
		}
	}
	loadStart, final := r.loadStart, r.final
	for _, ts := range r.tasks {
		calls := r.rec.Calls(ts.ID)
		if ts.Refused != "" {
			f.refused = append(f.refused, fmt.Sprintf("%s: %s", ts.ID, ts.Refused))
		}
		if !ts.Acked {
			f.unknown = append(f.unknown, ts.ID)
			if task, ok := final[ts.ID]; ok {
				f.unknownInStore = append(f.unknownInStore, ts.ID+"="+task.State)
			}
			if len(calls) > 0 {
				f.unknownCalled = append(f.unknownCalled, ts.ID)
			}
		}
		// Never before the due time: next_run_at of the reply, else (no
		// reply) the earliest the leader could have accepted it.
		due := ts.Due
		if due.IsZero() && !ts.FirstSent.IsZero() {
			due = ts.FirstSent.Add(ts.Delay).Truncate(time.Millisecond)
		}
		for i, call := range calls {
			if call.At.Before(due) {
				f.early = append(f.early, fmt.Sprintf("%s: callback %d (node %s, attempt %s) at %s is %s before its due time %s",
					ts.ID, i+1, call.Node, call.Attempt, call.At.Format(time.RFC3339Nano), due.Sub(call.At), due.Format(time.RFC3339Nano)))
			}
			if string(call.Body) != string(ts.Want) {
				f.badBody = append(f.badBody, fmt.Sprintf("%s: callback %d body %q, want %q", ts.ID, i+1, call.Body, ts.Want))
			}
		}
		if len(calls) > 1 {
			f.dupTasks++
			f.dupCalls += len(calls) - 1
			k := killedRunning(ts.ID)
			if k > 0 {
				f.dupExplained++
			}
			var desc []string
			for _, call := range calls {
				desc = append(desc, fmt.Sprintf("%s attempt %s run %s at +%s (answered +%s, cancelled %v)", call.Node, call.Attempt, call.Run,
					call.At.Sub(loadStart).Round(time.Millisecond), call.Ended.Sub(loadStart).Round(time.Millisecond), call.Cancelled))
			}
			why := "NOT RUNNING on a killed node at any kill"
			if k > 0 {
				why = fmt.Sprintf("RUNNING on the node of kill %d", k)
			}
			f.dupLines = append(f.dupLines, fmt.Sprintf("%s (%s): %s", ts.ID, why, strings.Join(desc, "; ")))
		}
		if !ts.Acked {
			continue
		}
		if len(calls) == 0 || final[ts.ID].State != "SUCCESS" {
			task, ok := final[ts.ID]
			if ok && (task.State == "WAITING" || task.State == "RUNNING") {
				f.pending++ // late past the settle window, not dropped (yet)
			}
			state := "absent from the store"
			if ok {
				state = fmt.Sprintf("state %s, attempts %d, node %q, next_run_at %v, last_error %q", task.State, task.Attempts, task.Node, task.NextRunAt, task.LastError)
			}
			f.lost = append(f.lost, fmt.Sprintf("%s: acknowledged %d at +%s (try %d, due +%s), %d callbacks, %s", ts.ID, ts.Status,
				ts.Answered.Sub(loadStart).Round(time.Millisecond), ts.Tries, ts.Due.Sub(loadStart).Round(time.Millisecond), len(calls), state))
		}
		if ts.Due.IsZero() {
			f.noDue = append(f.noDue, fmt.Sprintf("%s (reply %d on try %d at +%s, first sent +%s)", ts.ID, ts.Status, ts.Tries,
				ts.Answered.Sub(loadStart).Round(time.Millisecond), ts.FirstSent.Sub(loadStart).Round(time.Millisecond)))
		} else if len(calls) > 0 {
			f.lateness = append(f.lateness, calls[0].At.Sub(ts.Due))
		}
	}
	return f
}

// assert fails the test for every finding that breaks a guarantee: lost,
// early, wrong body, refused, phantom, and duplicates beyond the attempts
// in flight at the kills.
func (f chaosFindings) assert(t *testing.T, r *chaosRun) {
	t.Helper()
	for _, l := range f.lost[:min(len(f.lost), 30)] {
		t.Errorf("LOST: %s", l)
	}
	if len(f.lost) > 0 {
		t.Errorf("%d of %d acknowledged tasks were lost: not SUCCESS %s after the load (%d of them still WAITING or RUNNING: delayed past the window; %d absent or ended otherwise)",
			len(f.lost), len(r.acked), chaosSettleTimeout, f.pending, len(f.lost)-f.pending)
	}
	for _, e := range f.early[:min(len(f.early), 30)] {
		t.Errorf("EARLY: %s", e)
	}
	if len(f.early) > 0 {
		t.Errorf("%d callbacks came before their due time", len(f.early))
	}
	for _, b := range f.badBody[:min(len(f.badBody), 10)] {
		t.Errorf("BODY: %s", b)
	}
	for _, r := range f.refused[:min(len(f.refused), 10)] {
		t.Errorf("REFUSED: %s", r)
	}
	if len(f.refused) > 0 {
		t.Errorf("%d submits got a final answer other than 200/201 (a retry with the same id and spec must not)", len(f.refused))
	}
	if len(f.phantoms) > 0 {
		t.Errorf("%d callbacks for ids never submitted, e.g. %q", len(f.phantoms), f.phantoms[0])
	}
	if f.dupTasks > f.inFlightAtKills {
		t.Errorf("%d tasks were called back more than once, more than the %d attempts RUNNING on the killed nodes at the kills (%d duplicates are not explained by a kill)",
			f.dupTasks, f.inFlightAtKills, f.dupTasks-f.dupExplained)
	}
}
