package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// TestBackpressure_QueueFull: with the backlog bound at 1000 and no
// executor anywhere, 1000 due tasks are accepted (with a warning header
// from 80 % of the bound), the 1001st submit gets 429 queue_full with
// Retry-After, the depth and the limit, through the leader and through a
// follower alike, and nothing accepted earlier is lost.
func TestBackpressure_QueueFull(t *testing.T) {
	skipShort(t)
	c := NewCluster(t, WithSize(3), WithExecutorsOn(), WithArgs("--backlog-limit", "1000"))
	c.WaitReady()
	leader := c.Leader()
	follower := c.Followers()[0]
	warned := 0
	for b := range 10 {
		var items []string
		for i := range 100 {
			items = append(items, fmt.Sprintf(`{"id":"bp-%d-%d","handler":"bp.none"}`, b, i))
		}
		resp, err := follower.Client.Do(reqCtx(t), "POST", "/v1/tasks/batch", []byte(`{"tasks":[`+strings.Join(items, ",")+`]}`))
		if err != nil {
			t.Fatal(err)
		}
		if resp.Status != 200 {
			t.Fatalf("batch %d: %s", b, resp)
		}
		if resp.Header.Get("Ax-Backlog-Warning") != "" {
			warned++
		}
	}
	// A single submit at the bound: refused, on both nodes.
	for _, n := range []*Node{leader, follower} {
		resp, err := n.Client.Submit(reqCtx(t), SubmitRequest{ID: "bp-over-" + n.ID, Handler: "bp.none"}.Body())
		if err != nil {
			t.Fatal(err)
		}
		if resp.Status != 429 {
			t.Fatalf("submit past the bound via %s: %s", n.ID, resp)
		}
		if resp.RetryAfter() <= 0 {
			t.Errorf("429 without Retry-After: %v", resp.Header)
		}
		var body struct {
			Error struct {
				Code         string
				Message      string
				Depth, Limit int
			}
		}
		if err := json.Unmarshal(resp.Body, &body); err != nil {
			t.Fatal(err)
		}
		if body.Error.Code != "queue_full" || body.Error.Depth != 1000 || body.Error.Limit != 1000 || !strings.Contains(body.Error.Message, "bp.none") {
			t.Fatalf("429 body: %s", resp.Body)
		}
		if _, err := n.Client.GetTask(reqCtx(t), "bp-over-"+n.ID); err == nil {
			t.Fatalf("a refused task was stored")
		}
	}
	// Another handler is not held back by this one's backlog, and a task
	// due later is not counted.
	mustSubmit(t, follower, SubmitRequest{ID: "bp-other", Handler: "bp.other"}, 201)
	mustSubmit(t, follower, SubmitRequest{ID: "bp-later", Handler: "bp.none", Delay: "1h"}, 201)
	// Every accepted task is stored and waiting.
	m := scrape(t, leader)
	if got := m[`ax_tasks{state="WAITING"}`]; got != 1002 {
		t.Fatalf("WAITING tasks %v, want 1002", got)
	}
	for b := range 10 {
		if _, err := leader.Client.GetTask(reqCtx(t), fmt.Sprintf("bp-%d-99", b)); err != nil {
			t.Fatalf("accepted task lost: %v", err)
		}
	}
	if warned < 2 {
		t.Errorf("want an Ax-Backlog-Warning on the batches past 80 %% of the bound, got %d", warned)
	}
}
