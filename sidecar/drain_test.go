package sidecar

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/axsched/ax/ipc"
	"github.com/axsched/ax/raftfsm"
	"github.com/axsched/ax/sidecar/peerapi"
	"github.com/axsched/ax/sidecar/scheduler"
)

// drainNode starts a one-node cluster whose executor for "h" blocks every
// callback until release is called; started receives each callback's task
// id.
func drainNode(t *testing.T, drainTimeout time.Duration) (n *Node, dataDir string, started chan string, release func()) {
	t.Helper()
	started = make(chan string, 16)
	rel := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(rel) }) }
	exec := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started <- r.Header.Get("Ax-Task-Id")
		<-rel
		w.WriteHeader(200)
	}))
	t.Cleanup(func() { release(); exec.Close() })
	dir := t.TempDir()
	a := freeAddrs(t, 2)
	dataDir = filepath.Join(dir, "data")
	cfg := Config{NodeID: "d1", DataDir: dataDir, Socket: filepath.Join(dir, "ax.sock"), RaftAddr: a[0], PeerAddr: a[1],
		BootstrapExpect: 1, Executors: []Executor{{Handler: "h", URL: exec.URL}},
		FireLead: 5 * time.Second, DrainTimeout: drainTimeout}
	n = startTestNode(t, cfg)
	waitUntil(t, "ready", func() bool { return n.Ready(context.Background()) == nil && n.registered.Load() })
	return n, dataDir, started, release
}

// The drain order: on Shutdown, an attempt assigned here but waiting for
// its due time is handed back at once (WAITING again, its attempt number
// given back, its due time kept), while the callback in flight goes on;
// once it answers, its outcome is reported before the node stops (it was
// dropped before: shutdown cancelled the node's context first).
func TestShutdownDrainsInOrder(t *testing.T) {
	n, dataDir, started, release := drainNode(t, time.Minute)
	ctx := context.Background()
	if _, _, err := n.Submit(ctx, ipc.TaskSpec{ID: "now", Handler: "h", Timeout: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if id := <-started; id != "now" {
		t.Fatalf("callback for %q, want now", id)
	}
	// Due in 4 s: fired at once (FireLead 5 s), it waits here for its due time.
	if _, _, err := n.Submit(ctx, ipc.TaskSpec{ID: "later", Handler: "h", Delay: 4 * time.Second, Timeout: time.Minute}); err != nil {
		t.Fatal(err)
	}
	var due int64
	waitUntil(t, "later fired here", func() bool {
		tk, err := n.fsm.Task("later")
		if err != nil {
			return false
		}
		due = tk.DueMs
		return tk.State == raftfsm.StateRunning && tk.Node == "d1"
	})
	done := make(chan error, 1)
	go func() { done <- n.Shutdown(ctx) }()
	waitUntil(t, "later handed back", func() bool {
		tk, err := n.fsm.Task("later")
		return err == nil && tk.State == raftfsm.StateWaiting
	})
	tk, _ := n.fsm.Task("later")
	if tk.Attempts != 0 || tk.DueMs != due {
		t.Errorf("handed back: attempts %d due %d, want 0 and %d", tk.Attempts, tk.DueMs, due)
	}
	if now, _ := n.fsm.Task("now"); now.State != raftfsm.StateRunning {
		t.Errorf("the callback in flight: state %s, want RUNNING until it answers", now.State)
	}
	select {
	case err := <-done:
		t.Fatalf("shutdown returned (%v) with a callback in flight", err)
	default:
	}
	release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	db, err := raftfsm.OpenDB(filepath.Join(dataDir, "state"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	fsm, err := raftfsm.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	if tk, err := fsm.Task("now"); err != nil || tk.State != raftfsm.StateSuccess {
		t.Errorf("the answered attempt after shutdown: %+v %v, want SUCCESS (reported)", tk, err)
	}
}

// A callback that never answers holds shutdown only for DrainTimeout.
func TestShutdownDrainIsBounded(t *testing.T) {
	n, _, started, _ := drainNode(t, 300*time.Millisecond)
	if _, _, err := n.Submit(context.Background(), ipc.TaskSpec{ID: "stuck", Handler: "h", Timeout: time.Hour}); err != nil {
		t.Fatal(err)
	}
	<-started
	done := make(chan error, 1)
	go func() { done <- n.Shutdown(context.Background()) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("shutdown not done 30 s after a 300 ms drain timeout")
	}
	if left := n.delivery.Active(); left != 0 {
		t.Errorf("%d attempt goroutines still running after shutdown", left)
	}
}

// The leader routes no attempt to a node whose load report says it is
// draining, nor to itself while it drains; a later report without the
// flag (the node restarted) makes it a candidate again.
func TestPickSkipsDrainingNodes(t *testing.T) {
	n, l := testLeader(scheduler.RoutingRoundRobin)
	nodes := nodesRunning("h", "a", "b", "c")
	now := time.Now()
	n.reportToLeader(peerapi.LoadReport{ID: "b", Draining: true})
	n.drain.self.Store(true) // a, the leader, drains too
	for range 6 {
		if got := l.Pick(nodes, "h", "", "", now); got != "c" {
			t.Fatalf("picked %q, want c (a and b drain)", got)
		}
	}
	n.reportToLeader(peerapi.LoadReport{ID: "c", Draining: true})
	if got := l.Pick(nodes, "h", "", "", now); got != "" {
		t.Fatalf("picked %q with every node draining, want none", got)
	}
	n.reportToLeader(peerapi.LoadReport{ID: "b"})
	if got := l.Pick(nodes, "h", "", "", now); got != "b" {
		t.Fatalf("picked %q, want b (no longer draining)", got)
	}
}
