package raftstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/axsched/ax/engine"
	"github.com/axsched/ax/ipc"
	"github.com/axsched/ax/raftfsm"
)

// Disk errors (issue 4): when badger or the Raft log cannot write (disk
// full, permission, I/O error) the node stops accepting writes with 503
// storage_unavailable, keeps serving reads, does not crash or skip an
// entry, and recovers by itself once the disk takes writes again. (A disk
// that hangs rather than fails is not covered: on one P with
// --raft-log-sync auto a hung write or fsync of the Raft log, or statfs
// of the data dir, stops the whole process until it returns, walsync.go.)
//
// What the stores do on a full disk decided the design:
//
//   - badger v4 writes its memtable log (and builds its tables) through
//     mmap'd files that it sizes in advance with ftruncate, which
//     allocates nothing. On a full disk the page fault of such a write is a
//     SIGBUS, which the Go runtime turns into a fatal "unexpected fault
//     address" error: no error is returned, recover cannot help, and the
//     restarted node crashes again on replay (dgraph-io/badger#1682, #1801;
//     memtable.go logFile.writeEntry copies into lf.Data). So the node must
//     stop writing badger before the disk is full: the FSM's write gate
//     (raftfsm.FSM.SetWriteGate) refuses every commit while the data dir
//     has less than Config.StorageReserve free, and the FSM then retries
//     the same entry with backoff instead of writing (it never skips it).
//     Errors badger does return (a failed commit: a file it cannot create,
//     permission) take the same retry path.
//   - The Raft log (raft-wal, walstore.go) writes with pwrite into
//     segment files preallocated with fallocate, so a full disk is an
//     ENOSPC error: on an append past a segment's end, or on the
//     preallocation of the next segment (walSegmentSize, which the ½R
//     floor leaves room for). raft-wal v0.4.1 rolls a failed append back,
//     so the next one may succeed; but a failed rotation (the new
//     segment's preallocation or its meta commit) leaves the sealed tail
//     in place, and every append fails (sealed) until the node restarts,
//     which recovers the log from its last commit. hashicorp/raft v1.8.0
//     handles a failed StoreLogs: a leader logs "failed to commit logs",
//     fails the pending futures and steps down to follower
//     (raft.go dispatchLogs); a follower logs "failed to append to logs"
//     and rejects the AppendEntries, which the leader retries
//     (raft.go appendEntries). guardedLogStore records those failures.
//   - But raft panics when its stable store cannot persist a new term
//     ("failed to save current term", raft.go setCurrentTerm), which
//     would crash the node in a loop on any election while the disk is
//     full. guardedStableStore retries such writes with backoff instead,
//     stalling raft's loop (like a hung disk) until the write succeeds.
//
// While storage is unavailable a leader transfers leadership (its FSM may
// be stuck, so it cannot serve strong reads or fire), and the proposer
// holds the leader's own proposals (timer fires) until storage recovers
// or leadership moves, so no fire is dropped.

// storageTransferEvery spaces the leadership transfers of a leader whose
// storage stays unavailable.
const storageTransferEvery = 10 * time.Second

// StorageUnavailableError is returned for writes while this node's
// storage cannot take them; the API answers it as 503 storage_unavailable.
type StorageUnavailableError struct {
	// Cause names the failure.
	Cause string
	// Since is when the node stopped accepting writes.
	Since time.Time
}

func (e *StorageUnavailableError) Error() string {
	return "storage unavailable since " + e.Since.UTC().Format(time.RFC3339) + ": " + e.Cause
}

type logFailure struct {
	cause string
	at    time.Time
}

// Guard decides whether this node's storage takes writes, from
// three sources: a periodic probe of the data dir (free space against the
// reserve; write, fsync and remove a small file), the FSM's storage error
// (badger), and the last Raft log or stable store write.
type Guard struct {
	dir      string
	reserve  atomic.Uint64 // bytes; 0: no free-space check
	interval time.Duration
	log      zerolog.Logger
	fsm      *raftfsm.FSM
	now      func() time.Time
	// freeSpace and probeWrite are the probe's system calls (test hooks).
	freeSpace  func(dir string) (DiskFree, error)
	probeWrite func(dir string) error
	// statfsPolicy, once StartRaft sets it, makes the data dir's statfs
	// raw while it holds the P (freeSpaceHeld); nil: never.
	statfsPolicy atomic.Pointer[syncPolicy]

	probeCause atomic.Pointer[string] // nil: the last probe passed
	// spaceOnly is set while the last probe failed only because free
	// bytes are below the reserve (diskpressure.go: freeing writes pass).
	spaceOnly atomic.Bool
	// snapNeed is the expected size of the next Raft snapshot (bytes),
	// which writes must leave free on top of the reserve (diskpressure.go);
	// nil: none. Set before Run starts.
	snapNeed func() uint64
	logFail  atomic.Pointer[logFailure]

	mu       sync.Mutex
	down     atomic.Pointer[StorageUnavailableError] // nil: writable
	changed  Broadcast                               // notified on every transition
	lastDown time.Time                               // last onDown call
	// onDown is called (in its own goroutine) when the node enters the
	// state, and every storageTransferEvery while it stays in it. Set it
	// with SetOnDown.
	onDown   func()
	stopCh   chan struct{}
	stopOnce sync.Once
}

// GuardConfig is what NewGuard needs.
type GuardConfig struct {
	// Dir is the data dir whose file system is watched.
	Dir string
	// Reserve is the free space (bytes) below which writes are refused;
	// 0 turns the free-space checks off (Config.StorageReserve).
	Reserve int64
	// Interval is the probe period (Config.StorageProbeInterval).
	Interval time.Duration
	// FSM is gated (Attach) and asked for its storage error.
	FSM *raftfsm.FSM
	Log zerolog.Logger
	// Clock gives the times of the state (Since) and of the probes;
	// nil: the real clock. The probe ticker and the stable store's retry
	// backoff run on real time.
	Clock engine.Clock
}

// NewGuard returns the storage guard of cfg.Dir, writable until a probe,
// a badger or a Raft log failure says otherwise. Call Attach to gate the
// FSM, and Run to probe.
func NewGuard(cfg GuardConfig) *Guard {
	g := newStorageGuard(cfg.Dir, cfg.Reserve, cfg.Interval, cfg.FSM, cfg.Log)
	if cfg.Clock != nil {
		g.now = cfg.Clock.Now
	}
	return g
}

func newStorageGuard(dir string, reserve int64, interval time.Duration, fsm *raftfsm.FSM, log zerolog.Logger) *Guard {
	g := &Guard{
		dir: dir, interval: interval, log: log, fsm: fsm, now: engine.RealClock().Now,
		probeWrite: writeProbeFile,
		stopCh:     make(chan struct{}),
	}
	g.freeSpace = liveFreeSpace(dir, &g.statfsPolicy)
	g.reserve.Store(uint64(max(reserve, 0)))
	return g
}

// Attach wires the guard into the FSM: the write gate and the degraded
// hook.
func (g *Guard) Attach() {
	g.fsm.SetSpaceGate(g.spaceGate)
	g.fsm.SetStorageHook(func(error) { g.update() })
}

// SetOnDown installs fn as the onDown callback.
func (g *Guard) SetOnDown(fn func()) {
	g.mu.Lock()
	g.onDown = fn
	g.mu.Unlock()
}

// Err returns the current state: nil when writes are accepted.
func (g *Guard) Err() *StorageUnavailableError { return g.down.Load() }

// Changed returns a channel closed at the next transition.
func (g *Guard) Changed() <-chan struct{} { return g.changed.Changed() }

// Reserve returns the free-space reserve in bytes (0: no check).
func (g *Guard) Reserve() uint64 { return g.reserve.Load() }

// SetReserve sets the free-space reserve in bytes; the next probe or live
// check applies it.
func (g *Guard) SetReserve(b uint64) { g.reserve.Store(b) }

// FreeSpace returns what statfs tells of the data dir (through the
// guard's hook, which tests replace).
func (g *Guard) FreeSpace() (DiskFree, error) { return g.freeSpace(g.dir) }

// waitWritable returns nil once storage takes writes, the
// *StorageUnavailableError when ctx ends first, or the first error of stop
// (when not nil), which it calls every 50 ms while it waits.
func (g *Guard) waitWritable(ctx context.Context, stop func() error) error {
	return g.waitUntil(ctx, g.Err, stop)
}

// waitUntil is waitWritable with the state read from errFn.
func (g *Guard) waitUntil(ctx context.Context, errFn func() *StorageUnavailableError, stop func() error) error {
	if errFn() == nil {
		return nil
	}
	var tick <-chan time.Time
	if stop != nil {
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		tick = t.C
	}
	for {
		ch := g.Changed()
		e := errFn()
		if e == nil {
			return nil
		}
		if stop != nil {
			if err := stop(); err != nil {
				return err
			}
		}
		select {
		case <-ch:
		case <-tick:
		case <-ctx.Done():
			return e
		}
	}
}

// storageMinInodes is the fewest free inodes the write gate accepts (when
// the file system counts them): badger writes new table and value-log
// files, Raft new snapshots, and a file system out of inodes fails those
// with ENOSPC whatever its free bytes.
const storageMinInodes = 64

// gate is the FSM's write gate: it refuses a badger commit while the data
// dir has less than the reserve free, or fewer than storageMinInodes free
// inodes (a live statfs: one system call).
func (g *Guard) gate() error {
	err, _ := g.check()
	return err
}

// check is gate; spaceOnly reports that free bytes below the reserve are
// the only cause.
func (g *Guard) check() (_ error, spaceOnly bool) {
	reserve := g.reserve.Load()
	if reserve == 0 {
		return nil, false
	}
	free, err := g.freeSpace(g.dir)
	if err != nil {
		return nil, false // cannot tell: let badger try (its own errors are retried)
	}
	if free.Inodes >= 0 && free.Inodes < storageMinInodes {
		return fmt.Errorf("data dir %s has %d free inodes, below %d: new files cannot be created", g.dir, free.Inodes, storageMinInodes), false
	}
	if snap := g.snapHeadroom(); snap > 0 && free.Bytes < reserve+snap {
		return fmt.Errorf("data dir %s has %s free, below the reserve of %s (--storage-reserve) plus %s for the next Raft snapshot (a full copy of the state; without it the Raft log cannot be truncated)",
			g.dir, mib(free.Bytes), mib(reserve), mib(snap)), true
	}
	if free.Bytes < reserve {
		return fmt.Errorf("data dir %s has %s free, below the reserve of %s (--storage-reserve)",
			g.dir, mib(free.Bytes), mib(reserve)), true
	}
	return nil, false
}

// Probe checks the data dir once and updates the state. A probe that
// passes also clears a Raft log write failure older than itself: raft
// retries the write by itself, but a leader backs off from a follower that
// failed (up to about 40 s), so waiting for the next log write would keep
// a recovered node refusing writes for that long.
func (g *Guard) Probe() {
	start := g.now()
	var cause string
	err, spaceOnly := g.check()
	g.spaceOnly.Store(spaceOnly)
	if err != nil {
		cause = err.Error()
	} else if err := g.probeWrite(g.dir); err != nil {
		cause = "data dir " + g.dir + " is not writable: " + err.Error()
	}
	if cause == "" {
		g.probeCause.Store(nil)
		if lf := g.logFail.Load(); lf != nil && lf.at.Before(start) {
			g.logFail.CompareAndSwap(lf, nil)
		}
	} else {
		g.probeCause.Store(&cause)
	}
	g.update()
}

// LiveErr is Err after a live free-space check (one statfs) when storage
// takes writes: the periodic probe runs every interval (2 s by default),
// and a fast writer (batches of 1 MiB) could otherwise fill tens of MiB
// past the reserve and its snapshot headroom in between, down to where the
// FSM applies only freeing entries: the first other entry committed then
// blocks every later one, cancels and purges included. A failed check
// sets the state as the probe would; the next probe clears it.
func (g *Guard) LiveErr() *StorageUnavailableError {
	if e := g.Err(); e != nil {
		return e
	}
	if err, spaceOnly := g.check(); err != nil {
		g.spaceOnly.Store(spaceOnly)
		cause := err.Error()
		g.probeCause.Store(&cause)
		g.update()
	}
	return g.Err()
}

// probeFree is the probe without the written file: it checks free space
// against the reserve and updates the state.
func (g *Guard) probeFree() {
	err, spaceOnly := g.check()
	g.spaceOnly.Store(spaceOnly)
	if err != nil {
		cause := err.Error()
		g.probeCause.Store(&cause)
	} else {
		g.probeCause.Store(nil)
	}
	g.update()
}

// logWrite records the outcome of a Raft log or stable store write.
func (g *Guard) logWrite(what string, err error) error {
	if err != nil {
		g.logFail.Store(&logFailure{cause: "raft " + what + " write failed: " + err.Error(), at: g.now()})
		g.update()
	} else if g.logFail.Load() != nil {
		g.logFail.Store(nil)
		g.update()
	}
	return err
}

// cause returns why storage is unavailable now, "" when it is not.
func (g *Guard) cause() string {
	if se := g.fsm.StorageError(); se != nil {
		return "badger write failing, entry " + fmt.Sprint(se.Index) + " is being retried: " + se.Err.Error()
	}
	if lf := g.logFail.Load(); lf != nil {
		return lf.cause
	}
	if probe := g.probeCause.Load(); probe != nil {
		return *probe
	}
	return ""
}

// update recomputes the state; on a transition it logs, wakes waiters and
// (entering) calls onDown.
func (g *Guard) update() {
	g.mu.Lock()
	defer g.mu.Unlock()
	cause := g.cause()
	cur := g.down.Load()
	switch {
	case cause == "" && cur == nil:
		return
	case cause == "":
		g.down.Store(nil)
		g.log.Warn().Dur("unavailable_for", g.now().Sub(cur.Since)).Msg("storage is writable again: accepting writes")
	case cur == nil:
		e := &StorageUnavailableError{Cause: cause, Since: g.now()}
		g.down.Store(e)
		g.log.Error().Str("cause", cause).Msg("storage unavailable: refusing writes (503 storage_unavailable) until the data dir takes writes again")
		g.lastDown = e.Since
		if g.onDown != nil {
			go g.onDown()
		}
	case cur.Cause != cause:
		g.down.Store(&StorageUnavailableError{Cause: cause, Since: cur.Since})
		g.log.Warn().Str("cause", cause).Msg("storage still unavailable")
		return // no transition: waiters keep waiting
	default:
		return
	}
	g.changed.Notify()
}

// storageWriteProbeEvery is how often a node whose storage is fine writes
// the probe file; between those, each interval only checks free space
// against the reserve (one statfs). A node that writes is probed by its
// own writes (every Raft log write and badger commit reports a failure at
// once); an idle one has nothing to lose meanwhile, and the write probe's
// fsync was the largest share of an idle node's CPU (15 % of it, with
// badger's compactors). While storage is unavailable every interval
// writes the probe file, so that recovery is seen within an interval.
const storageWriteProbeEvery = 30 * time.Second

// Run probes every interval until ctx ends, and repeats onDown while the
// state lasts: a full probe (free space, then a written file) when storage
// is unavailable or the last full probe is storageWriteProbeEvery old, a
// free-space check otherwise.
func (g *Guard) Run(ctx context.Context) {
	t := time.NewTicker(g.interval)
	defer t.Stop()
	var lastWrite time.Time
	for {
		if now := g.now(); g.Err() != nil || now.Sub(lastWrite) >= storageWriteProbeEvery { // the zero lastWrite is long ago
			lastWrite = now
			g.Probe()
		} else {
			g.probeFree()
		}
		g.mu.Lock()
		if fn := g.onDown; fn != nil && g.Err() != nil && g.now().Sub(g.lastDown) >= storageTransferEvery {
			g.lastDown = g.now()
			go fn()
		}
		g.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Stop ends the stable store's retry loop (see guardedStableStore).
func (g *Guard) Stop() { g.stopOnce.Do(func() { close(g.stopCh) }) }

// APIError is the 503 the API answers while storage is unavailable.
func (e *StorageUnavailableError) APIError() error {
	return ipc.Errorf(ipc.ErrStorageUnavailable, "this node cannot write to its storage, so it accepts no writes (reads still work; a write that was in flight may still take effect: retry with the same id): %s (since %s)",
		e.Cause, e.Since.UTC().Format(time.RFC3339))
}

// Status is the storage part of GET /v1/cluster (nil when writable).
func (g *Guard) Status() *ipc.StorageStatus {
	e := g.Err()
	if e == nil {
		return nil
	}
	return &ipc.StorageStatus{Cause: e.Cause, Since: e.Since.UTC()}
}

// Collectors are the guard's metrics (registered by the node).
func (g *Guard) Collectors() []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "ax_storage_unavailable", Help: "1 while this node's storage cannot take writes (disk full or below --storage-reserve, not writable, a badger or Raft log write failing): writes get 503 storage_unavailable."},
			func() float64 {
				if g.Err() != nil {
					return 1
				}
				return 0
			}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "ax_fsm_storage_retries_total", Help: "Failed badger writes (or reads) the FSM retried while applying entries."},
			func() float64 { return float64(g.fsm.StorageRetries()) }),
	}
}

// mib formats a byte count in MiB.
func mib(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// FreeSpace returns the bytes of dir's file system available to this
// (unprivileged) process.
func FreeSpace(dir string) (DiskFree, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return DiskFree{}, err
	}
	return diskFree(&st), nil
}

func diskFree(st *syscall.Statfs_t) DiskFree {
	f := DiskFree{Bytes: st.Bavail * uint64(st.Bsize), Inodes: -1}
	if st.Files > 0 { // 0: the file system does not count inodes (btrfs)
		f.Inodes = int64(st.Ffree)
	}
	return f
}

// freeSpaceHeld is FreeSpace of dir, with a raw statfs(2) while policy
// (nil: never) holds the P for the Raft log's calls (useRaw): on one P,
// a statfs through the runtime after an idle moment wakes its sysmon
// thread (internal/rawio), and the API asks before every write. A raw
// statfs that took LogSyncSlow or more sends the policy's calls through
// the runtime for a while (timed).
func freeSpaceHeld(dir string, policy *syncPolicy) (DiskFree, error) {
	if policy == nil || !policy.useRaw() {
		return FreeSpace(dir)
	}
	path, err := syscall.BytePtrFromString(dir)
	if err != nil {
		return DiskFree{}, err // as syscall.Statfs gives it
	}
	var st syscall.Statfs_t
	var errno syscall.Errno
	policy.timed("statfs of the data dir", func() {
		_, _, errno = syscall.RawSyscall(syscall.SYS_STATFS, uintptr(unsafe.Pointer(path)), uintptr(unsafe.Pointer(&st)), 0)
	})
	if errno != 0 {
		return DiskFree{}, errno
	}
	return diskFree(&st), nil
}

// statfsMaxAge is how old a free-space answer may be (liveFreeSpace).
const statfsMaxAge = time.Millisecond

// liveFreeSpace is FreeSpace of dir with an answer reused for
// statfsMaxAge (cacheFor; a failed statfs is asked again). The API checks
// free space before every write (Guard.LiveErr), and one statfs per
// request cost 5 % of a node's CPU at 9 500 submits/s; within a
// millisecond the node writes at most what its disk takes in a
// millisecond, far inside the reserve's margins. Other dirs are asked
// live. The age is real (monotonic) time, as statfs is.
func liveFreeSpace(dir string, policy *atomic.Pointer[syncPolicy]) func(string) (DiskFree, error) {
	cached := cacheFor(statfsMaxAge, time.Now, func() (DiskFree, error) { return freeSpaceHeld(dir, policy.Load()) })
	return func(d string) (DiskFree, error) {
		if d != dir {
			return FreeSpace(d)
		}
		return cached()
	}
}

// DiskFree is what statfs tells of the data dir's file system.
type DiskFree struct {
	Bytes  uint64 // available to unprivileged users
	Inodes int64  // free inodes; -1 when the file system does not count them
}

// probeFileName is the file the probe writes in the data dir.
const probeFileName = ".ax-storage-probe"

// writeProbeFile writes, syncs and removes a small file in dir.
func writeProbeFile(dir string) error {
	p := filepath.Join(dir, probeFileName)
	f, err := os.OpenFile(p, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(make([]byte, 4096))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if rerr := os.Remove(p); err == nil && rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
		err = rerr
	}
	return err
}

// guardedLogStore reports the outcome of every Raft log write to the guard,
// and counts the writes in stats.
type guardedLogStore struct {
	raft.LogStore
	g     *Guard
	stats *LogWriteStats
}

// LogWriteStats counts the Raft log's successful writes (each one WAL
// append, so one fsync of its segment file) and the entries they stored: entries ÷ writes
// is how many entries raft groups per disk sync, and the commands per entry
// (ax_raft_entry_commands) multiply it — the group commit of docs/DESIGN.md section 6.
// The zero value is ready to use.
type LogWriteStats struct {
	Writes, Entries atomic.Uint64
	// Bytes counts the entries' data bytes, for the snapshot trigger of
	// Config.TrailingLogsBytes (snapgate.go).
	Bytes atomic.Uint64
}

func (s guardedLogStore) count(ls []*raft.Log, err error) error {
	if err == nil && s.stats != nil {
		s.stats.Writes.Add(1)
		s.stats.Entries.Add(uint64(len(ls)))
		var b uint64
		for _, l := range ls {
			b += uint64(len(l.Data))
		}
		s.stats.Bytes.Add(b)
	}
	return err
}

func (s guardedLogStore) StoreLog(l *raft.Log) error {
	return s.g.logWrite("log", s.count([]*raft.Log{l}, s.LogStore.StoreLog(l)))
}

func (s guardedLogStore) StoreLogs(ls []*raft.Log) error {
	return s.g.logWrite("log", s.count(ls, s.LogStore.StoreLogs(ls)))
}

func (s guardedLogStore) DeleteRange(lo, hi uint64) error {
	return s.g.logWrite("log", s.LogStore.DeleteRange(lo, hi))
}

// IsMonotonic passes on the wrapped store's raft.MonotonicLogStore (the
// WAL's: true). Raft asks it of the store it is given: a store that
// cannot take a gap in its indexes has all its entries removed when a
// snapshot from the leader is installed, instead of keeping them and
// appending after a gap, which the WAL refuses ("non-monotonic log
// entries"): a follower that needed a snapshot could never append again.
func (s guardedLogStore) IsMonotonic() bool {
	m, ok := s.LogStore.(raft.MonotonicLogStore)
	return ok && m.IsMonotonic()
}

var _ raft.MonotonicLogStore = guardedLogStore{}

// guardedStableStore retries failed writes of raft's stable store (term,
// vote) with backoff until they succeed: raft panics when it cannot save a
// new term, which on a full disk would be a crash loop. While it retries,
// raft's loop is stalled, as on a hung disk. After stop (shutdown) a
// failing write ends its goroutine (runtime.Goexit) so that raft.Shutdown,
// which waits for raft's goroutines, returns.
type guardedStableStore struct {
	raft.StableStore
	g *Guard
}

func (s guardedStableStore) Set(k, v []byte) error {
	s.retry(func() error { return s.StableStore.Set(k, v) })
	return nil
}

func (s guardedStableStore) SetUint64(k []byte, v uint64) error {
	s.retry(func() error { return s.StableStore.SetUint64(k, v) })
	return nil
}

func (s guardedStableStore) retry(op func() error) {
	delay := 10 * time.Millisecond
	for {
		err := op()
		s.g.logWrite("stable store", err)
		if err == nil {
			return
		}
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-s.g.stopCh:
			t.Stop()
			runtime.Goexit()
		}
		delay = min(delay*2, 5*time.Second)
	}
}
