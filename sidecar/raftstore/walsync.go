package raftstore

import (
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/hashicorp/raft-wal/fs"
	"github.com/hashicorp/raft-wal/types"
	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/axsched/ax/internal/rawio"
)

// The Raft log's fsync, and the P it blocks.
//
// raft-wal makes each append durable with an fsync of its segment file
// (os.File.Sync: a blocking system call through the Go runtime). While a
// goroutine is in such a call, the runtime's sysmon takes its P once it
// has seen it there for a tick (20 µs or more) and, when other goroutines
// are runnable, hands the P to another thread, waking or starting one;
// when the fsync returns, its thread finds the P gone, queues the
// goroutine and parks (runtime/proc.go: sysmon, retake, handoffp,
// exitsyscall). On one P — the node's usual state while its load fits in
// one CPU (--adaptive-procs, internal/procs) — that is two or more
// switches between threads for every fsync, and each retake keeps sysmon
// polling every 20 µs instead of backing off (golang/go#18236).
//
// With LogSyncAuto (the default) a segment's fsync is a raw system call
// (unix.RawSyscall: the runtime is not told) while the adaptive
// controller has the process on one P (Config.OneP: procs.OnOneP, which
// the CLI passes with --adaptive-procs; nil, as in the embedded node and
// the tests' clusters, never) and the last slow fsync is LogSyncSlowHold
// or more ago: the thread keeps its P, and the goroutines made runnable
// meanwhile wait for the fsync as they would behind a goroutine that
// computes. On one P there
// is no other P to hand them to; what the hand-off bought was another
// thread running them during the fsync, and under a load of single
// submits they mostly wait for that fsync's commit anyway. And with no
// retakes, sysmon backs off. One node of ax bench throughput, alternated
// pairs on the project's 2-CPU VM (docs/perf/README.md, "Twentieth
// session"), per submit (perf stat -a over the whole run): 16 callers,
// 1.36–1.48 context switches against 1.93–3.45 and 0.10–0.13 of sysmon's
// nanosleeps against 0.28–0.75, node CPU 17–42 % lower, 18–61 % more
// submits/s in five pairs of five; 8 callers and 1 caller, 10–42 % and
// 4–23 % more in three of three. Three nodes, 16 callers: no measurable
// change by the fsync alone (−8 to +22 % in seven pairs): there each node
// goes idle between entries, and the next system call through the
// runtime wakes sysmon from its sleep and sets it polling every 20 µs
// again (entersyscallWakeSysmon). So the segment's writes (pwrite, up to
// rawio.MaxRaw bytes: syncFile.WriteAt) and the storage guard's statfs of
// the data dir (freeSpaceHeld) follow the same policy, and the node's
// connections read and write raw as well (internal/rawio, --socket-io):
// together they cut three nodes' CPU a submit by 22–28 %
// (docs/perf/README.md, "Twenty-first session").
//
// The risk is a stalled disk: a raw fsync (or pwrite, or statfs) that
// hangs stops the whole process for as long as it hangs — reads, /metrics
// and Raft heartbeats included, as a SIGSTOP would (e2e/sigstop_test.go:
// the other nodes elect another leader; nothing is lost) — where through
// the runtime only the log's thread would wait (a review measured 25.6 s
// of a frozen node with the data dir on a loop device whose backing file
// sat on a frozen file system). Timers are not behind it: the controller
// keeps the node on all its CPUs while a task is due within 2 s or a
// callback is in flight, and OneP is false there. A raw disk call that
// took LogSyncSlow or more sends those of the next LogSyncSlowHold
// through the runtime (timed), so a disk that turns slow stops the
// process at most once a minute, not at every append; neither the metric
// nor the log line can say so before the call returns. On more than one
// P every call goes through the runtime: there another P is usually idle (sysmon
// then leaves the P in the system call alone), and a P held in a raw call
// would hold up the garbage collector's stop-the-world.
//
// LogSyncHandoff (--raft-log-sync handoff) sends every fsync, write and
// statfs through the runtime, as os.File's methods do.

// LogSync says how the Raft log's segment files are written and fsynced,
// and the data dir's statfs made (Config.LogSync).
type LogSync string

// The values of LogSync; "" is LogSyncAuto.
const (
	// LogSyncAuto: raw calls while the controller has the process on one
	// P (Config.OneP) and the last slow one is LogSyncSlowHold or more
	// ago; else the runtime's.
	LogSyncAuto LogSync = "auto"
	// LogSyncHandoff: every call through the runtime (os.File.Sync, ...).
	LogSyncHandoff LogSync = "handoff"
)

// ParseLogSync returns the LogSync named s ("" is LogSyncAuto). Errors:
// any other name.
func ParseLogSync(s string) (LogSync, error) {
	switch LogSync(s) {
	case "", LogSyncAuto:
		return LogSyncAuto, nil
	case LogSyncHandoff:
		return LogSyncHandoff, nil
	}
	return "", fmt.Errorf("raft log sync %q: want %s or %s", s, LogSyncAuto, LogSyncHandoff)
}

const (
	// LogSyncSlow is how long a raw fsync may take before the log's
	// fsyncs go through the runtime for LogSyncSlowHold: 10 ms is 30–60
	// times this VM's usual fsync (0.15–0.3 ms) and a fiftieth of ax's
	// default heartbeat timeout (500 ms), so a stall long enough to cost
	// the node its leadership is never held twice in a minute.
	LogSyncSlow = 10 * time.Millisecond
	// LogSyncSlowHold is how long the fsyncs after a slow raw one go
	// through the runtime.
	LogSyncSlowHold = time.Minute
)

// syncPolicy decides, for each fsync of the log's segments, whether it
// is raw (see above), and counts both kinds. Its fields other than the
// counters are set once, before the first fsync.
type syncPolicy struct {
	mode LogSync
	// oneP reports whether the adaptive controller has the process on one
	// P (procs.OnOneP); nil: never, so no fsync keeps its P.
	oneP func() bool
	// now is a monotonic reading; nil: time since the policy's first use
	// (time.Since of a fixed start).
	now func() time.Duration
	// rawSync fsyncs fd without telling the runtime; nil: rawFsync.
	rawSync func(fd uintptr) syscall.Errno
	// rawWrite writes b at off on fd without telling the runtime; nil:
	// rawPwrite.
	rawWrite func(fd uintptr, b []byte, off int64) (int, syscall.Errno)
	log      zerolog.Logger

	start     time.Time
	slowUntil atomic.Int64  // now() in ns before which disk calls go through the runtime
	raw       atomic.Uint64 // fsyncs that kept the P
	handoff   atomic.Uint64 // fsyncs through the runtime
	slow      atomic.Uint64 // raw disk calls (fsync, pwrite, statfs) that took LogSyncSlow or more
}

// newSyncPolicy returns the policy for mode, holding the P only while
// oneP reports true (nil: never), and warning on log of a slow raw fsync.
func newSyncPolicy(mode LogSync, oneP func() bool, log zerolog.Logger) *syncPolicy {
	return &syncPolicy{mode: mode, oneP: oneP, log: log, start: time.Now()}
}

func (p *syncPolicy) clock() time.Duration {
	if p.now != nil {
		return p.now()
	}
	return time.Since(p.start)
}

// useRaw reports whether the next fsync is raw.
func (p *syncPolicy) useRaw() bool {
	if p.mode == LogSyncHandoff || p.oneP == nil || !p.oneP() {
		return false
	}
	return int64(p.clock()) >= p.slowUntil.Load()
}

// sync fsyncs f: raw through rc when useRaw says so (and rc is not nil),
// else with f.Sync. Errors: the fsync's, as *os.PathError for a raw one,
// as os.File.Sync returns them; a file that cannot be reached through rc
// (closed) is synced with f.Sync, whose error says so (os.ErrClosed).
func (p *syncPolicy) sync(f types.WritableFile, rc syscall.RawConn, name string) error {
	if rc == nil || !p.useRaw() {
		p.handoff.Add(1)
		return f.Sync()
	}
	rawSync := p.rawSync
	if rawSync == nil {
		rawSync = rawFsync
	}
	var errno syscall.Errno
	if err := rc.Control(func(fd uintptr) {
		p.timed("fsync of the Raft log", func() { errno = rawSync(fd) })
	}); err != nil {
		p.handoff.Add(1)
		return f.Sync()
	}
	p.raw.Add(1)
	if errno != 0 {
		return &os.PathError{Op: "sync", Path: name, Err: errno}
	}
	return nil
}

// timed runs call, a raw disk call (what: "fsync of the Raft log", ...),
// on the policy's clock: one that took LogSyncSlow or more counts as
// slow, is logged as a warning, and sends the calls of the next
// LogSyncSlowHold through the runtime. The time also counts a wait for
// the P if the goroutine is preempted as the call returns (sysmon asks a
// goroutine that ran 10 ms to yield): a false slow one only sends calls
// through the runtime, the safe way.
func (p *syncPolicy) timed(what string, call func()) {
	begin := p.clock()
	call()
	end := p.clock()
	if took := end - begin; took >= LogSyncSlow {
		p.slow.Add(1)
		p.slowUntil.Store(int64(end + LogSyncSlowHold))
		p.log.Warn().Dur("took", took).Dur("for", LogSyncSlowHold).Str("call", what).Msg("a disk call that kept the process's one P took long: the Raft log's writes and fsyncs and the data dir's statfs go through the Go runtime for a while")
	}
}

// LogSyncs returns the Raft log's fsyncs that kept their P (held) and
// the held disk calls — those fsyncs, the log's writes, the data dir's
// statfs — that took LogSyncSlow or more (slow) since the node started
// Raft (walsync.go); 0, 0 before StartRaft.
func (st *Store) LogSyncs() (held, slow uint64) {
	if st.syncs == nil {
		return 0, 0
	}
	return st.syncs.raw.Load(), st.syncs.slow.Load()
}

// rawFsync is fsync(2) on fd without the runtime's entersyscall (the
// thread keeps its P), repeated on EINTR as os.File.Sync does.
func rawFsync(fd uintptr) syscall.Errno {
	for {
		_, _, errno := unix.RawSyscall(unix.SYS_FSYNC, fd, 0, 0)
		if errno != unix.EINTR {
			return errno
		}
	}
}

// syncFS is raft-wal's OS file system (fs.FS) whose writable files sync
// through a syncPolicy.
type syncFS struct {
	*fs.FS
	policy *syncPolicy
}

// Create creates the segment file as fs.FS does. Its first Sync goes
// through fs.File's (which also fsyncs the directory, so that the new
// file's entry is durable), the later ones through the policy.
func (v syncFS) Create(dir, name string, size uint64) (types.WritableFile, error) {
	f, err := v.FS.Create(dir, name, size)
	if err != nil {
		return nil, err
	}
	return v.wrap(f, false), nil
}

// OpenWriter opens an existing segment file as fs.FS does; every Sync
// goes through the policy.
func (v syncFS) OpenWriter(dir, name string) (types.WritableFile, error) {
	f, err := v.FS.OpenWriter(dir, name)
	if err != nil {
		return nil, err
	}
	return v.wrap(f, true), nil
}

func (v syncFS) wrap(f types.WritableFile, synced bool) types.WritableFile {
	sf := &syncFile{WritableFile: f, policy: v.policy}
	if n, ok := f.(interface{ Name() string }); ok {
		sf.name = n.Name()
	}
	if sc, ok := f.(syscall.Conn); ok {
		if rc, err := sc.SyscallConn(); err == nil {
			sf.rc = rc
		}
	}
	sf.synced.Store(synced)
	return sf
}

// syncFile is a segment file whose Sync goes through a syncPolicy once
// it has been synced once.
type syncFile struct {
	types.WritableFile
	policy *syncPolicy
	rc     syscall.RawConn // nil: the file has no descriptor to sync raw
	name   string
	synced atomic.Bool
}

// Sync fsyncs the file: the first time through the wrapped file's Sync
// (for a new file, fs.File's, which fsyncs its directory too), then
// through the policy.
func (f *syncFile) Sync() error {
	if !f.synced.Load() {
		f.policy.handoff.Add(1)
		if err := f.WritableFile.Sync(); err != nil {
			return err
		}
		f.synced.Store(true)
		return nil
	}
	return f.policy.sync(f.WritableFile, f.rc, f.name)
}

// WriteAt writes b at off (raft-wal's append): raw pwrite(2) calls while
// the policy holds the P (useRaw) and b is at most rawio.MaxRaw bytes (a
// longer copy into the page cache is left to the runtime, which can run
// the process's goroutines beside it), with os.File.WriteAt otherwise. A
// raw write that took LogSyncSlow or more is slow as an fsync would be
// (timed). Errors: *os.PathError with the call's errno, or with
// io.ErrUnexpectedEOF after a pwrite that wrote nothing, as
// os.File.WriteAt gives (internal/poll's Pwrite); a file that cannot be
// reached raw (closed) is written by os.File.WriteAt, whose error says so.
func (f *syncFile) WriteAt(b []byte, off int64) (int, error) {
	p := f.policy
	if f.rc == nil || len(b) == 0 || len(b) > rawio.MaxRaw || !p.useRaw() {
		return f.WritableFile.WriteAt(b, off)
	}
	rawWrite := p.rawWrite
	if rawWrite == nil {
		rawWrite = rawPwrite
	}
	var n int
	var errno syscall.Errno
	if err := f.rc.Control(func(fd uintptr) {
		p.timed("write of the Raft log", func() { n, errno = rawWrite(fd, b, off) })
	}); err != nil {
		return f.WritableFile.WriteAt(b, off)
	}
	if errno != 0 {
		return n, &os.PathError{Op: "write", Path: f.name, Err: errno}
	}
	if n < len(b) {
		return n, &os.PathError{Op: "write", Path: f.name, Err: io.ErrUnexpectedEOF}
	}
	return n, nil
}

// rawPwrite writes b at off on fd with pwrite(2) calls that the runtime
// is not told of, repeated after a partial write or EINTR as
// os.File.WriteAt does; it stops short, with no errno, at a call that
// writes nothing.
func rawPwrite(fd uintptr, b []byte, off int64) (int, syscall.Errno) {
	n := 0
	for n < len(b) {
		r, _, e := unix.RawSyscall6(unix.SYS_PWRITE64, fd, uintptr(unsafe.Pointer(&b[n])), uintptr(len(b)-n), uintptr(off+int64(n)), 0, 0)
		switch {
		case e == unix.EINTR:
			continue
		case e != 0:
			return n, e
		case r == 0:
			return n, 0
		}
		n += int(r)
	}
	return n, 0
}
