package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/axsched/ax/e2e/harness"
)

// Sizes of the restart test; the environment overrides them:
//
//	AX_RESTART_TASKS     tasks submitted through POST /v1/tasks/batch (1000 per request; default 20000)
//	AX_RESTART_SINGLES   tasks submitted one by one, about one Raft entry each (default 3000)
//	AX_RESTART_SNAPSHOT  0: no Raft snapshot before the restart (the whole log is replayed
//	                     to the FSM, which skips it); default: a snapshot, then more entries
const (
	restartTasksDefault   = 20000
	restartSinglesDefault = 3000
	restartBatchSize      = 1000
	restartSingleWorkers  = 4
	// restartSnapshotThreshold and restartSnapshotInterval make Raft
	// snapshot during the single submits (--snapshot-threshold,
	// --snapshot-interval).
	restartSnapshotThreshold = 1024
	restartSnapshotInterval  = 500 * time.Millisecond
	// restartSnapshotTimeout bounds the wait for that snapshot.
	restartSnapshotTimeout = 30 * time.Second
	// restartAfterSnapshot single submits follow the snapshot, so badger
	// is ahead of it at the restart.
	restartAfterSnapshot = 500
	// restartSettleTimeout bounds the wait for the tasks that run (due
	// now) to end before the first digest.
	restartSettleTimeout = 60 * time.Second
	// restartReadyTimeout bounds the restart.
	restartReadyTimeout = 60 * time.Second
)

// restartMetrics scrapes /metrics without failing the test.
func restartMetrics(ctx context.Context, cl *harness.Client) (map[string]float64, error) {
	resp, err := cl.Do(ctx, "GET", "/metrics", nil)
	if err != nil {
		return nil, err
	}
	if resp.Status != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %s", resp)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(resp.Body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	return out, nil
}

// taskCounts returns the ax_tasks samples as "STATE=n", sorted.
func taskCounts(m map[string]float64) string {
	var out []string
	for k, v := range m {
		if strings.HasPrefix(k, "ax_tasks{") {
			out = append(out, fmt.Sprintf("%s=%.0f", strings.TrimSuffix(strings.TrimPrefix(k, `ax_tasks{state="`), `"}`), v))
		}
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

// stateDigest lists every task through cl and returns a SHA-256 over their
// full JSON views in id order, and the views by id.
func stateDigest(ctx context.Context, cl *harness.Client) (string, map[string]string, error) {
	tasks, err := harness.ListTasks(ctx, cl, "")
	if err != nil {
		return "", nil, err
	}
	h := sha256.New()
	views := make(map[string]string, len(tasks))
	for _, task := range tasks {
		b, err := json.Marshal(task)
		if err != nil {
			return "", nil, err
		}
		h.Write(b)
		h.Write([]byte{'\n'})
		views[task.ID] = string(b)
	}
	return fmt.Sprintf("%x", h.Sum(nil)), views, nil
}

// TestRestart_ReplaysOnlyNewEntries fills one node (batches and single
// submits, tasks WAITING, SUCCESS, FAILED and CANCELLED; Raft snapshots
// on the way, then more entries, so badger is ahead of the newest
// snapshot), stops it with SIGTERM and starts it again. The state digest
// (every task's view) and the task counts must be the same before and
// after; the applied index must be the stored one from the first moment
// the node answers (a snapshot restore would set it back); the node must
// not apply any entry it had applied before (no "state change" log line
// for an old task) nor deliver any task again.
// AX_RESTART_SINGLES=70000 gives the 100 000 applied entries.
func TestRestart_ReplaysOnlyNewEntries(t *testing.T) {
	harness.SkipShort(t)
	t.Parallel()
	nBatch := harness.EnvInt(t, "AX_RESTART_TASKS", restartTasksDefault)
	nSingle := harness.EnvInt(t, "AX_RESTART_SINGLES", restartSinglesDefault)
	snapshot := os.Getenv("AX_RESTART_SNAPSHOT") != "0"
	opts := []harness.ClusterOption{harness.WithSize(1), harness.WithLogLevel("debug")}
	if snapshot {
		opts = append(opts, harness.WithArgs("--snapshot-threshold", fmt.Sprint(restartSnapshotThreshold),
			"--snapshot-interval", restartSnapshotInterval.String()))
	}
	c := harness.NewCluster(t, opts...)
	c.WaitReady()
	n := c.Nodes[0]
	cl := harness.NewClient(n.Socket)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	// Batches: WAITING for an hour.
	start := time.Now()
	for b := 0; b*restartBatchSize < nBatch; b++ {
		var items []string
		for i := b * restartBatchSize; i < min((b+1)*restartBatchSize, nBatch); i++ {
			items = append(items, fmt.Sprintf(`{"id":"rs/batch/%06d","handler":%q,"delay":"1h","payload":{"i":%d}}`, i, harness.HandlerOK, i))
		}
		body := []byte(`{"tasks":[` + strings.Join(items, ",") + `]}`)
		resp, err := cl.Do(ctx, "POST", "/v1/tasks/batch", body)
		if err != nil || resp.Status != http.StatusOK {
			t.Fatalf("batch %d: %v %v", b, resp, err)
		}
		var br struct {
			Results []struct {
				Status int `json:"status"`
			} `json:"results"`
		}
		if err := json.Unmarshal(resp.Body, &br); err != nil || len(br.Results) != len(items) {
			t.Fatalf("batch %d: %d results (err %v): %.300s", b, len(br.Results), err, resp.Body)
		}
		for i, r := range br.Results {
			if r.Status != http.StatusCreated {
				t.Fatalf("batch %d item %d: status %d", b, i, r.Status)
			}
		}
	}
	t.Logf("submitted %d tasks in batches of %d in %s", nBatch, restartBatchSize, time.Since(start).Round(time.Millisecond))

	want := submitSingles(t, ctx, cl, "single", nSingle)
	settle := func() map[string]float64 {
		var m map[string]float64
		harness.WaitFor(t, restartSettleTimeout, 200*time.Millisecond, "the due-now tasks to end", func() error {
			var err error
			m, err = restartMetrics(ctx, cl)
			if err != nil {
				return err
			}
			got := [3]float64{m[`ax_tasks{state="SUCCESS"}`], m[`ax_tasks{state="FAILED"}`], m[`ax_tasks{state="CANCELLED"}`]}
			if got != want || m[`ax_tasks{state="RUNNING"}`] != 0 {
				return fmt.Errorf("counts %s, want SUCCESS=%.0f FAILED=%.0f CANCELLED=%.0f RUNNING=0", taskCounts(m), want[0], want[1], want[2])
			}
			return nil
		})
		return m
	}
	before := settle()
	if snapshot {
		snapDir := filepath.Join(n.DataDir, "snapshots")
		var snap string
		harness.WaitFor(t, restartSnapshotTimeout, 100*time.Millisecond, "a Raft snapshot", func() error {
			ents, _ := os.ReadDir(snapDir)
			for _, e := range ents {
				if e.IsDir() && !strings.HasSuffix(e.Name(), ".tmp") {
					snap = e.Name()
					return nil
				}
			}
			return fmt.Errorf("none in %s", snapDir)
		})
		t.Logf("snapshot %s on disk (applied index %.0f)", snap, before["ax_raft_applied_index"])
		// Put badger ahead of the snapshot: the restart must not go back
		// to the snapshot and apply these entries again.
		more := submitSingles(t, ctx, cl, "after-snapshot", restartAfterSnapshot)
		for i := range want {
			want[i] += more[i]
		}
		before = settle()
		if idx := newestSnapshotIndex(snapDir); idx >= uint64(before["ax_raft_applied_index"]) {
			// A newer snapshot caught up with badger: a few more entries.
			more := submitSingles(t, ctx, cl, "after-snapshot-2", 20)
			for i := range want {
				want[i] += more[i]
			}
			before = settle()
		}
		t.Logf("at the restart: badger at applied index %.0f, newest snapshot at %d", before["ax_raft_applied_index"], newestSnapshotIndex(snapDir))
	}

	digestBefore, viewsBefore, err := stateDigest(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	appliedBefore := uint64(before["ax_raft_applied_index"])
	info, err := cl.Cluster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if m, err := restartMetrics(ctx, cl); err == nil && uint64(m["ax_raft_applied_index"]) != appliedBefore {
		t.Fatalf("the applied index moved while the node was idle: %d then %.0f", appliedBefore, m["ax_raft_applied_index"])
	}
	t.Logf("before the restart: %d tasks, digest %.16s, %s, applied index %d (cluster view: applied %d, commit %d)",
		len(viewsBefore), digestBefore, taskCounts(before), appliedBefore, info.AppliedIndex, info.CommitIndex)

	callsBefore := len(c.Recorder.All())

	// SIGTERM, then start it again, watching the applied index from the
	// first moment the socket answers.
	if err := n.Stop(); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
	logOffset := len(n.Logs())
	restartAt := time.Now()
	if err := n.Start(); err != nil {
		t.Fatal(err)
	}
	var firstApplied, minApplied uint64
	var firstAnswer, readyAt time.Duration
	var samples int
	for time.Since(restartAt) < restartReadyTimeout {
		if !n.Running() {
			t.Fatalf("the node exited after its restart: %v", n.ExitErr())
		}
		rctx, rcancel := context.WithTimeout(ctx, time.Second)
		m, err := restartMetrics(rctx, cl)
		if err == nil {
			a := uint64(m["ax_raft_applied_index"])
			if samples == 0 {
				firstApplied, minApplied, firstAnswer = a, a, time.Since(restartAt)
			}
			minApplied = min(minApplied, a)
			samples++
			resp, err := cl.Do(rctx, "GET", "/readyz", nil)
			if err == nil && resp.Status == http.StatusOK {
				readyAt = time.Since(restartAt)
				rcancel()
				break
			}
		}
		rcancel()
		time.Sleep(2 * time.Millisecond)
	}
	if readyAt == 0 {
		t.Fatalf("not ready %s after the restart", restartReadyTimeout)
	}
	after, err := restartMetrics(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	digestAfter, viewsAfter, err := stateDigest(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	appliedAfter := uint64(after["ax_raft_applied_index"])
	t.Logf("restart: socket answered after %s with applied index %d (stored %d), lowest seen %d over %d samples, ready after %s",
		firstAnswer.Round(time.Millisecond), firstApplied, appliedBefore, minApplied, samples, readyAt.Round(time.Millisecond))
	t.Logf("after the restart: %d tasks, digest %.16s, %s, applied index %d (+%d new entries)",
		len(viewsAfter), digestAfter, taskCounts(after), appliedAfter, int64(appliedAfter)-int64(appliedBefore))

	// No old task is delivered again: every task that ran had ended before
	// the restart. Give a replayed Fire time to reach the executor.
	time.Sleep(2 * time.Second)
	redelivered := c.Recorder.All()[callsBefore:]
	for _, call := range redelivered[:min(len(redelivered), 10)] {
		t.Errorf("delivered again after the restart: %s attempt %s at %s", call.TaskID, call.Attempt, call.At.Format(time.RFC3339Nano))
	}
	if len(redelivered) > 0 {
		t.Errorf("%d callbacks after the restart, for tasks that had ended before it", len(redelivered))
	}

	// What the restarted process logged.
	logs := n.Logs()[logOffset:]
	replayed := 0
	var example string
	restoredSnapshot := false
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, `"state change"`) && strings.Contains(line, `"task_id":"rs/`) {
			replayed++
			if example == "" {
				example = line
			}
		}
		if strings.Contains(line, "restored from snapshot") || strings.Contains(line, "starting restore from snapshot") {
			restoredSnapshot = true
			t.Logf("restart log: %s", line)
		}
	}
	t.Logf("RESULT restart of %d tasks / %d applied entries: ready in %s; digest equal %v; state-change lines for old tasks after the restart %d; callbacks after the restart %d; snapshot restored %v",
		len(viewsBefore), appliedBefore, readyAt.Round(time.Millisecond), digestAfter == digestBefore, replayed, len(redelivered), restoredSnapshot)

	if digestAfter != digestBefore {
		var diffs []string
		for id, v := range viewsBefore {
			if viewsAfter[id] != v {
				diffs = append(diffs, fmt.Sprintf("%s: before %s, after %s", id, v, viewsAfter[id]))
			}
		}
		for id, v := range viewsAfter {
			if _, ok := viewsBefore[id]; !ok {
				diffs = append(diffs, fmt.Sprintf("%s: new after the restart: %s", id, v))
			}
		}
		sort.Strings(diffs)
		for _, d := range diffs[:min(len(diffs), 10)] {
			t.Errorf("differs: %s", d)
		}
		t.Errorf("state digest changed across the restart: %d tasks differ", len(diffs))
	}
	if taskCounts(after) != taskCounts(before) {
		t.Errorf("task counts changed across the restart: %s, then %s", taskCounts(before), taskCounts(after))
	}
	if firstApplied != appliedBefore || minApplied < appliedBefore {
		t.Errorf("applied index at the first answer %d, lowest %d; want the stored %d from the start (the node went back and re-applied entries)",
			firstApplied, minApplied, appliedBefore)
	}
	if appliedAfter < appliedBefore {
		t.Errorf("applied index went back: %d before, %d after", appliedBefore, appliedAfter)
	}
	if replayed > 0 {
		t.Errorf("the restarted node applied %d old task changes again, e.g. %s", replayed, example)
	}
	if restoredSnapshot {
		t.Errorf("the restart restored a Raft snapshot although badger held every applied entry (it should start with NoSnapshotRestoreOnStart)")
	}
}

// submitSingles submits n tasks one by one through a few workers (group
// commit merges some into one Raft entry): every 10th runs at once
// (SUCCESS), every 10th+1 is refused by the executor (FAILED), every
// 10th+2 is cancelled (one more entry), the others wait for an hour. It
// returns how many end SUCCESS, FAILED and CANCELLED.
func submitSingles(t *testing.T, ctx context.Context, cl *harness.Client, prefix string, n int) [3]float64 {
	t.Helper()
	start := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []string
	for w := 0; w < restartSingleWorkers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += restartSingleWorkers {
				id := fmt.Sprintf("rs/%s/%06d", prefix, i)
				req := harness.SubmitRequest{ID: id, Handler: harness.HandlerOK, Delay: "1h", Payload: fmt.Appendf(nil, `[%d]`, i)}
				switch i % 10 {
				case 0:
					req.Delay = ""
				case 1:
					req.Delay, req.Handler = "", harness.HandlerPermanent
				}
				resp, err := cl.Submit(ctx, req.Body())
				if err == nil && resp.Status == http.StatusCreated && i%10 == 2 {
					resp, err = cl.Cancel(ctx, id)
					if err == nil && resp.Status != http.StatusOK {
						err = fmt.Errorf("cancel: %s", resp)
					}
				} else if err == nil && resp.Status != http.StatusCreated {
					err = fmt.Errorf("submit: %s", resp)
				}
				if err != nil {
					mu.Lock()
					errs = append(errs, fmt.Sprintf("%s: %v", id, err))
					mu.Unlock()
				}
			}
		}()
	}
	var want [3]float64
	for i := 0; i < n; i++ {
		if k := i % 10; k < 3 {
			want[k]++
		}
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d single submits failed, e.g. %s", len(errs), errs[0])
	}
	t.Logf("submitted %d single tasks (%s) in %s", n, prefix, time.Since(start).Round(time.Millisecond))
	return want
}

// newestSnapshotIndex returns the highest Raft index among the snapshots in
// dir (hashicorp/raft names them TERM-INDEX-MILLIS), 0 when there is none.
func newestSnapshotIndex(dir string) uint64 {
	ents, _ := os.ReadDir(dir)
	var best uint64
	for _, e := range ents {
		parts := strings.Split(e.Name(), "-")
		if !e.IsDir() || len(parts) != 3 || strings.HasSuffix(e.Name(), ".tmp") {
			continue
		}
		if idx, err := strconv.ParseUint(parts[1], 10, 64); err == nil && idx > best {
			best = idx
		}
	}
	return best
}
