package raftstore

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/axsched/ax/internal/fsmtest"

	"github.com/hashicorp/raft"
	"github.com/rs/zerolog"
)

func TestStorageGuardStates(t *testing.T) {
	g := newStorageGuard("/data", 64<<20, time.Hour, fsmtest.Open(t), zerolog.New(zerolog.NewTestWriter(t)))
	var free atomic.Uint64
	free.Store(1 << 30)
	var inodes atomic.Int64
	inodes.Store(-1)
	var probeErr atomic.Pointer[error]
	g.freeSpace = func(string) (DiskFree, error) { return DiskFree{Bytes: free.Load(), Inodes: inodes.Load()}, nil }
	g.probeWrite = func(string) error {
		if e := probeErr.Load(); e != nil {
			return *e
		}
		return nil
	}
	now := time.Unix(1_700_000_000, 0)
	g.now = func() time.Time { return now }
	downs := make(chan struct{}, 10)
	g.SetOnDown(func() { downs <- struct{}{} })

	g.Probe()
	if g.Err() != nil || g.gate() != nil {
		t.Fatalf("healthy dir: %v / %v", g.Err(), g.gate())
	}

	// Below the reserve: the gate refuses badger commits and writes stop.
	free.Store(10 << 20)
	ch := g.Changed()
	g.Probe()
	<-ch
	<-downs
	e := g.Err()
	if e == nil || !strings.Contains(e.Cause, "below the reserve of 64.0 MiB") || !e.Since.Equal(now) {
		t.Fatalf("state %+v", e)
	}
	if err := g.gate(); err == nil || !strings.Contains(err.Error(), "10.0 MiB free") {
		t.Fatalf("gate: %v", err)
	}
	st := g.Status()
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
	g.Probe()
	if err := <-released; err != nil {
		t.Fatalf("waitWritable after recovery: %v", err)
	}
	if g.Err() != nil || g.Status() != nil {
		t.Fatalf("still unavailable: %v", g.Err())
	}

	// Out of inodes, free bytes or not: refused; uncounted (-1): not.
	inodes.Store(10)
	g.Probe()
	if e := g.Err(); e == nil || !strings.Contains(e.Cause, "10 free inodes") {
		t.Fatalf("state with 10 free inodes %+v", e)
	}
	inodes.Store(100000)
	g.Probe()
	if g.Err() != nil {
		t.Fatalf("still unavailable with free inodes: %v", g.Err())
	}
	inodes.Store(-1)

	// A probe file that cannot be written (read-only dir, ENOSPC).
	perm := error(&os.PathError{Op: "open", Path: "/data/" + probeFileName, Err: syscall.EACCES})
	probeErr.Store(&perm)
	g.Probe()
	if e := g.Err(); e == nil || !strings.Contains(e.Cause, "not writable") {
		t.Fatalf("state %+v", e)
	}
	probeErr.Store(nil)
	g.Probe()
	if g.Err() != nil {
		t.Fatal(g.Err())
	}

	// A failed Raft log write counts until a later one succeeds, or until
	// a probe that started after it passes.
	g.logWrite("log", errors.New("write raft.db: no space left on device"))
	if e := g.Err(); e == nil || !strings.Contains(e.Cause, "raft log write failed") {
		t.Fatalf("state %+v", e)
	}
	g.logWrite("log", nil)
	if g.Err() != nil {
		t.Fatal(g.Err())
	}
	g.logWrite("log", errors.New("no space left on device"))
	g.Probe() // started at the failure's instant: not after it
	if g.Err() == nil {
		t.Fatal("a probe as old as the log failure cleared it")
	}
	now = now.Add(time.Second)
	g.Probe()
	if g.Err() != nil {
		t.Fatalf("log failure not cleared by a later passing probe: %v", g.Err())
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
	g := newStorageGuard(t.TempDir(), 0, time.Hour, fsmtest.Open(t), zerolog.New(zerolog.NewTestWriter(t)))
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
	if g.Err() != nil {
		t.Fatalf("unavailable after the write succeeded: %v", g.Err())
	}
}

// TestStorageGuardRunWritesProbeFileRarelyWhileHealthy: a healthy node
// checks free space every interval but writes the probe file only every
// storageWriteProbeEvery; once storage is unavailable, every interval
// writes it, so that recovery is noticed within an interval.
func TestStorageGuardRunWritesProbeFileRarelyWhileHealthy(t *testing.T) {
	g := newStorageGuard("/data", 64<<20, time.Millisecond, fsmtest.Open(t), zerolog.New(zerolog.NewTestWriter(t)))
	var now atomic.Int64
	now.Store(time.Unix(1_700_000_000, 0).UnixNano())
	g.now = func() time.Time { return time.Unix(0, now.Load()) }
	var statfs, writes atomic.Int64
	var probeErr atomic.Pointer[error]
	g.freeSpace = func(string) (DiskFree, error) { statfs.Add(1); return DiskFree{Bytes: 1 << 30, Inodes: -1}, nil }
	g.probeWrite = func(string) error {
		writes.Add(1)
		if e := probeErr.Load(); e != nil {
			return *e
		}
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); g.Run(ctx) }()
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
	waitFor("storage unavailable", func() bool { return g.Err() != nil })
	w := writes.Load()
	waitFor("20 probe files while unavailable", func() bool { return writes.Load() >= w+20 })
	probeErr.Store(nil)
	waitFor("recovery", func() bool { return g.Err() == nil })
}

// waitWritable ends with stop's error while storage stays unavailable (the
// proposer's: this node lost leadership, so a forwarded write goes to the
// new leader at once instead of waiting for this disk).
func TestStorageGuardWaitWritableStops(t *testing.T) {
	g := newStorageGuard("/data", 64<<20, time.Hour, fsmtest.Open(t), zerolog.New(zerolog.NewTestWriter(t)))
	g.freeSpace = func(string) (DiskFree, error) { return DiskFree{Bytes: 1 << 20, Inodes: -1}, nil } // below the reserve
	g.probeWrite = func(string) error { return nil }
	g.Probe()
	if g.Err() == nil {
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
	g.freeSpace = func(string) (DiskFree, error) { return DiskFree{Bytes: 1 << 30, Inodes: -1}, nil }
	g.Probe()
	if err := g.waitWritable(context.Background(), func() error { return stopped }); err != nil {
		t.Fatalf("waitWritable on writable storage = %v", err)
	}
}

// The free-space answer is reused for statfsMaxAge, and asked again after
// it or after a failed call (cacheFor keeps no error).
func TestStatfsCacheReusesAnswerForMaxAge(t *testing.T) {
	var calls int
	var fail bool
	now := time.Unix(1_700_000_000, 0)
	c := cacheFor(statfsMaxAge, func() time.Time { return now }, func() (DiskFree, error) {
		calls++
		if fail {
			return DiskFree{}, errors.New("statfs failed")
		}
		return DiskFree{Bytes: uint64(calls), Inodes: -1}, nil
	})
	get := func() DiskFree {
		t.Helper()
		v, err := c()
		if err != nil {
			t.Fatalf("get: %v", err)
		}
		return v
	}
	if v := get(); v.Bytes != 1 {
		t.Fatalf("first answer %d", v.Bytes)
	}
	now = now.Add(999 * time.Microsecond)
	if v := get(); v.Bytes != 1 || calls != 1 {
		t.Fatalf("within maxAge: answer %d after %d calls, want the kept 1 after 1", v.Bytes, calls)
	}
	now = now.Add(time.Millisecond)
	if v := get(); v.Bytes != 2 {
		t.Fatalf("after maxAge: answer %d, want a new one", v.Bytes)
	}
	now = now.Add(time.Millisecond)
	fail = true
	if _, err := c(); err == nil {
		t.Fatal("failed statfs not reported")
	}
	fail = false
	if v := get(); v.Bytes != 4 || calls != 4 {
		t.Fatalf("after a failure: answer %d after %d calls, want a new one", v.Bytes, calls)
	}
	// The guard asks another dir live.
	live := liveFreeSpace(t.TempDir(), new(atomic.Pointer[syncPolicy]))
	if _, err := live("/nonexistent-ax-dir"); err == nil {
		t.Fatal("another dir answered from the cache")
	}
}
