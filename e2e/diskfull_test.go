package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/axsched/ax/e2e/harness"
)

// fillDisk writes path until the file system is full (ENOSPC) and returns
// the bytes written.
func fillDisk(t *testing.T, path string) int64 {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var total int64
	for _, chunk := range []int{1 << 20, 4 << 10, 512} {
		buf := make([]byte, chunk)
		for {
			n, err := f.Write(buf)
			total += int64(n)
			if errors.Is(err, syscall.ENOSPC) || errors.Is(err, io.ErrShortWrite) {
				break
			}
			if err != nil {
				t.Fatalf("filling %s: %v", path, err)
			}
		}
	}
	_ = f.Sync()
	return total
}

// tmpfsCluster starts a ready three-node cluster whose data dirs are each
// a 96 MiB tmpfs (root only; the test skips otherwise), with an 8 MiB
// storage reserve probed every 200 ms. It runs the test in parallel.
func tmpfsCluster(t *testing.T) *harness.Cluster {
	t.Helper()
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
	return c
}

// TestDiskFull_RefusesWritesAndRecovers puts every node's data dir on a
// small tmpfs and fills the leader's: that node answers writes 503
// storage_unavailable, keeps serving reads, hands leadership over, does not
// exit, and once the junk is removed serves writes again and catches up; no
// task submitted to the cluster is lost.
func TestDiskFull_RefusesWritesAndRecovers(t *testing.T) {
	c := tmpfsCluster(t)
	// The node whose disk fills is the leader: the harder case.
	full := c.Leader()
	other := c.Followers()[0]
	t.Logf("filling the disk of the leader %s; writing through %s meanwhile", full.ID, other.ID)

	ctx, cancel := context.WithTimeout(context.Background(), 55*time.Second)
	defer cancel()
	var ids []string
	submit := func(cl *harness.Client, id string) (*harness.Response, error) {
		return cl.Submit(ctx, []byte(fmt.Sprintf(`{"id":%q,"handler":"disk","delay":"300ms"}`, id)))
	}
	for i := range 10 {
		id := fmt.Sprintf("before-%d", i)
		resp, err := submit(full.Client, id)
		if err != nil || resp.Status != 201 {
			t.Fatalf("submit %s through the full node: %v %v", id, resp, err)
		}
		ids = append(ids, id)
	}

	junk := filepath.Join(full.DataDir, "junk")
	filled := fillDisk(t, junk)
	t.Logf("filled %s's tmpfs with %d MiB of junk", full.ID, filled>>20)

	// full refuses writes with storage_unavailable.
	probe := 0
	harness.WaitFor(t, 10*time.Second, 100*time.Millisecond, "full refuses writes", func() error {
		probe++
		id := fmt.Sprintf("probe-%d", probe)
		resp, err := submit(full.Client, id)
		if err != nil {
			return err
		}
		if resp.Status == 201 {
			ids = append(ids, id) // accepted before the probe saw the disk full
			return fmt.Errorf("submit accepted: %s", resp)
		}
		e, err := resp.APIError()
		if err != nil {
			return err
		}
		if resp.Status != 503 || e.Error.Code != "storage_unavailable" || resp.RetryAfter() <= 0 {
			return fmt.Errorf("submit: %s (Retry-After %v)", resp, resp.RetryAfter())
		}
		t.Logf("%s answers: %s", full.ID, resp)
		return nil
	})
	// A leader that cannot write hands leadership over.
	harness.WaitFor(t, 10*time.Second, 100*time.Millisecond, "leadership leaves the full node", func() error {
		info, err := other.Client.Cluster(ctx)
		if err != nil {
			return err
		}
		if info.Leader == "" || info.Leader == full.ID {
			return fmt.Errorf("leader %q", info.Leader)
		}
		return nil
	})
	// Reads keep working, and GET /v1/cluster shows why.
	if _, err := full.Client.GetTask(ctx, "before-0"); err != nil {
		t.Fatalf("read from full while its disk is full: %v", err)
	}
	resp, err := full.Client.Do(ctx, "GET", "/v1/cluster", nil)
	if err != nil || resp.Status != 200 || !strings.Contains(string(resp.Body), `"storage":{"cause"`) {
		t.Fatalf("GET /v1/cluster on full: %v %v", resp, err)
	}

	// The rest of the cluster keeps taking writes (if full led, it hands
	// leadership over). The leader may route some of these to full before
	// it hears full's storage state (its next load report): such an
	// attempt runs once full's disk is freed and full has caught up. (Their
	// lease, 30 s + 5 s, is longer than the wait below: a full node that
	// never caught up fails the test. CI once saw 6 of 20 stay RUNNING on
	// full: the leader's replication to it had deadlocked, see
	// raftstore.newRaftTransport.)
	for i := range 20 {
		id := fmt.Sprintf("during-%d", i)
		resp, _, err := other.Client.SubmitRetry(ctx, []byte(fmt.Sprintf(`{"id":%q,"handler":"disk","delay":"300ms"}`, id)))
		if err != nil || resp.Status != 201 {
			t.Fatalf("submit %s through other while full's disk is full: %v %v", id, resp, err)
		}
		ids = append(ids, id)
	}
	if !full.Running() {
		t.Fatalf("full exited on a full disk: %v", full.ExitErr())
	}

	// Free the disk: full serves writes again.
	if err := os.Remove(junk); err != nil {
		t.Fatal(err)
	}
	harness.WaitFor(t, 20*time.Second, 100*time.Millisecond, "full accepts writes again", func() error {
		probe++
		id := fmt.Sprintf("after-%d", probe)
		resp, err := submit(full.Client, id)
		if err != nil {
			return err
		}
		if resp.Status != 201 {
			return fmt.Errorf("submit: %s", resp)
		}
		ids = append(ids, id)
		return nil
	})
	if !full.Running() {
		t.Fatalf("full exited: %v", full.ExitErr())
	}

	// Nothing lost: every accepted task succeeds, and full catches up.
	lost := 0
	harness.WaitFor(t, 20*time.Second, 200*time.Millisecond, "every task SUCCESS", func() error {
		lost = 0
		var which []string
		for _, id := range ids {
			tk, err := other.Client.GetTask(ctx, id)
			if err != nil || tk.State != "SUCCESS" {
				lost++
				if err != nil {
					which = append(which, fmt.Sprintf("%s: %v", id, err))
				} else {
					which = append(which, fmt.Sprintf("%s %s on %q, attempt %d, %q", id, tk.State, tk.Node, tk.Attempts, tk.LastError))
				}
			}
		}
		if lost > 0 {
			// Where full stands: its applied index against the leader's,
			// and its storage state (CI once left 6 attempts RUNNING on
			// full for the whole wait).
			state := ""
			if fi, err := full.Client.Cluster(ctx); err == nil {
				state = fmt.Sprintf("%s applied %d", full.ID, fi.AppliedIndex)
			}
			if oi, err := other.Client.Cluster(ctx); err == nil {
				state += fmt.Sprintf(", leader %s applied %d", oi.Leader, oi.AppliedIndex)
			}
			if resp, err := full.Client.Do(ctx, "GET", "/v1/cluster", nil); err == nil {
				if i := strings.Index(string(resp.Body), `"storage"`); i >= 0 {
					state += "; " + string(resp.Body[i:min(len(resp.Body), i+300)])
				}
			}
			return fmt.Errorf("%d of %d tasks not SUCCESS (%s): %s", lost, len(ids), state, strings.Join(which, "; "))
		}
		return nil
	})
	retried := 0
	for _, id := range ids {
		if tk, err := other.Client.GetTask(ctx, id); err == nil && tk.Attempts > 1 {
			retried++
			t.Logf("%s took %d attempts (last on %s)", id, tk.Attempts, tk.Node)
		}
	}
	t.Logf("%d of %d tasks took more than one attempt", retried, len(ids))
	var leaderApplied uint64
	if info, err := other.Client.Cluster(ctx); err == nil {
		leaderApplied = info.AppliedIndex
	}
	harness.WaitFor(t, 10*time.Second, 100*time.Millisecond, "full catches up", func() error {
		info, err := full.Client.Cluster(ctx)
		if err != nil {
			return err
		}
		if info.AppliedIndex < leaderApplied {
			return fmt.Errorf("full applied %d of %d", info.AppliedIndex, leaderApplied)
		}
		return nil
	})
	logs := full.Logs()
	for _, want := range []string{"storage unavailable: refusing writes", "storage is writable again"} {
		if !strings.Contains(logs, want) {
			t.Errorf("full's log has no %q", want)
		}
	}
	if strings.Contains(logs, "panic") || strings.Contains(logs, "fatal error") {
		t.Errorf("full panicked:\n%s", harness.Tail(logs, 4000))
	}
	t.Logf("tasks: %d submitted, lost 0; %s stayed up through the full disk", len(ids), full.ID)
}

// TestDiskFull_FollowerGetsAttemptsWhileFull fills a follower's disk and at
// once submits tasks that fall due before the leader can have heard of it
// (its load report comes every 300 ms), so some attempts are routed to the
// full node, which cannot apply their Fire. Once the disk is freed it
// applies them and delivers: every task succeeds (here in about 0.6 s),
// long before their leases (30 s + 5 s) could end; the test logs any task
// that took a second attempt.
func TestDiskFull_FollowerGetsAttemptsWhileFull(t *testing.T) {
	c := tmpfsCluster(t)
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
		resp, _, err := leader.Client.SubmitRetry(ctx, []byte(fmt.Sprintf(`{"id":%q,"handler":"disk","delay":"100ms"}`, id)))
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
