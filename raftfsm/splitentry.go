package raftfsm

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/dgraph-io/badger/v4"
)

// Counts across a split transaction.
//
// A writer whose writes outgrow one badger transaction commits them in
// parts (writer.split); the applied index and the task counts go with the
// last part. When the node stops (Abort) or crashes after a part
// committed and before the last, the next start applies the writer's
// entries again, and their commands find the work of the committed parts
// done: they change nothing, so they count nothing. The per-state counts
// stored with the last part (m/count/) then missed those parts' changes for
// good (TestSplitEntryStoppedBetweenPartsKeepsCounts: 1 409 of 2 000 new
// tasks counted), and so did the counts per handler a clean stop saves.
//
// So before its first part commits, a writer that splits stores
// keySplitEntry on its own (markSplit: a small transaction, committed
// before the part in badger's order), and its last part deletes it
// (finish). An Open that finds the key knows the counts may not hold:
// it counts the task records per handler and state (as a start without
// saved counts does), takes the per-state counts from those sums, and
// stores them, deleting the key and any saved counts in the same
// transaction. The entries applied again then add only the changes of the
// parts that had not committed. A writer splits when its writes pass
// badger's batch size, 2.5 MB with the 16 MiB memtable OpenDB sets (or
// 26 214 writes): a few large payloads applied together do it (a review
// caught the marker on disk in 5 of 15 SIGKILLs of a node under batches
// of ~500 KB tasks). The cost is one small write per such writer, and a
// full count at the start after a stop in the middle of one.

// keySplitEntry is present while a writer that split has committed some
// parts and not its last; its value is the index of the entry that split
// it (BE 8), for a reader of the store.
var keySplitEntry = []byte("m/split-entry")

// markSplit stores keySplitEntry before the writer's first part commits
// (retrying storage errors as commit does).
func (w *writer) markSplit() {
	w.f.retryStorage(w.index, func() error {
		return w.db.Update(func(txn *badger.Txn) error {
			return txn.Set(keySplitEntry, binary.BigEndian.AppendUint64(nil, w.index))
		})
	})
	w.splitMarked = true
}

// splitEntryPending reports whether a writer that split stopped before its
// last part (keySplitEntry is stored).
func splitEntryPending(db *badger.DB) (bool, error) {
	err := db.View(func(txn *badger.Txn) error {
		_, err := txn.Get(keySplitEntry)
		return err
	})
	if errors.Is(err, badger.ErrKeyNotFound) {
		return false, nil
	}
	return err == nil, err
}

// RecountedAfterSplit reports whether Open found a writer stopped between
// the parts of a split transaction (keySplitEntry) and so counted every
// task record again (the node's "state opened" line says so). Call it
// before raft starts.
func (f *FSM) RecountedAfterSplit() bool { return f.recountedAfterSplit }

// recountAfterSplit counts the task records per handler and state,
// takes the per-state counts from the sums and stores them, deleting
// keySplitEntry and the saved counts per handler (which may be as wrong
// as the stored counts) in the same transaction.
func (f *FSM) recountAfterSplit() error {
	if err := f.loadHandlerCounts(); err != nil {
		return fmt.Errorf("count tasks per handler: %w", err)
	}
	var sums [numStates]int64
	for _, c := range f.handlerCounts.all() {
		for s, n := range c {
			sums[s] += n
		}
	}
	err := f.db.Update(func(txn *badger.Txn) error {
		for s := StateWaiting; s <= StateCancelled; s++ {
			if err := txn.Set(countKey(s), binary.BigEndian.AppendUint64(nil, uint64(sums[s]))); err != nil {
				return err
			}
		}
		if err := txn.Delete(keySavedCounts); err != nil {
			return err
		}
		return txn.Delete(keySplitEntry)
	})
	if err != nil {
		return fmt.Errorf("store the recounted task counts: %w", err)
	}
	for s := range sums {
		f.counts[s].Store(sums[s])
	}
	f.countsSaved = false
	return nil
}
