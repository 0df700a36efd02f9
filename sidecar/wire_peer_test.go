package sidecar

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/axsched/ax/ipc"
	"github.com/axsched/ax/sidecar/cluster"
	"github.com/axsched/ax/sidecar/peerapi"
)

// The peer API a one-node cluster serves, through the node's adapters
// (wire_cluster.go): a task read (local and strong), the member list, and
// a removal that names no member; and the backend's member removal
// (wire_api.go) with the same refusal.
func TestPeerNodeServesTasksMembersAndRemovals(t *testing.T) {
	dir := t.TempDir()
	a := freeAddrs(t, 2)
	n := startTestNode(t, Config{NodeID: "p1", DataDir: filepath.Join(dir, "data"), Socket: filepath.Join(dir, "ax.sock"),
		RaftAddr: a[0], PeerAddr: a[1]})
	waitUntil(t, "p1 ready", func() bool { return n.Ready(context.Background()) == nil })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, _, err := n.Submit(ctx, ipc.TaskSpec{ID: "t1", Handler: "h", Delay: time.Hour}); err != nil {
		t.Fatal(err)
	}

	c := peerapi.NewClient("", time.Now)
	for _, strong := range []bool{false, true} {
		read := c.Task
		if strong {
			read = c.StrongTask
		}
		tk, err := read(ctx, a[1], "t1")
		if err != nil || tk == nil || tk.ID != "t1" || tk.Spec.Handler != "h" {
			t.Fatalf("peer task read (strong %v): %+v %v", strong, tk, err)
		}
	}
	members, err := c.Members(ctx, a[1])
	if err != nil || len(members) != 1 {
		t.Fatalf("peer members: %+v %v, want p1 alone", members, err)
	}
	if _, ok := members["p1"]; !ok {
		t.Fatalf("peer members %+v lack p1", members)
	}
	if err := c.Remove(ctx, a[1], "nobody"); !errors.Is(err, cluster.ErrNoSuchMember) {
		t.Fatalf("peer removal of a non-member: %v, want no such member", err)
	}
	err = n.Backend().RemoveMember(ctx, "nobody")
	if status, code, _, _ := ipc.MapError(err); status != 404 {
		t.Fatalf("backend removal of a non-member: %v (%d %s), want 404", err, status, code)
	}
	if err := n.Backend().RemoveMember(ctx, "p1"); err == nil {
		t.Fatal("the last voter was removed")
	}
}
