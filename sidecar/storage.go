package sidecar

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

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/axsched/ax/ipc"
	"github.com/axsched/ax/raftfsm"
)

// Disk errors (issue 4): when badger or the Raft log cannot write (disk
// full, permission, I/O error) the node stops accepting writes with 503
// storage_unavailable, keeps serving reads, does not crash or skip an
// entry, and recovers by itself once the disk takes writes again.
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
//   - raft-boltdb (bbolt) writes with pwrite and reads through a read-only
//     mmap, so a full disk is an ENOSPC error. hashicorp/raft v1.8.0
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

// storageGuard decides whether this node's storage takes writes, from
// three sources: a periodic probe of the data dir (free space against the
// reserve; write, fsync and remove a small file), the FSM's storage error
// (badger), and the last Raft log or stable store write.
type storageGuard struct {
	dir      string
	reserve  atomic.Uint64 // bytes; 0: no free-space check
	interval time.Duration
	log      zerolog.Logger
	fsm      *raftfsm.FSM
	now      func() time.Time
	// freeSpace and probeWrite are the probe's system calls (test hooks).
	freeSpace  func(dir string) (diskFree, error)
	probeWrite func(dir string) error

	probeCause atomic.Pointer[string] // nil: the last probe passed
	logFail    atomic.Pointer[logFailure]

	mu       sync.Mutex
	down     atomic.Pointer[StorageUnavailableError] // nil: writable
	changed  broadcast                               // notified on every transition
	lastDown time.Time                               // last onDown call
	// onDown is called (in its own goroutine) when the node enters the
	// state, and every storageTransferEvery while it stays in it. Set it
	// with setOnDown.
	onDown   func()
	stopCh   chan struct{}
	stopOnce sync.Once
}

func newStorageGuard(dir string, reserve int64, interval time.Duration, fsm *raftfsm.FSM, log zerolog.Logger) *storageGuard {
	g := &storageGuard{
		dir: dir, interval: interval, log: log, fsm: fsm, now: time.Now,
		freeSpace: statfsFree, probeWrite: writeProbeFile,
		stopCh: make(chan struct{}),
	}
	g.reserve.Store(uint64(max(reserve, 0)))
	return g
}

// attach wires the guard into the FSM: the write gate and the degraded
// hook.
func (g *storageGuard) attach() {
	g.fsm.SetWriteGate(g.gate)
	g.fsm.SetStorageHook(func(error) { g.update() })
}

// setOnDown installs fn as the onDown callback.
func (g *storageGuard) setOnDown(fn func()) {
	g.mu.Lock()
	g.onDown = fn
	g.mu.Unlock()
}

// err returns the current state: nil when writes are accepted.
func (g *storageGuard) err() *StorageUnavailableError { return g.down.Load() }

// changedCh returns a channel closed at the next transition.
func (g *storageGuard) changedCh() <-chan struct{} { return g.changed.changed() }

// waitWritable returns nil once storage takes writes, the
// *StorageUnavailableError when ctx ends first, or the first error of stop
// (when not nil), which it calls every 50 ms while it waits.
func (g *storageGuard) waitWritable(ctx context.Context, stop func() error) error {
	if g.err() == nil {
		return nil
	}
	var tick <-chan time.Time
	if stop != nil {
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		tick = t.C
	}
	for {
		ch := g.changedCh()
		e := g.err()
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
func (g *storageGuard) gate() error {
	reserve := g.reserve.Load()
	if reserve == 0 {
		return nil
	}
	free, err := g.freeSpace(g.dir)
	if err != nil {
		return nil // cannot tell: let badger try (its own errors are retried)
	}
	if free.bytes < reserve {
		return fmt.Errorf("data dir %s has %s free, below the reserve of %s (--storage-reserve)",
			g.dir, mib(free.bytes), mib(reserve))
	}
	if free.inodes >= 0 && free.inodes < storageMinInodes {
		return fmt.Errorf("data dir %s has %d free inodes, below %d: new files cannot be created", g.dir, free.inodes, storageMinInodes)
	}
	return nil
}

// probe checks the data dir once and updates the state. A probe that
// passes also clears a Raft log write failure older than itself: raft
// retries the write by itself, but a leader backs off from a follower that
// failed (up to about 40 s), so waiting for the next log write would keep
// a recovered node refusing writes for that long.
func (g *storageGuard) probe() {
	start := g.now()
	var cause string
	if err := g.gate(); err != nil {
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

// probeFree is the probe without the written file: it checks free space
// against the reserve and updates the state.
func (g *storageGuard) probeFree() {
	if err := g.gate(); err != nil {
		cause := err.Error()
		g.probeCause.Store(&cause)
	} else {
		g.probeCause.Store(nil)
	}
	g.update()
}

// logWrite records the outcome of a Raft log or stable store write.
func (g *storageGuard) logWrite(what string, err error) error {
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
func (g *storageGuard) cause() string {
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
func (g *storageGuard) update() {
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
	g.changed.notify()
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

// run probes every interval until ctx ends, and repeats onDown while the
// state lasts: a full probe (free space, then a written file) when storage
// is unavailable or the last full probe is storageWriteProbeEvery old, a
// free-space check otherwise.
func (g *storageGuard) run(ctx context.Context) {
	t := time.NewTicker(g.interval)
	defer t.Stop()
	var lastWrite time.Time
	for {
		if now := g.now(); g.err() != nil || now.Sub(lastWrite) >= storageWriteProbeEvery { // the zero lastWrite is long ago
			lastWrite = now
			g.probe()
		} else {
			g.probeFree()
		}
		g.mu.Lock()
		if fn := g.onDown; fn != nil && g.err() != nil && g.now().Sub(g.lastDown) >= storageTransferEvery {
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

// stop ends the stable store's retry loop (see guardedStableStore).
func (g *storageGuard) stop() { g.stopOnce.Do(func() { close(g.stopCh) }) }

// apiError is the 503 the API answers while storage is unavailable.
func (e *StorageUnavailableError) apiError() error {
	return ipc.Errorf(ipc.ErrStorageUnavailable, "this node cannot write to its storage, so it accepts no writes (reads still work; a write that was in flight may still take effect: retry with the same id): %s (since %s)",
		e.Cause, e.Since.UTC().Format(time.RFC3339))
}

// status is the storage part of GET /v1/cluster (nil when writable).
func (g *storageGuard) status() *ipc.StorageStatus {
	e := g.err()
	if e == nil {
		return nil
	}
	return &ipc.StorageStatus{Cause: e.Cause, Since: e.Since.UTC()}
}

// collectors are the guard's metrics.
func (g *storageGuard) collectors() []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "ax_storage_unavailable", Help: "1 while this node's storage cannot take writes (disk full or below --storage-reserve, not writable, a badger or Raft log write failing): writes get 503 storage_unavailable."},
			func() float64 { return b2f(g.err() != nil) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "ax_fsm_storage_retries_total", Help: "Failed badger writes (or reads) the FSM retried while applying entries."},
			func() float64 { return float64(g.fsm.StorageRetries()) }),
	}
}

// mib formats a byte count in MiB.
func mib(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// statfsFree returns the bytes of dir's file system available to this
// (unprivileged) process.
func statfsFree(dir string) (diskFree, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return diskFree{}, err
	}
	f := diskFree{bytes: st.Bavail * uint64(st.Bsize), inodes: -1}
	if st.Files > 0 { // 0: the file system does not count inodes (btrfs)
		f.inodes = int64(st.Ffree)
	}
	return f, nil
}

// diskFree is what statfs tells of the data dir's file system.
type diskFree struct {
	bytes  uint64 // available to unprivileged users
	inodes int64  // free inodes; -1 when the file system does not count them
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
	g     *storageGuard
	stats *logWriteStats
}

// logWriteStats counts the Raft log's successful writes (each one bolt
// transaction, so one fsync) and the entries they stored: entries ÷ writes
// is how many entries raft groups per disk sync, and the commands per entry
// (ax_raft_entry_commands) multiply it — the group commit of DESIGN §6.
type logWriteStats struct {
	writes, entries atomic.Uint64
}

func (s guardedLogStore) count(n int, err error) error {
	if err == nil && s.stats != nil {
		s.stats.writes.Add(1)
		s.stats.entries.Add(uint64(n))
	}
	return err
}

func (s guardedLogStore) StoreLog(l *raft.Log) error {
	return s.g.logWrite("log", s.count(1, s.LogStore.StoreLog(l)))
}

func (s guardedLogStore) StoreLogs(ls []*raft.Log) error {
	return s.g.logWrite("log", s.count(len(ls), s.LogStore.StoreLogs(ls)))
}

func (s guardedLogStore) DeleteRange(lo, hi uint64) error {
	return s.g.logWrite("log", s.LogStore.DeleteRange(lo, hi))
}

// guardedStableStore retries failed writes of raft's stable store (term,
// vote) with backoff until they succeed: raft panics when it cannot save a
// new term, which on a full disk would be a crash loop. While it retries,
// raft's loop is stalled, as on a hung disk. After stop (shutdown) a
// failing write ends its goroutine (runtime.Goexit) so that raft.Shutdown,
// which waits for raft's goroutines, returns.
type guardedStableStore struct {
	raft.StableStore
	g *storageGuard
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

var _ ipc.WriteGuard = (*Node)(nil)

// WriteAllowed implements ipc.WriteGuard: while this node's storage cannot
// take writes, every write request is answered 503 storage_unavailable
// (Retry-After 5 s, the message names the cause); reads are served.
func (n *Node) WriteAllowed() error {
	if e := n.storage.err(); e != nil {
		return e.apiError()
	}
	return nil
}

// storageDown runs when storage becomes unavailable (and again every
// storageTransferEvery while it stays so): a leader hands leadership to a
// healthy voter, since it can neither apply (its FSM may be stuck on a
// write) nor fire timers it cannot commit.
func (n *Node) storageDown() {
	if n.raft.State() != raft.Leader || n.numServers() < 2 {
		return
	}
	n.log.Warn().Msg("storage unavailable on the leader: transferring leadership")
	if err := n.raft.LeadershipTransfer().Error(); err != nil {
		n.log.Warn().Err(err).Msg("leadership transfer failed; retrying while storage stays unavailable")
	}
}
