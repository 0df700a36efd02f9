package sidecartest_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/axsched/ax/sidecar/sidecartest"
)

// handlerInfo is one handler of GET /v1/handlers, as documented.
type handlerInfo struct {
	Name      string         `json:"name"`
	Paused    bool           `json:"paused"`
	Backlog   *int           `json:"backlog"`
	Parked    map[string]int `json:"parked"`
	Circuit   string         `json:"circuit"`
	Tasks     map[string]int `json:"tasks"`
	Executors []struct {
		Node string `json:"node"`
		Name string `json:"name"`
		URL  string `json:"url"`
	} `json:"executors"`
}

func handlersOf(t *testing.T, c *sidecartest.Cluster, i int) map[string]handlerInfo {
	t.Helper()
	resp := c.HTTP(i, "GET", "/v1/handlers", nil)
	if resp.Status != 200 {
		t.Fatalf("GET /v1/handlers via n%d: %d %s", i, resp.Status, resp.Body)
	}
	var doc struct {
		Handlers []handlerInfo `json:"handlers"`
	}
	if err := json.Unmarshal(resp.Body, &doc); err != nil {
		t.Fatalf("GET /v1/handlers: %v: %s", err, resp.Body)
	}
	out := map[string]handlerInfo{}
	for _, h := range doc.Handlers {
		out[h.Name] = h
	}
	return out
}

// On three nodes, a handler paused through a follower gets none of its
// tasks delivered, due now or later, while other handlers run; GET
// /v1/handlers (through the other follower, which asks the leader) shows
// it paused with its runs parked as "paused"; resumed through the
// leader, every task is delivered once (moved from e2e's
// TestPause_Handler).
func TestPauseHandler(t *testing.T) {
	c := sidecartest.New(t, sidecartest.Options{Nodes: 3})
	leader := c.WaitLeader()
	var f []int
	for i := range c.Nodes() {
		if i != leader {
			f = append(f, i)
		}
	}
	const n = 30
	// The handler must be known to be paused: it has an executor ("*").
	if r := c.HTTP(f[0], "POST", "/v1/handlers/paused/pause", []byte("{}")); r.Status != 200 || string(r.Body) != `{"name":"paused","paused":true}`+"\n" {
		t.Fatalf("pause via n%d: %d %s", f[0], r.Status, r.Body)
	}
	// Again: idempotent.
	if r := c.HTTP(leader, "POST", "/v1/handlers/paused/pause", []byte("{}")); r.Status != 200 {
		t.Fatalf("pause again: %d %s", r.Status, r.Body)
	}
	var ids []string
	for i := range n {
		id := fmt.Sprintf("paused-%d", i)
		ids = append(ids, id)
		s := sidecartest.Spec(id, "paused")
		if i%2 == 1 {
			s.Delay = time.Second // due while paused, later
		}
		c.Submit(i%3, s)
	}
	s := sidecartest.Spec("not-paused", "ok")
	s.Delay = 1500 * time.Millisecond
	c.Submit(f[1], s)
	c.Advance(1500 * time.Millisecond)
	c.WaitState(f[1], "not-paused", "SUCCESS")
	// Every paused run is due by now and parked on the leader.
	var h handlerInfo
	c.Eventually("the paused runs to be parked", func() bool {
		h = handlersOf(t, c, f[1])["paused"]
		return h.Paused && h.Parked["paused"] == n && h.Tasks["WAITING"] == n && h.Backlog != nil && *h.Backlog >= n &&
			h.Circuit == "closed" && len(h.Executors) == 3
	})
	for _, id := range ids {
		if calls := c.CallsFor(id); len(calls) != 0 {
			t.Fatalf("task %s of the paused handler was delivered %d times", id, len(calls))
		}
		if task, err := c.Task(f[0], id); err != nil || task.State != "WAITING" {
			t.Fatalf("task %s while paused: %+v %v", id, task, err)
		}
	}

	if r := c.HTTP(leader, "POST", "/v1/handlers/paused/resume", []byte("{}")); r.Status != 200 || string(r.Body) != `{"name":"paused","paused":false}`+"\n" {
		t.Fatalf("resume via the leader: %d %s", r.Status, r.Body)
	}
	// Every node has read every outcome, the viewing follower included
	// (a follower answers from its own store if the leader does not).
	for i := range c.Nodes() {
		for _, id := range ids {
			c.WaitState(i, id, "SUCCESS")
		}
	}
	for _, id := range ids {
		if calls := c.CallsFor(id); len(calls) != 1 {
			t.Errorf("task %s: %d callbacks after the resume, want 1", id, len(calls))
		}
	}
	h = handlersOf(t, c, f[0])["paused"]
	if h.Paused || len(h.Parked) != 0 || h.Tasks["SUCCESS"] != n {
		t.Fatalf("handler view after the resume: %+v", h)
	}
}
