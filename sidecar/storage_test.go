package sidecar

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/rs/zerolog"
)

func TestStorageGuardStates(t *testing.T) {
	g := newStorageGuard("/data", 64<<20, time.Hour, testFSM(t), zerolog.New(zerolog.NewTestWriter(t)))
	var free atomic.Uint64
	free.Store(1 << 30)
	var inodes atomic.Int64
	inodes.Store(-1)
	var probeErr atomic.Pointer[error]
	g.freeSpace = func(string) (diskFree, error) { return diskFree{bytes: free.Load(), inodes: inodes.Load()}, nil }
	g.probeWrite = func(string) error {
		if e := probeErr.Load(); e != nil {
			return *e
		}
		return nil
	}
	now := time.Unix(1_700_000_000, 0)
	g.now = func() time.Time { return now }
	downs := make(chan struct{}, 10)
	g.setOnDown(func() { downs <- struct{}{} })

	g.probe()
	if g.err() != nil || g.gate() != nil {
		t.Fatalf("healthy dir: %v / %v", g.err(), g.gate())
	}

	// Below the reserve: the gate refuses badger commits and writes stop.
	free.Store(10 << 20)
	ch := g.changedCh()
	g.probe()
	<-ch
	<-downs
	e := g.err()
	if e == nil || !strings.Contains(e.Cause, "below the reserve of 64.0 MiB") || !e.Since.Equal(now) {
		t.Fatalf("state %+v", e)
	}
	if err := g.gate(); err == nil || !strings.Contains(err.Error(), "10.0 MiB free") {
		t.Fatalf("gate: %v", err)
	}
	st := g.status()
	if st == nil || st.Cause != e.Cause {
		t.Fatalf("status %+v", st)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var se *StorageUnavailableError
	if err := g.waitWritable(ctx, nil); !errors.As(err, &se) {
		t.Fatalf("waitWritable with an ended ctx: %v", err)
	}

	// A writer waiting for storage is released when it recovers.
	released := make(chan error)
	go func() { released <- g.waitWritable(context.Background(), nil) }()
	free.Store(1 << 30)
	g.probe()
	if err := <-released; err != nil {
		t.Fatalf("waitWritable after recovery: %v", err)
	}
	if g.err() != nil || g.status() != nil {
		t.Fatalf("still unavailable: %v", g.err())
	}

	// Out of inodes, free bytes or not: refused; uncounted (-1): not.
	inodes.Store(10)
	g.probe()
	if e := g.err(); e == nil || !strings.Contains(e.Cause, "10 free inodes") {
		t.Fatalf("state with 10 free inodes %+v", e)
	}
	inodes.Store(100000)
	g.probe()
	if g.err() != nil {
		t.Fatalf("still unavailable with free inodes: %v", g.err())
	}
	inodes.Store(-1)

	// A probe file that cannot be written (read-only dir, ENOSPC).
	perm := error(&os.PathError{Op: "open", Path: "/data/" + probeFileName, Err: syscall.EACCES})
	probeErr.Store(&perm)
	g.probe()
	if e := g.err(); e == nil || !strings.Contains(e.Cause, "not writable") {
		t.Fatalf("state %+v", e)
	}
	probeErr.Store(nil)
	g.probe()
	if g.err() != nil {
		t.Fatal(g.err())
	}

	// A failed Raft log write counts until a later one succeeds, or until
	// a probe that started after it passes.
	g.logWrite("log", errors.New("write raft.db: no space left on device"))
	if e := g.err(); e == nil || !strings.Contains(e.Cause, "raft log write failed") {
		t.Fatalf("state %+v", e)
	}
	g.logWrite("log", nil)
	if g.err() != nil {
		t.Fatal(g.err())
	}
	g.logWrite("log", errors.New("no space left on device"))
	g.probe() // started at the failure's instant: not after it
	if g.err() == nil {
		t.Fatal("a probe as old as the log failure cleared it")
	}
	now = now.Add(time.Second)
	g.probe()
	if g.err() != nil {
		t.Fatalf("log failure not cleared by a later passing probe: %v", g.err())
	}
}

// failingStable fails its first n writes.
type failingStable struct {
	raft.StableStore
	n      int
	writes int
}

func (s *failingStable) SetUint64(k []byte, v uint64) error {
	s.writes++
	if s.writes <= s.n {
		return syscall.ENOSPC
	}
	return s.StableStore.SetUint64(k, v)
}

// raft panics when it cannot save a new term; the guarded stable store
// retries instead, and the node reports storage unavailable meanwhile.
func TestGuardedStableStoreRetries(t *testing.T) {
	g := newStorageGuard(t.TempDir(), 0, time.Hour, testFSM(t), zerolog.New(zerolog.NewTestWriter(t)))
	inner := &failingStable{StableStore: raft.NewInmemStore(), n: 3}
	s := guardedStableStore{StableStore: inner, g: g}
	if err := s.SetUint64([]byte("CurrentTerm"), 7); err != nil {
		t.Fatal(err)
	}
	if inner.writes != 4 {
		t.Fatalf("%d writes, want 4", inner.writes)
	}
	if v, _ := inner.StableStore.GetUint64([]byte("CurrentTerm")); v != 7 {
		t.Fatalf("term %d", v)
	}
	if g.err() != nil {
		t.Fatalf("unavailable after the write succeeded: %v", g.err())
	}
}

// startStorageNode starts a real one-node sidecar in-process and returns it
// and an HTTP client on its socket, once it serves writes.
func startStorageNode(t *testing.T) (*Node, *http.Client) {
	t.Helper()
	dir, err := os.MkdirTemp("", "axstorage")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	var addrs []string
	for range 2 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addrs = append(addrs, ln.Addr().String())
		ln.Close()
	}
	cfg := Config{NodeID: "s1", DataDir: filepath.Join(dir, "data"), Socket: filepath.Join(dir, "ax.sock"), RaftAddr: addrs[0], PeerAddr: addrs[1]}
	n, err := Start(cfg, zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		n.Shutdown(ctx)
	})
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", cfg.Socket)
	}}}
	deadline := time.Now().Add(30 * time.Second)
	for n.Ready(context.Background()) != nil {
		if time.Now().After(deadline) {
			t.Fatal("node not ready after 30s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return n, c
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

	ch := n.storage.changedCh()
	n.storage.reserve.Store(1 << 62) // more than any disk has free
	n.storage.probe()
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

	ch = n.storage.changedCh()
	n.storage.reserve.Store(StorageReserveDefault)
	n.storage.probe()
	// The FSM may be backing off on a write the gate refused; it retries
	// within storageRetryMax and then the state clears.
	for n.storage.err() != nil {
		<-ch
		ch = n.storage.changedCh()
		n.storage.probe()
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

// TestStorageGuardRunWritesProbeFileRarelyWhileHealthy: a healthy node
// checks free space every interval but writes the probe file only every
// storageWriteProbeEvery; once storage is unavailable, every interval
// writes it, so that recovery is noticed within an interval.
func TestStorageGuardRunWritesProbeFileRarelyWhileHealthy(t *testing.T) {
	g := newStorageGuard("/data", 64<<20, time.Millisecond, testFSM(t), zerolog.New(zerolog.NewTestWriter(t)))
	var now atomic.Int64
	now.Store(time.Unix(1_700_000_000, 0).UnixNano())
	g.now = func() time.Time { return time.Unix(0, now.Load()) }
	var statfs, writes atomic.Int64
	var probeErr atomic.Pointer[error]
	g.freeSpace = func(string) (diskFree, error) { statfs.Add(1); return diskFree{bytes: 1 << 30, inodes: -1}, nil }
	g.probeWrite = func(string) error {
		writes.Add(1)
		if e := probeErr.Load(); e != nil {
			return *e
		}
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); g.run(ctx) }()
	defer func() { cancel(); <-done }()
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s (statfs %d, writes %d)", what, statfs.Load(), writes.Load())
			}
			time.Sleep(time.Millisecond)
		}
	}

	// The clock stands still: one write at start, then free-space checks.
	waitFor("50 free-space checks", func() bool { return statfs.Load() >= 50 })
	if w := writes.Load(); w != 1 {
		t.Fatalf("%d probe files written while healthy within storageWriteProbeEvery, want 1", w)
	}
	// storageWriteProbeEvery later: the next interval writes one.
	now.Add(int64(storageWriteProbeEvery))
	waitFor("the second probe file", func() bool { return writes.Load() == 2 })
	s := statfs.Load()
	waitFor("50 more free-space checks", func() bool { return statfs.Load() >= s+50 })
	if w := writes.Load(); w != 2 {
		t.Fatalf("%d probe files written, want 2", w)
	}

	// A failing write makes the node unavailable at the next full probe;
	// from then on every interval writes the file.
	perm := error(&os.PathError{Op: "open", Path: "/data/" + probeFileName, Err: syscall.EROFS})
	probeErr.Store(&perm)
	now.Add(int64(storageWriteProbeEvery))
	waitFor("storage unavailable", func() bool { return g.err() != nil })
	w := writes.Load()
	waitFor("20 probe files while unavailable", func() bool { return writes.Load() >= w+20 })
	probeErr.Store(nil)
	waitFor("recovery", func() bool { return g.err() == nil })
}

// waitWritable ends with stop's error while storage stays unavailable (the
// proposer's: this node lost leadership, so a forwarded write goes to the
// new leader at once instead of waiting for this disk).
func TestStorageGuardWaitWritableStops(t *testing.T) {
	g := newStorageGuard("/data", 64<<20, time.Hour, testFSM(t), zerolog.New(zerolog.NewTestWriter(t)))
	g.freeSpace = func(string) (diskFree, error) { return diskFree{bytes: 1 << 20, inodes: -1}, nil } // below the reserve
	g.probeWrite = func(string) error { return nil }
	g.probe()
	if g.err() == nil {
		t.Fatal("storage should be unavailable")
	}
	var calls atomic.Int64
	stopped := errors.New("stopped")
	err := g.waitWritable(context.Background(), func() error {
		if calls.Add(1) < 3 {
			return nil
		}
		return stopped
	})
	if err != stopped || calls.Load() != 3 {
		t.Fatalf("waitWritable = %v after %d stop calls, want stopped after 3", err, calls.Load())
	}
	// Writable: nil at once, stop not called.
	g.freeSpace = func(string) (diskFree, error) { return diskFree{bytes: 1 << 30, inodes: -1}, nil }
	g.probe()
	if err := g.waitWritable(context.Background(), func() error { return stopped }); err != nil {
		t.Fatalf("waitWritable on writable storage = %v", err)
	}
}
