package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/axsched/ax/e2e/harness"
)

// chromiumPath finds Debian's chromium; without it the test skips, unless
// AX_UI_REQUIRE_CHROMIUM is set (CI), where it fails.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("AX_UI_REQUIRE_CHROMIUM") != "" {
		t.Fatal("AX_UI_REQUIRE_CHROMIUM is set but chromium is not installed (apt-get install chromium)")
	}
	t.Skip("chromium is not installed (apt-get install chromium): the dashboard's browser test needs it")
	return ""
}

// newBrowser starts headless Chromium, with the flags that keep it off the
// network (this machine's closed network makes it hang otherwise) and a
// fresh profile.
func newBrowser(t *testing.T, path string) context.Context {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-default-apps", true),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1200, 860),
	}
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelB := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	ctx, cancelT := context.WithTimeout(ctx, 90*time.Second)
	t.Cleanup(func() { cancelT(); cancelB(); cancelA() })
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

// uiTask is what the test reads of a task from the API.
type uiTask struct {
	ID       string `json:"id"`
	State    string `json:"state"`
	Run      int    `json:"run"`
	Attempts int    `json:"attempts"`
}

func apiGet(t *testing.T, n *harness.Node, path string, out any) {
	t.Helper()
	resp, err := n.Client.Do(harness.ReqCtx(t), "GET", path, nil)
	if err != nil || resp.Status != http.StatusOK {
		t.Fatalf("GET %s via %s: %v %v", path, n.ID, resp, err)
	}
	if err := json.Unmarshal(resp.Body, out); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
}

// TestUI_Browser drives the dashboard of a live three-node cluster in
// headless Chromium: node 1 serves it (ax sidecar --ui-addr), with tasks
// in every state. Each page is loaded and checked against the API; a task
// is cancelled and dead ones are retried from the pages, and the API sees
// it. Screenshots go to $AX_UI_SCREENSHOTS (default: a temp dir).
func TestUI_Browser(t *testing.T) {
	harness.SkipShort(t)
	chrome := chromiumPath(t)
	t.Parallel()
	shots := os.Getenv("AX_UI_SCREENSHOTS")
	if shots == "" {
		shots = t.TempDir()
	} else if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}
	port := harness.FreePorts(t, 1)[0]
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	c := harness.NewCluster(t, harness.WithNodeArgs(0, "--ui-addr", fmt.Sprintf("127.0.0.1:%d", port), "--ui-sample-interval", "250ms"))
	c.WaitReady()
	n1 := c.Nodes[0]

	// Tasks in every state.
	sub := func(body string) { harness.SubmitRaw(t, n1, body, http.StatusCreated) }
	// A task with a run history (HandlerHistory): 3 runs 1 s apart,
	// submitted first so that they go on while the other tasks are made.
	// Run 1 answers JSON, run 2's first attempt fails (500) and its retry
	// succeeds, run 3's 100 KiB answer is kept cut, as base64.
	histID := "report|ui"
	sub(fmt.Sprintf(`{"id":%q,"handler":%q,"every":"1s","repeats":3,"backoff":{"initial":"100ms","jitter":0},"labels":{"team":"blue"}}`, histID, harness.HandlerHistory))
	// A diamond flow A -> (B, C) -> D, for the flows pages.
	flowBody := fmt.Sprintf(`{"id":"ui-dia","stages":[{"name":"A","handler":%[1]q},{"name":"B","handler":%[1]q,"depends_on":["A"]},
		{"name":"C","handler":%[1]q,"depends_on":["A"]},{"name":"D","handler":%[1]q,"depends_on":["B","C"]}]}`, harness.HandlerOK)
	if resp, err := n1.Client.Do(harness.ReqCtx(t), "POST", "/v1/flows", []byte(flowBody)); err != nil || resp.Status != http.StatusCreated {
		t.Fatalf("submit flow: %v %v", resp, err)
	}
	for i := 0; i < 12; i++ {
		sub(fmt.Sprintf(`{"id":"order|%02d","handler":"shop.remind","delay":"1h","labels":{"team":"%s"},"payload":{"order":%d}}`, i, []string{"red", "blue"}[i%2], i))
	}
	for i := 0; i < 5; i++ {
		sub(fmt.Sprintf(`{"id":"ok-%d","handler":"%s"}`, i, harness.HandlerOK))
	}
	for i := 0; i < 4; i++ {
		sub(fmt.Sprintf(`{"id":"dead-%d","handler":"%s","max_attempts":1,"labels":{"team":"red"}}`, i, harness.HandlerFail))
	}
	sub(fmt.Sprintf(`{"id":"failed-0","handler":"%s"}`, harness.HandlerPermanent))
	sub(fmt.Sprintf(`{"id":"running-0","handler":"%s","timeout":"10m"}`, harness.HandlerSlow))
	sub(`{"id":"cancelled-0","handler":"shop.remind","delay":"1h"}`)
	if resp, err := n1.Client.Cancel(harness.ReqCtx(t), "cancelled-0"); err != nil || resp.Status != 200 {
		t.Fatalf("cancel: %v %v", resp, err)
	}
	// A trickle of callbacks for the lateness chart (sampled every 250 ms).
	for i := 0; i < 24; i++ {
		sub(fmt.Sprintf(`{"id":"sleep-%02d","handler":"%s"}`, i, harness.HandlerSleep))
		time.Sleep(100 * time.Millisecond)
	}
	for i := 0; i < 5; i++ {
		harness.WaitState(t, n1, fmt.Sprintf("ok-%d", i), "SUCCESS")
	}
	for i := 0; i < 24; i++ {
		harness.WaitState(t, n1, fmt.Sprintf("sleep-%02d", i), "SUCCESS")
	}
	for i := 0; i < 4; i++ {
		harness.WaitState(t, n1, fmt.Sprintf("dead-%d", i), "DEAD")
	}
	harness.WaitState(t, n1, "failed-0", "FAILED")
	harness.WaitState(t, n1, "running-0", "RUNNING")
	harness.WaitFor(t, 15*time.Second, 50*time.Millisecond, histID+"'s 3 runs", func() error {
		var tk uiTask
		apiGet(t, n1, "/v1/tasks/"+url.PathEscape(histID), &tk)
		if tk.State != "SUCCESS" || tk.Run != 3 {
			return fmt.Errorf("state %s run %d", tk.State, tk.Run)
		}
		return nil
	})

	ctx := newBrowser(t, chrome)
	run := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, steps...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	shot := func(name string) {
		t.Helper()
		png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		if err := os.WriteFile(filepath.Join(shots, name+".png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	text := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return strings.TrimSpace(s)
	}
	count := func(sel string) int {
		t.Helper()
		n, err := chromedp.Run(ctx, chromedp.Evaluate[int](fmt.Sprintf(`document.querySelectorAll(%q).length`, sel)))
		if err != nil {
			t.Fatalf("count %s: %v", sel, err)
		}
		return n
	}

	// Cluster: the leader and the members as the API says.
	var ci struct {
		Leader  string `json:"leader"`
		Members []struct {
			ID string `json:"id"`
		} `json:"members"`
	}
	// A leader change under load may come between the two reads (CI once
	// read no leader from the API while an election ran): compare until
	// both show the same leader, for at most 10 s.
	var pageLeader string
	harness.WaitFor(t, 10*time.Second, 200*time.Millisecond, "the cluster page shows the API's leader", func() error {
		apiGet(t, n1, "/v1/cluster", &ci)
		run("cluster page", chromedp.Navigate(base+"/cluster"), chromedp.WaitVisible(chromedp.CSS("#members")))
		if pageLeader = text("#leader"); ci.Leader == "" || pageLeader != ci.Leader {
			return fmt.Errorf("page %q, API %q", pageLeader, ci.Leader)
		}
		return nil
	})
	if got := count("#members tr[data-member]"); got != len(ci.Members) || got != 3 {
		t.Errorf("cluster page: %d members, API %d", got, len(ci.Members))
	}
	shot("cluster")

	// Handlers: every handler's counts by state as the API's.
	var hl struct {
		Handlers []struct {
			Name  string         `json:"name"`
			Tasks map[string]int `json:"tasks"`
		} `json:"handlers"`
	}
	apiGet(t, n1, "/v1/handlers", &hl)
	run("handlers page", chromedp.Navigate(base+"/handlers"), chromedp.WaitVisible(chromedp.CSS(`section[data-handler="shop.remind"]`)))
	var chartErr error
	func() {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		chartErr = chromedp.Do(wctx, chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`section[data-handler=%q] svg polyline`, harness.HandlerSleep))))
	}()
	if chartErr != nil {
		// The chart shows node n1's callbacks; routing may have sent it few.
		t.Logf("no lateness chart for %s: %v", harness.HandlerSleep, chartErr)
	}
	total := map[string]int{}
	for _, h := range hl.Handlers {
		for st, n := range h.Tasks {
			total[st] += n
			sel := fmt.Sprintf(`section[data-handler=%q] .counts [data-state=%q] b`, h.Name, st)
			if got := text(sel); got != strconv.Itoa(n) {
				t.Errorf("handlers page: %s %s = %q, API %d", h.Name, st, got, n)
			}
		}
	}
	shot("handlers")
	if chartErr == nil {
		// One handler's section with its chart (the README's picture).
		png, err := chromedp.Run(ctx, chromedp.Screenshot(chromedp.CSS(fmt.Sprintf(`section[data-handler=%q]`, harness.HandlerSleep))))
		if err != nil {
			t.Fatalf("screenshot of %s: %v", harness.HandlerSleep, err)
		}
		if err := os.WriteFile(filepath.Join(shots, "handler.png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// Tasks: the counts, a filtered list, a task's state.
	run("tasks page", chromedp.Navigate(base+"/tasks"), chromedp.WaitVisible(chromedp.CSS("#tasks")))
	sum := 0
	for _, st := range []string{"WAITING", "RUNNING", "SUCCESS", "DEAD", "FAILED", "CANCELLED"} {
		if total[st] == 0 {
			t.Errorf("the API has no %s task: the test wants every state", st)
		}
		sum += total[st]
		if got := text(fmt.Sprintf(`#counts [data-state=%q] b`, st)); got != strconv.Itoa(total[st]) {
			t.Errorf("tasks page: %s = %q, API %d", st, got, total[st])
		}
	}
	if got := text("#total"); got != strconv.Itoa(sum) {
		t.Errorf("tasks page: total %q, API %d", got, sum)
	}
	shot("tasks")
	run("filtered tasks", chromedp.Navigate(base+"/tasks?state=WAITING&label=team%3Dred&prefix=order"), chromedp.WaitVisible(chromedp.CSS("#tasks")))
	if got := count("#tasks tr[data-id]"); got != 6 {
		t.Errorf("WAITING, team=red, prefix order: %d rows, want 6", got)
	}

	// A DEAD task's page (the README's screenshot), then retry it there.
	var before uiTask
	apiGet(t, n1, "/v1/tasks/dead-0", &before)
	run("dead task page", chromedp.Navigate(base+"/tasks/dead-0"), chromedp.WaitVisible(chromedp.CSS("#task-state")))
	if got := text("#task-state"); got != "DEAD" {
		t.Errorf("task page: state %q, API DEAD", got)
	}
	shot("task")
	run("retry", chromedp.Click(chromedp.CSS("#retry")), chromedp.WaitVisible(chromedp.CSS("#flash")))
	harness.WaitFor(t, 10*time.Second, 50*time.Millisecond, "dead-0 retried", func() error {
		var after uiTask
		apiGet(t, n1, "/v1/tasks/dead-0", &after)
		if after.Run <= before.Run {
			return fmt.Errorf("run %d (state %s), was %d", after.Run, after.State, before.Run)
		}
		return nil
	})

	// A task's run history on its page, as GET /v1/tasks/{id}/runs has it:
	// the runs newest first, each with its state and attempts, the failed
	// attempt's error, the JSON result, the cut base64 one.
	hist, err := runsOn(t, n1, histID)
	if err != nil {
		t.Fatal(err)
	}
	if len(hist) != 3 {
		t.Fatalf("GET runs of %s: %d hist, want 3", histID, len(hist))
	}
	run("task page with history", chromedp.Navigate(base+"/tasks/"+url.PathEscape(histID)), chromedp.WaitVisible(chromedp.CSS(`section.run[data-run="1"]`)))
	if got := count("section.run"); got != len(hist) {
		t.Errorf("task page of %s: %d hist, API %d", histID, got, len(hist))
	}
	order, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("section.run")].map(s => s.dataset.run)`))
	if err != nil || strings.Join(order, ",") != "3,2,1" {
		t.Errorf("task page of %s: runs in order %v (%v), want newest first", histID, order, err)
	}
	for _, r := range hist {
		sec := fmt.Sprintf(`section.run[data-run="%d"]`, r.Run)
		if got := text(sec + " h3 .tag"); got != r.State {
			t.Errorf("run %d: state %q, API %s", r.Run, got, r.State)
		}
		if got := count(sec + " tr[data-attempt]"); got != len(r.Attempts) {
			t.Errorf("run %d: %d attempts, API %d", r.Run, got, len(r.Attempts))
		}
		for _, a := range r.Attempts {
			if a.Error == "" {
				continue
			}
			if got := text(fmt.Sprintf(`%s tr[data-attempt="%d"] td.err`, sec, a.Attempt)); got != a.Error {
				t.Errorf("run %d attempt %d: error %q, API %q", r.Run, a.Attempt, got, a.Error)
			}
		}
		switch {
		case len(r.Result) > 0:
			var shown, want bytes.Buffer
			got := text(sec + ` .result[data-kind="json"] pre`)
			if err := json.Compact(&shown, []byte(got)); err != nil || json.Compact(&want, r.Result) != nil || shown.String() != want.String() {
				t.Errorf("run %d: result %q (%v), API %s", r.Run, got, err, r.Result)
			}
		case r.ResultBase64 != "":
			got := text(sec + ` .result[data-kind="base64"] p`)
			if r.ResultTruncated != strings.Contains(got, "truncated") {
				t.Errorf("run %d: result's caption %q, API truncated %v", r.Run, got, r.ResultTruncated)
			}
			if pre := text(sec + " .result pre"); !strings.HasPrefix(r.ResultBase64, strings.TrimSuffix(pre, "…")) {
				t.Errorf("run %d: base64 result shown is not the API's", r.Run)
			}
		}
	}
	if hist[1].Attempts[0].Error == "" || hist[2].Result == nil || hist[0].ResultBase64 == "" {
		t.Errorf("the API's history lacks a failed attempt, a JSON or a base64 result: %+v", hist)
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot of %s: %v", histID, err)
	}
	if err := os.WriteFile(filepath.Join(shots, "task-history.png"), png, 0o644); err != nil {
		t.Fatal(err)
	}

	// Cancel a waiting task from its page (it asks for confirmation).
	id := "order|03"
	run("task page", chromedp.Navigate(base+"/tasks/"+url.PathEscape(id)), chromedp.WaitVisible(chromedp.CSS("#cancel")))
	if got := text("#task-state"); got != "WAITING" {
		t.Errorf("task page of %s: state %q, want WAITING", id, got)
	}
	run("cancel", chromedp.Click(chromedp.CSS(`#cancel-form input[name=confirm]`)), chromedp.Click(chromedp.CSS("#cancel")),
		chromedp.WaitVisible(chromedp.CSS("#flash")))
	if got := text("#task-state"); got != "CANCELLED" {
		t.Errorf("after cancel the page shows %q", got)
	}
	var cancelled uiTask
	apiGet(t, n1, "/v1/tasks/"+url.PathEscape(id), &cancelled)
	if cancelled.State != "CANCELLED" {
		t.Errorf("after cancel from the page the API has %s", cancelled.State)
	}

	// Live update: a change made through the API shows on an open page
	// without a reload (app.js polls every 2 s).
	id = "order|05"
	run("task page "+id, chromedp.Navigate(base+"/tasks/"+url.PathEscape(id)), chromedp.WaitVisible(chromedp.CSS("#task-state.state-waiting")))
	if resp, err := c.Nodes[2].Client.Cancel(harness.ReqCtx(t), id); err != nil || resp.Status != 200 {
		t.Fatalf("cancel %s through the API: %v %v", id, resp, err)
	}
	func() {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := chromedp.Do(wctx, chromedp.WaitVisible(chromedp.CSS("#task-state.state-cancelled"))); err != nil {
			t.Errorf("the open page of %s did not show CANCELLED within 10 s: %v", id, err)
		}
	}()

	// Dead letters: the DEAD and FAILED tasks; a bulk retry of two.
	harness.WaitState(t, n1, "dead-0", "DEAD") // its retry failed again (max_attempts 1)
	run("dead letters", chromedp.Navigate(base+"/dead"), chromedp.WaitVisible(chromedp.CSS("#dead-handlers")))
	if got := text(fmt.Sprintf(`#dead-handlers tr[data-handler=%q] .dead`, harness.HandlerFail)); got != strconv.Itoa(total["DEAD"]) {
		t.Errorf("dead letters: %s DEAD %q, API %d", harness.HandlerFail, got, total["DEAD"])
	}
	shot("dead")
	runs := map[string]int{}
	for _, id := range []string{"dead-1", "dead-2"} {
		var tk uiTask
		apiGet(t, n1, "/v1/tasks/"+id, &tk)
		runs[id] = tk.Run
	}
	run("bulk retry", chromedp.Click(chromedp.CSS(`#retry-dead input[value="dead-1"]`)), chromedp.Click(chromedp.CSS(`#retry-dead input[value="dead-2"]`)),
		chromedp.Click(chromedp.CSS(`#retry-dead button`)), chromedp.WaitVisible(chromedp.CSS("#flash")))
	if got := text("#flash"); got != "retried 2 tasks" {
		t.Errorf("bulk retry: flash %q", got)
	}
	for id, was := range runs {
		var tk uiTask
		apiGet(t, n1, "/v1/tasks/"+id, &tk)
		if tk.Run <= was {
			t.Errorf("%s after the bulk retry: run %d, was %d", id, tk.Run, was)
		}
	}

	// The diamond flow's page: its state and its 4 stages, by level, as
	// GET /v1/flows/{id} on n1 (the node the dashboard reads) has them.
	var fl e2eFlow
	harness.WaitFor(t, 15*time.Second, 50*time.Millisecond, "flow ui-dia SUCCESS on "+n1.ID, func() error {
		var err error
		if fl, err = getFlowOn(t, n1, "ui-dia"); err == nil && fl.State != "SUCCESS" {
			err = fmt.Errorf("state %s", fl.State)
		}
		return err
	})
	run("flows list", chromedp.Navigate(base+"/flows"), chromedp.WaitVisible(chromedp.CSS(`#flows tr[data-id="ui-dia"]`)))
	if got := text(`#flows tr[data-id="ui-dia"] td .tag`); got != fl.State {
		t.Errorf("flows list: ui-dia %q, API %s", got, fl.State)
	}
	run("flow page", chromedp.Navigate(base+"/flows/ui-dia"), chromedp.WaitVisible(chromedp.CSS("#levels .stage")))
	if got := text("#flow-state"); got != fl.State {
		t.Errorf("flow page: state %q, API %s", got, fl.State)
	}
	if got := count("#levels .stage"); got != len(fl.Stages) || got != 4 {
		t.Errorf("flow page: %d stages, API %d, want 4", got, len(fl.Stages))
	}
	for _, st := range fl.Stages {
		if got := text(fmt.Sprintf(`#levels .stage[data-stage=%q] .state`, st.Name)); got != st.State {
			t.Errorf("flow page: stage %s %q, API %s", st.Name, got, st.State)
		}
	}
	levels, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#levels .level")].map(l => [...l.querySelectorAll(".stage")].map(s => s.dataset.stage).join(","))`))
	if err != nil || strings.Join(levels, " | ") != "A | B,C | D" {
		t.Errorf("flow page: levels %v (%v), want A | B,C | D", levels, err)
	}
	shot("flow")

	// socket.
	uiPort := harness.FreePorts(t, 1)[0]
	p := harness.NewProcess("ax-ui", harness.AxBin, filepath.Join(t.TempDir(), "ui.log"), "ui", "--socket", c.Nodes[1].Socket, "--listen", fmt.Sprintf("127.0.0.1:%d", uiPort))
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Kill() })
	uiAddr := fmt.Sprintf("127.0.0.1:%d", uiPort)
	harness.WaitFor(t, 10*time.Second, 20*time.Millisecond, "ax ui to listen", func() error {
		conn, err := net.Dial("tcp", uiAddr)
		if err == nil {
			conn.Close()
		}
		return err
	})
	run("ax ui", chromedp.Navigate(fmt.Sprintf("http://127.0.0.1:%d/cluster", uiPort)), chromedp.WaitVisible(chromedp.CSS("#node-id")))
	if got := text("#node-id"); !strings.HasPrefix(got, c.Nodes[1].ID+" ") {
		t.Errorf("ax ui beside %s shows node %q", c.Nodes[1].ID, got)
	}
	t.Logf("screenshots in %s", shots)
}
