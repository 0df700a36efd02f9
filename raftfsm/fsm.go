package raftfsm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/dgraph-io/badger/v4"
	"github.com/hashicorp/raft"
)

// Event tells an Observer what an applied command changed.
type Event struct {
	// Type is the command that caused the change.
	Type CommandType
	// Index and Term are the Raft index and term of the entry that held
	// the command.
	Index, Term uint64
	// Task is the task after the change (nil for node events and for a
	// handler's pause or resume); for CmdPurge, the deleted task as it
	// was stored.
	Task *Task
	// Prev is the task's state before the change (0 when it was created,
	// and for CmdPause, which changes no state: a pause of a RUNNING task
	// does not end its attempt).
	Prev State
	// PrevNode is the node that ran the task's attempt before the change.
	PrevNode string
	// Node is set for CmdNode and CmdExecutor events.
	Node *Node
	// Outcome is the reported outcome, for CmdComplete events.
	Outcome Outcome
	// Alert is set on a CmdComplete event that wrote a pending alert
	// (the run ended DEAD or FAILED with Complete.Alert; alert.go).
	Alert bool
	// RunEnded is the number of the run whose record this change closed
	// (a CmdComplete that ended the run, a CmdCancel of a run that had
	// fired), when the run has history; 0 otherwise. EndedBy is the node
	// that ran the last attempt when its own Complete ended the run (it
	// carried the call's report), "" when the leader decided the end (a
	// cancel, a timeout, a lost node, an app's reported result). Used to
	// export the run once (sidecar/otelexport).
	RunEnded int
	EndedBy  string
	// Pause is the applied pause or resume, for CmdPause events (of a
	// handler, or of the task in Task).
	Pause *Pause
	// Restored is set on the one event sent after a snapshot restore
	// replaced all state: observers that cache state drop their caches.
	Restored bool
}

// Observer is told about every change once its entry is committed to
// badger, on every node, in log order. Applied is called from the FSM's apply
// goroutine: it must not block and must not call back into Apply.
type Observer interface {
	Applied(index uint64, events []Event)
}

// FSM is the ax state machine over badger. It implements raft.FSM and
// raft.ConfigurationStore.
//
// Contract (see the package doc): deterministic — no clock, no randomness;
// each entry's effects and the applied index are written in one badger
// transaction, and entries at or below the stored applied index are skipped;
// Snapshot only pins a badger read view and Persist streams it; Restore
// drops all state first. Apply fails closed: an undecodable entry, an unknown
// command type or an undecodable stored record panics, stopping the node,
// because skipping an entry would make this replica diverge silently. A
// storage error (a failed badger read or commit: disk full, permission,
// I/O) is not a bug and would fail again after a restart, so it neither
// panics nor skips: the FSM becomes degraded (StorageError) and retries the
// same entry's write with backoff until the disk takes it (see sidecar/raftstore/storage.go
// and SetWriteGate).
type FSM struct {
	db       *badger.DB
	observer atomic.Pointer[observerBox]

	applied atomic.Uint64
	counts  [numStates]atomic.Int64 // tasks per state, as stored
	mu      sync.Mutex
	waitCh  chan struct{} // closed and replaced when applied moves

	handlerCounts // tasks per handler and state (pause.go)

	// ids holds every stored task id, and maybe others (idfilter.go): a
	// submit of an id it does not hold reads nothing. nil until Open's
	// scan, and from the start of a Restore until its scan. Used only on
	// the apply goroutine.
	ids *idFilter
	// rebuild is the next filter while it is built in steps
	// (stepIDRebuild); idRebuildSlack and idRebuildStep are its
	// constants, fields for tests.
	rebuild        *idRebuild
	idRebuildSlack uint64
	idRebuildStep  int

	// broken is set when a Restore failed after dropping the old state:
	// badger then holds neither state, so Apply, StoreConfiguration and
	// Snapshot refuse to run until a Restore succeeds.
	broken atomic.Bool

	storageState // degraded mode: see sidecar/raftstore/storage.go

	// tasks holds the task records written last (taskcache.go).
	tasks taskCache

	// countsSaved reports that the last Open or Restore took the tasks
	// per handler saved with the state (savedcounts.go) rather than
	// counting them. Written on the apply goroutine (or before raft runs).
	countsSaved bool
	// recountedAfterSplit reports that Open found a writer stopped between
	// the parts of a split transaction and counted the tasks again
	// (splitentry.go).
	recountedAfterSplit bool
}

type observerBox struct{ o Observer }

var (
	_ raft.FSM                = (*FSM)(nil)
	_ raft.ConfigurationStore = (*FSM)(nil)
)

// Open opens the FSM over an open badger database and reads its applied
// index, its task counts and its tasks per handler: those SaveHandlerCounts
// stored at a clean stop when they still hold (savedcounts.go), else
// counted from every task record.
func Open(db *badger.DB) (*FSM, error) {
	f := &FSM{db: db, waitCh: make(chan struct{}), idRebuildSlack: idRebuildSlack, idRebuildStep: idRebuildStep}
	f.abortCh = make(chan struct{})
	var idx uint64
	err := db.View(func(txn *badger.Txn) error {
		var err error
		idx, err = readApplied(txn)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("read applied index: %w", err)
	}
	f.applied.Store(idx)
	if err := f.loadCounts(); err != nil {
		return nil, fmt.Errorf("read task counts: %w", err)
	}
	split, err := splitEntryPending(db)
	if err != nil {
		return nil, fmt.Errorf("read the split-entry marker: %w", err)
	}
	if split {
		// A writer stopped between the parts of a split transaction: the
		// stored counts may miss the committed parts (splitentry.go).
		if err := f.recountAfterSplit(); err != nil {
			return nil, err
		}
		f.recountedAfterSplit = true
	}
	if _, err := backfillFinished(db, f.terminalCount()); err != nil {
		return nil, fmt.Errorf("index finished tasks: %w", err)
	}
	if !split {
		if err := f.loadHandlerCountsAt(idx); err != nil {
			return nil, err
		}
	}
	return f, nil
}

// SetObserver installs o; nil removes it.
func (f *FSM) SetObserver(o Observer) {
	if o == nil {
		f.observer.Store(nil)
		return
	}
	f.observer.Store(&observerBox{o})
}

// AppliedIndex returns the last Raft index whose effects are in badger.
func (f *FSM) AppliedIndex() uint64 { return f.applied.Load() }

// AppliedCh returns a channel closed when the applied index next moves;
// use it with AppliedIndex to wait for an index without polling.
func (f *FSM) AppliedCh() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.waitCh
}

func (f *FSM) setApplied(idx uint64) {
	f.applied.Store(idx)
	f.mu.Lock()
	close(f.waitCh)
	f.waitCh = make(chan struct{})
	f.mu.Unlock()
}

func readApplied(txn *badger.Txn) (uint64, error) {
	item, err := txn.Get(keyApplied)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	var idx uint64
	err = item.Value(func(v []byte) error {
		if len(v) != 8 {
			return fmt.Errorf("applied index of %d bytes: %w", len(v), ErrBadEntry)
		}
		idx = binary.BigEndian.Uint64(v)
		return nil
	})
	return idx, err
}

// Apply applies one Raft log entry and returns []Result, one per command.
// An entry at or below the applied index returns nil (it was applied before
// a restart). It panics on an entry it cannot apply (see FSM); on a storage
// error it blocks, retrying, until the write succeeds or Abort is called.
func (f *FSM) Apply(l *raft.Log) interface{} {
	return f.ApplyBatch([]*raft.Log{l})[0]
}

// batchFlushOps: ApplyBatch commits its transaction at the next entry
// boundary once the current part holds this many writes, so that a batch of
// entries never makes badger split a transaction in the middle of an entry
// any more often than one entry alone would (see writer).
const batchFlushOps = 1000

// appliedEntry is an entry of a writer: its index and the events its
// commands produced, handed to the observer once the writer commits.
type appliedEntry struct {
	index  uint64
	events []Event
}

// ApplyBatch implements raft.BatchingFSM: it applies the entries raft
// committed together (commands and configuration changes, in index order)
// and returns one response per entry, the same as Apply and
// StoreConfiguration would. Consecutive entries share one badger
// transaction, with the counts and the applied index written once, at the
// last entry of the transaction: one commit (and one wait for badger's
// write goroutine) instead of one per entry. The applied-index rule holds
// as for one entry: the index moves with the last part, so a crash before
// it re-applies the whole group, whose commands are idempotent. The group
// is cut at an entry boundary when the class of the entry changes (only
// space-freeing commands, or not: the storage gate waits on a group that
// does not free space, and must not hold back a freeing entry behind it)
// and after batchFlushOps writes. Events go to the observer per entry,
// in order, after the commit.
func (f *FSM) ApplyBatch(logs []*raft.Log) []interface{} {
	out := make([]interface{}, len(logs))
	f.stepIDRebuild()
	var w *writer
	var group []appliedEntry
	flush := func() {
		if w == nil {
			return
		}
		f.finishWriter(w, group[len(group)-1].index, group)
		w, group = nil, nil
	}
	for i, l := range logs {
		if f.broken.Load() {
			panic(fmt.Sprintf("raftfsm: entry %d: %v", l.Index, errRestoreFailed))
		}
		if l.Index <= f.applied.Load() {
			continue // applied before a restart
		}
		switch l.Type {
		case raft.LogCommand:
			cmds, err := DecodeEntry(l.Data)
			if err != nil {
				panic(fmt.Sprintf("raftfsm: entry %d: %v", l.Index, err))
			}
			frees := EntryFreesSpace(cmds)
			if w != nil && (w.frees != frees || len(w.ops) >= batchFlushOps) {
				flush()
			}
			if w == nil {
				w = f.newWriter()
				w.frees = frees
			}
			results, events := w.applyEntry(l.Index, cmds)
			for j := range events {
				events[j].Term = l.Term
			}
			out[i] = results
			group = append(group, appliedEntry{index: l.Index, events: events})
		case raft.LogConfiguration:
			// Only the applied index moves (StoreConfiguration): it may
			// ride in any group.
			if w == nil {
				w = f.newWriter()
				w.frees = true
			}
			w.index = l.Index
			group = append(group, appliedEntry{index: l.Index})
		}
	}
	flush()
	return out
}

// applyEntry applies the commands of entry index into w and returns their
// results and events. It panics on a command it cannot apply (see FSM).
func (w *writer) applyEntry(index uint64, cmds []Command) ([]Result, []Event) {
	w.index = index
	before := w.deltas
	results := make([]Result, len(cmds))
	var events []Event
	for i := range cmds {
		r, ev, err := apply(w, index, &cmds[i])
		if err != nil {
			w.discard()
			panic(fmt.Sprintf("raftfsm: entry %d command %d: %v", index, i, err))
		}
		r.Index = index
		results[i] = r
		for j := range ev {
			ev[j].Index = index
		}
		events = append(events, ev...)
	}
	for st := range w.deltas {
		if w.deltas[st] != before[st] {
			w.touched[st] = true
		}
	}
	return results, events
}

// finishWriter commits w with applied index last, publishes the counts and
// the applied index, and hands each entry's events to the observer.
func (f *FSM) finishWriter(w *writer, last uint64, entries []appliedEntry) {
	if err := w.finish(last); err != nil {
		panic(fmt.Sprintf("raftfsm: entry %d: commit: %v", last, err))
	}
	f.addCounts(&w.deltas)
	f.addHandlerCounts(w.hdeltas)
	f.setApplied(last)
	if b := f.observer.Load(); b != nil {
		for _, e := range entries {
			if len(e.events) > 0 {
				b.o.Applied(e.index, e.events)
			}
		}
	}
}

// StoreConfiguration records the index of a configuration entry as applied,
// so the stored applied index matches raft's view exactly.
func (f *FSM) StoreConfiguration(index uint64, _ raft.Configuration) {
	if f.broken.Load() {
		panic(fmt.Sprintf("raftfsm: configuration entry %d: %v", index, errRestoreFailed))
	}
	if index <= f.applied.Load() {
		return
	}
	w := f.newWriter()
	w.index = index
	w.frees = true // only the applied index: see SetSpaceGate
	if err := w.finish(index); err != nil {
		panic(fmt.Sprintf("raftfsm: configuration entry %d: %v", index, err))
	}
	f.setApplied(index)
}

// writer is a badger write transaction that splits itself when it grows past
// badger's transaction limit. The applied index goes into the last part, so
// a crash between parts re-applies the entry, whose commands are idempotent.
//
// It also keeps the per-state task counts: putTask records deltas, and the
// last part writes the counts as they stand, next to the applied index.
// (The commands of the parts that committed before a crash re-apply as
// no-ops and count nothing: a writer that splits marks it in the store
// first, and the next Open counts the records again; splitentry.go.)
//
// Storage errors never reach the apply logic: a failed read is retried on
// the same transaction, and a failed commit is retried by rebuilding the
// part's transaction from ops, the sets and deletes of the part, with
// backoff until it succeeds (FSM.retryStorage). So the commands of an entry
// run exactly once in memory, whatever the disk does, and the results and
// events are the same as without the fault. Rewriting a part is idempotent:
// its ops are absolute values, and the applied index only moves with the
// last part.
type writer struct {
	f      *FSM
	db     *badger.DB
	txn    *badger.Txn      // nil after a failed commit, until rebuilt
	index  uint64           // the entry being applied, for StorageError
	frees  bool             // every command of the entry frees space (the gate's argument)
	ops    []writeOp        // the current part's writes, to rebuild txn
	base   [numStates]int64 // counts before this entry
	deltas [numStates]int64
	// touched: the count of the state changed in some entry of the
	// writer (ApplyBatch), so finish writes it even when the changes
	// cancel out over the group, as one entry at a time would have.
	touched [numStates]bool
	// hdeltas are deltas per handler (FSM.HandlerCounts).
	hdeltas map[string]*[numStates]int64
	// splitMarked: the writer split and stored keySplitEntry
	// (splitentry.go); its last part deletes it.
	splitMarked bool
}

// writeOp is one set (del false) or delete of a writer's current part.
type writeOp struct {
	key, val []byte
	del      bool
	// uncached: a task record not kept in the task cache once committed
	// (putTaskRecord: not due soon, or final). fresh: a new record
	// (putTaskRecord with prev nil), which no stored or cached record
	// precedes, so its commit has nothing to drop from the cache.
	uncached, fresh bool
	// next, stale and at rank a task record in the task cache
	// (taskCache.rank; Unix ms, 0 for other writes): its next command is
	// expected from next on (a WAITING task's due time, a RUNNING one's
	// fire time: its Complete may come at once), and not after stale (the
	// due time or the write's, whichever is later, or the attempt's lease,
	// plus taskCacheOverdue: a task paused or parked at its due time, an
	// attempt that hangs); at is the time of the command that wrote it
	// (Task.UpdatedMs).
	next, stale, at int64
}

func (f *FSM) newWriter() *writer {
	w := &writer{f: f, db: f.db, txn: f.db.NewTransaction(true)}
	for i := range w.base {
		w.base[i] = f.counts[i].Load()
	}
	return w
}

// count records that the number of tasks of handler in state s changes
// by d. Every write that adds, removes or moves a task calls it.
func (w *writer) count(handler string, s State, d int64) {
	w.deltas[s] += d
	if w.hdeltas == nil {
		w.hdeltas = map[string]*[numStates]int64{}
	}
	hd := w.hdeltas[handler]
	if hd == nil {
		hd = new([numStates]int64)
		w.hdeltas[handler] = hd
	}
	hd[s] += d
}

// split commits the full transaction and starts the next part; before the
// first part, it marks the split in the store (markSplit).
func (w *writer) split() error {
	if !w.splitMarked {
		w.markSplit()
	}
	w.commit()
	w.txn = w.db.NewTransaction(true)
	return nil
}

// commit commits the current part, retrying storage errors until it
// succeeds (see writer).
func (w *writer) commit() {
	w.f.retryStorage(w.index, func() error {
		if w.txn == nil {
			w.rebuild()
		}
		if g := w.f.gate.Load(); g != nil {
			if err := (*g)(w.frees); err != nil {
				return err
			}
		}
		commit := w.f.commitTxn
		if commit == nil {
			commit = (*badger.Txn).Commit
		}
		if err := commit(w.txn); err != nil {
			// badger discards a transaction whose commit failed; a part
			// of its writes may be in the memtable at its commit
			// timestamp. The rebuilt transaction writes all of them
			// again, with the same values.
			w.txn.Discard()
			w.txn = nil
			return err
		}
		return nil
	})
	w.f.tasks.committed(w.ops)
	w.ops = w.ops[:0]
}

// rebuild starts a new transaction holding the current part's ops.
func (w *writer) rebuild() {
	w.txn = w.db.NewTransaction(true)
	for _, op := range w.ops {
		var err error
		if op.del {
			err = w.txn.Delete(op.key)
		} else {
			err = w.txn.Set(op.key, op.val)
		}
		if err != nil {
			// The same writes fitted one transaction before: a bug.
			panic(fmt.Sprintf("raftfsm: entry %d: rebuilding a transaction: %v", w.index, err))
		}
	}
}

// get reads key into v. It returns false when the key does not exist, and
// an error only when the stored record cannot be decoded (corruption):
// badger errors are retried (see writer).
func (w *writer) get(key []byte, v any) (bool, error) {
	return w.getWith(key, func(b []byte) error { return decodeRecord(b, v) })
}

// getWith is get with the record decoded by decode, called only when the
// key exists (loadTask allocates a task only then).
func (w *writer) getWith(key []byte, decode func([]byte) error) (bool, error) {
	found := false
	var decErr error // not a storage error: never retried
	w.f.retryStorage(w.index, func() error {
		item, err := w.txn.Get(key)
		if errors.Is(err, badger.ErrKeyNotFound) {
			found = false
			return nil
		}
		if err != nil {
			return err
		}
		err = item.Value(func(b []byte) error {
			decErr = decode(b)
			return nil
		})
		found = err == nil
		return err
	})
	if !found {
		return false, nil
	}
	return true, decErr
}

func (w *writer) set(key, val []byte) error {
	return w.setOp(writeOp{key: key, val: val})
}

// setOp sets op.key to op.val in the writer's transaction and records op
// for the commit; a task record's cached value is forgotten unless op is
// fresh (no record of it is stored, so none is cached).
func (w *writer) setOp(op writeOp) error {
	if err := w.txnSet(op.key, op.val); err != nil {
		return err
	}
	w.ops = append(w.ops, op)
	if !op.fresh && isTaskKey(op.key) {
		w.f.tasks.forget(op.key)
	}
	return nil
}

func (w *writer) del(key []byte) error {
	err := w.txn.Delete(key)
	if errors.Is(err, badger.ErrTxnTooBig) {
		if err := w.split(); err != nil {
			return err
		}
		err = w.txn.Delete(key)
	}
	if err == nil {
		w.ops = append(w.ops, writeOp{key: key, del: true})
		if isTaskKey(key) {
			w.f.tasks.forget(key)
		}
	}
	return err
}

// putTaskRecord writes task t's record under key (putTask, the one writer
// of task records). fresh: no record of the task is stored (nor, so,
// cached: the cache holds committed records only), and the write skips
// the cache's forget. keep: the record is kept in the task cache once
// committed, ranked by when its next command is expected (writeOp.next).
// A new task due a day later, or a record in a final state, would
// otherwise take a cache entry (a map insert, an eviction of a record a
// Fire or Complete may still read) that nothing reads before it is
// gone: in a batch of new tasks that churn was ~6-10 % of every node's
// CPU (docs/perf/README.md, Sixteenth session).
func (w *writer) putTaskRecord(key []byte, t *Task, fresh, keep bool) error {
	b, err := encodeRecord(t)
	if err != nil {
		return err
	}
	op := writeOp{key: key, val: b, uncached: !keep, fresh: fresh, next: t.DueMs, stale: max(t.DueMs, t.UpdatedMs), at: t.UpdatedMs}
	if t.State != StateWaiting {
		op.next, op.stale = t.FiredMs, max(t.FiredMs, t.LeaseMs)
	}
	op.stale += taskCacheOverdue.Milliseconds()
	return w.setOp(op)
}

// txnSet sets key to val in the writer's transaction, splitting the
// entry's write into another part when the transaction is full.
func (w *writer) txnSet(key, val []byte) error {
	err := w.txn.Set(key, val)
	if errors.Is(err, badger.ErrTxnTooBig) {
		if err := w.split(); err != nil {
			return err
		}
		err = w.txn.Set(key, val)
	}
	return err
}

func (w *writer) putRecord(key []byte, v any) error {
	b, err := encodeRecord(v)
	if err != nil {
		return err
	}
	return w.set(key, b)
}

// finish writes the counts and the applied index into the last part and
// commits it, retrying storage errors until it succeeds.
func (w *writer) finish(index uint64) error {
	w.index = index
	for st, d := range w.deltas {
		if d != 0 || w.touched[st] {
			if err := w.set(countKey(State(st)), binary.BigEndian.AppendUint64(nil, uint64(w.base[st]+d))); err != nil {
				return err
			}
		}
	}
	if err := w.set(keyApplied, binary.BigEndian.AppendUint64(nil, index)); err != nil {
		return err
	}
	// Last, so that a split by any write above (the counts', the applied
	// index's) is marked before this check (splitentry.go). Should the
	// delete itself split, the marker outlives the applied index by one
	// part: a stop then costs a recount, never wrong counts.
	if w.splitMarked {
		if err := w.del(keySplitEntry); err != nil {
			return err
		}
	}
	w.commit()
	return nil
}

func (w *writer) discard() {
	if w.txn != nil {
		w.txn.Discard()
	}
}

// Snapshot pins a badger read view at the current applied index, with the
// tasks per handler at that index. It returns at once; Persist does the
// I/O.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	if f.broken.Load() {
		return nil, errRestoreFailed
	}
	// raft calls Snapshot on the goroutine that applies, between two
	// ApplyBatch calls: the counts in memory are those of the view.
	return &snapshot{txn: f.db.NewTransaction(false), applied: f.applied.Load(), counts: f.handlerCounts.all()}, nil
}

// errRestoreFailed is the panic (or error) of an FSM whose last Restore failed
// after dropping the old state.
var errRestoreFailed = errors.New("state is half restored after a failed snapshot restore")

// Restore replaces all state with a snapshot written by Persist. When it
// fails after dropping the old state, the FSM fails closed until a later
// Restore succeeds.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	f.ids, f.rebuild = nil, nil // the state they hold ids of is dropped: read until the scan
	f.tasks.clear()
	idx, dropped, err := restore(f.db, rc)
	if err != nil {
		if dropped {
			// badger holds part of the snapshot and no applied index.
			f.broken.Store(true)
			f.applied.Store(0)
		}
		return fmt.Errorf("restore snapshot: %w", err)
	}
	f.broken.Store(false)
	if err := f.loadCounts(); err != nil {
		return fmt.Errorf("restore snapshot: read task counts: %w", err)
	}
	if _, err := backfillFinished(f.db, f.terminalCount()); err != nil {
		return fmt.Errorf("restore snapshot: index finished tasks: %w", err)
	}
	// The snapshot carries its counts per handler (snapshot.go); one
	// written before it did, or whose counts do not add up, is counted.
	if err := f.loadHandlerCountsAt(idx); err != nil {
		return fmt.Errorf("restore snapshot: %w", err)
	}
	f.setApplied(idx)
	if b := f.observer.Load(); b != nil {
		b.o.Applied(idx, []Event{{Restored: true}})
	}
	return nil
}

// numStates sizes per-state arrays (index = State).
const numStates = int(StateCancelled) + 1

// Counts returns how many tasks are in each state, indexed by State
// (index 0 is unused). O(1): the counts are kept with every apply.
func (f *FSM) Counts() [numStates]int64 {
	var c [numStates]int64
	for i := range c {
		c[i] = f.counts[i].Load()
	}
	return c
}

// TotalTasks is the number of stored tasks, all states (the sum of
// Counts; never negative).
func (f *FSM) TotalTasks() int64 {
	var n int64
	for _, c := range f.Counts() {
		n += c
	}
	return max(n, 0)
}

func (f *FSM) addCounts(d *[numStates]int64) {
	for i, v := range d {
		if v != 0 {
			f.counts[i].Add(v)
		}
	}
}

func (f *FSM) loadCounts() error {
	return f.db.View(func(txn *badger.Txn) error {
		for s := StateWaiting; s <= StateCancelled; s++ {
			var v int64
			item, err := txn.Get(countKey(s))
			if err == nil {
				err = item.Value(func(b []byte) error {
					if len(b) != 8 {
						return fmt.Errorf("count of %d bytes: %w", len(b), ErrBadEntry)
					}
					v = int64(binary.BigEndian.Uint64(b))
					return nil
				})
			} else if errors.Is(err, badger.ErrKeyNotFound) {
				err = nil
			}
			if err != nil {
				return err
			}
			f.counts[s].Store(v)
		}
		return nil
	})
}
