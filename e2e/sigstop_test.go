package e2e

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/axsched/ax/e2e/harness"
)

// TestSigstop_Leader pauses the leader of a three-node cluster with
// SIGSTOP under a steady load for 4 s (eight election timeouts), then
// resumes it. The two others elect a leader and keep firing; the resumed
// old leader, which still believes it leads for a moment and has timers
// long overdue, must not cause a delivery the new leader did not commit
// (every callback matches a committed Fire), and must not serve a stale
// strong read: a read of a task created during the pause, sent to it
// while it is stopped (so it is the first thing it serves on waking),
// returns the task or an error, never 404. No task lost, none early,
// duplicates within the attempts in flight at the pause.
func TestSigstop_Leader(t *testing.T) {
	harness.SkipShort(t)
	t.Parallel()
	c := harness.NewCluster(t, harness.WithSize(3), harness.WithLogLevel("debug"))
	const marker = "sigstop/marker"
	type readResult struct {
		resp *harness.Response
		err  error
	}
	strongRead := make(chan readResult, 1)
	r := runLeaderFault(t, c, faultHooks{
		what:    "SIGSTOP",
		holdFor: 4 * time.Second,
		fault: func(old *harness.Node) {
			if err := old.Pause(); err != nil {
				t.Fatalf("SIGSTOP %s: %v", old.ID, err)
			}
		},
		during: func(old, newLeader *harness.Node) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			resp, _, err := newLeader.Client.SubmitRetry(ctx, harness.SubmitRequest{ID: marker, Handler: harness.HandlerOK, Delay: "1h"}.Body())
			if err != nil || resp.Status != http.StatusCreated {
				t.Errorf("submit %s through the new leader %s: %v %v", marker, newLeader.ID, resp, err)
			}
		},
		recover: func(old *harness.Node) {
			// The strong read goes to the stopped process first: the kernel
			// queues it, and the old leader serves it as soon as it runs.
			go func() {
				cl := harness.NewClient(old.Socket)
				defer cl.Close()
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				resp, err := cl.Do(ctx, "GET", harness.TaskPath(marker)+"?consistency=strong", nil)
				strongRead <- readResult{resp, err}
			}()
			time.Sleep(200 * time.Millisecond)
			if err := old.Resume(); err != nil {
				t.Fatalf("SIGCONT %s: %v", old.ID, err)
			}
		},
	})
	res := <-strongRead
	switch {
	case res.err != nil:
		t.Logf("RESULT SIGSTOP: strong read on the resumed old leader: error %v (not stale)", res.err)
	case res.resp.Status == http.StatusNotFound:
		t.Errorf("STALE READ: the resumed old leader %s answered a strong read of %s (created during the pause) with 404: %s", r.old.ID, marker, res.resp)
	case res.resp.Status == http.StatusOK:
		task, _ := res.resp.Task()
		t.Logf("RESULT SIGSTOP: strong read on the resumed old leader: 200, %s %s (not stale)", task.ID, task.State)
	default:
		t.Logf("RESULT SIGSTOP: strong read on the resumed old leader: %s (refused, not stale)", res.resp)
	}
	tried := strings.Count(r.old.Logs(), "proposing fired timers failed")
	t.Logf("RESULT SIGSTOP: the resumed old leader %s logged %d failed fire proposals (timers overdue at SIGCONT, never committed); deliveries without a committed fire: %d",
		r.old.ID, tried, len(r.uncommitted))
}
