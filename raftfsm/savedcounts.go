package raftfsm

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/dgraph-io/badger/v4"
)

// Saved counts per handler (a restart or restore without decoding every
// task).
//
// The FSM keeps how many tasks each handler has in each state in memory
// (handlerCounts) and, at Open, counted them by decoding every task
// record: 78–84 % of a restart's CPU at 3M and 10M stored tasks (DESIGN
// §13), 2.2 s of 2.7 s per million tasks (BenchmarkOpenSavedCounts). A
// node that stops cleanly now saves them (SaveHandlerCounts, after raft
// has stopped: no Apply runs any more), with the applied index they are
// true at, under keySavedCounts; the next Open takes them when that index
// is still badger's applied index, and builds the id filter from the task
// keys alone (no record decoded: about a fifth of the time). The counts
// are a function of the state at that index, so they hold whatever came
// between (a restore of a snapshot taken at the same index included).
// Open deletes the record in either case, so it never lasts past the
// first Apply, and checks its sums against the per-state counts (m/count/,
// kept with every entry): any difference, a stale index, an old binary's
// stop (no record) or a crash falls back to the full scan.
//
// A snapshot carries the same record, at its own index (Snapshot takes
// the counts on the apply goroutine, with the read view; Persist writes
// them after the view's keys), and Restore takes them the same way: a
// restore of a million tasks spent a third of its time counting them
// (BenchmarkRestoreSavedCounts). A snapshot written before carries none
// and is counted; an older binary that restores a newer snapshot keeps
// the record as an unknown key, which the next Open of a newer one
// deletes (and takes only if it still holds).

// keySavedCounts holds savedCounts from a clean stop to the next Open.
var keySavedCounts = []byte("m/saved-handler-counts")

// savedCountsMaxBytes bounds keySavedCounts' record: counts that encode
// to more (about 25 000 handlers with the longest names, 100 000 with
// short ones) are not saved, and the next Open or Restore counts the
// tasks. One badger value holds at most the value log file size (64 MiB
// in OpenDB): a larger record in a snapshot made every restore of it fail
// after dropping the old state, on this version and on older ones, which
// store the record as an unknown key.
const savedCountsMaxBytes = 8 << 20

// savedCounts is keySavedCounts' record: the tasks per handler and state
// at applied index Index, in handler order (so that the same counts are
// the same bytes, in a snapshot too).
type savedCounts struct {
	Index    uint64         `msgpack:"i"`
	Handlers []handlerCount `msgpack:"h"`
}

// handlerCount is one handler's tasks per state (indexed by State; index
// 0 is no state).
type handlerCount struct {
	Name   string           `msgpack:"n"`
	Counts [numStates]int64 `msgpack:"c"`
}

// newSavedCounts returns the record of counts c at applied index idx.
func newSavedCounts(idx uint64, c map[string][numStates]int64) *savedCounts {
	rec := &savedCounts{Index: idx, Handlers: make([]handlerCount, 0, len(c))}
	for name, n := range c {
		rec.Handlers = append(rec.Handlers, handlerCount{Name: name, Counts: n})
	}
	slices.SortFunc(rec.Handlers, func(a, b handlerCount) int { return strings.Compare(a.Name, b.Name) })
	return rec
}

// SaveHandlerCounts stores the tasks per handler and state with the
// applied index they are true at, for the next Open to read instead of
// decoding every task record. Call it when no Apply or Restore runs any
// more (raft has shut down) and before badger closes; it writes nothing
// for an FSM whose restore failed. It returns badger's error (the next
// Open then scans, as without it).
func (f *FSM) SaveHandlerCounts() error {
	if f.broken.Load() {
		return nil
	}
	b, err := encodeSavedCounts(f.applied.Load(), f.handlerCounts.all())
	if err != nil || b == nil {
		return err // nil: too many handlers, the next Open counts them
	}
	return f.db.Update(func(txn *badger.Txn) error { return txn.Set(keySavedCounts, b) })
}

// encodeSavedCounts returns the record of counts c at applied index idx,
// or nil when it would pass savedCountsMaxBytes.
func encodeSavedCounts(idx uint64, c map[string][numStates]int64) ([]byte, error) {
	b, err := encodeRecord(newSavedCounts(idx, c))
	if err != nil || len(b) > savedCountsMaxBytes {
		return nil, err
	}
	return b, nil
}

// HandlerCountsSaved reports whether Open took the tasks per handler that
// SaveHandlerCounts saved at the last clean stop (false: it decoded every
// task record to count them). Call it before raft starts: a Restore sets
// it too (for the counts a snapshot carries).
func (f *FSM) HandlerCountsSaved() bool { return f.countsSaved }

// loadSavedCounts takes the counts SaveHandlerCounts stored when they are
// true at applied index idx and add up to the per-state counts (loaded
// first), and then builds the id filter from the task keys; it reports
// whether it did (false: the caller scans). It deletes the record either
// way.
func (f *FSM) loadSavedCounts(idx uint64) (bool, error) {
	var rec savedCounts
	var found bool
	var decodeErr error
	err := f.db.Update(func(txn *badger.Txn) error {
		item, err := txn.Get(keySavedCounts)
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		found = true
		err = item.Value(func(b []byte) error {
			decodeErr = decodeRecord(b, &rec) // any error: it does not hold
			return nil
		})
		if err != nil {
			return err
		}
		return txn.Delete(keySavedCounts)
	})
	if err != nil || !found {
		return false, err
	}
	if decodeErr != nil || rec.Index != idx {
		return false, nil
	}
	hc := make(map[string]*[numStates]int64, len(rec.Handlers))
	var sums [numStates]int64
	for _, h := range rec.Handlers {
		c := h.Counts
		if hc[h.Name] != nil {
			return false, nil
		}
		var total int64
		for s, v := range c {
			if v < 0 || (s == 0 && v != 0) { // index 0 is no state
				return false, nil
			}
			sums[s] += v
			total += v
		}
		if total > 0 {
			hc[h.Name] = &c
		}
	}
	for s := StateWaiting; s <= StateCancelled; s++ {
		if sums[s] != f.counts[s].Load() {
			return false, nil
		}
	}
	if err := f.loadIDs(); err != nil {
		return false, err
	}
	f.handlerCounts.hmu.Lock()
	f.handlerCounts.hc = hc
	f.handlerCounts.hmu.Unlock()
	return true, nil
}

// loadHandlerCountsAt loads the tasks per handler of the state at applied
// index idx (Open, Restore): the saved record when it holds
// (loadSavedCounts), else a count of every task record (loadHandlerCounts);
// countsSaved says which.
func (f *FSM) loadHandlerCountsAt(idx uint64) error {
	saved, err := f.loadSavedCounts(idx)
	if err != nil {
		return fmt.Errorf("read the saved counts per handler: %w", err)
	}
	f.countsSaved = saved
	if !saved {
		if err := f.loadHandlerCounts(); err != nil {
			return fmt.Errorf("count tasks per handler: %w", err)
		}
	}
	return nil
}

// loadIDs builds the filter of stored task ids (idfilter.go) from the task
// keys alone. The filter stays off (nil: every lookup reads badger) when
// the scan fails.
func (f *FSM) loadIDs() error {
	f.ids = nil
	ids := newIDFilter(uint64(f.TotalTasks()))
	err := f.db.View(func(txn *badger.Txn) error {
		opts := badger.DefaultIteratorOptions
		opts.Prefix = prefixTask
		opts.PrefetchValues = false
		it := txn.NewIterator(opts)
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			ids.add(it.Item().Key())
		}
		return nil
	})
	if err != nil {
		return err
	}
	f.ids = ids
	return nil
}
