package ax_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	ax "github.com/axsched/ax/clients/go"
)

func TestRunsAndRun(t *testing.T) {
	f := startFakeSidecar(t)
	due := time.Date(2026, 12, 4, 3, 0, 0, 0, time.UTC)
	var got []string
	f.SetHook(func(w http.ResponseWriter, r *http.Request) bool {
		if !strings.Contains(r.URL.Path, "/runs") {
			return false
		}
		got = append(got, r.URL.EscapedPath()+"?"+r.URL.RawQuery)
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.EscapedPath() {
		case "/v1/tasks/a%7Cb/runs":
			json.NewEncoder(w).Encode(ax.RunsPage{Runs: []ax.Run{{Run: 2, State: "SUCCESS", DueAt: due, Result: json.RawMessage(`{"ok":1}`)}}, NextCursor: "r2"})
		case "/v1/tasks/a%7Cb/runs/2":
			json.NewEncoder(w).Encode(ax.Run{Run: 2, State: "SUCCESS", DueAt: due, Attempts: []ax.RunAttempt{{Attempt: 1, Node: "n1", Outcome: "success", HTTPStatus: 200}}})
		default:
			w.WriteHeader(404)
			w.Write([]byte(`{"error":{"code":"not_found","message":"run 9 of task \"a|b\" not found"}}`))
		}
		return true
	})
	c := newClient(t, f)
	ctx := context.Background()
	page, err := c.Runs(ctx, "a|b", &ax.RunsOptions{Limit: 5, Cursor: "r9"})
	if err != nil || len(page.Runs) != 1 || page.Runs[0].Run != 2 || string(page.Runs[0].Result) != `{"ok":1}` || page.NextCursor != "r2" {
		t.Fatalf("Runs = %+v, %v", page, err)
	}
	if _, err := c.Runs(ctx, "a|b", nil); err != nil {
		t.Fatal(err)
	}
	run, err := c.Run(ctx, "a|b", 2)
	if err != nil || run.Attempts[0].Node != "n1" {
		t.Fatalf("Run = %+v, %v", run, err)
	}
	if _, err := c.Run(ctx, "a|b", 9); !errors.Is(err, ax.ErrNotFound) {
		t.Fatalf("Run 9: %v", err)
	}
	if _, err := c.Runs(ctx, "a|b", &ax.RunsOptions{Limit: 101}); !errors.Is(err, ax.ErrInvalid) {
		t.Fatalf("limit 101: %v", err)
	}
	want := []string{"/v1/tasks/a%7Cb/runs?cursor=r9&limit=5", "/v1/tasks/a%7Cb/runs?", "/v1/tasks/a%7Cb/runs/2?", "/v1/tasks/a%7Cb/runs/9?"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("requests %v, want %v", got, want)
	}
}

// A handler's result is the body of the executor's answer; a handler that
// sets none answers an empty body.
func TestExecutorResult(t *testing.T) {
	ex := ax.NewExecutor()
	ex.HandleResult("sum", func(ctx context.Context, d *ax.Delivery) (any, error) { return map[string]int{"sum": 3}, nil })
	ex.HandleResult("none", func(ctx context.Context, d *ax.Delivery) (any, error) { return nil, nil })
	ex.HandleResult("fails", func(ctx context.Context, d *ax.Delivery) (any, error) { return 1, errors.New("boom") })
	ex.HandleFunc("set", func(ctx context.Context, d *ax.Delivery) error { return ax.SetResult(ctx, []string{"a"}) })
	for _, tc := range []struct {
		handler string
		status  int
		body    string
	}{{"sum", 200, `{"sum":3}`}, {"none", 200, ""}, {"fails", 500, "boom"}, {"set", 200, `["a"]`}} {
		rec := httptest.NewRecorder()
		ex.ServeHTTP(rec, callback(tc.handler, nil))
		if rec.Code != tc.status || strings.TrimSpace(rec.Body.String()) != tc.body {
			t.Errorf("%s: %d %q, want %d %q", tc.handler, rec.Code, rec.Body.String(), tc.status, tc.body)
		}
	}
	if err := ax.SetResult(context.Background(), 1); !errors.Is(err, ax.ErrInvalid) {
		t.Errorf("SetResult outside a handler: %v", err)
	}
}

func TestReportSuccessCarriesTheResult(t *testing.T) {
	f := startFakeSidecar(t)
	c := newClient(t, f)
	if _, err := c.Submit(context.Background(), ax.SubmitRequest{ID: "r|1", Handler: "h"}); err != nil {
		t.Fatal(err)
	}
	f.SetRunning("r|1", 1)
	if _, err := c.ReportSuccess(context.Background(), "r|1", 1, map[string]int{"rows": 3}); err != nil {
		t.Fatal(err)
	}
	if got := string(f.LastRequest().Body); got != `{"attempt":1,"status":"success","result":{"rows":3}}` {
		t.Errorf("body %s", got)
	}
	big := strings.Repeat("x", 70<<10)
	if _, err := c.ReportSuccess(context.Background(), "r|1", 1, big); !errors.Is(err, ax.ErrInvalid) {
		t.Errorf("a 70 KiB result: %v", err)
	}
}

// Get reads the newest run's result: JSON as it is, other bytes decoded.
func TestGetHasTheLastResult(t *testing.T) {
	f := startFakeSidecar(t)
	f.SetHook(func(w http.ResponseWriter, r *http.Request) bool {
		body := map[string]string{
			"/v1/tasks/j": `{"id":"j","handler":"h","state":"SUCCESS","timeout":"30s","run":2,"snoozes":0,"created_at":"2026-12-04T03:00:00Z","updated_at":"2026-12-04T03:00:00Z","last_run":2,"result":{"rows":3}}`,
			"/v1/tasks/b": `{"id":"b","handler":"h","state":"SUCCESS","timeout":"30s","run":1,"snoozes":0,"created_at":"2026-12-04T03:00:00Z","updated_at":"2026-12-04T03:00:00Z","last_run":1,"result_base64":"b2s=","result_truncated":true}`,
		}[r.URL.Path]
		if body == "" {
			return false
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(body))
		return true
	})
	c := newClient(t, f)
	tk, err := c.Get(context.Background(), "j")
	if err != nil || tk.LastRun != 2 || string(tk.Result) != `{"rows":3}` || tk.ResultBinary {
		t.Fatalf("j: %+v %v", tk, err)
	}
	tk, err = c.Get(context.Background(), "b")
	if err != nil || string(tk.Result) != "ok" || !tk.ResultBinary || !tk.ResultTruncated {
		t.Fatalf("b: %+v %v", tk, err)
	}
}
