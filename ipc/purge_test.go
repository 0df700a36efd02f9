package ipc

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/axsched/ax/clients/go/axapi"
)

// PurgeTask implements Backend for the fake: a finished task is deleted.
func (f *fakeBackend) PurgeTask(ctx context.Context, id string) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, ok := f.tasks[id]
	if !ok {
		return 0, fmt.Errorf("task %q: %w", id, ErrNotFound)
	}
	switch t.State {
	case axapi.StateSuccess, axapi.StateCancelled, axapi.StateDead, axapi.StateFailed:
	default:
		return 0, Errorf(ErrConflict, "purge: task %q is %s", id, t.State)
	}
	delete(f.tasks, id)
	delete(f.specs, id)
	return 1, nil
}

// PurgeTasks implements Backend for the fake: finished tasks matching q
// (FinishedAt before q.FinishedBefore), in id order, up to q.Limit.
func (f *fakeBackend) PurgeTasks(ctx context.Context, q PurgeQuery) (PurgeResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lastPurge = q
	var ids []string
	for id, t := range f.tasks {
		finished := t.State == axapi.StateSuccess || t.State == axapi.StateCancelled || t.State == axapi.StateDead || t.State == axapi.StateFailed
		if !finished || (q.State != "" && t.State != q.State) || (q.Handler != "" && t.Handler != q.Handler) ||
			t.FinishedAt == nil || !t.FinishedAt.Before(q.FinishedBefore) {
			continue
		}
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var res PurgeResult
	if len(ids) > q.Limit {
		ids, res.More = ids[:q.Limit], true
	}
	for _, id := range ids {
		delete(f.tasks, id)
		delete(f.specs, id)
	}
	res.Purged = len(ids)
	return res, nil
}

func TestServer_PurgeOne(t *testing.T) {
	ts := startServer(t, ServerOptions{})
	for _, id := range []string{"done", "A/B", "waiting"} {
		ts.do("POST", "/v1/tasks", `{"id":"`+id+`","handler":"h"}`)
	}
	fin := fakeNow.Add(-time.Hour)
	for _, id := range []string{"done", "A/B"} {
		ts.backend.setTask(id, func(t *Task) { t.State, t.FinishedAt = axapi.StateSuccess, &fin })
	}
	p := func(id string) string { return "/v1/tasks/" + url.PathEscape(id) + "?purge=true" }
	for _, id := range []string{"done", "A/B"} {
		r := ts.do("DELETE", p(id), "")
		if r.status != 200 || string(r.body) != "{\"purged\":1}\n" {
			t.Fatalf("purge %q = %d %s", id, r.status, r.body)
		}
		ts.do("GET", "/v1/tasks/"+url.PathEscape(id), "").wantError(t, 404, "not_found", "")
	}
	ts.do("DELETE", p("waiting"), "").wantError(t, 409, "conflict", `task "waiting" is WAITING`)
	ts.do("DELETE", p("ghost"), "").wantError(t, 404, "not_found", `task "ghost"`)
	ts.do("DELETE", "/v1/tasks/waiting?purge=yes", "").wantError(t, 400, "bad_request", `purge: want true or false, got "yes"`)
	ts.do("DELETE", "/v1/tasks/a%07b?purge=true", "").wantError(t, 400, "bad_request", "id: control character")
	// purge=false (or no purge) is the cancel it always was.
	if r := ts.do("DELETE", "/v1/tasks/waiting?purge=false", ""); r.status != 200 || r.task(t).State != axapi.StateCancelled {
		t.Fatalf("cancel = %d %s", r.status, r.body)
	}
}

func TestServer_PurgeMany(t *testing.T) {
	ts := startServer(t, ServerOptions{})
	fin := fakeNow.Add(-time.Hour)
	for i, st := range []string{axapi.StateSuccess, axapi.StateSuccess, axapi.StateDead, axapi.StateFailed, axapi.StateCancelled, axapi.StateWaiting} {
		id := fmt.Sprintf("t%d", i)
		ts.do("POST", "/v1/tasks", `{"id":"`+id+`","handler":"h"}`)
		ts.backend.setTask(id, func(t *Task) { t.State, t.FinishedAt = st, &fin })
	}
	ts.do("POST", "/v1/tasks", `{"id":"other","handler":"h2"}`)
	ts.backend.setTask("other", func(t *Task) { t.State, t.FinishedAt = axapi.StateSuccess, &fin })

	purge := func(body string) PurgeResult {
		t.Helper()
		r := ts.do("POST", "/v1/tasks/purge", body)
		if r.status != 200 {
			t.Fatalf("purge %s = %d %s", body, r.status, r.body)
		}
		var res PurgeResult
		if err := json.Unmarshal(r.body, &res); err != nil {
			t.Fatal(err)
		}
		return res
	}
	before := time.Now()
	if res := purge(`{"handler":"h","state":"SUCCESS","limit":1}`); res != (PurgeResult{Purged: 1, More: true}) {
		t.Fatalf("first = %+v", res)
	}
	if q := ts.backend.lastPurge; q.Handler != "h" || q.State != axapi.StateSuccess || q.Limit != 1 || q.FinishedBefore.Before(before) {
		t.Fatalf("query = %+v", q)
	}
	if res := purge(`{"handler":"h","state":"SUCCESS","cursor":"opaque-1"}`); res != (PurgeResult{Purged: 1}) {
		t.Fatalf("second = %+v", res)
	}
	if q := ts.backend.lastPurge; q.Limit != axapi.PurgeLimitDefault || q.Cursor != "opaque-1" {
		t.Fatalf("default limit %d, cursor %q", q.Limit, q.Cursor)
	}
	// finished_before before the finish time matches nothing.
	if res := purge(`{"finished_before":"` + fin.Add(-time.Second).Format(time.RFC3339) + `"}`); res != (PurgeResult{}) {
		t.Fatalf("before = %+v", res)
	}
	if q := ts.backend.lastPurge; !q.FinishedBefore.Equal(fin.Add(-time.Second)) || q.FinishedBefore.Location() != time.UTC {
		t.Fatalf("finished_before = %v", q.FinishedBefore)
	}
	// Empty body: every finished task, before now.
	if res := purge(""); res != (PurgeResult{Purged: 4}) {
		t.Fatalf("all = %+v", res)
	}
	if r := ts.do("GET", "/v1/tasks/t5", ""); r.status != 200 {
		t.Fatalf("the WAITING task went: %d", r.status)
	}

	for _, tc := range []struct{ body, code, msg string }{
		{`{"state":"WAITING"}`, "bad_request", `state: must be one of SUCCESS, CANCELLED, DEAD, FAILED (a finished state), got "WAITING"`},
		{`{"state":"success"}`, "bad_request", `state: must be one of`},
		{`{"finished_before":"yesterday"}`, "bad_request", `finished_before: must be an RFC 3339 time`},
		{`{"finished_before":"1969-01-01T00:00:00Z"}`, "bad_request", `finished_before: must be after 1970`},
		{`{"limit":0}`, "bad_request", "limit: must be between 1 and 10000, got 0"},
		{`{"limit":10001}`, "bad_request", "limit: must be between 1 and 10000, got 10001"},
		{`{"limit":"5"}`, "bad_request", "limit: must be an integer from 1 to 10000"},
		{`{"handler":"a\u0007"}`, "bad_request", "handler: control character"},
		{`{"force":true}`, "bad_request", `unknown field "force"`},
		{`{"cursor":"a\u0000b"}`, "bad_request", "cursor: control character"},
		{`{"cursor":"` + strings.Repeat("a", axapi.CursorMaxBytes+1) + `"}`, "bad_request", "cursor: 4097 bytes, the limit is 4096"},
		{`{"cursor":5}`, "bad_request", "cursor"},
		{`{`, "invalid_json", "invalid json"},
		{`[]`, "invalid_json", "want a JSON object"},
	} {
		ts.do("POST", "/v1/tasks/purge", tc.body).wantError(t, 400, tc.code, tc.msg)
	}
	ts.do("GET", "/v1/tasks/purge", "").wantError(t, 404, "not_found", `task "purge"`)
}

func TestDecodeSubmitRetention(t *testing.T) {
	for _, tc := range []struct {
		body string
		want time.Duration
		err  string
	}{
		{`{"handler":"h"}`, 0, ""},
		{`{"handler":"h","retention":"1h"}`, time.Hour, ""},
		{`{"handler":"h","retention":"0s"}`, 0, ""},
		{`{"handler":"h","retention":"-1s"}`, 0, `retention: must not be negative, got "-1s"`},
		{`{"handler":"h","retention":"forever"}`, 0, `retention: must be a Go duration like "24h", got "forever"`},
		{`{"handler":"h","retention":3600}`, 0, `retention: must be a Go duration string like "24h", got JSON number`},
	} {
		s, err := DecodeSubmit([]byte(tc.body))
		if tc.err != "" {
			if err == nil || err.Error() != tc.err {
				t.Errorf("%s: error %v, want %q", tc.body, err, tc.err)
			}
			continue
		}
		if err != nil || s.Retention != tc.want {
			t.Errorf("%s: retention %v, %v; want %v", tc.body, s.Retention, err, tc.want)
		}
	}
	a, _ := DecodeSubmit([]byte(`{"id":"x","handler":"h","retention":"1h"}`))
	b, _ := DecodeSubmit([]byte(`{"id":"x","handler":"h","retention":"2h"}`))
	if SameSpec(a, b) {
		t.Error("specs with different retentions are the same spec")
	}
}

// TestServer_TaskQueryParamsChecked: DELETE /v1/tasks/{id} (and
// /v1/flows/{id}) refuses, 400 bad_request, a query parameter it does not
// take and purge given twice, as the list does. It ignored them: ?Purge=true
// or ?prune=true, a typo for a purge, cancelled the waiting task instead
// (and ?purge=true&purge=false purged). GET /v1/tasks/{id} refuses
// unknown parameters too (TestServer_GetCancel, TestServer_QueryStrings).
func TestServer_TaskQueryParamsChecked(t *testing.T) {
	ts := startServer(t, ServerOptions{})
	ts.do("POST", "/v1/tasks", `{"id":"waiting","handler":"h"}`)
	for _, q := range []string{"Purge=true", "prune=true", "purge=true&purge=false", "purge=false&x=1", "reason=x"} {
		ts.do("DELETE", "/v1/tasks/waiting?"+q, "").wantError(t, 400, "bad_request", "")
		ts.do("DELETE", "/v1/flows/f1?"+q, "").wantError(t, 400, "bad_request", "")
	}
	if r := ts.do("GET", "/v1/tasks/waiting", ""); r.status != 200 || r.task(t).State != axapi.StateWaiting {
		t.Fatalf("a refused DELETE changed the task: %d %s", r.status, r.body)
	}
	if r := ts.do("GET", "/v1/tasks/waiting?consistency=strong", ""); r.status != 200 {
		t.Fatalf("consistency=strong = %d %s", r.status, r.body)
	}
	if r := ts.do("DELETE", "/v1/tasks/waiting?purge=false", ""); r.status != 200 || r.task(t).State != axapi.StateCancelled {
		t.Fatalf("cancel = %d %s", r.status, r.body)
	}
}

// TestServer_PurgeManyRefusesQuery: POST /v1/tasks/purge takes its filters
// in the JSON body; a query string (the way GET /v1/tasks takes them) is
// 400 bad_request and purges nothing. It was ignored, and with an empty
// body ?handler=h&state=DEAD purged every finished task of every handler.
func TestServer_PurgeManyRefusesQuery(t *testing.T) {
	ts := startServer(t, ServerOptions{})
	fin := fakeNow.Add(-time.Hour)
	for _, id := range []string{"a", "b"} {
		ts.do("POST", "/v1/tasks", `{"id":"`+id+`","handler":"other"}`)
		ts.backend.setTask(id, func(t *Task) { t.State, t.FinishedAt = axapi.StateSuccess, &fin })
	}
	for _, body := range []string{"", "{}", `{"limit":1}`} {
		ts.do("POST", "/v1/tasks/purge?handler=h&state=DEAD", body).wantError(t, 400, "bad_request", "query")
	}
	for _, id := range []string{"a", "b"} {
		if r := ts.do("GET", "/v1/tasks/"+id, ""); r.status != 200 {
			t.Fatalf("task %s purged by a refused request: %d", id, r.status)
		}
	}
}
