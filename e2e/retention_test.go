package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/axsched/ax/e2e/harness"
)

// purgeReply is the body of the purge endpoints.
type purgeReply struct {
	Purged     int    `json:"purged"`
	More       bool   `json:"more"`
	NextCursor string `json:"next_cursor"`
}

func doPurge(t *testing.T, n *harness.Node, method, path, body string) *harness.Response {
	t.Helper()
	var b []byte
	if body != "" {
		b = []byte(body)
	}
	resp, err := n.Client.Do(harness.ReqCtx(t), method, path, b)
	if err != nil {
		t.Fatalf("%s %s via %s: %v", method, path, n.ID, err)
	}
	return resp
}

func purgeOK(t *testing.T, resp *harness.Response) purgeReply {
	t.Helper()
	if resp.Status != 200 {
		t.Fatalf("purge: want 200, got %s", resp)
	}
	var r purgeReply
	dec := json.NewDecoder(strings.NewReader(string(resp.Body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		t.Fatalf("purge reply %s: %v", resp, err)
	}
	return r
}

// cancelled submits id an hour ahead (handler h, extra JSON fields) and
// cancels it: a finished task, cheaply.
func cancelled(t *testing.T, n *harness.Node, id, h, extra string) {
	t.Helper()
	harness.SubmitRaw(t, n, fmt.Sprintf(`{"id":%q,"handler":%q,"delay":"1h"%s}`, id, h, extra), 201)
	resp, err := n.Client.Cancel(harness.ReqCtx(t), id)
	if err != nil || resp.Status != 200 {
		t.Fatalf("cancel %q: %v %v", id, resp, err)
	}
}

// TestRetention_PurgeAPI: on three real nodes, DELETE /v1/tasks/{id}?purge=true
// removes one finished task (sent to a follower, forwarded), and POST
// /v1/tasks/purge removes many in bounded requests; tasks that are not
// finished stay; bad input gets 4xx with a code and changes nothing.
func TestRetention_PurgeAPI(t *testing.T) {
	harness.SkipShort(t)
	t.Parallel()
	c := harness.NewCluster(t)
	c.WaitReady()
	leader, follower := c.Leader(), c.Followers()[0]

	ok := harness.SubmitRaw(t, leader, fmt.Sprintf(`{"id":"done","handler":%q}`, harness.HandlerOK), 201)
	harness.WaitState(t, leader, ok.ID, "SUCCESS")
	harness.WaitState(t, follower, ok.ID, "SUCCESS")
	harness.SubmitRaw(t, leader, fmt.Sprintf(`{"id":"waiting","handler":%q,"delay":"1h"}`, harness.HandlerOK), 201)

	// One task, through a follower.
	if r := purgeOK(t, doPurge(t, follower, "DELETE", harness.TaskPath("done")+"?purge=true", "")); r.Purged != 1 {
		t.Fatalf("purge done: %+v", r)
	}
	for _, n := range c.Nodes {
		harness.WaitFor(t, harness.StateTimeout, 50*time.Millisecond, "done gone on "+n.ID, func() error {
			if resp := doPurge(t, n, "GET", harness.TaskPath("done"), ""); resp.Status != 404 {
				return fmt.Errorf("GET: %s", resp)
			}
			return nil
		})
	}
	harness.WantError(t, doPurge(t, follower, "DELETE", harness.TaskPath("done")+"?purge=true", ""), 404, "not_found")
	harness.WantError(t, doPurge(t, leader, "DELETE", harness.TaskPath("waiting")+"?purge=true", ""), 409, "conflict")
	harness.WantError(t, doPurge(t, leader, "DELETE", harness.TaskPath("ghost")+"?purge=true", ""), 404, "not_found")
	harness.WantError(t, doPurge(t, leader, "DELETE", harness.TaskPath("waiting")+"?purge=maybe", ""), 400, "bad_request")
	harness.WaitState(t, leader, "waiting", "WAITING")

	// Many: 30 finished tasks of one handler, 20 per request.
	for i := range 30 {
		cancelled(t, leader, fmt.Sprintf("bulk-%02d", i), "e2e.bulk", "")
	}
	cancelled(t, leader, "other-handler", "e2e.other", "")
	// The second request resumes on the leader from the follower's
	// cursor.
	body := `{"handler":"e2e.bulk","state":"CANCELLED","limit":20}`
	r := purgeOK(t, doPurge(t, follower, "POST", "/v1/tasks/purge", body))
	if r.Purged != 20 || !r.More || r.NextCursor == "" {
		t.Fatalf("first purge: %+v", r)
	}
	withCursor := fmt.Sprintf(`{"handler":"e2e.bulk","state":"CANCELLED","limit":20,"cursor":%q}`, r.NextCursor)
	if r := purgeOK(t, doPurge(t, leader, "POST", "/v1/tasks/purge", withCursor)); r != (purgeReply{Purged: 10, More: false}) {
		t.Fatalf("second purge: %+v", r)
	}
	if r := purgeOK(t, doPurge(t, leader, "POST", "/v1/tasks/purge", body)); r != (purgeReply{}) {
		t.Fatalf("third purge: %+v", r)
	}
	// finished_before before they finished matches nothing.
	past := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	if r := purgeOK(t, doPurge(t, leader, "POST", "/v1/tasks/purge", `{"finished_before":"`+past+`"}`)); r.Purged != 0 {
		t.Fatalf("purge before an hour ago: %+v", r)
	}
	harness.WaitState(t, leader, "other-handler", "CANCELLED")
	harness.WaitState(t, leader, "waiting", "WAITING")

	for _, bad := range []struct{ body, code string }{
		{`{"state":"WAITING"}`, "bad_request"},
		{`{"state":"RUNNING"}`, "bad_request"},
		{`{"limit":0}`, "bad_request"},
		{`{"limit":10001}`, "bad_request"},
		{`{"finished_before":"yesterday"}`, "bad_request"},
		{`{"handler":"e2e.other","force":true}`, "bad_request"},
		{`{"handler":"e2e.other","cursor":"not-ours"}`, "bad_request"},
		{`{"handler":`, "invalid_json"},
	} {
		harness.WantError(t, doPurge(t, leader, "POST", "/v1/tasks/purge", bad.body), 400, bad.code)
	}
	harness.WaitState(t, leader, "other-handler", "CANCELLED")

	// retention on submit: validated, shown.
	for _, bad := range []string{`"-1s"`, `"forever"`, `3600`} {
		resp, err := leader.Client.Submit(harness.ReqCtx(t), []byte(fmt.Sprintf(`{"id":"ret-bad","handler":%q,"retention":%s}`, harness.HandlerOK, bad)))
		if err != nil {
			t.Fatal(err)
		}
		harness.WantError(t, resp, 400, "bad_request")
	}
	harness.WantError(t, doPurge(t, leader, "GET", harness.TaskPath("ret-bad"), ""), 404, "not_found")
	var view map[string]any
	got := harness.SubmitRaw(t, leader, fmt.Sprintf(`{"id":"ret-ok","handler":%q,"delay":"1h","retention":"90m"}`, harness.HandlerOK), 201)
	resp := doPurge(t, leader, "GET", harness.TaskPath(got.ID), "")
	if err := json.Unmarshal(resp.Body, &view); err != nil || view["retention"] != "1h30m0s" {
		t.Fatalf("view of a task with a retention: %s", resp)
	}

	// ax_tasks_purged_total{reason="api"} counts them where they were asked.
	if got := harness.SumMetric(t, c.Nodes, `ax_tasks_purged_total{reason="api"}`); got != 31 {
		t.Fatalf("ax_tasks_purged_total{reason=\"api\"} summed over the nodes = %v, want 31", got)
	}
}
