package ax_test

import (
	"context"
	"errors"
	"net/http"
	"testing"

	ax "github.com/axsched/ax/clients/go"
)

// Pause, resume and Handlers send the routes of the API and decode the
// answers; the pause error codes match their sentinels.
func TestPauseResumeAndHandlers(t *testing.T) {
	f := startFakeSidecar(t)
	var seen []string
	f.SetHook(func(w http.ResponseWriter, r *http.Request) bool {
		seen = append(seen, r.Method+" "+r.RequestURI)
		switch r.RequestURI {
		case "/v1/handlers/mail%2Fsend/pause", "/v1/handlers/mail%2Fsend/resume":
			writeJSON(w, 200, map[string]any{"name": "mail/send", "paused": r.RequestURI[len(r.RequestURI)-5:] == "pause"})
		case "/v1/handlers/typo/pause":
			writeError(w, 404, "handler_not_found", `handler "typo": no task, no executor and no pause names it`)
		case "/v1/tasks/A%2FB/pause":
			writeJSON(w, 200, map[string]any{"id": "A/B", "handler": "h", "state": "WAITING", "timeout": "30s", "run": 1, "paused": true})
		case "/v1/tasks/A%2FB/resume":
			writeJSON(w, 200, map[string]any{"id": "A/B", "handler": "h", "state": "WAITING", "timeout": "30s", "run": 1})
		case "/v1/tasks/done/pause":
			writeError(w, 409, "task_finished", `pause: task "done" is SUCCESS`)
		case "/v1/handlers":
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{"handlers":[{"name":"h","paused":true,"backlog":3,"parked":{"paused":3},"circuit":"closed",` +
				`"tasks":{"WAITING":3,"SUCCESS":1},"executors":[{"node":"n1","name":"w","url":"unix:///w.sock","max_concurrency":8,"limit":4}]}]}`))
		default:
			return false
		}
		return true
	})
	c := ax.New(ax.Config{SocketPath: f.Socket})
	ctx := context.Background()
	if err := c.PauseHandler(ctx, "mail/send"); err != nil {
		t.Fatal(err)
	}
	if err := c.ResumeHandler(ctx, "mail/send"); err != nil {
		t.Fatal(err)
	}
	err := c.PauseHandler(ctx, "typo")
	var apiErr *ax.APIError
	if !errors.Is(err, ax.ErrNotFound) || !errors.As(err, &apiErr) || apiErr.Code != ax.CodeHandlerNotFound {
		t.Fatalf("pause of an unknown handler: %v", err)
	}
	task, err := c.PauseTask(ctx, "A/B")
	if err != nil || !task.Paused || task.ID != "A/B" {
		t.Fatalf("PauseTask = %+v, %v", task, err)
	}
	if task, err = c.ResumeTask(ctx, "A/B"); err != nil || task.Paused {
		t.Fatalf("ResumeTask = %+v, %v", task, err)
	}
	_, err = c.PauseTask(ctx, "done")
	if !errors.Is(err, ax.ErrConflict) || !errors.As(err, &apiErr) || apiErr.Code != ax.CodeTaskFinished {
		t.Fatalf("pause of a finished task: %v", err)
	}
	if _, err := c.PauseTask(ctx, ""); !errors.Is(err, ax.ErrInvalid) {
		t.Fatalf("empty id: %v", err)
	}
	if err := c.PauseHandler(ctx, ""); !errors.Is(err, ax.ErrInvalid) {
		t.Fatalf("empty handler: %v", err)
	}
	hs, err := c.Handlers(ctx)
	if err != nil || len(hs) != 1 {
		t.Fatalf("Handlers = %+v, %v", hs, err)
	}
	h := hs[0]
	if h.Name != "h" || !h.Paused || h.Backlog == nil || *h.Backlog != 3 || h.Parked["paused"] != 3 || h.Circuit != "closed" ||
		h.Tasks[ax.StateWaiting] != 3 || h.Tasks[ax.StateSuccess] != 1 || len(h.Executors) != 1 || h.Executors[0].Limit != 4 || h.Executors[0].MaxConcurrency != 8 {
		t.Fatalf("handler %+v", h)
	}
	want := []string{"POST /v1/handlers/mail%2Fsend/pause", "POST /v1/handlers/mail%2Fsend/resume", "POST /v1/handlers/typo/pause",
		"POST /v1/tasks/A%2FB/pause", "POST /v1/tasks/A%2FB/resume", "POST /v1/tasks/done/pause", "GET /v1/handlers"}
	if len(seen) != len(want) {
		t.Fatalf("requests %q, want %q", seen, want)
	}
	for i := range want {
		if seen[i] != want[i] {
			t.Fatalf("requests %q, want %q", seen, want)
		}
	}
}
