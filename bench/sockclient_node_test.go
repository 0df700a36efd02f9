//go:build unix

package bench

import (
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/axsched/ax/internal/rawio"
	"github.com/axsched/ax/sidecar/sidecartest"
)

// TestSockSubmitterAgainstANode: the bench's blocking submitter against a
// real node's API socket (the in-process kit): a submit is answered 201
// with the task, which a read right after the answer sees; the same spec
// again is 200, another spec under the same id the API's conflict.
func TestSockSubmitterAgainstANode(t *testing.T) {
	c := sidecartest.New(t, sidecartest.Options{NoExecutor: true})
	s := newSockSubmitter(c.Socket(0), 10*time.Second)
	defer s.close()
	body := func(id, handler string) []byte {
		it := submitItem(id, handler)
		d := "24h"
		it.Delay = &d
		return raw(it)
	}
	for i, id := range []string{"sock-1", "sock-2", "sock-1"} {
		if err := s.submit(body(id, "h"), id, time.Time{}); err != nil {
			t.Fatalf("submit %d (%s): %v", i, id, err)
		}
		task, err := c.Task(0, id)
		if err != nil || task.ID != id {
			t.Fatalf("read of %s after its answer: %+v, %v", id, task, err)
		}
	}
	err := s.submit(body("sock-1", "other"), "sock-1", time.Time{})
	if err == nil || !strings.Contains(err.Error(), "409 conflict") {
		t.Fatalf("submit of sock-1 with another handler: %v, want 409 conflict", err)
	}
	if err := s.submit(body("sock-3", "h"), "sock-3", time.Time{}); err != nil {
		t.Fatalf("submit after a conflict, same connection: %v", err)
	}
}

// TestFastSubmitterOnOneP: with the bench on one P (ClientProcs 1) the
// fastSubmitter dials a rawio.Conn, whose submits are answered as over a
// plain connection; clientOnProcs's restore gives GOMAXPROCS back and
// clears the flag, once however often it is called.
func TestFastSubmitterOnOneP(t *testing.T) {
	c := sidecartest.New(t, sidecartest.Options{NoExecutor: true})
	before := runtime.GOMAXPROCS(0)
	restore := clientOnProcs(1)
	defer restore()
	if runtime.GOMAXPROCS(0) != 1 || !clientOneP.Load() {
		t.Fatalf("after clientOnProcs(1): GOMAXPROCS %d, one P %v", runtime.GOMAXPROCS(0), clientOneP.Load())
	}
	s := newFastSubmitter(c.Socket(0), 10*time.Second).(*fastSubmitter)
	defer s.close()
	conn, err := s.hc.Dial("ax")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := conn.(*rawio.Conn); !ok {
		t.Fatalf("the submitter dials %T, want *rawio.Conn", conn)
	}
	conn.Close()
	for _, id := range []string{"fast-1", "fast-2", "fast-1"} {
		it := submitItem(id, "h")
		d := "24h"
		it.Delay = &d
		if err := s.submit(raw(it), id, time.Now().Add(10*time.Second)); err != nil {
			t.Fatalf("submit %s: %v", id, err)
		}
		if task, err := c.Task(0, id); err != nil || task.ID != id {
			t.Fatalf("read of %s after its answer: %+v, %v", id, task, err)
		}
	}
	restore()
	restore()
	if runtime.GOMAXPROCS(0) != before || clientOneP.Load() {
		t.Fatalf("after restore: GOMAXPROCS %d (want %d), one P %v", runtime.GOMAXPROCS(0), before, clientOneP.Load())
	}
	if clientOnProcs(0)(); runtime.GOMAXPROCS(0) != before {
		t.Fatal("clientOnProcs(0) changed GOMAXPROCS")
	}
}
