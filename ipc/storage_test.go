package ipc

import (
	"sync/atomic"
	"testing"
)

// guardedBackend is the fake backend of a node whose storage may refuse
// writes (WriteGuard).
type guardedBackend struct {
	*fakeBackend
	refuse atomic.Pointer[Error]
}

func (g *guardedBackend) WriteAllowed() error {
	if e := g.refuse.Load(); e != nil {
		return e
	}
	return nil
}

func startGuardedServer(t *testing.T) (*testServer, *guardedBackend) {
	t.Helper()
	g := &guardedBackend{fakeBackend: newFakeBackend()}
	return serveBackend(t, g, g.fakeBackend, ServerOptions{}), g
}

// A node whose storage cannot take writes answers every write 503
// storage_unavailable with Retry-After and the cause, without calling the
// backend, and keeps serving reads.
func TestServer_StorageUnavailableRefusesWritesOnly(t *testing.T) {
	ts, g := startGuardedServer(t)
	if r := ts.do("POST", "/v1/tasks", `{"id":"a","handler":"h"}`); r.status != 201 {
		t.Fatalf("submit while healthy: %d %s", r.status, r.body)
	}

	g.refuse.Store(Errorf(ErrStorageUnavailable, "data dir /d: 0 B free, below the reserve of 64 MiB"))
	writes := []struct{ method, path, body string }{
		{"POST", "/v1/tasks", `{"id":"b","handler":"h"}`},
		{"POST", "/v1/tasks/batch", `{"tasks":[{"handler":"h"}]}`},
		{"DELETE", "/v1/tasks/a", ""},
		{"POST", "/v1/tasks/a/retry", ""},
		{"POST", "/v1/tasks/a/heartbeat", `{"attempt":1}`},
		{"POST", "/v1/tasks/a/result", `{"attempt":1,"status":"success"}`},
		{"POST", "/v1/executors", `{"name":"e","handlers":["h"],"url":"http://127.0.0.1:9"}`},
		{"DELETE", "/v1/executors/e", ""},
		{"DELETE", "/v1/cluster/members/n2", ""},
	}
	for _, w := range writes {
		r := ts.do(w.method, w.path, w.body)
		r.wantError(t, 503, "storage_unavailable", "below the reserve")
		if got := r.header.Get("Retry-After"); got != "5" {
			t.Errorf("%s %s: Retry-After = %q, want 5", w.method, w.path, got)
		}
	}
	ts.backend.mu.Lock()
	_, stored := ts.backend.tasks["b"]
	ts.backend.mu.Unlock()
	if stored {
		t.Fatal("a refused submit reached the backend")
	}

	// Reads still work.
	if r := ts.do("GET", "/v1/tasks/a", ""); r.status != 200 || r.task(t).ID != "a" {
		t.Fatalf("read while storage unavailable: %d %s", r.status, r.body)
	}
	for _, p := range []string{"/v1/tasks", "/v1/cluster", "/v1/executors", "/healthz", "/readyz"} {
		if r := ts.do("GET", p, ""); r.status != 200 {
			t.Errorf("GET %s while storage unavailable: %d %s", p, r.status, r.body)
		}
	}

	// It recovers: writes are accepted again.
	g.refuse.Store(nil)
	if r := ts.do("POST", "/v1/tasks", `{"id":"b","handler":"h"}`); r.status != 201 {
		t.Fatalf("submit after recovery: %d %s", r.status, r.body)
	}
}
