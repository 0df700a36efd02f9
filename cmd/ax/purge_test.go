package main

import (
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// purgeSidecar answers the purge endpoints: one finished task "done", a
// WAITING "w", and POST /v1/tasks/purge that deletes none (with a cursor),
// then 3 (with another), then 2 tasks.
type purgeSidecar struct {
	mu     sync.Mutex
	reqs   []string
	rounds int
}

func startPurgeSidecar(t *testing.T) (*purgeSidecar, string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "axpurge")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "ax.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	p := &purgeSidecar{}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		p.mu.Lock()
		defer p.mu.Unlock()
		p.reqs = append(p.reqs, r.Method+" "+r.URL.RequestURI()+" "+string(b))
		w.Header().Set("Content-Type", "application/json")
		switch r.Method + " " + r.URL.Path {
		case "DELETE /v1/tasks/done":
			io.WriteString(w, `{"purged":1}`)
		case "DELETE /v1/tasks/w":
			w.WriteHeader(409)
			io.WriteString(w, `{"error":{"code":"conflict","message":"purge: task \"w\" is WAITING; only finished tasks can be purged"}}`)
		case "POST /v1/tasks/purge":
			p.rounds++
			switch p.rounds {
			case 1:
				io.WriteString(w, `{"purged":0,"more":true,"next_cursor":"c1"}`)
			case 2:
				io.WriteString(w, `{"purged":3,"more":true,"next_cursor":"c2"}`)
			default:
				io.WriteString(w, `{"purged":2,"more":false}`)
			}
		default:
			w.WriteHeader(404)
			io.WriteString(w, `{"error":{"code":"not_found","message":"task not found"}}`)
		}
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return p, sock
}

func TestPurgeCommand(t *testing.T) {
	p, sock := startPurgeSidecar(t)
	out, errOut, code := runAx(t, "purge", "done", "--socket", sock)
	if code != 0 || out != "purged done\n" {
		t.Fatalf("purge done: %d %q %q", code, out, errOut)
	}
	if _, errOut, code := runAx(t, "purge", "w", "--socket", sock); code != 1 || !strings.Contains(errOut, "is WAITING") {
		t.Fatalf("purge w: %d %q", code, errOut)
	}
	if _, errOut, code := runAx(t, "purge", "ghost", "--socket", sock); code != 1 || !strings.Contains(errOut, `task "ghost" not found`) {
		t.Fatalf("purge ghost: %d %q", code, errOut)
	}
	out, errOut, code = runAx(t, "purge", "--handler", "h", "--state", "dead", "--before", "2026-11-01T00:00:00Z", "--limit", "3", "--socket", sock)
	if code != 0 || out != "purged 5 finished tasks\n" {
		t.Fatalf("purge many: %d %q %q", code, out, errOut)
	}
	want := []string{
		`POST /v1/tasks/purge {"finished_before":"2026-11-01T00:00:00Z","handler":"h","limit":3,"state":"DEAD"}`,
		`POST /v1/tasks/purge {"cursor":"c1","finished_before":"2026-11-01T00:00:00Z","handler":"h","limit":3,"state":"DEAD"}`,
		`POST /v1/tasks/purge {"cursor":"c2","finished_before":"2026-11-01T00:00:00Z","handler":"h","limit":3,"state":"DEAD"}`,
	}
	p.mu.Lock()
	got := p.reqs[len(p.reqs)-3:]
	p.mu.Unlock()
	if !slices.Equal(got, want) {
		t.Fatalf("requests %q, want %q", got, want)
	}
	for _, bad := range [][]string{
		{"purge"},
		{"purge", "done", "--state", "DEAD"},
		{"purge", "--state", "WAITING"},
		{"purge", "--before", "yesterday"},
		{"purge", "--all", "--limit", "0"},
	} {
		if _, errOut, code := runAx(t, append(bad, "--socket", sock)...); code != 2 {
			t.Errorf("%v: exit %d (%s), want 2", bad, code, errOut)
		}
	}
}

func TestParseBefore(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	if got, err := parseBefore("24h", now); err != nil || !got.Equal(now.Add(-24*time.Hour)) {
		t.Fatalf("24h: %v %v", got, err)
	}
	if got, err := parseBefore("2026-11-01T00:00:00+01:00", now); err != nil || !got.Equal(time.Date(2026, 10, 31, 23, 0, 0, 0, time.UTC)) {
		t.Fatalf("time: %v %v", got, err)
	}
	if _, err := parseBefore("-1h", now); err == nil {
		t.Fatal("a negative duration was accepted")
	}
}
