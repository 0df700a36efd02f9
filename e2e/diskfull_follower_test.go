package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/axsched/ax/e2e/harness"
)

// TestDiskFull_FollowerGetsAttemptsWhileFull fills a follower's disk and at
// once submits tasks that fall due before the leader can have heard of it
// (its load report comes every 300 ms), so some attempts are routed to the
// full node, which cannot apply their Fire. Once the disk is freed it
// applies them and delivers: every task succeeds (here in about 0.6 s).
// The tasks' timeout is 5 s, so that an attempt the full node never runs
// is retried (lease: timeout + 5 s) inside the wait; the test logs any
// task that took a second attempt.
func TestDiskFull_FollowerGetsAttemptsWhileFull(t *testing.T) {
	harness.SkipShort(t)
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("disk-full e2e: needs root to mount a tmpfs as one node's data dir")
	}
	c := harness.NewCluster(t, harness.WithDeferredStart(0, 1, 2), harness.WithArgs("--storage-reserve", "8388608", "--storage-probe-interval", "200ms"))
	for _, n := range c.Nodes {
		if err := os.MkdirAll(n.DataDir, 0o750); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=96m", "tmpfs", n.DataDir).CombinedOutput(); err != nil {
			t.Skipf("disk-full e2e: cannot mount a tmpfs on %s: %v %s", n.DataDir, err, out)
		}
		t.Cleanup(func() {
			_ = n.Kill()
			_ = exec.Command("umount", "-l", n.DataDir).Run()
		})
	}
	for _, n := range c.Nodes {
		if err := n.Start(); err != nil {
			t.Fatal(err)
		}
	}
	c.WaitReady()
	leader := c.Leader()
	full := c.Followers()[0]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	junk := filepath.Join(full.DataDir, "junk")
	filled := fillDisk(t, junk)
	t.Logf("filled follower %s's tmpfs with %d MiB of junk", full.ID, filled>>20)
	var ids []string
	for i := range 30 {
		id := fmt.Sprintf("t-%d", i)
		resp, _, err := leader.Client.SubmitRetry(ctx, []byte(fmt.Sprintf(`{"id":%q,"handler":"disk","delay":"100ms","timeout":"5s"}`, id)))
		if err != nil || resp.Status != 201 {
			t.Fatalf("submit %s: %v %v", id, resp, err)
		}
		ids = append(ids, id)
	}
	time.Sleep(2 * time.Second)
	if err := os.Remove(junk); err != nil {
		t.Fatal(err)
	}
	freed := time.Now()
	harness.WaitFor(t, 20*time.Second, 200*time.Millisecond, "every task SUCCESS", func() error {
		var which []string
		for _, id := range ids {
			tk, err := leader.Client.GetTask(ctx, id)
			if err != nil {
				which = append(which, fmt.Sprintf("%s: %v", id, err))
			} else if tk.State != "SUCCESS" {
				which = append(which, fmt.Sprintf("%s %s on %q, attempt %d, %q", id, tk.State, tk.Node, tk.Attempts, tk.LastError))
			}
		}
		if len(which) > 0 {
			return fmt.Errorf("%d of %d tasks not SUCCESS: %s", len(which), len(ids), strings.Join(which, "; "))
		}
		return nil
	})
	t.Logf("every task SUCCESS %v after the disk was freed", time.Since(freed).Round(time.Millisecond))
	for _, id := range ids {
		if tk, err := leader.Client.GetTask(ctx, id); err == nil && tk.Attempts > 1 {
			t.Logf("%s took %d attempts (last on %s)", id, tk.Attempts, tk.Node)
		}
	}
}
