//go:build unix

package bench

import (
	"strings"
	"testing"
	"time"

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
