package ipc

import (
	"sync/atomic"
	"testing"

	"github.com/axsched/ax/clients/go/axapi"
)

// freeingBackend is the fake backend of a node whose disk is low: it
// refuses writes but (while freeing is nil) accepts those that free space.
type freeingBackend struct {
	guardedBackend
	freeing  atomic.Pointer[Error]
	freeings atomic.Int32 // FreeingWriteAllowed calls
}

func (g *freeingBackend) FreeingWriteAllowed() error {
	g.freeings.Add(1)
	if e := g.freeing.Load(); e != nil {
		return e
	}
	return nil
}

// Inside the reserve a cancel is still served (FreeingWriteAllowed), every
// other write is refused (WriteAllowed); below the floor the cancel is
// refused too.
func TestServer_FreeingWritesPassTheLowSpaceGuard(t *testing.T) {
	g := &freeingBackend{guardedBackend: guardedBackend{fakeBackend: newFakeBackend()}}
	ts := serveBackend(t, g, g.fakeBackend, ServerOptions{})
	if r := ts.do("POST", "/v1/tasks", `{"id":"a","handler":"h","delay":"1h"}`); r.status != 201 {
		t.Fatalf("submit: %d %s", r.status, r.body)
	}
	g.refuse.Store(Errorf(ErrStorageUnavailable, "data dir /d: 40 MiB free, below the reserve of 64 MiB"))
	ts.do("POST", "/v1/tasks", `{"id":"b","handler":"h"}`).wantError(t, 503, "storage_unavailable", "below the reserve")
	ts.do("POST", "/v1/tasks/a/retry", "").wantError(t, 503, "storage_unavailable", "below the reserve")
	if g.freeings.Load() != 0 {
		t.Fatalf("FreeingWriteAllowed asked for a submit or a retry")
	}
	if r := ts.do("DELETE", "/v1/tasks/a", ""); r.status != 200 || r.task(t).State != axapi.StateCancelled {
		t.Fatalf("cancel inside the reserve: %d %s", r.status, r.body)
	}
	if g.freeings.Load() != 1 {
		t.Fatalf("FreeingWriteAllowed calls: %d", g.freeings.Load())
	}
	g.freeing.Store(Errorf(ErrStorageUnavailable, "data dir /d: 20 MiB free, below the floor of 32 MiB"))
	ts.do("DELETE", "/v1/tasks/a", "").wantError(t, 503, "storage_unavailable", "below the floor")
	if !freeingRoutes[[2]string{"POST", "/v1/tasks/purge"}] {
		t.Fatal("POST /v1/tasks/purge is not a freeing route")
	}
}
