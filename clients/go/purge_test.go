package ax_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"

	ax "github.com/axsched/ax/clients/go"
)

// purgeServer answers the purge endpoints on a Unix socket, recording each
// request as "METHOD path?query body".
type purgeServer struct {
	mu   sync.Mutex
	reqs []string
}

func startPurgeServer(t *testing.T) (*purgeServer, *ax.Client) {
	t.Helper()
	sock := filepath.Join(shortTempDir(t), "ax.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	p := &purgeServer{}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		p.mu.Lock()
		p.reqs = append(p.reqs, r.Method+" "+r.URL.RequestURI()+" "+string(b))
		p.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch r.Method + " " + r.URL.Path {
		case "DELETE /v1/tasks/done":
			io.WriteString(w, `{"purged":1}`)
		case "DELETE /v1/tasks/waiting":
			w.WriteHeader(409)
			io.WriteString(w, `{"error":{"code":"conflict","message":"purge: task \"waiting\" is WAITING"}}`)
		case "POST /v1/tasks":
			w.WriteHeader(201)
			io.WriteString(w, `{"id":"r","handler":"h","state":"WAITING","timeout":"30s","retention":"1h0m0s","created_at":"2026-12-01T10:00:00Z","updated_at":"2026-12-01T10:00:00Z"}`)
		case "POST /v1/tasks/purge":
			if string(b) == `{"limit":0}` {
				w.WriteHeader(400)
				io.WriteString(w, `{"error":{"code":"bad_request","message":"limit"}}`)
				return
			}
			io.WriteString(w, `{"purged":7,"more":true,"next_cursor":"cy8AAAAAAAAAAWE"}`)
		default:
			w.WriteHeader(404)
			io.WriteString(w, `{"error":{"code":"not_found","message":"no"}}`)
		}
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return p, ax.New(ax.Config{SocketPath: sock})
}

func TestPurge(t *testing.T) {
	p, c := startPurgeServer(t)
	ctx := context.Background()
	if err := c.Purge(ctx, "done"); err != nil {
		t.Fatal(err)
	}
	if err := c.Purge(ctx, "waiting"); !errors.Is(err, ax.ErrConflict) {
		t.Fatalf("purge of a waiting task: %v", err)
	}
	if err := c.Purge(ctx, "ghost"); !errors.Is(err, ax.ErrNotFound) {
		t.Fatalf("purge of an unknown task: %v", err)
	}
	if err := c.Purge(ctx, ""); !errors.Is(err, ax.ErrInvalid) {
		t.Fatalf("purge of an empty id: %v", err)
	}
	before := time.Date(2026, 12, 1, 10, 0, 0, 5, time.FixedZone("x", 3600))
	res, err := c.PurgeTasks(ctx, ax.PurgeFilter{Handler: "h", State: ax.StateDead, FinishedBefore: before, Limit: 50})
	if err != nil || res != (ax.PurgeResult{Purged: 7, More: true, NextCursor: "cy8AAAAAAAAAAWE"}) {
		t.Fatalf("PurgeTasks = %+v, %v", res, err)
	}
	if _, err := c.PurgeTasks(ctx, ax.PurgeFilter{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PurgeTasks(ctx, ax.PurgeFilter{State: ax.StateDead, Cursor: res.NextCursor}); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"DELETE /v1/tasks/done?purge=true ",
		"DELETE /v1/tasks/waiting?purge=true ",
		"DELETE /v1/tasks/ghost?purge=true ",
		`POST /v1/tasks/purge {"handler":"h","state":"DEAD","finished_before":"2026-12-01T09:00:00.000000005Z","limit":50}`,
		`POST /v1/tasks/purge {}`,
		`POST /v1/tasks/purge {"state":"DEAD","cursor":"cy8AAAAAAAAAAWE"}`,
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.reqs) != len(want) {
		t.Fatalf("requests %q", p.reqs)
	}
	for i := range want {
		if p.reqs[i] != want[i] {
			t.Errorf("request %d = %q, want %q", i, p.reqs[i], want[i])
		}
	}
}

func TestSubmitRetention(t *testing.T) {
	p, c := startPurgeServer(t)
	task, err := c.Submit(context.Background(), ax.SubmitRequest{ID: "r", Handler: "h", Retention: time.Hour})
	if err != nil || task.Retention != time.Hour {
		t.Fatalf("Submit = %+v, %v", task, err)
	}
	if want := `POST /v1/tasks {"id":"r","handler":"h","retention":"1h0m0s"}`; p.reqs[0] != want {
		t.Fatalf("request %q, want %q", p.reqs[0], want)
	}
}
