package sidecar

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/axsched/ax/sidecar/config"
	"github.com/axsched/ax/sidecar/raftstore"
)

// startStorageNode starts a real one-node sidecar in-process and returns it
// and an HTTP client on its socket, once it serves writes.
func startStorageNode(t *testing.T) (*Node, *http.Client) {
	t.Helper()
	dir, err := os.MkdirTemp("", "axstorage")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	addrs := freeAddrs(t, 2)
	cfg := Config{NodeID: "s1", DataDir: filepath.Join(dir, "data"), Socket: filepath.Join(dir, "ax.sock"), RaftAddr: addrs[0], PeerAddr: addrs[1]}
	n := startReadyNode(t, cfg, zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		n.Shutdown(ctx)
	})
	return n, socketClient(cfg.Socket)
}

// startReadyNode starts a real sidecar in-process with cfg and returns it
// once it serves writes (at most 30 s).
func startReadyNode(t *testing.T, cfg Config, log zerolog.Logger) *Node {
	t.Helper()
	n, err := Start(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for n.Ready(context.Background()) != nil {
		if time.Now().After(deadline) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			n.Shutdown(ctx)
			cancel()
			t.Fatal("node not ready after 30s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return n
}

// socketClient is an HTTP client of the API on Unix socket path.
func socketClient(path string) *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	}}}
}

type httpReply struct {
	status     int
	retryAfter string
	body       string
}

func call(t *testing.T, c *http.Client, method, path, body string) httpReply {
	t.Helper()
	req, err := http.NewRequest(method, "http://ax"+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return httpReply{resp.StatusCode, resp.Header.Get("Retry-After"), string(b)}
}

// A node whose data dir falls below its free-space reserve answers writes
// 503 storage_unavailable naming the cause, keeps serving reads, shows the
// state in GET /v1/cluster and the metric, and serves writes again once
// the disk has room.
func TestNodeRefusesWritesWhileStorageUnavailable(t *testing.T) {
	n, c := startStorageNode(t)
	if r := call(t, c, "POST", "/v1/tasks", `{"id":"a","handler":"h","delay":"1h"}`); r.status != 201 {
		t.Fatalf("submit: %d %s", r.status, r.body)
	}

	ch := n.storage.Changed()
	n.storage.SetReserve(1 << 62) // more than any disk has free
	n.storage.Probe()
	<-ch

	r := call(t, c, "POST", "/v1/tasks", `{"id":"b","handler":"h","delay":"1h"}`)
	var body struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	if err := json.Unmarshal([]byte(r.body), &body); err != nil {
		t.Fatalf("%d %s: %v", r.status, r.body, err)
	}
	if r.status != 503 || body.Error.Code != "storage_unavailable" || r.retryAfter != "5" ||
		!strings.Contains(body.Error.Message, "below the reserve") {
		t.Fatalf("submit while unavailable: %d Retry-After %q %s", r.status, r.retryAfter, r.body)
	}
	if r := call(t, c, "DELETE", "/v1/tasks/a", ""); r.status != 503 || !strings.Contains(r.body, "storage_unavailable") {
		t.Fatalf("cancel while unavailable: %d %s", r.status, r.body)
	}
	if r := call(t, c, "GET", "/v1/tasks/a", ""); r.status != 200 || !strings.Contains(r.body, `"WAITING"`) {
		t.Fatalf("read while unavailable: %d %s", r.status, r.body)
	}
	if r := call(t, c, "GET", "/v1/tasks/b", ""); r.status != 404 {
		t.Fatalf("refused task b: %d %s", r.status, r.body)
	}
	r = call(t, c, "GET", "/v1/cluster", "")
	if r.status != 200 || !strings.Contains(r.body, `"storage":{"cause":"data dir`) {
		t.Fatalf("cluster while unavailable: %d %s", r.status, r.body)
	}
	if r := call(t, c, "GET", "/metrics", ""); !strings.Contains(r.body, "\nax_storage_unavailable 1\n") {
		t.Fatalf("metric: %s", r.body)
	}

	ch = n.storage.Changed()
	n.storage.SetReserve(config.StorageReserveDefault)
	n.storage.Probe()
	// The FSM may be backing off on a write the gate refused; it retries
	// within storageRetryMax and then the state clears.
	for n.storage.Err() != nil {
		<-ch
		ch = n.storage.Changed()
		n.storage.Probe()
	}
	if r := call(t, c, "POST", "/v1/tasks", `{"id":"b","handler":"h","delay":"1h"}`); r.status != 201 {
		t.Fatalf("submit after recovery: %d %s", r.status, r.body)
	}
	if r := call(t, c, "GET", "/v1/cluster", ""); strings.Contains(r.body, `"storage"`) {
		t.Fatalf("cluster after recovery: %s", r.body)
	}
	if r := call(t, c, "GET", "/metrics", ""); !strings.Contains(r.body, "\nax_storage_unavailable 0\n") {
		t.Fatal("metric not cleared")
	}
}

// Through a real node (API, proposer, Raft, FSM): with free space inside
// the reserve, submits get 503 while cancels and purges are applied; in
// the freeing-only band too; below the floor even a cancel is refused.
// The reserve is set around the disk's real free space.
func TestNodeFreeingWritesInsideTheReserve(t *testing.T) {
	n, c := startStorageNode(t)
	for _, id := range []string{"a", "b", "c"} {
		if r := call(t, c, "POST", "/v1/tasks", `{"id":"`+id+`","handler":"h","delay":"1h"}`); r.status != 201 {
			t.Fatalf("submit %s: %d %s", id, r.status, r.body)
		}
	}
	free, err := raftstore.FreeSpace(n.cfg.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	// setLevel sets the reserve so that free space is at frac of it.
	setLevel := func(frac float64, want raftstore.SpaceLevel) {
		t.Helper()
		n.storage.SetReserve(uint64(float64(free.Bytes) / frac))
		n.storage.Probe()
		f, _ := raftstore.FreeSpace(n.cfg.DataDir)
		if lvl := raftstore.LevelOf(f.Bytes, n.storage.Reserve()); lvl != want {
			t.Fatalf("level %v, want %v (free space moved)", lvl, want)
		}
	}
	refused := func(what, method, path, body string) {
		t.Helper()
		if r := call(t, c, method, path, body); r.status != 503 || !strings.Contains(r.body, "storage_unavailable") {
			t.Fatalf("%s: %d %s, want 503 storage_unavailable", what, r.status, r.body)
		}
	}
	accepted := func(what, method, path, body, want string) {
		t.Helper()
		if r := call(t, c, method, path, body); r.status != 200 || !strings.Contains(r.body, want) {
			t.Fatalf("%s: %d %s, want 200 with %s", what, r.status, r.body, want)
		}
	}

	setLevel(0.875, raftstore.SpaceLow)
	refused("submit inside the reserve", "POST", "/v1/tasks", `{"id":"d","handler":"h"}`)
	accepted("cancel inside the reserve", "DELETE", "/v1/tasks/a", "", `"CANCELLED"`)
	accepted("purge inside the reserve", "POST", "/v1/tasks/purge", `{"state":"CANCELLED","limit":10}`, `"purged":1`)

	setLevel(0.625, raftstore.SpaceFreeing)
	refused("submit in the freeing-only band", "POST", "/v1/tasks", `{"id":"d","handler":"h"}`)
	accepted("cancel in the freeing-only band", "DELETE", "/v1/tasks/b", "", `"CANCELLED"`)
	accepted("purge of one task in the freeing-only band", "DELETE", "/v1/tasks/b?purge=true", "", "")

	setLevel(0.3, raftstore.SpaceFloor)
	refused("cancel below the floor", "DELETE", "/v1/tasks/c", "")

	n.storage.SetReserve(config.StorageReserveDefault)
	for n.storage.Err() != nil {
		ch := n.storage.Changed()
		n.storage.Probe()
		select {
		case <-ch:
		case <-time.After(100 * time.Millisecond):
		}
	}
	if r := call(t, c, "GET", "/v1/tasks/b", ""); r.status != 404 {
		t.Fatalf("purged b: %d %s", r.status, r.body)
	}
	if r := call(t, c, "GET", "/v1/tasks/c", ""); r.status != 200 || !strings.Contains(r.body, `"WAITING"`) {
		t.Fatalf("c after the refused cancel: %d %s", r.status, r.body)
	}
}

// A write is checked against live free space, not only the periodic
// probe's last view (every 2 s): a fast writer could otherwise fill the
// disk past the reserve between two probes, until the FSM applies only
// freeing entries and the first other entry blocks every later one,
// cancels and purges included (seen with 200 × 4 KB batches on a 128 MiB
// tmpfs: writes accepted down to 10.6 MiB free with a 16 MiB reserve,
// then even cancels got 503 for good).
func TestNodeWriteChecksLiveFreeSpace(t *testing.T) {
	n, c := startStorageNode(t)
	if r := call(t, c, "POST", "/v1/tasks", `{"id":"a","handler":"h","delay":"1h"}`); r.status != 201 {
		t.Fatalf("submit a: %d %s", r.status, r.body)
	}
	free, err := raftstore.FreeSpace(n.cfg.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	// Free space falls inside the reserve; no probe has run since.
	n.storage.SetReserve(uint64(float64(free.Bytes) / 0.875))
	if r := call(t, c, "POST", "/v1/tasks", `{"id":"b","handler":"h","delay":"1h"}`); r.status != 503 || !strings.Contains(r.body, "storage_unavailable") {
		t.Fatalf("submit inside the reserve before a probe: %d %s, want 503 storage_unavailable", r.status, r.body)
	}
	if r := call(t, c, "DELETE", "/v1/tasks/a", ""); r.status != 200 || !strings.Contains(r.body, `"CANCELLED"`) {
		t.Fatalf("cancel inside the reserve: %d %s", r.status, r.body)
	}
}
