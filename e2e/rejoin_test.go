package e2e

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/axsched/ax/e2e/harness"
)

// A voter whose data dir is lost (an emptyDir after its pod was
// recreated) comes back under its old id and address with --join: the
// leader takes its vote away (it no longer has the entries it helped
// commit), adds it back as a non-voter, and autopilot makes it a voter
// again once it has caught up. Nothing is lost; the node reads every task
// and takes writes.
func TestRejoin_EmptyDataDirUnderOldID(t *testing.T) {
	harness.SkipShort(t)
	c := harness.NewCluster(t)
	c.WaitReady()
	l := c.Leader()
	f := c.Followers()[0]
	var ids []string
	for i := range 40 {
		id := fmt.Sprintf("keep-%d", i)
		harness.MustSubmit(t, l, harness.SubmitRequest{ID: id, Handler: "nobody", Delay: "1h"}, 201)
		ids = append(ids, id)
	}
	harness.WaitState(t, f, ids[len(ids)-1], "WAITING")

	if err := f.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(f.DataDir); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(f.DataDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := f.Start(); err != nil {
		t.Fatal(err)
	}
	harness.WaitFor(t, 60*time.Second, 200*time.Millisecond, f.ID+" a voter again", func() error {
		info, err := c.Leader().Client.Cluster(harness.ReqCtx(t))
		if err != nil {
			return err
		}
		n := 0
		for _, m := range info.Members {
			if m.ID == f.ID {
				n++
				if m.Suffrage != "Voter" {
					return fmt.Errorf("%s is a %s", f.ID, m.Suffrage)
				}
			}
		}
		if n != 1 || len(info.Members) != 3 {
			return fmt.Errorf("members %+v", info.Members)
		}
		return nil
	})
	lead := c.Leader()
	if !strings.Contains(lead.Logs()+l.Logs(), "a voter rejoins with no Raft state") {
		t.Errorf("the leader did not take the emptied voter's vote away first")
	}
	for _, id := range ids {
		harness.WaitState(t, f, id, "WAITING")
	}
	harness.MustSubmit(t, f, harness.SubmitRequest{ID: "after", Handler: "nobody", Delay: "1h"}, 201)
}
