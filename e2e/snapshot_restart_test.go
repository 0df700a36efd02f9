package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/axsched/ax/e2e/harness"
)

// TestRestart_FromSnapshotWithoutRestore: a node snapshots (small
// threshold), keeps applying, then restarts. Its badger state is past the
// newest snapshot, so it skips the snapshot restore (the applied-index
// rule at boot), and its state is the same after the restart: every task,
// the applied index, the counts by state. Killed with SIGKILL instead, it
// comes back the same way.
func TestRestart_FromSnapshotWithoutRestore(t *testing.T) {
	harness.SkipShort(t)
	t.Parallel()
	c := harness.NewCluster(t, harness.WithSize(1), harness.WithBootstrapExpect(1),
		harness.WithArgs("--snapshot-threshold", "20", "--snapshot-interval", "200ms", "--trailing-logs", "10"))
	c.WaitReady()
	n := c.Nodes[0]
	for b := range 30 {
		var items []string
		for i := range 10 {
			items = append(items, fmt.Sprintf(`{"id":"snap-%d-%d","handler":"nobody","delay":"1h"}`, b, i))
		}
		resp, err := n.Client.Do(harness.ReqCtx(t), "POST", "/v1/tasks/batch", []byte(`{"tasks":[`+strings.Join(items, ",")+`]}`))
		if err != nil || resp.Status != 200 {
			t.Fatalf("batch %d: %v %v", b, resp, err)
		}
	}
	harness.WaitFor(t, 15*time.Second, 100*time.Millisecond, "a snapshot on disk", func() error {
		entries, _ := os.ReadDir(filepath.Join(n.DataDir, "snapshots"))
		if len(entries) == 0 {
			return fmt.Errorf("no snapshot in %s yet", n.DataDir)
		}
		return nil
	})
	// More entries after the snapshot, so that badger is past it.
	harness.MustSubmit(t, n, harness.SubmitRequest{ID: "after-snap", Handler: "nobody", Delay: "1h"}, 201)
	before := harness.Scrape(t, n)

	for round, restart := range []func() error{n.Restart, func() error {
		if err := n.Kill(); err != nil {
			return err
		}
		return n.Start()
	}} {
		if err := restart(); err != nil {
			t.Fatalf("round %d: restart: %v", round, err)
		}
		c.WaitReady()
		if !strings.Contains(n.Logs(), "no restore at start") {
			t.Fatalf("round %d: the node restored the snapshot although badger was past it", round)
		}
		after := harness.Scrape(t, n)
		for _, k := range []string{`ax_tasks{state="WAITING"}`, `ax_tasks{state="SUCCESS"}`} {
			if before[k] != after[k] {
				t.Errorf("round %d: %s %v before the restart, %v after", round, k, before[k], after[k])
			}
		}
		if after["ax_raft_applied_index"] < before["ax_raft_applied_index"] {
			t.Errorf("round %d: applied index went back from %v to %v", round, before["ax_raft_applied_index"], after["ax_raft_applied_index"])
		}
		for _, id := range []string{"snap-0-0", "snap-29-9", "after-snap"} {
			if task, err := n.Client.GetTask(harness.ReqCtx(t), id); err != nil || task.State != "WAITING" {
				t.Fatalf("round %d: %s after restart: %+v %v", round, id, task, err)
			}
		}
	}
}
