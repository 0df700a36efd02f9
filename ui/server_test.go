package ui

import (
	"errors"
	"html/template"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/axsched/ax/clients/go/axapi"
)

// browser is a test client of a dashboard with a cookie jar.
type browser struct {
	t    *testing.T
	base string
	hc   *http.Client
}

func startUI(t *testing.T, f *fakeAPI, token string) (*Server, *browser) {
	t.Helper()
	s, err := New(Options{Socket: f.socket, Token: token, APITimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s)
	t.Cleanup(hs.Close)
	jar, _ := cookiejar.New(nil)
	return s, &browser{t: t, base: hs.URL, hc: &http.Client{Jar: jar, Timeout: 10 * time.Second}}
}

func (b *browser) do(method, path string, form url.Values, hdr map[string]string) (int, string) {
	b.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, _ := http.NewRequest(method, b.base+path, body)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range hdr {
		if k == "Host" {
			req.Host = v
		}
		req.Header.Set(k, v)
	}
	resp, err := b.hc.Do(req)
	if err != nil {
		b.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(out)
}

func (b *browser) get(path string) (int, string) { return b.do("GET", path, nil, nil) }

var csrfRE = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// post sends a form from page (whose CSRF token it reads) to action.
func (b *browser) post(page, action string, form url.Values) (int, string) {
	b.t.Helper()
	_, html := b.get(page)
	m := csrfRE.FindStringSubmatch(html)
	if m == nil {
		b.t.Fatalf("no csrf field on %s", page)
	}
	if form == nil {
		form = url.Values{}
	}
	form.Set("csrf", m[1])
	return b.do("POST", action, form, nil)
}

func mustContain(t *testing.T, what, body string, subs ...string) {
	t.Helper()
	for _, s := range subs {
		if !strings.Contains(body, s) {
			t.Errorf("%s: %q missing in:\n%s", what, s, body)
		}
	}
}

func TestOptions_Validate(t *testing.T) {
	for _, c := range []struct {
		addr, token string
		ok          bool
	}{
		{"127.0.0.1:7480", "", true},
		{"localhost:7480", "", true},
		{"[::1]:7480", "", true},
		{"127.0.0.2:0", "", true},
		{"0.0.0.0:7480", "", false},
		{":7480", "", false},
		{"10.1.2.3:7480", "", false},
		{"example.com:7480", "", false},
		{"0.0.0.0:7480", "s3cret-token", true},
		{"nonsense", "", false},
	} {
		err := Options{Addr: c.addr, Token: c.token, Socket: "/x.sock"}.WithDefaults().Validate()
		if (err == nil) != c.ok {
			t.Errorf("addr %q token %q: err %v, want ok=%v", c.addr, c.token, err, c.ok)
		}
		if !c.ok && c.addr != "nonsense" && !errors.Is(err, ErrTokenRequired) {
			t.Errorf("addr %q: err %v, want ErrTokenRequired", c.addr, err)
		}
	}
	if _, err := New(Options{Addr: "0.0.0.0:7480", Socket: "/x.sock"}); !errors.Is(err, ErrTokenRequired) {
		t.Errorf("New on 0.0.0.0 without a token: %v", err)
	}
	if err := (Options{Addr: "127.0.0.1:1"}).WithDefaults().Validate(); err == nil {
		t.Error("no socket: accepted")
	}
}

func TestAuth_TokenRequired(t *testing.T) {
	f := newFakeAPI(t)
	_, b := startUI(t, f, "s3cret-token")
	for _, p := range []string{"/cluster", "/handlers", "/tasks", "/dead", "/tasks/x"} {
		if st, body := b.get(p); st != http.StatusUnauthorized || !strings.Contains(body, `name="token"`) {
			t.Errorf("GET %s without token: %d, want 401 with the login form", p, st)
		}
	}
	if st, _ := b.do("POST", "/tasks/x/retry", url.Values{}, nil); st != http.StatusUnauthorized {
		t.Errorf("POST without token: %d, want 401", st)
	}
	if st, _ := b.do("GET", "/cluster", nil, map[string]string{"Authorization": "Bearer wrong"}); st != http.StatusUnauthorized {
		t.Errorf("wrong bearer: %d, want 401", st)
	}
	if st, _ := b.do("GET", "/cluster", nil, map[string]string{"Authorization": "Bearer s3cret-token"}); st != http.StatusOK {
		t.Errorf("right bearer: %d, want 200", st)
	}
	if st, _ := b.get("/static/style.css"); st != http.StatusOK {
		t.Errorf("stylesheet without token: %d, want 200", st)
	}
	// The login form: a wrong token is refused, the right one sets the
	// session cookie and goes to the page asked for.
	if st, body := b.do("POST", "/login", url.Values{"token": {"nope"}, "next": {"/tasks"}}, nil); st != http.StatusUnauthorized || !strings.Contains(body, "wrong token") {
		t.Errorf("login with a wrong token: %d", st)
	}
	st, body := b.do("POST", "/login", url.Values{"token": {"s3cret-token"}, "next": {"/handlers"}}, nil)
	if st != http.StatusOK || !strings.Contains(body, "<h1>Handlers</h1>") {
		t.Errorf("login: %d, want the handlers page:\n%s", st, body)
	}
	if st, _ := b.get("/cluster"); st != http.StatusOK {
		t.Errorf("after login: %d", st)
	}
	// The login never redirects off the site.
	_, b2 := startUI(t, f, "s3cret-token")
	b2.hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	req, _ := http.NewRequest("POST", b2.base+"/login", strings.NewReader(url.Values{"token": {"s3cret-token"}, "next": {"//evil.example/x"}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := b2.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if loc := resp.Header.Get("Location"); loc != "/cluster" {
		t.Errorf("login next=//evil.example/x: Location %q, want /cluster", loc)
	}
}

func TestAuth_CSRFAndHost(t *testing.T) {
	f := newFakeAPI(t)
	f.add("d1", "mail", "DEAD", nil)
	_, b := startUI(t, f, "")
	// No CSRF field: refused, and the API is not called.
	b.get("/tasks/d1")
	if st, _ := b.do("POST", "/tasks/d1/retry", url.Values{}, nil); st != http.StatusForbidden {
		t.Errorf("POST without csrf: %d, want 403", st)
	}
	if st, _ := b.do("POST", "/tasks/d1/retry", url.Values{"csrf": {"forged"}}, nil); st != http.StatusForbidden {
		t.Errorf("POST with a forged csrf: %d, want 403", st)
	}
	_, html := b.get("/tasks/d1")
	tok := csrfRE.FindStringSubmatch(html)[1]
	if st, _ := b.do("POST", "/tasks/d1/retry", url.Values{"csrf": {tok}}, map[string]string{"Sec-Fetch-Site": "cross-site"}); st != http.StatusForbidden {
		t.Errorf("cross-site POST: %d, want 403", st)
	}
	if st, _ := b.do("POST", "/tasks/d1/retry", url.Values{"csrf": {tok}}, map[string]string{"Origin": "http://evil.example"}); st != http.StatusForbidden {
		t.Errorf("cross-origin POST: %d, want 403", st)
	}
	if f.state("d1") != "DEAD" {
		t.Fatal("a refused POST reached the API")
	}
	st, body := b.do("POST", "/tasks/d1/retry", url.Values{"csrf": {tok}}, nil)
	if st != http.StatusOK || f.state("d1") != "WAITING" {
		t.Errorf("retry with csrf: %d, task %s", st, f.state("d1"))
	}
	mustContain(t, "after retry", body, "retry: done", `id="task-state">WAITING`)

	// A link cannot put words on a page: messages come from the flash
	// cookie of an action, shown once.
	if _, body := b.get("/cluster?error=call+0800-SCAM&flash=hi"); strings.Contains(body, "SCAM") || strings.Contains(body, `id="flash"`) {
		t.Error("a query parameter was shown as a message")
	}
	if _, body := b.get("/tasks/d1"); strings.Contains(body, "retry: done") {
		t.Error("the flash message was shown twice")
	}

	// Without a token, only loopback Host headers (DNS rebinding).
	if st, _ := b.do("GET", "/cluster", nil, map[string]string{"Host": "evil.example:7480"}); st != http.StatusMisdirectedRequest {
		t.Errorf("Host evil.example: %d, want 421", st)
	}
}

func TestPages_Cluster(t *testing.T) {
	f := newFakeAPI(t)
	_, b := startUI(t, f, "")
	st, body := b.get("/cluster")
	if st != 200 {
		t.Fatalf("status %d", st)
	}
	mustContain(t, "cluster", body, `id="leader">n1`, `data-member="n2"`, "follower", "healthy", "12 ms ago", "<td>2</td>", "quorum 2")
	if strings.Contains(body, "Quorum at risk") {
		t.Error("banner with a failure tolerance of 1")
	}
	zero := 0
	f.mu.Lock()
	f.cluster.FailureTolerance = &zero
	f.mu.Unlock()
	_, body = b.get("/cluster")
	mustContain(t, "cluster at risk", body, `class="warning banner"`, "Quorum at risk")
	// A partial (live update) is the content only.
	_, part := b.do("GET", "/cluster", nil, map[string]string{"X-Ax-Partial": "1"})
	if strings.Contains(part, "<html") || !strings.Contains(part, "Quorum at risk") {
		t.Errorf("partial: %s", part)
	}
	// The commit index ends on a new leader's no-op (state_index 41 of
	// 42): the lag counts only the entries that change the state.
	f.mu.Lock()
	f.cluster.StateIndex = 41
	f.mu.Unlock()
	_, body = b.get("/cluster")
	mustContain(t, "lag to the state index", body, "<td>42</td>\n<td>0</td>", "<td>40</td>\n<td>1</td>", "<td>41</td>\n<td>0</td>")
}

func TestPages_HandlersAndPause(t *testing.T) {
	f := newFakeAPI(t)
	backlog := 7
	lim := 12
	nodeOpen := time.Date(2026, 12, 7, 3, 0, 30, 0, time.UTC)
	f.handlers = []axapiHandler{{Name: "mail", Backlog: &backlog, Parked: map[string]int{"paused": 3}, Circuit: "open", Tasks: map[axapiState]int{"WAITING": 5, "DEAD": 2},
		Executors: []axapiHandlerExecutor{{Node: "n1", Name: "app", URL: "unix:///app.sock", Limit: lim},
			{Node: "n2", Name: "app", URL: "unix:///app.sock", CircuitUntil: &nodeOpen}}}}
	f.metrics = metricsText(0)
	s, b := startUI(t, f, "")
	// Two samples a minute apart: lateness and rates from their difference.
	s1 := parseMetrics([]byte(metricsText(0)))
	s1.at = time.Now().Add(-time.Minute)
	s2 := parseMetrics([]byte(metricsText(60)))
	s2.at = time.Now()
	s.sampler.add(s1)
	s.sampler.add(s2)
	_, body := b.get("/handlers")
	mustContain(t, "handlers", body, `data-handler="mail"`, `class="backlog">7`, "paused: 3", "circuit open", `data-state="DEAD">DEAD <b>2</b>`, "<td>12</td>", "<td>4</td>", "success 1.00", "<polyline", "p99 <b>",
		"<td>n2</td>", "open until 2026-12-07")
	st, body := b.post("/handlers", "/handlers/mail/pause", nil)
	if st != 200 || !strings.Contains(body, "mail: paused") {
		t.Errorf("pause: %d", st)
	}
	if !containsCall(f.callLog(), "POST /v1/handlers/mail/pause") {
		t.Errorf("no pause call: %v", f.callLog())
	}
}

func TestPages_TaskListPagesAndFilters(t *testing.T) {
	f := newFakeAPI(t)
	for i := 0; i < 1000; i++ {
		st := "WAITING"
		if i%10 == 0 {
			st = "DEAD"
		}
		f.add(taskID(i), "mail", st, map[string]string{"team": []string{"a", "b"}[i%2]})
	}
	_, b := startUI(t, f, "")
	st, body := b.get("/tasks")
	if st != 200 {
		t.Fatalf("status %d", st)
	}
	if n := strings.Count(body, "<tr data-id="); n != 50 {
		t.Errorf("first page: %d rows, want 50", n)
	}
	mustContain(t, "tasks", body, `id="total">1000`, `>DEAD <b>100</b>`, `id="next"`)
	// Paging reads one API page of the page's size, never every task.
	lists := 0
	for _, c := range f.callLog() {
		if strings.HasPrefix(c, "GET /v1/tasks?") {
			lists++
			if !strings.Contains(c, "limit=50") {
				t.Errorf("list call %q: want limit=50", c)
			}
		}
	}
	if lists != 1 {
		t.Errorf("%d list calls for one page, want 1", lists)
	}
	next := regexp.MustCompile(`id="next" href="([^"]+)"`).FindStringSubmatch(body)[1]
	_, body2 := b.get(strings.ReplaceAll(next, "&amp;", "&"))
	if !strings.Contains(body2, taskID(50)) || strings.Contains(body2, ">"+taskID(49)+"<") {
		t.Error("second page does not start after the first")
	}
	// Filters: state (the API's), label and prefix (the dashboard's).
	_, body = b.get("/tasks?state=dead&limit=20")
	if n := strings.Count(body, "<tr data-id="); n != 20 || strings.Contains(body, ">WAITING</span>") {
		t.Errorf("state=dead: %d rows", n)
	}
	_, body = b.get("/tasks?label=team%3Db&limit=20")
	if n := strings.Count(body, "<tr data-id="); n != 20 || strings.Contains(body, ">"+taskID(0)+"<") {
		t.Errorf("label: %d rows", n)
	}
	_, body = b.get("/tasks?prefix=" + url.QueryEscape(taskID(12)[:len(taskID(12))-1]))
	if n := strings.Count(body, "<tr data-id="); n != 10 || strings.Contains(body, `id="next"`) {
		t.Errorf("prefix %s: %d rows, want 10 and no next page", taskID(12)[:len(taskID(12))-1], n)
	}
	// Bad input is a 400 with the reason; the API is not asked.
	for _, q := range []string{"state=NOPE", "limit=7", "label=novalue", "handler=%01x"} {
		if st, body := b.get("/tasks?" + q); st != 400 || !strings.Contains(body, `class="error"`) {
			t.Errorf("/tasks?%s: %d", q, st)
		}
	}
}

func TestPages_TaskAndActions(t *testing.T) {
	f := newFakeAPI(t)
	f.add("a/b|1", "mail", "WAITING", map[string]string{"k": "v"})
	f.add("dead1", "mail", "DEAD", nil)
	_, b := startUI(t, f, "")
	// Before the run-history route exists: "no history".
	_, body := b.get("/tasks/" + url.PathEscape("a/b|1"))
	mustContain(t, "task", body, `id="task-id">a/b|1`, `id="task-state">WAITING`, "k=v", "No history", `id="cancel"`)
	// An API error shows its code and message.
	st, body := b.get("/tasks/missing")
	if st != 404 {
		t.Errorf("missing task: %d", st)
	}
	mustContain(t, "missing", body, "404 not_found: task &#34;missing&#34; not found")
	// Cancel needs the confirmation box.
	_, body = b.post("/tasks/a%2Fb%7C1", "/tasks/a%2Fb%7C1/cancel", nil)
	mustContain(t, "cancel unconfirmed", body, "tick the box")
	if f.state("a/b|1") != "WAITING" {
		t.Fatal("cancelled without confirmation")
	}
	_, body = b.post("/tasks/a%2Fb%7C1", "/tasks/a%2Fb%7C1/cancel", url.Values{"confirm": {"yes"}})
	mustContain(t, "cancelled", body, `id="task-state">CANCELLED`, `id="purge"`)
	// Retry of a task that is not dead: the API's 409 is shown.
	_, body = b.post("/tasks/a%2Fb%7C1", "/tasks/a%2Fb%7C1/retry", nil)
	mustContain(t, "retry refused", body, "409 conflict")
	// Purge.
	_, body = b.post("/tasks/a%2Fb%7C1", "/tasks/a%2Fb%7C1/purge", url.Values{"confirm": {"yes"}})
	mustContain(t, "purged", body, "purged a/b|1")
	if f.state("a/b|1") != "" {
		t.Error("not purged")
	}
	// With run history.
	f.mu.Lock()
	started := time.Now()
	f.runs = map[string][]axapi.Run{"dead1": {{Run: 1, State: "DEAD", DueAt: started, FiredAt: started, StartedAt: &started,
		Lateness: &axapi.Lateness{TotalMs: 12.5, ParkedMs: 10, ParkedReason: "handler_limit", CommitMs: 2, QueueMs: 0.5},
		Attempts: []axapi.RunAttempt{{Attempt: 1, Node: "n2", Executor: "app", FiredAt: started, Outcome: "retryable", HTTPStatus: 500, Error: "http 500: boom"}}}}}
	f.mu.Unlock()
	_, body = b.get("/tasks/dead1")
	mustContain(t, "runs", body, `data-run="1"`, "12.5 ms", "handler_limit", "http 500: boom", "retryable", `id="retry"`)
}

func TestPages_DeadLetters(t *testing.T) {
	f := newFakeAPI(t)
	for i := 0; i < 150; i++ {
		f.add(taskID(i), "mail", "DEAD", nil)
	}
	f.add("f1", "sms", "FAILED", nil)
	f.add("w1", "sms", "WAITING", nil)
	_, b := startUI(t, f, "")
	_, body := b.get("/dead")
	mustContain(t, "dead", body, `data-handler="mail"><td><a href="/dead?handler=mail">mail</a></td><td class="dead">150</td>`, "(100+ shown)", `value="f1"`)
	// Bulk retry is bounded.
	form := url.Values{}
	for i := 0; i < bulkMax+1; i++ {
		form.Add("id", taskID(i))
	}
	_, body = b.post("/dead", "/dead/retry", form)
	mustContain(t, "bulk too large", body, "at most 100 at once")
	form = url.Values{"id": {taskID(0), taskID(1), "w1"}}
	_, body = b.post("/dead", "/dead/retry", form)
	mustContain(t, "bulk retry", body, "retried 2 of 3", "w1: 409 conflict")
	if f.state(taskID(0)) != "WAITING" || f.state(taskID(1)) != "WAITING" {
		t.Error("bulk retry did not retry")
	}
	_, body = b.post("/dead?handler=mail", "/dead/purge", url.Values{"handler": {"mail"}, "state": {"DEAD"}, "confirm": {"yes"}})
	mustContain(t, "bulk purge", body, "purged 148 DEAD tasks")
	if f.state("f1") != "FAILED" {
		t.Error("purge of mail's DEAD tasks took sms's FAILED one")
	}
	_, body = b.post("/dead", "/dead/purge", url.Values{"state": {"WAITING"}, "confirm": {"yes"}})
	mustContain(t, "purge waiting", body, "want DEAD or FAILED")
}

// A bulk purge follows the API's next_cursor: when more finished tasks
// than one request reads come before the matching ones and do not match,
// a single request purges nothing and answers more; the click still
// purges them, and says so when its bound stops it.
func TestPages_DeadPurgeFollowsTheCursor(t *testing.T) {
	f := newFakeAPI(t)
	f.purgeScan = 50
	for i := 0; i < 400; i++ {
		f.add("a-done-"+pad(i), "mail", "SUCCESS", nil) // before the DEAD ones in id order
	}
	for i := 0; i < 30; i++ {
		f.add("m-dead-"+pad(i), "mail", "DEAD", nil)
	}
	_, b := startUI(t, f, "")
	_, body := b.post("/dead?handler=mail", "/dead/purge", url.Values{"handler": {"mail"}, "state": {"DEAD"}, "confirm": {"yes"}})
	mustContain(t, "bulk purge", body, "purged 30 DEAD tasks")
	if strings.Contains(body, "more remain") {
		t.Error("bulk purge says more remain after purging them all")
	}
	f.mu.Lock()
	left := len(f.tasks)
	calls := 0
	for _, c := range f.calls {
		if strings.HasPrefix(c, "POST /v1/tasks/purge") {
			calls++
		}
	}
	f.mu.Unlock()
	if left != 400 {
		t.Errorf("%d tasks left, want the 400 SUCCESS ones", left)
	}
	if calls != 9 {
		t.Errorf("%d purge requests, want 9 (430 tasks read 50 at a time)", calls)
	}

	// Bounded: with more skipped tasks than bulkPurgeRounds requests read,
	// the click stops and says more remain.
	f.mu.Lock()
	f.purgeScan = 1
	f.mu.Unlock()
	f.add("z-dead", "mail", "DEAD", nil)
	_, body = b.post("/dead?handler=mail", "/dead/purge", url.Values{"handler": {"mail"}, "state": {"DEAD"}, "confirm": {"yes"}})
	mustContain(t, "bounded bulk purge", body, "purged 0 DEAD tasks (more remain: purge again)")
}

// A bulk purge whose later request fails still says how many tasks its
// earlier requests purged: they are gone, and the error alone read as if
// the click had deleted nothing.
func TestPages_DeadPurgeErrorSaysWhatWasPurged(t *testing.T) {
	f := newFakeAPI(t)
	f.purgeScan = 50
	for i := 0; i < 30; i++ {
		f.add("a-dead-"+pad(i), "mail", "DEAD", nil)
	}
	for i := 0; i < 400; i++ {
		f.add("m-done-"+pad(i), "mail", "SUCCESS", nil)
	}
	f.add("z-dead", "mail", "DEAD", nil)
	f.purgeFailAt = 2 // the first request purges the 30, the second fails
	_, b := startUI(t, f, "")
	_, body := b.post("/dead?handler=mail", "/dead/purge", url.Values{"handler": {"mail"}, "state": {"DEAD"}, "confirm": {"yes"}})
	f.mu.Lock()
	left := len(f.tasks)
	f.mu.Unlock()
	if left != 401 {
		t.Fatalf("%d tasks left, want 401 (the first request purges 30)", left)
	}
	mustContain(t, "bulk purge that failed after purging", body, "purged 30 DEAD tasks", "no leader")
}

func TestAssets_NoExternalFetch(t *testing.T) {
	f := newFakeAPI(t)
	f.add("t1", "mail", "WAITING", nil)
	_, b := startUI(t, f, "")
	ext := regexp.MustCompile(`(?i)(src|href)="(https?:)?//`)
	for _, p := range []string{"/cluster", "/handlers", "/tasks", "/tasks/t1", "/dead", "/static/app.js", "/static/style.css"} {
		st, body := b.get(p)
		if st != 200 {
			t.Errorf("%s: %d", p, st)
		}
		if ext.MatchString(body) || strings.Contains(body, "@import") {
			t.Errorf("%s refers to another site", p)
		}
	}
}

func containsCall(calls []string, prefix string) bool {
	for _, c := range calls {
		if strings.HasPrefix(c, prefix) {
			return true
		}
	}
	return false
}

func taskID(i int) string { return "task-" + string(rune('a'+i/100%26)) + "-" + pad(i) }

func pad(i int) string {
	s := "0000" + itoa(i)
	return s[len(s)-4:]
}

// TestPages_DotSegmentIDs: a task whose id is "." or ".." is reachable
// from the dashboard's links and forms. A browser (like ResolveReference)
// removes dot segments from a URL's path before it asks, so the link
// /tasks/.. led to / and the cancel form's /tasks/../cancel to /cancel:
// such a segment must be escaped (%2E).
func TestPages_DotSegmentIDs(t *testing.T) {
	f := newFakeAPI(t)
	for _, id := range []string{".", "..", "...", "a/../b"} {
		f.add(id, "mail", "WAITING", nil)
	}
	_, b := startUI(t, f, "")
	base, _ := url.Parse(b.base)
	// resolve is what a browser asks for an href or a form action.
	resolve := func(ref string) string {
		u, err := url.Parse(ref)
		if err != nil {
			t.Fatalf("href %q: %v", ref, err)
		}
		r := base.ResolveReference(u)
		return r.EscapedPath()
	}
	_, list := b.get("/tasks")
	for _, id := range []string{".", "..", "...", "a/../b"} {
		href := "/tasks/" + pathEscape(id)
		if !strings.Contains(list, `href="`+href+`"`) {
			t.Errorf("id %q: no link %q on the task list", id, href)
			continue
		}
		page := resolve(href)
		st, body := b.get(page)
		if st != 200 || !strings.Contains(body, `id="task-id">`+template.HTMLEscapeString(id)+`<`) {
			t.Errorf("id %q: link %s asks %s: %d, not the task's page", id, href, page, st)
			continue
		}
		m := regexp.MustCompile(`action="([^"]*/cancel)"`).FindStringSubmatch(body)
		if m == nil {
			t.Errorf("id %q: no cancel form", id)
			continue
		}
		_, body = b.post(page, resolve(m[1]), url.Values{"confirm": {"yes"}})
		if f.state(id) != "CANCELLED" {
			t.Errorf("id %q: cancel form %s (asks %s) did not cancel it: %s", id, m[1], resolve(m[1]), f.state(id))
		}
	}
}
