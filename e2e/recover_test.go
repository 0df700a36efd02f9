package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/axsched/ax/e2e/harness"
)

// Quorum lost for good: two of three voters are killed and their data is
// gone. The survivor cannot elect a leader; `ax cluster recover` (after a
// dry run that changes nothing) makes it the only voter; started again
// with its usual flags it leads alone with every task it had, takes
// writes, and a node with a fresh data dir joins it and becomes a voter.
func TestRecover_OneSurvivorOfThree(t *testing.T) {
	harness.SkipShort(t)
	c := harness.NewCluster(t)
	c.WaitReady()
	l := c.Leader()
	var ids []string
	for i := range 30 {
		id := fmt.Sprintf("keep-%d", i)
		harness.MustSubmit(t, l, harness.SubmitRequest{ID: id, Handler: "nobody", Delay: "1h"}, 201)
		ids = append(ids, id)
	}
	harness.MustSubmit(t, l, harness.SubmitRequest{ID: "ran", Handler: harness.HandlerOK}, 201)
	harness.WaitState(t, l, "ran", "SUCCESS")
	s := c.Followers()[0]
	var lost []*harness.Node
	for _, n := range c.Nodes {
		if n != s {
			lost = append(lost, n)
		}
	}
	harness.WaitFor(t, 10*time.Second, 100*time.Millisecond, s.ID+" has applied everything", func() error {
		for _, id := range append([]string{"ran"}, ids...) {
			tk, err := s.Client.GetTask(harness.ReqCtx(t), id)
			if err != nil {
				return err
			}
			if want := map[bool]string{true: "SUCCESS", false: "WAITING"}[id == "ran"]; tk.State != want {
				return fmt.Errorf("%s %s", id, tk.State)
			}
		}
		return nil
	})
	for _, n := range lost {
		if err := n.Kill(); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := s.Client.Submit(harness.ReqCtx(t), []byte(`{"id":"no-quorum","handler":"nobody","delay":"1h"}`))
	if err == nil && resp.Status == 201 {
		t.Fatalf("a write was accepted without a quorum: %s", resp)
	}
	if err := s.Stop(); err != nil {
		t.Logf("stop %s: %v", s.ID, err)
	}

	recoverCmd := func(extra ...string) string {
		t.Helper()
		args := append([]string{"cluster", "recover", "--data-dir", s.DataDir, "--node-id", s.ID}, extra...)
		out, err := exec.Command(harness.AxBin, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("ax %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	dry := recoverCmd()
	for _, n := range c.Nodes {
		if !strings.Contains(dry, n.ID) {
			t.Errorf("the dry run does not show %s in the old configuration:\n%s", n.ID, dry)
		}
	}
	if !strings.Contains(dry, "nothing changed") {
		t.Errorf("dry run:\n%s", dry)
	}
	if out := recoverCmd("--yes"); !strings.Contains(out, "recovered: "+s.ID+" is the only voter") {
		t.Fatalf("recover:\n%s", out)
	}

	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	c.WaitReadyNodes([]*harness.Node{s}, 30*time.Second)
	for _, id := range ids {
		harness.WaitState(t, s, id, "WAITING")
	}
	harness.WaitState(t, s, "ran", "SUCCESS")
	harness.MustSubmit(t, s, harness.SubmitRequest{ID: "after", Handler: harness.HandlerOK}, 201)
	harness.WaitState(t, s, "after", "SUCCESS")

	// A lost node comes back with a fresh data dir and joins the survivor.
	fresh := lost[0]
	if err := os.RemoveAll(fresh.DataDir); err != nil {
		t.Fatal(err)
	}
	if err := fresh.Start(); err != nil {
		t.Fatal(err)
	}
	harness.WaitFor(t, 60*time.Second, 200*time.Millisecond, fresh.ID+" a voter of the recovered cluster", func() error {
		info, err := s.Client.Cluster(harness.ReqCtx(t))
		if err != nil {
			return err
		}
		for _, m := range info.Members {
			if m.ID == fresh.ID && m.Suffrage == "Voter" {
				return nil
			}
		}
		return fmt.Errorf("members %+v", info.Members)
	})
	for _, id := range ids {
		harness.WaitState(t, fresh, id, "WAITING")
	}
}
