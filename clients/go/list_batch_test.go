package ax_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	ax "github.com/axsched/ax/clients/go"
)

// submitN submits tasks t01..tN, handler "even" or "odd" by number.
func submitN(t *testing.T, c *ax.Client, n int) {
	t.Helper()
	reqs := make([]ax.SubmitRequest, n)
	for i := range reqs {
		h := "odd"
		if (i+1)%2 == 0 {
			h = "even"
		}
		reqs[i] = ax.SubmitRequest{ID: fmt.Sprintf("t%02d", i+1), Handler: h}
	}
	res, err := c.SubmitBatch(testContext(t), reqs)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if r.Err != nil || !r.Created {
			t.Fatalf("item %d: %+v", i, r)
		}
	}
}

func listIDs(t *testing.T, c *ax.Client, opts ax.ListOptions) []string {
	t.Helper()
	var ids []string
	for task, err := range c.List(testContext(t), opts) {
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, task.ID)
	}
	return ids
}

// uris returns the request URIs of the requests after the first skip.
func uris(f *fakeSidecar, skip int) []string {
	var out []string
	for _, r := range f.Requests()[skip:] {
		out = append(out, r.Method+" "+r.RequestURI)
	}
	return out
}

func Test_Client_List_Pagination(t *testing.T) {
	f := startFakeSidecar(t)
	c := newClient(t, f)
	submitN(t, c, 7)

	// Every task, across three pages.
	before := len(f.Requests())
	ids := listIDs(t, c, ax.ListOptions{PageSize: 3})
	if got := strings.Join(ids, ","); got != "t01,t02,t03,t04,t05,t06,t07" {
		t.Fatalf("ids %s", got)
	}
	want := []string{"GET /v1/tasks?limit=3", "GET /v1/tasks?cursor=after%3At03&limit=3", "GET /v1/tasks?cursor=after%3At06&limit=3"}
	if got := uris(f, before); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("requests\n got %q\nwant %q", got, want)
	}

	// Filters, and the default page size (no limit parameter).
	before = len(f.Requests())
	if got := strings.Join(listIDs(t, c, ax.ListOptions{Handler: "even", State: ax.StateWaiting}), ","); got != "t02,t04,t06" {
		t.Fatalf("filtered %s", got)
	}
	if got := uris(f, before); len(got) != 1 || got[0] != "GET /v1/tasks?handler=even&state=WAITING" {
		t.Fatalf("filtered requests %q", got)
	}
	if ids := listIDs(t, c, ax.ListOptions{State: ax.StateDead}); len(ids) != 0 {
		t.Fatalf("no DEAD task expected, got %v", ids)
	}

	// Limit: the last page asks only for what is missing.
	before = len(f.Requests())
	if got := strings.Join(listIDs(t, c, ax.ListOptions{PageSize: 3, Limit: 4}), ","); got != "t01,t02,t03,t04" {
		t.Fatalf("limited %s", got)
	}
	want = []string{"GET /v1/tasks?limit=3", "GET /v1/tasks?cursor=after%3At03&limit=1"}
	if got := uris(f, before); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("limited requests %q", got)
	}

	// Breaking out early fetches no further page.
	before = len(f.Requests())
	n := 0
	for _, err := range c.List(testContext(t), ax.ListOptions{PageSize: 2}) {
		if err != nil {
			t.Fatal(err)
		}
		if n++; n == 2 {
			break
		}
	}
	if got := len(f.Requests()) - before; got != 1 {
		t.Fatalf("break after one page made %d requests", got)
	}

	// An error ends the iteration, yielded once with a nil task.
	f.SetHook(nil)
	var seen []string
	var errs []error
	i := 0
	for task, err := range c.List(testContext(t), ax.ListOptions{PageSize: 4}) {
		if i++; i == 4 {
			f.Inject(fakeAnswer{Status: 500, Code: "internal", Message: "internal error"})
		}
		if err != nil {
			if task != nil {
				t.Fatal("task with an error")
			}
			errs = append(errs, err)
			continue
		}
		seen = append(seen, task.ID)
	}
	var apiErr *ax.APIError
	if len(seen) != 4 || len(errs) != 1 || !errors.As(errs[0], &apiErr) || apiErr.Status != 500 {
		t.Fatalf("seen %v, errors %v", seen, errs)
	}

	// Manual paging with ListPage.
	ctx := testContext(t)
	page, err := c.ListPage(ctx, ax.ListOptions{Handler: "odd", PageSize: 3}, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Tasks) != 3 || page.Tasks[0].ID != "t01" || page.NextCursor != "after:t05" {
		t.Fatalf("page 1: %d tasks, cursor %q", len(page.Tasks), page.NextCursor)
	}
	page, err = c.ListPage(ctx, ax.ListOptions{Handler: "odd", PageSize: 3}, page.NextCursor)
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Tasks) != 1 || page.Tasks[0].ID != "t07" || page.NextCursor != "" || page.Tasks[0].Handler != "odd" || page.Tasks[0].State != ax.StateWaiting {
		t.Fatalf("page 2: %+v, cursor %q", page.Tasks, page.NextCursor)
	}
	_, err = c.ListPage(ctx, ax.ListOptions{}, "bogus")
	if !errors.Is(err, ax.ErrInvalid) {
		t.Fatalf("bad cursor: %v", err)
	}

	// Options the sidecar would refuse are refused before sending.
	before = len(f.Requests())
	for _, opts := range []ax.ListOptions{{PageSize: -1}, {PageSize: 1001}, {Limit: -1}} {
		for task, err := range c.List(ctx, opts) {
			if task != nil || !errors.Is(err, ax.ErrInvalid) {
				t.Fatalf("%+v: %v, %v", opts, task, err)
			}
		}
	}
	if n := len(f.Requests()) - before; n != 0 {
		t.Fatalf("%d requests for invalid options", n)
	}
}

func Test_Client_List_SameCursorStops(t *testing.T) {
	f := startFakeSidecar(t)
	c := newClient(t, f)
	f.Inject(
		fakeAnswer{Status: 200, Body: `{"tasks":[{"id":"a","handler":"h","state":"WAITING","timeout":"30s"}],"next_cursor":"c1"}`},
		fakeAnswer{Status: 200, Body: `{"tasks":[],"next_cursor":"c1"}`},
	)
	var errs []error
	n := 0
	for task, err := range c.List(testContext(t), ax.ListOptions{}) {
		if err != nil {
			errs = append(errs, err)
			continue
		}
		n++
		_ = task
	}
	if n != 1 || len(errs) != 1 || !strings.Contains(errs[0].Error(), "cursor") {
		t.Fatalf("n %d, errs %v", n, errs)
	}
}

func Test_Client_SubmitBatch(t *testing.T) {
	f := startFakeSidecar(t)
	c := newClient(t, f)
	ctx := testContext(t)

	if _, err := c.Submit(ctx, ax.SubmitRequest{ID: "b", Handler: "report", Delay: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Submit(ctx, ax.SubmitRequest{ID: "c", Handler: "report"}); err != nil {
		t.Fatal(err)
	}
	f.SetBacklogWarning("850/1000")
	res, err := c.SubmitBatch(ctx, []ax.SubmitRequest{
		{ID: "a", Handler: "report", Payload: map[string]int{"n": 1}},
		{ID: "b", Handler: "report", Delay: 2 * time.Hour}, // different spec: conflict
		{ID: "c", Handler: "report"},                       // same spec: the existing task
		{Handler: "report", PayloadBytes: []byte{0, 1}},
	})
	if err != nil {
		t.Fatal(err)
	}
	sent := f.LastRequest()
	wantBody := `{"tasks":[{"id":"a","handler":"report","payload":{"n":1}},{"id":"b","handler":"report","delay":"2h0m0s"},{"id":"c","handler":"report"},{"handler":"report","payload_base64":"AAE="}]}`
	if sent.Method != "POST" || sent.RequestURI != "/v1/tasks/batch" || string(sent.Body) != wantBody {
		t.Fatalf("sent %s %s\n%s\nwant %s", sent.Method, sent.RequestURI, sent.Body, wantBody)
	}
	if len(res) != 4 {
		t.Fatalf("%d results", len(res))
	}
	if r := res[0]; r.Err != nil || !r.Created || r.Status != 201 || r.Task.ID != "a" || string(r.Task.Payload) != `{"n":1}` || r.Task.BacklogWarning != "850/1000" {
		t.Fatalf("result 0: %+v", r)
	}
	var apiErr *ax.APIError
	if r := res[1]; r.Task != nil || r.Created || r.Status != 409 || !errors.Is(r.Err, ax.ErrConflict) ||
		!errors.As(r.Err, &apiErr) || apiErr.Code != ax.CodeConflict || !strings.Contains(apiErr.Message, `"b"`) {
		t.Fatalf("result 1: %+v", r)
	}
	if r := res[2]; r.Err != nil || r.Created || r.Status != 200 || r.Task.ID != "c" {
		t.Fatalf("result 2: %+v", r)
	}
	if r := res[3]; r.Err != nil || !r.Created || r.Task.ID == "" || string(r.Task.PayloadBytes) != "\x00\x01" {
		t.Fatalf("result 3: %+v", r)
	}
	// The conflicting item was not applied; the others were.
	if got, err := c.Get(ctx, "b"); err != nil || got.Delay != time.Hour {
		t.Fatalf("b: %+v, %v", got, err)
	}
	if _, err := c.Get(ctx, "a"); err != nil {
		t.Fatal(err)
	}

	if p := f.LastRequest().Prefer; p != "" {
		t.Fatalf("Prefer %q sent without MinimalResults", p)
	}

	// MinimalResults: Prefer: return=minimal; each task has its id and
	// state only, the other results as without it.
	res, err = c.SubmitBatch(ctx, []ax.SubmitRequest{
		{ID: "m", Handler: "report", Payload: map[string]int{"n": 2}},
		{ID: "b", Handler: "report", Delay: 2 * time.Hour}, // conflict
		{ID: "c", Handler: "report"},
	}, ax.MinimalResults())
	if err != nil {
		t.Fatal(err)
	}
	if p := f.LastRequest().Prefer; p != "return=minimal" {
		t.Fatalf("Prefer %q, want return=minimal", p)
	}
	if r := res[0]; r.Err != nil || !r.Created || r.Status != 201 || r.Task.ID != "m" || r.Task.State != ax.StateWaiting ||
		r.Task.Handler != "" || !r.Task.CreatedAt.IsZero() || r.Task.BacklogWarning != "850/1000" {
		t.Fatalf("minimal result 0: %+v", r.Task)
	}
	if r := res[1]; r.Task != nil || r.Status != 409 || !errors.Is(r.Err, ax.ErrConflict) {
		t.Fatalf("minimal result 1: %+v", r)
	}
	if r := res[2]; r.Err != nil || r.Created || r.Status != 200 || r.Task.ID != "c" || r.Task.State != ax.StateWaiting {
		t.Fatalf("minimal result 2: %+v", r)
	}
	if got, err := c.Get(ctx, "m"); err != nil || got.Handler != "report" || string(got.Payload) != `{"n":2}` {
		t.Fatalf("m as stored: %+v, %v", got, err)
	}

	// Invalid requests: nothing is sent.
	before := len(f.Requests())
	_, err = c.SubmitBatch(ctx, []ax.SubmitRequest{{Handler: "h"}, {ID: "x"}})
	if !errors.Is(err, ax.ErrInvalid) || err.Error() != "ax: invalid request: tasks[1]: handler: required" {
		t.Fatalf("missing handler: %v", err)
	}
	_, err = c.SubmitBatch(ctx, []ax.SubmitRequest{{Handler: "h"}, {Handler: "h", Payload: []byte("x")}})
	if !errors.Is(err, ax.ErrInvalid) || !strings.HasPrefix(err.Error(), "ax: invalid request: tasks[1]: Payload is a []byte") {
		t.Fatalf("bad payload: %v", err)
	}
	_, err = c.SubmitBatch(ctx, make([]ax.SubmitRequest, ax.BatchMaxTasks+1))
	if !errors.Is(err, ax.ErrInvalid) {
		t.Fatalf("too many: %v", err)
	}
	if res, err := c.SubmitBatch(ctx, nil); err != nil || len(res) != 0 {
		t.Fatalf("empty: %v, %v", res, err)
	}
	if n := len(f.Requests()) - before; n != 0 {
		t.Fatalf("%d requests sent for refused batches", n)
	}

	// The sidecar refusing the batch as a whole.
	f.Inject(fakeAnswer{Status: 429, RetryAfter: "2", Code: "queue_full", Message: `backlog of handler "h" is full`, Depth: 1000, Limit: 1000})
	_, err = c.SubmitBatch(ctx, []ax.SubmitRequest{{Handler: "h"}})
	if !errors.Is(err, ax.ErrQueueFull) || !errors.As(err, &apiErr) || apiErr.Depth != 1000 || apiErr.Limit != 1000 || apiErr.RetryAfter != 2*time.Second {
		t.Fatalf("queue full: %v", err)
	}
	_, err = c.SubmitBatch(ctx, []ax.SubmitRequest{{Handler: "h", Timezone: "Mars/Olympus"}})
	if !errors.Is(err, ax.ErrInvalid) || !strings.Contains(err.Error(), "tasks[0]: timezone") {
		t.Fatalf("invalid item at the sidecar: %v", err)
	}

	// A sidecar answering fewer results than tasks is an error, not a panic.
	f.Inject(fakeAnswer{Status: 200, Body: `{"results":[]}`})
	if _, err := c.SubmitBatch(ctx, []ax.SubmitRequest{{Handler: "h"}}); err == nil || !strings.Contains(err.Error(), "0 results for 1 tasks") {
		t.Fatalf("short answer: %v", err)
	}
}

func Test_Client_QueueFullAndBacklogWarning(t *testing.T) {
	f := startFakeSidecar(t)
	c := newClient(t, f)
	ctx := testContext(t)

	f.Inject(fakeAnswer{Status: 429, RetryAfter: "3", Code: "queue_full",
		Message: `backlog of handler "order.timeout" is full: 1000 due runs waiting for executors, the bound is 1000`, Depth: 1000, Limit: 1000})
	_, err := c.Submit(ctx, ax.SubmitRequest{Handler: "order.timeout"})
	var apiErr *ax.APIError
	if !errors.Is(err, ax.ErrQueueFull) || !errors.As(err, &apiErr) {
		t.Fatalf("want ErrQueueFull, got %v", err)
	}
	if apiErr.Depth != 1000 || apiErr.Limit != 1000 || apiErr.RetryAfter != 3*time.Second || apiErr.Status != 429 {
		t.Fatalf("api error %+v", apiErr)
	}
	if n := len(f.Requests()); n != 1 {
		t.Fatalf("a 429 is not retried: %d requests", n)
	}
	// Other errors carry no depth.
	_, err = c.Get(ctx, "nope")
	if !errors.As(err, &apiErr) || apiErr.Depth != 0 || apiErr.Limit != 0 {
		t.Fatalf("not found: %+v", apiErr)
	}

	task, err := c.Submit(ctx, ax.SubmitRequest{ID: "a", Handler: "order.timeout"})
	if err != nil || task.BacklogWarning != "" {
		t.Fatalf("no warning expected: %+v, %v", task, err)
	}
	if _, _, ok := task.Backlog(); ok {
		t.Fatal("Backlog without a warning")
	}
	f.SetBacklogWarning("812/1000")
	task, err = c.Submit(ctx, ax.SubmitRequest{ID: "b", Handler: "order.timeout"})
	if err != nil || task.BacklogWarning != "812/1000" {
		t.Fatalf("warning: %+v, %v", task, err)
	}
	if depth, limit, ok := task.Backlog(); !ok || depth != 812 || limit != 1000 {
		t.Fatalf("Backlog() = %d, %d, %v", depth, limit, ok)
	}
	if got, err := c.Get(ctx, "b"); err != nil || got.BacklogWarning != "" {
		t.Fatalf("get: %+v, %v", got, err)
	}
}

func Test_Client_RecurringAndRoutingFields(t *testing.T) {
	f := startFakeSidecar(t)
	c := newClient(t, f)
	ctx := testContext(t)

	until := time.Date(2027, 3, 1, 0, 0, 0, 0, time.FixedZone("CET", 3600))
	task, err := c.Submit(ctx, ax.SubmitRequest{
		ID:       "nightly",
		Handler:  "report.build",
		Cron:     "0 2 * * *",
		Timezone: "Europe/Berlin",
		Repeats:  10,
		Until:    until,
		Backoff:  &ax.Backoff{Initial: time.Second, Multiplier: 3, Jitter: ax.NoJitter},
		RouteKey: "tenant-7",
		Labels:   map[string]string{"team": "billing", "env": "prod"},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"id":"nightly","handler":"report.build","cron":"0 2 * * *","timezone":"Europe/Berlin","repeats":10,"until":"2027-02-28T23:00:00Z","backoff":{"initial":"1s","multiplier":3,"jitter":0},"route_key":"tenant-7","labels":{"env":"prod","team":"billing"}}`
	if got := string(f.LastRequest().Body); got != want {
		t.Fatalf("body\n got %s\nwant %s", got, want)
	}
	if task.Cron != "0 2 * * *" || task.Timezone != "Europe/Berlin" || task.Repeats != 10 || !task.Until.Equal(until) ||
		task.RouteKey != "tenant-7" || task.Labels["team"] != "billing" || len(task.Labels) != 2 || task.Run != 1 || task.Every != 0 || task.Delay != 0 {
		t.Fatalf("task %+v", task)
	}
	if b := task.Backoff; b == nil || *b != (ax.Backoff{Initial: time.Second, Max: 30 * time.Second, Multiplier: 3, Jitter: 0}) {
		t.Fatalf("backoff %+v", task.Backoff)
	}

	task, err = c.Submit(ctx, ax.SubmitRequest{ID: "poll", Handler: "feed.poll", Every: 5 * time.Minute, Delay: time.Minute,
		Backoff: &ax.Backoff{Max: time.Minute, Jitter: 0.5}})
	if err != nil {
		t.Fatal(err)
	}
	want = `{"id":"poll","handler":"feed.poll","delay":"1m0s","every":"5m0s","backoff":{"max":"1m0s","jitter":0.5}}`
	if got := string(f.LastRequest().Body); got != want {
		t.Fatalf("body\n got %s\nwant %s", got, want)
	}
	if task.Every != 5*time.Minute || task.Cron != "" || task.Delay != time.Minute || task.Labels != nil ||
		*task.Backoff != (ax.Backoff{Initial: 2 * time.Second, Max: time.Minute, Multiplier: 2, Jitter: 0.5}) {
		t.Fatalf("task %+v backoff %+v", task, task.Backoff)
	}

	// A one-off task has no backoff view and run 1.
	task, err = c.Submit(ctx, ax.SubmitRequest{Handler: "h"})
	if err != nil || task.Backoff != nil || task.Run != 1 || task.Snoozes != 0 {
		t.Fatalf("one-off %+v, %v", task, err)
	}
}

func Test_Client_HeartbeatAndReportResult(t *testing.T) {
	f := startFakeSidecar(t)
	c := newClient(t, f)
	ctx := testContext(t)

	if _, err := c.Submit(ctx, ax.SubmitRequest{ID: "job|1", Handler: "h", MaxAttempts: 3}); err != nil {
		t.Fatal(err)
	}
	// Not running: conflict.
	_, err := c.Heartbeat(ctx, "job|1", 1)
	if !errors.Is(err, ax.ErrConflict) {
		t.Fatalf("heartbeat of a waiting task: %v", err)
	}
	f.SetRunning("job|1", 2)
	task, err := c.Heartbeat(ctx, "job|1", 2)
	if err != nil || task.State != ax.StateRunning || task.Attempts != 2 {
		t.Fatalf("heartbeat: %+v, %v", task, err)
	}
	if r := f.LastRequest(); r.RequestURI != "/v1/tasks/job%7C1/heartbeat" || string(r.Body) != `{"attempt":2}` {
		t.Fatalf("sent %s %s", r.RequestURI, r.Body)
	}
	// A stale attempt: 409.
	_, err = c.Heartbeat(ctx, "job|1", 1)
	var apiErr *ax.APIError
	if !errors.Is(err, ax.ErrConflict) || !errors.As(err, &apiErr) || apiErr.Status != 409 {
		t.Fatalf("stale heartbeat: %v", err)
	}
	_, err = c.Heartbeat(ctx, "nope", 1)
	if !errors.Is(err, ax.ErrNotFound) {
		t.Fatalf("unknown task: %v", err)
	}

	task, err = c.ReportResult(ctx, "job|1", 2, ax.ResultFailed, "upstream 502")
	if err != nil || task.State != ax.StateWaiting || task.LastError != "upstream 502" {
		t.Fatalf("result: %+v, %v", task, err)
	}
	if r := f.LastRequest(); r.RequestURI != "/v1/tasks/job%7C1/result" || string(r.Body) != `{"attempt":2,"status":"failed","error":"upstream 502"}` {
		t.Fatalf("sent %s %s", r.RequestURI, r.Body)
	}
	// Reported already: conflict.
	if _, err := c.ReportResult(ctx, "job|1", 2, ax.ResultSuccess, ""); !errors.Is(err, ax.ErrConflict) {
		t.Fatalf("second report: %v", err)
	}
	f.SetRunning("job|1", 3)
	task, err = c.ReportResult(ctx, "job|1", 3, ax.ResultSuccess, "")
	if err != nil || task.State != ax.StateSuccess || task.FinishedAt.IsZero() {
		t.Fatalf("success: %+v, %v", task, err)
	}
	if r := f.LastRequest(); string(r.Body) != `{"attempt":3,"status":"success"}` {
		t.Fatalf("sent %s", r.Body)
	}

	// A long error text is cut to the limit at a rune boundary.
	if _, err := c.Submit(ctx, ax.SubmitRequest{ID: "long", Handler: "h"}); err != nil {
		t.Fatal(err)
	}
	f.SetRunning("long", 1)
	long := strings.Repeat("é", 3000) // 6000 bytes
	task, err = c.ReportResult(ctx, "long", 1, ax.ResultPermanent, long)
	if err != nil || task.State != ax.StateFailed || len(task.LastError) != ax.ResultErrorMaxBytes || task.LastError != long[:ax.ResultErrorMaxBytes] {
		t.Fatalf("long error: %d bytes, %v", len(task.LastError), err)
	}

	// Refused before sending.
	before := len(f.Requests())
	for _, err := range []error{
		func() error { _, err := c.Heartbeat(ctx, "", 1); return err }(),
		func() error { _, err := c.Heartbeat(ctx, "x", 0); return err }(),
		func() error { _, err := c.ReportResult(ctx, "x", 1, "done", ""); return err }(),
		func() error { _, err := c.ReportResult(ctx, "x", 1, ax.ResultSuccess, "but"); return err }(),
	} {
		if !errors.Is(err, ax.ErrInvalid) {
			t.Errorf("want ErrInvalid, got %v", err)
		}
	}
	if n := len(f.Requests()) - before; n != 0 {
		t.Fatalf("%d requests sent", n)
	}
}
