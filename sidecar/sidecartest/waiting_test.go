package sidecartest_test

import (
	"encoding/json"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/axsched/ax/sidecar"
	"github.com/axsched/ax/sidecar/sidecartest"
)

// A follower asks the leader why its due tasks wait, for one task and
// for a list page; once an executor registers, the reason goes away with
// the wait (moved from e2e's TestWaitingReason_OnFollower).
func TestWaitingReasonOnFollower(t *testing.T) {
	c := sidecartest.New(t, sidecartest.Options{Nodes: 3, NoExecutor: true})
	f := c.Follower()
	for i := range 3 {
		s := sidecartest.Spec(fmt.Sprintf("wr-%d", i), "backlog")
		s.MaxAttempts = 1
		c.Submit(f, s)
	}
	type view struct {
		ID            string     `json:"id"`
		WaitingReason string     `json:"waiting_reason"`
		WaitingSince  *time.Time `json:"waiting_since"`
	}
	var last string
	c.Eventually("the reason on the follower", func() bool {
		resp := c.HTTP(f, "GET", "/v1/tasks/wr-1", nil)
		last = fmt.Sprintf("%d %s", resp.Status, resp.Body)
		var v view
		_ = json.Unmarshal(resp.Body, &v)
		return resp.Status == 200 && v.WaitingReason == "no_executor" && v.WaitingSince != nil
	})
	t.Logf("task on the follower: %s", last)
	resp := c.HTTP(f, "GET", "/v1/tasks?handler=backlog", nil)
	if resp.Status != 200 {
		t.Fatalf("list: %d %s", resp.Status, resp.Body)
	}
	var page struct {
		Tasks []view `json:"tasks"`
	}
	if err := json.Unmarshal(resp.Body, &page); err != nil || len(page.Tasks) != 3 {
		t.Fatalf("list: %s (%v)", resp.Body, err)
	}
	for _, v := range page.Tasks {
		if v.WaitingReason != "no_executor" {
			t.Fatalf("list on the follower: %s", resp.Body)
		}
	}
	ex := c.NewExecutor("wr")
	body := fmt.Sprintf(`{"name":"wr","handlers":["backlog"],"url":%q}`, ex.URL())
	if resp := c.HTTP(f, "POST", "/v1/executors", []byte(body)); resp.Status != 201 && resp.Status != 200 {
		t.Fatalf("register the executor: %d %s", resp.Status, resp.Body)
	}
	for i := range 3 {
		c.WaitState(f, fmt.Sprintf("wr-%d", i), "SUCCESS")
	}
	if got := len(ex.Calls()); got != 3 {
		t.Fatalf("%d delivered, want 3", got)
	}
}

// apiError decodes the error code of an API answer.
func apiError(t *testing.T, r sidecartest.Response) string {
	t.Helper()
	var body struct {
		Error struct{ Code string }
	}
	if err := json.Unmarshal(r.Body, &body); err != nil {
		t.Fatalf("error body %s: %v", r.Body, err)
	}
	return body.Error.Code
}

// A node with a retention of 1s and a purge interval of 1s deletes
// finished tasks by itself; a task with a long retention of its own, a
// DEAD one under a dead retention of 1h, and a WAITING one stay (moved
// from e2e's TestRetention_LeaderPurgesExpired).
func TestRetentionLeaderPurgesExpired(t *testing.T) {
	c := sidecartest.New(t, sidecartest.Options{Config: func(_ int, cfg *sidecar.Config) {
		cfg.Retention, cfg.RetentionDead, cfg.PurgeInterval = time.Second, time.Hour, time.Second
	}})
	c.Respond(func(call sidecartest.Call) sidecartest.Reply {
		if call.Handler == "fail" {
			return sidecartest.Reply{Status: 500}
		}
		return sidecartest.Reply{}
	})
	cancelled := func(id, extra string) {
		t.Helper()
		submitJSON(t, c, 0, fmt.Sprintf(`{"id":%q,"handler":"ok","delay":"1h"%s}`, id, extra))
		if r := c.HTTP(0, "DELETE", "/v1/tasks/"+url.PathEscape(id), nil); r.Status != 200 {
			t.Fatalf("cancel %q: %d %s", id, r.Status, r.Body)
		}
	}
	for i := range 50 {
		cancelled(fmt.Sprintf("short-%02d", i), "")
	}
	cancelled("long", `,"retention":"1h"`)
	submitJSON(t, c, 0, `{"id":"dead","handler":"fail","max_attempts":1}`)
	c.WaitState(0, "dead", "DEAD")
	submitJSON(t, c, 0, `{"id":"waiting","handler":"ok","delay":"1h"}`)
	submitJSON(t, c, 0, `{"id":"ok","handler":"ok"}`)
	c.WaitState(0, "ok", "SUCCESS")

	const purged = `ax_tasks_purged_total{reason="retention"}`
	c.AdvanceUntil("the short-retention tasks to be purged", 250*time.Millisecond, func() bool {
		return c.Metrics(0)[purged] == 51 // 50 cancelled and one SUCCESS
	})
	for _, id := range []string{"short-00", "short-49", "ok"} {
		if r := c.HTTP(0, "GET", "/v1/tasks/"+id, nil); r.Status != 404 || apiError(t, r) != "not_found" {
			t.Errorf("GET %s after the purge: %d %s, want 404 not_found", id, r.Status, r.Body)
		}
	}
	c.WaitState(0, "long", "CANCELLED")
	c.WaitState(0, "dead", "DEAD")
	c.WaitState(0, "waiting", "WAITING")
	m := c.Metrics(0)
	if m[`ax_tasks{state="CANCELLED"}`] != 1 || m[`ax_tasks{state="SUCCESS"}`] != 0 || m[`ax_tasks{state="DEAD"}`] != 1 || m[`ax_tasks{state="WAITING"}`] != 1 {
		t.Fatalf("task counts after the purge: %v %v %v %v", m[`ax_tasks{state="CANCELLED"}`], m[`ax_tasks{state="SUCCESS"}`], m[`ax_tasks{state="DEAD"}`], m[`ax_tasks{state="WAITING"}`])
	}
}
