package ui

import (
	"encoding/base64"
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/axsched/ax/clients/go/axapi"
)

// historyRuns returns n runs of a task, newest first: run 2 failed once
// before it succeeded; the newest has a JSON result that tries to inject
// markup, run 1 a base64 result cut by the node, the others {"run":N}.
func historyRuns(n int) []axapi.Run {
	due := time.Date(2026, 12, 4, 3, 0, 0, 0, time.UTC)
	var runs []axapi.Run
	for i := n; i >= 1; i-- {
		d := due.Add(time.Duration(i) * time.Hour)
		started, finished := d.Add(2*time.Millisecond), d.Add(1500*time.Millisecond)
		r := axapi.Run{Run: i, State: "SUCCESS", DueAt: d, FiredAt: d, StartedAt: &started, FinishedAt: &finished,
			Lateness: &axapi.Lateness{TotalMs: 41.2, ParkedMs: 38, ParkedReason: "handler_limit", CommitMs: 2, QueueMs: 0.8, ConnectMs: 0.4},
			Result:   json.RawMessage(`{"run":` + strconv.Itoa(i) + `}`)}
		ok := axapi.RunAttempt{Attempt: 1, Node: "n2", Executor: "app", FiredAt: d, StartedAt: &started, EndedAt: &finished, DurationMs: 1498, Outcome: "success", HTTPStatus: 200}
		switch i {
		case n:
			r.Result = json.RawMessage(`{"note":"<script>alert(1)</script>","items":[1,2]}`)
		case 2:
			failed := ok
			failed.Outcome, failed.HTTPStatus, failed.Error, failed.Node = "retryable", 500, "http 500: <b>boom</b>", "n3"
			ok.Attempt = 2
			r.Attempts = append(r.Attempts, failed)
			r.Lateness = &axapi.Lateness{TotalMs: 1041.2, ParkedMs: 38, RetriesMs: 1000, CommitMs: 2, QueueMs: 0.8, ConnectMs: 0.4}
		case 1:
			r.Result = nil
			r.ResultBase64 = base64.StdEncoding.EncodeToString([]byte(strings.Repeat("x", 6000)))
			r.ResultTruncated = true
		}
		r.Attempts = append(r.Attempts, ok)
		runs = append(runs, r)
	}
	return runs
}

var runRE = regexp.MustCompile(`data-run="(\d+)"`)

// shownRuns lists the run numbers of a task page, in page order.
func shownRuns(body string) []string {
	var out []string
	for _, m := range runRE.FindAllStringSubmatch(body, -1) {
		out = append(out, m[1])
	}
	return out
}

func TestPages_TaskRunHistory(t *testing.T) {
	f := newFakeAPI(t)
	f.add("report|daily", "report", "WAITING", nil)
	f.add("never", "report", "WAITING", nil)
	f.runs = map[string][]axapi.Run{"report|daily": historyRuns(12), "never": nil}
	_, b := startUI(t, f, "")

	st, body := b.get("/tasks/report%7Cdaily")
	if st != 200 {
		t.Fatalf("task page: %d", st)
	}
	// The newest 10 runs, newest first, and a link to the older ones.
	if got := strings.Join(shownRuns(body), ","); got != "12,11,10,9,8,7,6,5,4,3" {
		t.Errorf("first page shows runs %s", got)
	}
	if !containsCall(f.callLog(), "GET /v1/tasks/report%7Cdaily/runs?limit=10") {
		t.Errorf("the page did not read one page of 10 runs: %v", f.callLog())
	}
	mustContain(t, "first page", body,
		`<a href="/tasks/report%7Cdaily?runs=r3" id="runs-older">`,
		// Run 12: its times, lateness split, attempt and result.
		`id="run-12"`, "1 attempt · took 1.50 s",
		"due 2026-12-04 15:00:00.000Z · started 2026-12-04 15:00:00.002Z · finished 2026-12-04 15:00:01.500Z",
		"lateness <b>41.2 ms</b> = parked 38.0 <span class=\"tag\">handler_limit</span> + commit 2.0 + queue 0.8 + connect 0.4",
		`<tr data-attempt="1"><td>1</td><td>n2</td><td>app</td><td>2026-12-04 15:00:00.002Z</td><td>1498.0 ms</td><td class="outcome"><span class="tag ok">success</span></td><td>200</td>`,
		// The JSON result indented, and escaped.
		`data-kind="json"`, "<pre class=\"result\">{\n  &#34;note&#34;: &#34;&lt;script&gt;alert(1)&lt;/script&gt;&#34;,\n  &#34;items&#34;: [\n    1,\n    2\n  ]\n}</pre>",
		"<pre class=\"result\">{\n  &#34;run&#34;: 11\n}</pre>",
	)
	if strings.Contains(body, "<script>alert") || strings.Contains(body, "runs-newest") {
		t.Errorf("first page: unescaped result or a link to itself:\n%s", body)
	}

	// The older page: runs 2 and 1, a link back, none further.
	st, body = b.get("/tasks/report%7Cdaily?runs=r3")
	if st != 200 {
		t.Fatalf("older runs: %d", st)
	}
	if got := strings.Join(shownRuns(body), ","); got != "2,1" {
		t.Errorf("older page shows runs %s", got)
	}
	mustContain(t, "older page", body,
		`<a href="/tasks/report%7Cdaily" id="runs-newest">`,
		// Run 2's failed attempt, then its success; the error escaped;
		// its lateness names the retries (run 12's does not).
		"2 attempts",
		"lateness <b>1041.2 ms</b> = parked 38.0 + retries 1000.0 + commit 2.0 + queue 0.8 + connect 0.4",
		`<tr data-attempt="1"><td>1</td><td>n3</td>`, `<span class="tag bad">retryable</span></td><td>500</td><td class="err">http 500: &lt;b&gt;boom&lt;/b&gt;</td>`,
		`<tr data-attempt="2"><td>2</td><td>n2</td>`,
		// Run 1's base64 result, cut by the node and by the page.
		`data-kind="base64"`, "(not JSON: base64)", "<b class=\"bad\">truncated</b>", "first 4096 bytes shown",
	)
	if strings.Contains(body, "runs-older") {
		t.Error("the last page links to older runs")
	}
	if strings.Contains(body, historyRuns(2)[1].ResultBase64[:4097]) {
		t.Error("more than 4096 bytes of a result shown")
	}

	// A task that never ran; a cursor the API refuses; a bad one.
	_, body = b.get("/tasks/never")
	mustContain(t, "never ran", body, "No run on record yet.")
	st, body = b.get("/tasks/report%7Cdaily?runs=zz")
	if st != 200 {
		t.Errorf("a cursor the API refuses: %d", st)
	}
	mustContain(t, "refused cursor", body, `id="task-state">WAITING`, "Run history unavailable: 400 invalid: cursor")
	if st, _ := b.get("/tasks/report%7Cdaily?runs=%01"); st != 400 {
		t.Errorf("a cursor with a control character: %d", st)
	}

	// An older node without the route: the task, and "no history".
	f.mu.Lock()
	f.runs = nil
	f.mu.Unlock()
	st, body = b.get("/tasks/report%7Cdaily")
	if st != 200 {
		t.Errorf("task page on an older node: %d", st)
	}
	mustContain(t, "older node", body, `id="task-state">WAITING`, "No history: this node has no run-history API")
	if len(shownRuns(body)) != 0 {
		t.Error("runs shown without the route")
	}
}
