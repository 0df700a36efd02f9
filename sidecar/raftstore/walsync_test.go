package raftstore

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	walfs "github.com/hashicorp/raft-wal/fs"
	"github.com/hashicorp/raft-wal/types"
	"github.com/rs/zerolog"

	"github.com/axsched/ax/internal/rawio"
)

func TestParseLogSync(t *testing.T) {
	for in, want := range map[string]LogSync{"": LogSyncAuto, "auto": LogSyncAuto, "handoff": LogSyncHandoff} {
		if got, err := ParseLogSync(in); err != nil || got != want {
			t.Errorf("ParseLogSync(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"Auto", "raw", "fsync", " auto"} {
		if _, err := ParseLogSync(in); err == nil {
			t.Errorf("ParseLogSync(%q): no error", in)
		}
	}
}

// fakeSyncFile counts the Syncs that went through the runtime (os.File's
// path); fakeRawConn hands fd 42 to Control's function.
type fakeSyncFile struct {
	types.WritableFile
	syncs int
	err   error // what Sync returns
}

func (f *fakeSyncFile) Sync() error { f.syncs++; return f.err }

type fakeRawConn struct {
	syscall.RawConn
	closed bool
}

func (c fakeRawConn) Control(f func(fd uintptr)) error {
	if c.closed {
		return os.ErrClosed
	}
	f(42)
	return nil
}

// policyRig is a syncPolicy on a fake clock and fake P count, whose raw
// fsync takes rawTook of the fake clock and returns rawErr.
type policyRig struct {
	p       *syncPolicy
	now     time.Duration
	oneP    bool
	rawTook time.Duration
	rawErr  syscall.Errno
	raws    int
	file    fakeSyncFile
	log     bytes.Buffer
}

func newPolicyRig(mode LogSync) *policyRig {
	r := &policyRig{oneP: true}
	r.p = newSyncPolicy(mode, func() bool { return r.oneP }, zerolog.New(&r.log))
	r.p.now = func() time.Duration { return r.now }
	r.p.rawSync = func(fd uintptr) syscall.Errno {
		if fd != 42 {
			panic(fmt.Sprintf("raw fsync of fd %d", fd))
		}
		r.raws++
		r.now += r.rawTook
		return r.rawErr
	}
	return r
}

// sync runs one fsync through the policy and reports which way it went.
func (r *policyRig) sync(t *testing.T) string {
	t.Helper()
	raws, syncs := r.raws, r.file.syncs
	if err := r.p.sync(&r.file, fakeRawConn{}, "seg"); err != nil {
		t.Fatalf("sync: %v", err)
	}
	switch {
	case r.raws == raws+1 && r.file.syncs == syncs:
		return "raw"
	case r.raws == raws && r.file.syncs == syncs+1:
		return "handoff"
	}
	t.Fatalf("sync: %d raw and %d through the file", r.raws-raws, r.file.syncs-syncs)
	return ""
}

func TestSyncPolicy_RawOnOnePOnly(t *testing.T) {
	r := newPolicyRig(LogSyncAuto)
	r.rawTook = 300 * time.Microsecond
	if got := r.sync(t); got != "raw" {
		t.Fatalf("on one P: %s, want raw", got)
	}
	r.oneP = false
	if got := r.sync(t); got != "handoff" {
		t.Fatalf("on two Ps: %s, want handoff", got)
	}
	r.oneP = true
	if got := r.sync(t); got != "raw" {
		t.Fatalf("back on one P: %s, want raw", got)
	}
	if r.p.raw.Load() != 2 || r.p.handoff.Load() != 1 {
		t.Fatalf("counted %d raw, %d handed off; want 2, 1", r.p.raw.Load(), r.p.handoff.Load())
	}

	h := newPolicyRig(LogSyncHandoff)
	for i := range 3 {
		if got := h.sync(t); got != "handoff" {
			t.Fatalf("--raft-log-sync handoff, fsync %d: %s", i, got)
		}
	}

	// A file without a descriptor to sync raw goes through its Sync.
	var f fakeSyncFile
	if err := r.p.sync(&f, nil, "seg"); err != nil || f.syncs != 1 {
		t.Fatalf("no RawConn: err %v, %d Syncs of the file; want 1", err, f.syncs)
	}

	// Without OneP (the embedded node, the tests' clusters) no fsync
	// keeps the P.
	n := newPolicyRig(LogSyncAuto)
	n.p.oneP = nil
	if got := n.sync(t); got != "handoff" {
		t.Fatalf("no OneP: %s, want handoff", got)
	}
}

// A raw fsync that takes LogSyncSlow or more sends the fsyncs of the
// next LogSyncSlowHold through the runtime; then they are raw again.
func TestSyncPolicy_SlowRawFsyncHandsOffForAWhile(t *testing.T) {
	r := newPolicyRig(LogSyncAuto)
	r.rawTook = LogSyncSlow - time.Microsecond
	if got := r.sync(t); got != "raw" {
		t.Fatalf("first: %s", got)
	}
	if got := r.sync(t); got != "raw" {
		t.Fatalf("after a raw fsync just under LogSyncSlow: %s, want raw", got)
	}
	r.rawTook = LogSyncSlow
	if got := r.sync(t); got != "raw" {
		t.Fatalf("the slow one: %s", got)
	}
	slowEnd := r.now
	if r.p.slow.Load() != 1 || !strings.Contains(r.log.String(), `"took":10`) || !strings.Contains(r.log.String(), "took long") {
		t.Fatalf("after the slow raw fsync: slow %d, log %q; want 1 and a warning with its time", r.p.slow.Load(), r.log.String())
	}
	r.rawTook = 100 * time.Microsecond
	for _, at := range []time.Duration{0, time.Second, LogSyncSlowHold - time.Nanosecond} {
		r.now = slowEnd + at
		if got := r.sync(t); got != "handoff" {
			t.Fatalf("%v after the slow raw fsync: %s, want handoff", at, got)
		}
	}
	r.now = slowEnd + LogSyncSlowHold
	if got := r.sync(t); got != "raw" {
		t.Fatalf("LogSyncSlowHold after the slow raw fsync: %s, want raw", got)
	}
}

func TestSyncPolicy_RawErrors(t *testing.T) {
	r := newPolicyRig(LogSyncAuto)
	r.rawErr = syscall.EIO
	err := r.p.sync(&r.file, fakeRawConn{}, "seg-7")
	var pe *os.PathError
	if !errors.As(err, &pe) || pe.Op != "sync" || pe.Path != "seg-7" || !errors.Is(err, syscall.EIO) {
		t.Fatalf("a raw fsync's EIO: %v (%T), want *os.PathError sync seg-7 EIO", err, err)
	}
	if r.file.syncs != 0 || r.p.raw.Load() != 1 {
		t.Fatalf("%d Syncs through the file, %d raw; want 0, 1", r.file.syncs, r.p.raw.Load())
	}
	// A file the RawConn cannot reach (closed) is synced with its own
	// Sync, whose error is os.File's, and it is not counted as held.
	r.file.err = &os.PathError{Op: "sync", Path: "seg-7", Err: os.ErrClosed}
	err = r.p.sync(&r.file, fakeRawConn{closed: true}, "seg-7")
	if !errors.Is(err, os.ErrClosed) || r.file.syncs != 1 || r.p.raw.Load() != 1 {
		t.Fatalf("a closed file: %v, %d Syncs of the file, %d raw; want os.ErrClosed, 1, 1", err, r.file.syncs, r.p.raw.Load())
	}
}

// The WAL on syncFS, on one P: a new segment's first fsync goes through
// raft-wal's own file (which also fsyncs the directory), the others are
// raw (real fsync(2) calls), and what was stored reads back after the
// WAL is closed and opened again.
func TestSyncFS_WALStoresAndReadsBack(t *testing.T) {
	dir := t.TempDir()
	p := newSyncPolicy(LogSyncAuto, func() bool { return true }, zerolog.Nop())
	w, err := openWAL(dir, testHlog, p)
	if err != nil {
		t.Fatal(err)
	}
	const n = 20
	for i := uint64(1); i <= n; i++ {
		if err := w.StoreLogs([]*raft.Log{{Index: i, Term: 1, Type: raft.LogCommand, Data: []byte(fmt.Sprintf("entry %d", i))}}); err != nil {
			t.Fatalf("store %d: %v", i, err)
		}
	}
	raw, handoff := p.raw.Load(), p.handoff.Load()
	if raw < n-1 || handoff < 1 {
		t.Fatalf("%d raw and %d handed-off fsyncs for %d appends to a new segment; want %d raw or more and the first handed off", raw, handoff, n, n-1)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}

	// Opened again: the tail segment through OpenWriter, every fsync raw.
	p2 := newSyncPolicy(LogSyncAuto, func() bool { return true }, zerolog.Nop())
	w, err = openWAL(dir, testHlog, p2)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.StoreLogs([]*raft.Log{{Index: n + 1, Term: 1, Type: raft.LogCommand, Data: []byte("after")}}); err != nil {
		t.Fatal(err)
	}
	if p2.raw.Load() != 1 || p2.handoff.Load() != 0 {
		t.Fatalf("reopened: %d raw, %d handed off; want 1, 0", p2.raw.Load(), p2.handoff.Load())
	}
	for i := uint64(1); i <= n+1; i++ {
		var l raft.Log
		if err := w.GetLog(i, &l); err != nil {
			t.Fatalf("get %d: %v", i, err)
		}
		want := fmt.Sprintf("entry %d", i)
		if i == n+1 {
			want = "after"
		}
		if string(l.Data) != want {
			t.Fatalf("entry %d: %q, want %q", i, l.Data, want)
		}
	}
}

// syncFS.Create: the new file's first Sync goes through fs.File (which
// fsyncs its directory), later ones through the policy; a Sync after
// Close is an error.
func TestSyncFS_CreateThenClose(t *testing.T) {
	dir := t.TempDir()
	p := newSyncPolicy(LogSyncAuto, func() bool { return true }, zerolog.Nop())
	v := syncFS{FS: walfs.New(), policy: p}
	f, err := v.Create(dir, "seg", 4096)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("hello"), 0); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	if p.handoff.Load() != 1 || p.raw.Load() != 2 {
		t.Fatalf("%d handed off, %d raw; want 1, 2", p.handoff.Load(), p.raw.Load())
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); !errors.Is(err, os.ErrClosed) {
		t.Fatalf("Sync after Close: %v, want os.ErrClosed (as os.File.Sync)", err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "seg"))
	if err != nil || !bytes.HasPrefix(b, []byte("hello")) {
		t.Fatalf("read back: %q %v", b[:min(len(b), 8)], err)
	}
}

// writeRig is a syncFile over fakeSyncFile whose raw writes go to the
// rig's hook: each takes rawTook of the fake clock and returns rawErr.
type writeRig struct {
	*policyRig
	f      *syncFile
	writes int // raw writes
}

func (f *fakeSyncFile) WriteAt(b []byte, off int64) (int, error) {
	f.syncs += 1000 // counted apart from Syncs: thousands are writes
	return len(b), f.err
}

func newWriteRig(mode LogSync) *writeRig {
	r := &writeRig{policyRig: newPolicyRig(mode)}
	r.p.rawWrite = func(fd uintptr, b []byte, off int64) (int, syscall.Errno) {
		if fd != 42 {
			panic(fmt.Sprintf("raw write to fd %d", fd))
		}
		r.writes++
		r.now += r.rawTook
		if r.rawErr != 0 {
			return 0, r.rawErr
		}
		return len(b), 0
	}
	r.f = &syncFile{WritableFile: &r.file, policy: r.p, rc: fakeRawConn{}, name: "seg-9"}
	r.f.synced.Store(true)
	return r
}

// write runs one WriteAt and reports which way it went.
func (r *writeRig) write(t *testing.T) string {
	t.Helper()
	writes, through := r.writes, r.file.syncs
	n, err := r.f.WriteAt([]byte("entry"), 64)
	if err != nil || n != 5 {
		t.Fatalf("write: %d, %v", n, err)
	}
	switch {
	case r.writes == writes+1 && r.file.syncs == through:
		return "raw"
	case r.writes == writes && r.file.syncs == through+1000:
		return "handoff"
	}
	t.Fatalf("write: %d raw and %d through the file", r.writes-writes, (r.file.syncs-through)/1000)
	return ""
}

// The log's writes keep the P when its fsyncs do: on one P under auto,
// through the file otherwise; a slow raw write sends writes and fsyncs
// through the runtime for LogSyncSlowHold.
func TestSyncFile_WriteAtFollowsThePolicy(t *testing.T) {
	r := newWriteRig(LogSyncAuto)
	if got := r.write(t); got != "raw" {
		t.Fatalf("auto on one P: %s, want raw", got)
	}
	r.oneP = false
	if got := r.write(t); got != "handoff" {
		t.Fatalf("auto on more than one P: %s, want handoff", got)
	}
	r.oneP = true
	r.rawTook = LogSyncSlow
	if got := r.write(t); got != "raw" {
		t.Fatalf("the slow one: %s", got)
	}
	if r.p.slow.Load() != 1 || !strings.Contains(r.log.String(), "write of the Raft log") {
		t.Fatalf("after a slow raw write: slow %d, log %q; want 1 and a warning naming the write", r.p.slow.Load(), r.log.String())
	}
	r.rawTook = 0
	if got := r.write(t); got != "handoff" {
		t.Fatalf("write after a slow raw write: %s, want handoff", got)
	}
	if got := r.sync(t); got != "handoff" {
		t.Fatalf("fsync after a slow raw write: %s, want handoff", got)
	}
	r.now += LogSyncSlowHold
	if got := r.write(t); got != "raw" {
		t.Fatalf("LogSyncSlowHold later: %s, want raw", got)
	}

	writes, through := r.writes, r.file.syncs
	if _, err := r.f.WriteAt(make([]byte, rawio.MaxRaw+1), 0); err != nil || r.writes != writes || r.file.syncs != through+1000 {
		t.Fatalf("a write longer than rawio.MaxRaw: %v, %d raw; want it through the file", err, r.writes-writes)
	}

	h := newWriteRig(LogSyncHandoff)
	if got := h.write(t); got != "handoff" {
		t.Fatalf("handoff on one P: %s", got)
	}
}

func TestSyncFile_WriteAtErrors(t *testing.T) {
	r := newWriteRig(LogSyncAuto)
	r.rawErr = syscall.ENOSPC
	_, err := r.f.WriteAt([]byte("entry"), 0)
	var pe *os.PathError
	if !errors.As(err, &pe) || pe.Op != "write" || pe.Path != "seg-9" || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("a raw write's ENOSPC: %v (%T), want *os.PathError write seg-9 ENOSPC", err, err)
	}
	// A pwrite that wrote nothing ends the write short, as in os.File's.
	r.rawErr = 0
	short := r.p.rawWrite
	r.p.rawWrite = func(fd uintptr, b []byte, off int64) (int, syscall.Errno) { return 2, 0 }
	if n, err := r.f.WriteAt([]byte("entry"), 0); n != 2 || !errors.As(err, &pe) || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("a short raw write: %d, %v; want 2, *os.PathError io.ErrUnexpectedEOF", n, err)
	}
	r.p.rawWrite = short
	// A file the RawConn cannot reach (closed) is written by its own
	// WriteAt, whose error is os.File's.
	r.f.rc = fakeRawConn{closed: true}
	r.file.err = &os.PathError{Op: "write", Path: "seg-9", Err: os.ErrClosed}
	if _, err := r.f.WriteAt([]byte("entry"), 0); !errors.Is(err, os.ErrClosed) || r.writes != 1 {
		t.Fatalf("a closed file: %v after %d raw writes; want os.ErrClosed after 1", err, r.writes)
	}
}

// rawPwrite on a real file: every byte lands at its offset, past a hole,
// and a closed descriptor gives EBADF.
func TestRawPwrite(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "seg"))
	if err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	if n, errno := rawPwrite(f.Fd(), big, 4096); errno != 0 || n != len(big) {
		t.Fatalf("rawPwrite: %d, %v", n, errno)
	}
	if n, errno := rawPwrite(f.Fd(), []byte("head"), 0); errno != 0 || n != 4 {
		t.Fatalf("rawPwrite: %d, %v", n, errno)
	}
	got, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	want := append(append([]byte("head"), make([]byte, 4092)...), big...)
	if !bytes.Equal(got, want) {
		t.Fatalf("file holds %d bytes, not what was written (%d)", len(got), len(want))
	}
	fd := f.Fd()
	f.Close()
	if _, errno := rawPwrite(fd, []byte("x"), 0); errno != syscall.EBADF {
		t.Fatalf("rawPwrite on a closed fd: %v, want EBADF", errno)
	}
}

// The data dir's statfs is raw while the policy holds the P: it answers
// as FreeSpace does, fails as it does, and a slow one sends the policy's
// calls through the runtime.
func TestFreeSpaceHeld(t *testing.T) {
	dir := t.TempDir()
	r := newPolicyRig(LogSyncAuto)
	held, err := freeSpaceHeld(dir, r.p)
	if err != nil {
		t.Fatal(err)
	}
	live, err := FreeSpace(dir)
	if err != nil {
		t.Fatal(err)
	}
	const slack = 64 << 20 // other processes write meanwhile
	if held.Bytes == 0 || held.Bytes+slack < live.Bytes || live.Bytes+slack < held.Bytes || (held.Inodes < 0) != (live.Inodes < 0) {
		t.Fatalf("raw statfs %+v, FreeSpace %+v", held, live)
	}
	if _, err := freeSpaceHeld(filepath.Join(dir, "missing"), r.p); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("raw statfs of a missing dir: %v, want ENOENT", err)
	}
	if _, err := freeSpaceHeld(filepath.Join(dir, "nul\x00"), r.p); err == nil {
		t.Fatal("raw statfs of a path with a NUL: no error")
	}
	// A slow raw statfs: the fake clock moves LogSyncSlow between the
	// readings around the call.
	step := time.Duration(0)
	r.p.now = func() time.Duration { step += LogSyncSlow; return step }
	if _, err := freeSpaceHeld(dir, r.p); err != nil {
		t.Fatal(err)
	}
	if r.p.slow.Load() != 1 || !strings.Contains(r.log.String(), "statfs of the data dir") || r.p.useRaw() {
		t.Fatalf("after a slow raw statfs: slow %d, still raw %v, log %q", r.p.slow.Load(), r.p.useRaw(), r.log.String())
	}
	if _, err := freeSpaceHeld(dir, nil); err != nil {
		t.Fatalf("no policy: %v", err)
	}
}
