package e2e

import (
	"encoding/json"
	"net/http"
	"net/url"
	"testing"

	"github.com/axsched/ax/e2e/harness"
)

// post sends POST path with body {} through n and fails on a transport
// error.
func post(t *testing.T, n *harness.Node, path string) *harness.Response {
	t.Helper()
	resp, err := n.Client.Do(harness.ReqCtx(t), "POST", path, []byte("{}"))
	if err != nil {
		t.Fatalf("POST %s via %s: %v", path, n.ID, err)
	}
	return resp
}

func handlerPath(name, action string) string {
	return "/v1/handlers/" + url.PathEscape(name) + "/" + action
}

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

func handlersOf(t *testing.T, n *harness.Node) map[string]handlerInfo {
	t.Helper()
	resp, err := n.Client.Do(harness.ReqCtx(t), "GET", "/v1/handlers", nil)
	if err != nil || resp.Status != http.StatusOK {
		t.Fatalf("GET /v1/handlers via %s: %v %v", n.ID, resp, err)
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

// TestPause_BadInput: pausing a handler nobody knows, a finished task or
// an unknown task, and the wrong method, get a 4xx with a code; nothing
// changes.
func TestPause_BadInput(t *testing.T) {
	harness.SkipShort(t)
	t.Parallel()
	c := harness.NewCluster(t, harness.WithSize(1), harness.WithBootstrapExpect(1), harness.WithExecutorsOn())
	c.WaitReady()
	n := c.Nodes[0]
	harness.WantError(t, post(t, n, handlerPath("nobody", "pause")), 404, "handler_not_found")
	harness.WantError(t, post(t, n, handlerPath("nobody", "resume")), 404, "handler_not_found")
	harness.MustSubmit(t, n, harness.SubmitRequest{ID: "fin", Handler: "h", Delay: "1h"}, 201)
	if resp, err := n.Client.Cancel(harness.ReqCtx(t), "fin"); err != nil || resp.Status != 200 {
		t.Fatalf("cancel: %v %v", resp, err)
	}
	harness.WantError(t, post(t, n, harness.TaskPath("fin")+"/pause"), 409, "task_finished")
	harness.WantError(t, post(t, n, harness.TaskPath("ghost")+"/pause"), 404, "not_found")
	resp, err := n.Client.Do(harness.ReqCtx(t), "GET", handlerPath("h", "pause"), nil)
	if err != nil {
		t.Fatal(err)
	}
	harness.WantError(t, resp, 405, "method_not_allowed")
	resp, err = n.Client.Do(harness.ReqCtx(t), "POST", handlerPath("h", "pause"), []byte(`{"force":true}`))
	if err != nil {
		t.Fatal(err)
	}
	harness.WantError(t, resp, 400, "bad_request")
	// "h" has a task: it is known, and pausable.
	if r := post(t, n, handlerPath("h", "pause")); r.Status != 200 {
		t.Fatalf("pause h: %s", r)
	}
	hs := handlersOf(t, n)
	if len(hs) != 1 || !hs["h"].Paused || hs["h"].Tasks["CANCELLED"] != 1 {
		t.Fatalf("handlers %+v", hs)
	}
}
