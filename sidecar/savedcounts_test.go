package sidecar

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// A node stopped cleanly saves its task counts per handler, and the next
// start takes them instead of decoding every task; GET /v1/handlers shows
// the same counts before and after. (raftfsm's tests cover counts that no
// longer hold.)
func TestRestartTakesSavedHandlerCounts(t *testing.T) {
	dir, err := os.MkdirTemp("", "axcounts")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	addrs := freeAddrs(t, 2)
	cfg := Config{NodeID: "c1", DataDir: filepath.Join(dir, "data"), Socket: filepath.Join(dir, "ax.sock"), RaftAddr: addrs[0], PeerAddr: addrs[1]}
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	start := func() *Node { t.Helper(); return startReadyNode(t, cfg, log) }
	stop := func(n *Node) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := n.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
	}
	handlers := func(n *Node) string {
		t.Helper()
		list, err := n.backend.HandlersView(false)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(list)
		return string(b)
	}

	n := start()
	if n.fsm.HandlerCountsSaved() {
		t.Fatal("a new node took saved counts")
	}
	c := socketClient(cfg.Socket)
	for i := range 30 {
		h := []string{"mail", "bill", "ship"}[i%3]
		if r := call(t, c, "POST", "/v1/tasks", fmt.Sprintf(`{"id":"t%d","handler":%q,"delay":"1h"}`, i, h)); r.status != 201 {
			t.Fatalf("submit: %+v", r)
		}
	}
	for i := range 5 {
		if r := call(t, c, "DELETE", fmt.Sprintf("/v1/tasks/t%d", i), ""); r.status != 200 {
			t.Fatalf("cancel: %+v", r)
		}
	}
	want := handlers(n)
	stop(n)

	n = start()
	defer stop(n)
	if !n.fsm.HandlerCountsSaved() {
		t.Fatal("the restart after a clean stop counted the tasks again")
	}
	if got := handlers(n); got != want {
		t.Fatalf("handlers after the restart %s, want %s", got, want)
	}
}
