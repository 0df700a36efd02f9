package raftstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/axsched/ax/engine"
	"github.com/axsched/ax/raftfsm"
)

// Snapshots under disk pressure (issue 12). A Raft snapshot is a full copy
// of the state: on a disk that is nearly full it used to fill the disk to
// 0 bytes, and a failed one left its temp dir behind. Now:
//
//   - gatedSnapshotStore.Create (raft calls it after FSM.Snapshot, for its
//     own snapshots and for one a leader installs) starts a snapshot only
//     when free space covers its expected size plus the reserve
//     (snapshotAllowed); otherwise it returns an error: raft logs "failed
//     to take snapshot", releases the FSM's read view, and tries again at
//     its next interval.
//   - While a snapshot is written, its sink checks free space every
//     snapSinkCheckEvery bytes and fails the write when free space would
//     fall below the reserve (the estimate was low): raft then cancels the
//     sink, and the sink removes the snapshot's temp dir, which raft's
//     FileSnapshotSink.Cancel leaves behind when its final flush fails.
//   - At start, temp dirs of snapshots that never finished are removed
//     (removeStaleSnapshotTemps): raft ignores them but never deletes them.
//   - Before each snapshot, raft's TrailingLogs is lowered so that the
//     entries kept stay under Config.TrailingLogsBytes (trailingForBytes,
//     from the entries' sizes recorded as they were written, entrySizes;
//     with raft.ReloadConfig); and that many log bytes written since the
//     last snapshot trigger one (SnapshotByBytes), so that the Raft log
//     stays near twice the bound even when entries are large. While free
//     space is plentiful, the trigger is the last snapshot's state size
//     when that is larger (byteTrigger): a snapshot then never reads more
//     bytes of state than the log took since the last one. The state size
//     is that of the records before compression (the FSM reports it,
//     raftfsm.StateSizeSink): the file is about ten times smaller, but a
//     snapshot's work is reading the whole state, and the free-space
//     estimate keeps the uncompressed size too (snapshotEstimate).

// snapSinkCheckEvery is how many bytes a snapshot sink writes between two
// free-space checks; snapSinkSlack is the free space above the reserve it
// keeps for what is buffered (raft's 4 KiB writer and the FSM's 64 KiB one)
// plus one check interval.
const (
	snapSinkCheckEvery = 256 << 10
	snapSinkSlack      = 512 << 10
)

// snapshotAllowed reports whether a snapshot of need bytes may start with
// free bytes free: free must cover need plus reserve. A zero reserve (the
// check is off) allows every snapshot.
func snapshotAllowed(free, reserve, need uint64) bool {
	return reserve == 0 || free >= need+reserve
}

// snapshotEstimate is the expected size of the next snapshot: the last
// one's state size (its records before compression: the file is about ten
// times smaller, see below) scaled by how the task count changed since (a
// purge shrinks it), the bytes a cancelled one had written when that is
// more, and badger's size on disk when no snapshot was taken since start
// and none is on disk.
//
// The estimate is the uncompressed size on purpose. It is the room the
// write gate keeps above the reserve (DESIGN §14), and that room is also
// what the Raft log may grow into between two snapshots: with the
// compressed size (a few MiB) a fast writer filled a 256 MiB disk with log
// before the next snapshot could truncate it, and the snapshot, refused
// below the reserve, never came (e2e
// TestDiskPressure_FreeingWritesSnapshotsCompaction). So the arithmetic of
// the levels stays what it was with uncompressed snapshots, and a snapshot
// takes about a tenth of the room it is given.
type snapshotEstimate struct {
	mu    sync.Mutex
	size  uint64 // bytes of the last snapshot (or written by an aborted one)
	tasks int64  // tasks at that snapshot; -1 unknown (found on disk at start)
}

// expected returns the estimate for a state of tasksNow tasks; fallback
// gives the size to use when nothing is known (badger's size on disk).
func (e *snapshotEstimate) expected(tasksNow int64, fallback func() uint64) uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case e.size == 0:
		return fallback()
	case e.tasks < 0:
		return e.size
	default:
		return uint64(float64(e.size) * float64(tasksNow+1) / float64(e.tasks+1))
	}
}

// record sets the size of a finished snapshot of tasks tasks.
func (e *snapshotEstimate) record(size uint64, tasks int64) {
	e.mu.Lock()
	e.size, e.tasks = size, tasks
	e.mu.Unlock()
}

// recordAborted raises the estimate for tasks tasks to half as much
// again as the written bytes of a snapshot cancelled part way: it was
// larger than what it wrote, by an unknown amount. At exactly the written
// bytes the next snapshot would start from the same free space, fill the
// disk to the same point and be cancelled again, over and over (a review
// saw 58 snapshots cancelled at 27.5 MiB in 70 s); with the margin it
// waits until a purge or freed space makes room.
func (e *snapshotEstimate) recordAborted(written uint64, tasks int64) {
	floor := written + written/2
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.size == 0 || e.tasks < 0 || float64(e.size)*float64(tasks+1)/float64(e.tasks+1) < float64(floor) {
		e.size, e.tasks = floor, tasks
	}
}

// gatedSnapshotStore is raft's snapshot store with the disk-pressure gate
// (see above). dir is the store's directory (DataDir/snapshots).
type gatedSnapshotStore struct {
	raft.SnapshotStore
	dir       string
	freeSpace func() (DiskFree, error)
	reserve   func() uint64
	// tasks and diskSize feed the estimate: the FSM's task count and
	// badger's size on disk.
	tasks    func() int64
	diskSize func() uint64
	// beforeSnapshot runs before a snapshot of our own starts (it lowers
	// TrailingLogs); nil: nothing.
	beforeSnapshot func()
	// busy is Config.BackgroundWork: a snapshot's write is heavy work,
	// from Create (before beforeSnapshot) to its sink's Close or Cancel,
	// and so is a snapshot's read, from Open to the reader's Close (raft
	// restores one, made here or received from the leader, or sends one
	// to a follower).
	busy func() (done func())
	// persisted runs after a snapshot is complete.
	persisted func()
	est       snapshotEstimate
	log       zerolog.Logger

	skipped atomic.Uint64 // snapshots refused by the gate
	// logBytesAtSnap is LogWriteStats.bytes when the last snapshot was
	// complete, lastState the bytes of the state it stored
	// (gatedSink.SetStateBytes; its file's bytes when the FSM did not
	// say, as for a snapshot installed from the leader) (SnapshotByBytes).
	logBytesAtSnap atomic.Uint64
	lastState      atomic.Uint64
	// newest is the highest index of a snapshot stored (newestIndex).
	newest    atomic.Uint64
	lastSkipM sync.Mutex
	lastSkip  time.Time
	now       func() time.Time
}

// errSnapshotSkipped is the error of a snapshot the gate refuses.
var errSnapshotSkipped = errors.New("snapshot skipped: not enough free space")

// Create starts a snapshot when free space covers its expected size plus
// the reserve, and returns errSnapshotSkipped (wrapped, with the figures)
// otherwise.
func (s *gatedSnapshotStore) Create(version raft.SnapshotVersion, index, term uint64, configuration raft.Configuration,
	configurationIndex uint64, trans raft.Transport) (raft.SnapshotSink, error) {
	tasks := s.tasks()
	if err := s.admit(s.expectedSize()); err != nil {
		return nil, err
	}
	done := func() {}
	if s.busy != nil {
		done = s.busy()
	}
	if s.beforeSnapshot != nil {
		s.beforeSnapshot() // reads a restarted node's older entries back
	}
	sink, err := s.SnapshotStore.Create(version, index, term, configuration, configurationIndex, trans)
	if err != nil {
		done()
		return nil, err
	}
	return &gatedSink{SnapshotSink: sink, s: s, index: index, tasks: tasks, dir: filepath.Join(s.dir, sink.ID()+".tmp"), done: sync.OnceFunc(done)}, nil
}

// keepNewestAnd removes every snapshot but the newest one (raft's order:
// term, then index) and the one named written, which is older when a
// leader installs a snapshot behind this node's newest. The raft store
// under it keeps fileSnapshotsRetained; this brings it back to
// snapshotsRetained, and to two only while an older snapshot is the last
// one written.
//
// With raft's own reaping to one, an older snapshot received from the
// leader was deleted as its sink closed, before raft could restore it
// ("failed to open snapshot"), and the leader sent it again and again:
// the follower never caught up until the leader took a snapshot past the
// follower's (e2e TestSnapshot_LaggingFollowerCatchesUp; a node whose
// log raft emptied when it installed a snapshot a deposed leader sent,
// left with a next index below that snapshot at the new leader).
// Restoring the older snapshot is safe: it is a committed state, and the
// leader's entries after it follow.
func (s *gatedSnapshotStore) keepNewestAnd(written string) {
	metas, err := s.SnapshotStore.List()
	if err != nil {
		s.log.Warn().Err(err).Msg("cannot list snapshots to remove the older ones")
		return
	}
	for i, m := range metas {
		if i == 0 || m.ID == written {
			continue
		}
		if err := os.RemoveAll(filepath.Join(s.dir, m.ID)); err != nil {
			s.log.Warn().Err(err).Str("id", m.ID).Msg("cannot remove an older snapshot")
		}
	}
}

// newestIndex is the index of the newest snapshot stored (0: none).
func (s *gatedSnapshotStore) newestIndex() uint64 { return s.newest.Load() }

// snapshotFSM is the FSM raft runs: the store's, whose Snapshot answers
// raft.ErrNothingNewToSnapshot (which raft passes over in silence) when
// neither the state nor the Raft log is past the newest snapshot stored,
// newest(). (The log's entries that never reach the FSM, a new leader's
// no-op and barrier, still let a snapshot compact the log.)
//
// raft decides to snapshot when its log's last index is SnapshotThreshold
// past its last snapshot's, in unsigned arithmetic. A follower that has
// just installed a snapshot has an empty log (raft removes it, and
// raft-wal's LastIndex is then 0): 0 - 368 wrapped to nearly 2^64, and the
// node wrote its whole state out again at every SnapshotInterval, the
// same index each time, until the leader's next entry arrived (forever on
// a cluster with nothing to write; e2e TestSnapshot_LaggingFollowerCatchesUp
// logged 61 such snapshots in 30 s).
type snapshotFSM struct {
	*raftfsm.FSM
	newest  func() uint64
	lastLog func() (uint64, error) // the Raft log's LastIndex
}

// Snapshot is raftfsm.FSM.Snapshot, or raft.ErrNothingNewToSnapshot when
// neither the applied index nor the log's last index is above newest().
func (f snapshotFSM) Snapshot() (raft.FSMSnapshot, error) {
	if n := f.newest(); n > 0 && f.FSM.AppliedIndex() <= n {
		if last, err := f.lastLog(); err == nil && last <= n {
			return nil, raft.ErrNothingNewToSnapshot
		}
	}
	return f.FSM.Snapshot()
}

// Open opens a snapshot to read; a read is heavy background work (busy)
// until the reader is closed: raft restores the snapshot into the FSM
// (at start, or one received from the leader) or sends it to a follower,
// and closes the reader in either case.
func (s *gatedSnapshotStore) Open(id string) (*raft.SnapshotMeta, io.ReadCloser, error) {
	done := func() {}
	if s.busy != nil {
		done = s.busy()
	}
	meta, rc, err := s.SnapshotStore.Open(id)
	if err != nil {
		done()
		return nil, nil, err
	}
	return meta, &busyReader{ReadCloser: rc, done: sync.OnceFunc(done)}, nil
}

// busyReader ends the background work of a snapshot's read at Close.
type busyReader struct {
	io.ReadCloser
	done func()
}

func (r *busyReader) Close() error {
	defer r.done()
	return r.ReadCloser.Close()
}

// expectedSize is the expected size of the next snapshot (bytes).
func (s *gatedSnapshotStore) expectedSize() uint64 {
	return s.est.expected(s.tasks(), s.diskSize)
}

// fits reports whether free space covers a snapshot of need bytes plus the
// reserve (true when free space cannot be read: the sink's checks still
// apply), with the figures.
func (s *gatedSnapshotStore) fits(need uint64) (ok bool, free DiskFree, reserve uint64) {
	free, err := s.freeSpace()
	if err != nil {
		return true, free, 0
	}
	reserve = s.reserve()
	return snapshotAllowed(free.Bytes, reserve, need), free, reserve
}

// admit checks free space for a snapshot of need bytes; a refusal is
// counted and logged (at most once a minute).
func (s *gatedSnapshotStore) admit(need uint64) error {
	ok, free, reserve := s.fits(need)
	if ok {
		return nil
	}
	s.skipped.Add(1)
	err := fmt.Errorf("%w: %s free, the snapshot needs about %s plus the reserve of %s (--storage-reserve); raft retries at its next interval",
		errSnapshotSkipped, mib(free.Bytes), mib(need), mib(reserve))
	s.lastSkipM.Lock()
	nowFn := s.now
	if nowFn == nil {
		nowFn = engine.RealClock().Now
	}
	if now := nowFn(); now.Sub(s.lastSkip) >= time.Minute {
		s.lastSkip = now
		s.log.Warn().Uint64("free_bytes", free.Bytes).Uint64("expected_bytes", need).Uint64("reserve_bytes", reserve).
			Uint64("skipped", s.skipped.Load()).Msg("Raft snapshot skipped: free space does not cover its expected size plus the reserve")
	}
	s.lastSkipM.Unlock()
	return err
}

// gatedSink checks free space as the snapshot is written and removes the
// snapshot's temp dir when it is cancelled.
type gatedSink struct {
	raft.SnapshotSink
	s          *gatedSnapshotStore
	index      uint64 // the snapshot's last log index
	dir        string // the temp dir FileSnapshotStore writes into
	tasks      int64
	written    uint64
	stateBytes uint64 // the state's bytes before compression (SetStateBytes); 0: not told
	nextChk    uint64
	failed     error
	canceled   bool
	// done ends the background work Create began (Config.BackgroundWork)
	// at the sink's Close or Cancel.
	done func()
}

func (k *gatedSink) Write(p []byte) (int, error) {
	if k.failed != nil {
		return 0, k.failed
	}
	if k.written >= k.nextChk {
		k.nextChk = k.written + snapSinkCheckEvery
		if free, err := k.s.freeSpace(); err == nil {
			if r := k.s.reserve(); r > 0 && free.Bytes < r+snapSinkSlack+uint64(len(p)) {
				k.failed = fmt.Errorf("snapshot cancelled after %s: free space fell to %s, near the reserve of %s (--storage-reserve)",
					mib(k.written), mib(free.Bytes), mib(r))
				k.s.est.recordAborted(k.written, k.tasks)
				k.s.log.Warn().Uint64("written_bytes", k.written).Uint64("free_bytes", free.Bytes).Msg("Raft snapshot cancelled: free space near the reserve")
				return 0, k.failed
			}
		}
	}
	n, err := k.SnapshotSink.Write(p)
	k.written += uint64(n)
	return n, err
}

// SetStateBytes records the size of the state the snapshot stores, before
// compression (raftfsm.StateSizeSink): the next byte trigger.
func (k *gatedSink) SetStateBytes(n uint64) { k.stateBytes = n }

// Close finishes the snapshot; it records its size for the next estimate.
func (k *gatedSink) Close() error {
	defer k.done()
	if k.failed != nil {
		// raft's FSMSnapshot cancels on a failed write; a Close after it
		// must not keep a partial snapshot.
		return errors.Join(k.failed, k.Cancel())
	}
	err := k.SnapshotSink.Close()
	if err != nil {
		k.removeTemp()
		return err
	}
	state, tasks := k.stateBytes, k.tasks
	if state == 0 {
		// Not told: a snapshot installed from the leader, stored here
		// before this node restores it. Its state's size is taken as the
		// larger of its file and what was expected, and its task count
		// is unknown (-1: the estimate is not scaled by it): the count
		// read at Create is this node's before the restore, 0 on a new or
		// wiped node, and scaled by it the estimate of a 300 000-task
		// state came out at terabytes and refused every write here, even
		// after a restart (its record is saved).
		state, tasks = max(k.written, k.s.expectedSize()), -1
	}
	k.s.est.record(state, tasks)
	k.s.lastState.Store(state)
	k.s.saveEstimate(snapEstimateRecord{ID: k.ID(), Size: k.written, Tasks: tasks, StateBytes: state})
	k.s.keepNewestAnd(k.ID())
	for n := k.s.newest.Load(); k.index > n && !k.s.newest.CompareAndSwap(n, k.index); n = k.s.newest.Load() {
	}
	if k.s.persisted != nil {
		k.s.persisted()
	}
	return nil
}

// Cancel drops the snapshot and its temp dir.
func (k *gatedSink) Cancel() error {
	defer k.done()
	if k.canceled {
		return nil
	}
	k.canceled = true
	err := k.SnapshotSink.Cancel()
	k.removeTemp()
	return err
}

func (k *gatedSink) removeTemp() {
	if err := os.RemoveAll(k.dir); err != nil {
		k.s.log.Warn().Err(err).Str("path", k.dir).Msg("cannot remove a failed snapshot's temp dir")
	}
}

var (
	_ io.Writer             = (*gatedSink)(nil)
	_ raftfsm.StateSizeSink = (*gatedSink)(nil)
)

// removeStaleSnapshotTemps removes the temp dirs (*.tmp) of snapshots that
// never finished from the snapshot store's directory dir (raft skips them
// but never deletes them) and returns the bytes freed.
func removeStaleSnapshotTemps(dir string, log zerolog.Logger) uint64 {
	tmps, _ := filepath.Glob(filepath.Join(dir, "*.tmp"))
	var freed uint64
	for _, p := range tmps {
		size := uint64(DirSize(p))
		if err := os.RemoveAll(p); err != nil {
			log.Warn().Err(err).Str("path", p).Msg("cannot remove an unfinished snapshot's temp dir")
			continue
		}
		freed += size
		log.Info().Str("path", p).Uint64("bytes", size).Msg("removed an unfinished snapshot's temp dir")
	}
	return freed
}

// raftEntryOverhead approximates what the WAL stores per entry beyond its
// data (raft-wal's frame header and binary codec of raft.Log: index,
// term, type, extensions, append time; the padding and the segment
// index's offset).
const raftEntryOverhead = 64

// trailingForBytes returns how many of the newest entries of logs fit in
// maxBytes (data plus raftEntryOverhead each), at most maxEntries: the
// TrailingLogs that bounds what a snapshot leaves in the log by bytes. It
// goes backwards from the last entry and stops at the first that does not
// fit. An entry's data length comes from known when it has it (nil: from
// none), else from reading the entry.
func trailingForBytes(logs raft.LogStore, known func(idx uint64) (int, bool), maxEntries, maxBytes uint64) (uint64, error) {
	first, err := logs.FirstIndex()
	if err != nil {
		return maxEntries, err
	}
	last, err := logs.LastIndex()
	if err != nil {
		return maxEntries, err
	}
	if last == 0 || last < first {
		return maxEntries, nil
	}
	var n, sum uint64
	var l raft.Log
	for idx := last; idx >= first && n < maxEntries; idx-- {
		size, ok := 0, false
		if known != nil {
			size, ok = known(idx)
		}
		if !ok {
			if err := logs.GetLog(idx, &l); err != nil {
				if errors.Is(err, raft.ErrLogNotFound) {
					break
				}
				return maxEntries, err
			}
			size = len(l.Data)
		}
		sum += uint64(size) + raftEntryOverhead
		if sum > maxBytes {
			break
		}
		n++
		if idx == 0 {
			break
		}
	}
	return n, nil
}

// lowerTrailingLogs sets raft's TrailingLogs for the next log compaction
// to what fits Config.TrailingLogsBytes (at most Config.TrailingLogs).
// It runs in raft's snapshot goroutine, before the snapshot's compaction
// reads the value.
func (st *Store) lowerTrailingLogs() {
	r := st.Raft
	if r == nil || st.cfg.TrailingLogsBytes <= 0 {
		return
	}
	keep, err := trailingForBytes(st.logStore, st.sizes.dataLen, st.cfg.TrailingLogs, uint64(st.cfg.TrailingLogsBytes))
	if err != nil {
		st.log.Warn().Err(err).Msg("cannot size the trailing Raft log: keeping --trailing-logs entries")
		keep = st.cfg.TrailingLogs
	}
	rc := r.ReloadableConfig()
	if rc.TrailingLogs == keep {
		return
	}
	rc.TrailingLogs = keep
	if err := r.ReloadConfig(rc); err != nil {
		st.log.Warn().Err(err).Msg("cannot lower raft's trailing logs")
		return
	}
	if keep < st.cfg.TrailingLogs {
		st.log.Debug().Uint64("trailing_logs", keep).Int64("trailing_logs_bytes", st.cfg.TrailingLogsBytes).Msg("Raft log entries are large: keeping fewer after snapshots, to stay under --trailing-logs-bytes")
	}
}

// byteTrigger returns how many log bytes written since the last snapshot
// trigger the next one, for a bound of Config.TrailingLogsBytes: the last
// snapshot's state size (before compression) when that is larger and free
// space covers the expected snapshot plus that many log bytes above the
// reserve; bound otherwise.
//
// With the fixed bound, a state much larger than it was written out in
// full for every bound of log bytes: at 110 000 batched submits/s the
// 64 MiB bound fired every 2 s and the snapshots took 12 % of the node's
// CPU (docs/perf/README.md). Grown with the state, a snapshot reads at
// most as many bytes of state as the log took since the last one, and the
// log stays under bound (trailing) plus the larger of bound and the
// state's size. Under
// disk pressure the fixed bound holds, so that the log's growth never
// stands between a full disk and the snapshot that truncates the log.
func (s *gatedSnapshotStore) byteTrigger(bound uint64) uint64 {
	last := s.lastState.Load()
	if last <= bound {
		return bound
	}
	if ok, _, _ := s.fits(s.expectedSize() + last); !ok {
		return bound
	}
	return last
}

// SnapshotByBytes triggers a Raft snapshot when the log bytes written since
// the last one reach the byte trigger (byteTrigger: Config.TrailingLogsBytes,
// or the last snapshot's size when larger and the disk has room; checked
// every second), so that the Raft log stays bounded in bytes even when the
// entry-count threshold is far. A snapshot the gate refuses is tried again
// at the next check. It returns when ctx ends (at once without the bound).
func (st *Store) SnapshotByBytes(ctx context.Context) {
	bound := uint64(st.cfg.TrailingLogsBytes)
	if bound == 0 {
		return
	}
	snaps := st.snaps
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if st.LogStats.Bytes.Load()-snaps.logBytesAtSnap.Load() < snaps.byteTrigger(bound) {
			continue
		}
		// Ask the gate first: a refused user snapshot is an error line in
		// raft's log at every check.
		if ok, _, _ := snaps.fits(snaps.expectedSize()); !ok {
			continue
		}
		if err := st.Raft.Snapshot().Error(); err != nil && !errors.Is(err, raft.ErrNothingNewToSnapshot) {
			st.log.Debug().Err(err).Msg("snapshot by log bytes failed")
		}
	}
}

// snapshotsRetained is how many snapshots the store keeps: one. A second
// one (raft's usual 2) is a second full copy of the state on disk, and the
// node's own badger state and the log are the fallback of the first.
// raft's file store is opened with one more, and gatedSnapshotStore
// removes the extra one itself (keepNewestAnd), so that a snapshot older
// than the newest, installed from the leader, survives until raft
// restores it.
const snapshotsRetained = 1

// fileSnapshotsRetained is what raft's file store under the gate keeps.
const fileSnapshotsRetained = snapshotsRetained + 1

// openSnapshots removes unfinished snapshots' temp dirs and opens raft's
// file snapshot store (fileSnapshotsRetained, trimmed to snapshotsRetained
// by keepNewestAnd) behind the disk-pressure gate.
func (st *Store) openSnapshots(hlog hclog.Logger) (*gatedSnapshotStore, error) {
	dataDir := st.cfg.DataDir
	dir := filepath.Join(dataDir, "snapshots")
	removeStaleSnapshotTemps(dir, st.log)
	fs, err := raft.NewFileSnapshotStoreWithLogger(dataDir, fileSnapshotsRetained, hlog)
	if err != nil {
		return nil, fmt.Errorf("open snapshots: %w", err)
	}
	g := st.Guard
	s := &gatedSnapshotStore{
		SnapshotStore: fs, dir: dir, log: st.log, now: st.clock.Now,
		freeSpace:      func() (DiskFree, error) { return g.freeSpace(dataDir) },
		reserve:        g.reserve.Load,
		tasks:          st.FSM.TotalTasks,
		diskSize:       dropErr(cacheFor(diskSizeCacheFor, st.clock.Now, func() (uint64, error) { return dirAllocatedBytes(filepath.Join(dataDir, "state")), nil })),
		beforeSnapshot: st.lowerTrailingLogs,
		busy:           st.cfg.BackgroundWork,
	}
	s.persisted = func() { s.logBytesAtSnap.Store(st.LogStats.Bytes.Load()) }
	g.snapNeed = s.expectedSize
	if metas, err := fs.List(); err == nil && len(metas) > 0 {
		for _, m := range metas {
			s.newest.Store(max(s.newest.Load(), m.Index))
		}
		if len(metas) > snapshotsRetained {
			s.keepNewestAnd(metas[0].ID) // a stop before the older one's restore
		}
		rec := s.loadEstimate(metas[0].ID)
		s.est.size, s.est.tasks = max(rec.StateBytes, uint64(max(metas[0].Size, 0))), rec.Tasks
		s.lastState.Store(s.est.size)
	}
	return s, nil
}

// snapEstimateFile, in the snapshot store's directory, keeps the task
// count and state size of the newest snapshot, so that after a restart the
// estimate still follows the task count (a purge before the restart
// shrinks it) and the byte trigger the state's size.
const snapEstimateFile = "ax-snapshot-tasks.json"

// snapEstimateRecord is snapEstimateFile's content: the snapshot's id, its
// file's bytes, its tasks and its state's bytes before compression (0 in
// a file written before ax compressed snapshots).
type snapEstimateRecord struct {
	ID         string `json:"id"`
	Size       uint64 `json:"size"`
	Tasks      int64  `json:"tasks"`
	StateBytes uint64 `json:"state_bytes,omitempty"`
}

// saveEstimate records the task count and state size of a snapshot (best
// effort).
func (s *gatedSnapshotStore) saveEstimate(r snapEstimateRecord) {
	b, _ := json.Marshal(r)
	p := filepath.Join(s.dir, snapEstimateFile)
	if err := os.WriteFile(p+".new", b, 0o600); err == nil {
		_ = os.Rename(p+".new", p)
	}
}

// loadEstimate returns what is recorded for snapshot id; Tasks is -1 and
// StateBytes 0 when nothing is.
func (s *gatedSnapshotStore) loadEstimate(id string) snapEstimateRecord {
	b, err := os.ReadFile(filepath.Join(s.dir, snapEstimateFile))
	var r snapEstimateRecord
	if err != nil || json.Unmarshal(b, &r) != nil || r.ID != id || r.Tasks < 0 {
		return snapEstimateRecord{ID: id, Tasks: -1}
	}
	return r
}

// Compactor wraps the retention's badger compaction (Flatten), which
// writes the merged tables before it removes the old ones: it runs only
// when free space covers the live data (the snapshot estimate) plus the
// reserve. A skipped compaction is logged and kept pending: Run runs it
// once space allows.
type Compactor struct {
	g       *Guard
	snaps   *gatedSnapshotStore
	inner   func() error
	busy    func() (done func()) // Config.BackgroundWork; nil: none
	log     zerolog.Logger
	mu      sync.Mutex // one compaction at a time
	pending atomic.Bool
}

// GateCompaction returns the gated form of compact (see Compactor); start
// its Run. Call it after StartRaft.
func (st *Store) GateCompaction(compact func() error) *Compactor {
	return &Compactor{g: st.Guard, snaps: st.snaps, inner: compact, busy: st.cfg.BackgroundWork, log: st.log}
}

// allowed reports whether a compaction may run now.
func (c *Compactor) allowed(logSkip bool) bool {
	reserve := c.g.reserve.Load()
	free, err := c.g.FreeSpace()
	if reserve == 0 || err != nil {
		return true
	}
	need := c.snaps.expectedSize()
	if snapshotAllowed(free.Bytes, reserve, need) {
		return true
	}
	if logSkip {
		c.log.Warn().Uint64("free_bytes", free.Bytes).Uint64("live_bytes", need).Uint64("reserve_bytes", reserve).
			Msg("badger compaction postponed: free space does not cover the live data plus the reserve")
	}
	return false
}

// Compact runs the compaction when free space allows, and otherwise
// keeps it pending (returning nil); it returns the compaction's error.
// The compaction is background work (Config.BackgroundWork).
func (c *Compactor) Compact() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.allowed(!c.pending.Load()) {
		c.pending.Store(true)
		return nil
	}
	c.pending.Store(false)
	if c.busy != nil {
		defer c.busy()()
	}
	return c.inner()
}

// Run runs a postponed compaction once space allows (checked every 5 s)
// until ctx ends.
func (c *Compactor) Run(ctx context.Context) {
	t := time.NewTicker(5 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if c.pending.Load() {
			if err := c.Compact(); err != nil {
				c.log.Warn().Err(err).Msg("badger compaction after purges failed")
			}
		}
	}
}

// diskSizeCacheFor is how long the state dir's allocated size is reused
// by the snapshot estimate's fallback (before the first snapshot). Every
// write's storage check asks for the estimate, and listing and stating
// the badger dir took 29 % of a node's CPU under 8 submitting callers
// (docs/perf); the free-space check itself stays live (one statfs).
const diskSizeCacheFor = time.Second

// cacheFor returns fn's value, computed again only when it is older than
// d by now's clock (or the clock stepped back). An answer with an error
// is returned but not kept: the next call asks again.
func cacheFor[T any](d time.Duration, now func() time.Time, fn func() (T, error)) func() (T, error) {
	var mu sync.Mutex
	var at time.Time
	var v T
	return func() (T, error) {
		mu.Lock()
		defer mu.Unlock()
		if t := now(); at.IsZero() || t.Sub(at) >= d || t.Before(at) {
			nv, err := fn()
			if err != nil {
				return nv, err
			}
			v, at = nv, t
		}
		return v, nil
	}
}

// dropErr adapts a function that never fails.
func dropErr[T any](fn func() (T, error)) func() T {
	return func() T { v, _ := fn(); return v }
}

// dirAllocatedBytes returns the disk space the files in dir take (their
// allocated blocks, not their apparent sizes: badger sizes its memtable
// and value-log files in advance, sparsely).
func dirAllocatedBytes(dir string) uint64 {
	var total uint64
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		fi, err := e.Info()
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			total += uint64(st.Blocks) * 512
		} else {
			total += uint64(fi.Size())
		}
	}
	return total
}

// Collectors are the snapshot gate's metrics.
func (s *gatedSnapshotStore) Collectors() []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "ax_raft_snapshots_skipped_total", Help: "Raft snapshots not started because free space did not cover their expected size plus --storage-reserve (raft tries again at its next interval)."},
			func() float64 { return float64(s.skipped.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "ax_raft_snapshot_expected_bytes", Help: "Expected size of the next Raft snapshot (the state before compression: the file is smaller): writes leave this much free on top of --storage-reserve."},
			func() float64 { return float64(s.expectedSize()) }),
	}
}

// DirSize adds up the sizes of the files in dir (badger keeps a few dozen).
func DirSize(dir string) int64 {
	var total int64
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if fi, err := e.Info(); err == nil && fi.Mode().IsRegular() {
			total += fi.Size()
		}
	}
	return total
}
