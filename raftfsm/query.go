package raftfsm

import (
	"bytes"
	"errors"
	"math"

	"github.com/dgraph-io/badger/v4"
)

// Task returns the task with id, or ErrNotFound.
func (f *FSM) Task(id string) (*Task, error) {
	var t *Task
	err := f.db.View(func(txn *badger.Txn) (err error) {
		t, err = txnTask(txn, id)
		return err
	})
	if err == nil && t == nil {
		err = ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	return t, nil
}

// Due calls fn for each WAITING task due at or before untilMs, in due order,
// with its id and due time, until fn returns false.
func (f *FSM) Due(untilMs int64, fn func(id string, dueMs int64) bool) error {
	return f.DueBetween(math.MinInt64, untilMs, fn)
}

// DueBetween is Due for the WAITING tasks due after afterMs and at or
// before untilMs (Unix milliseconds): it seeks the due-time index to
// afterMs, so loading the next window of tasks reads only that window.
// Due times are never negative (the API refuses them), so any afterMs < 0
// starts at the beginning.
func (f *FSM) DueBetween(afterMs, untilMs int64, fn func(id string, dueMs int64) bool) error {
	if untilMs < 0 || afterMs == math.MaxInt64 || untilMs <= afterMs {
		return nil // an empty window: no due time is negative, none after MaxInt64
	}
	return f.db.View(func(txn *badger.Txn) error {
		// Every version, deleted ones too: a plain iterator skips the
		// deleted keys inside Seek and Next, so a window followed by many
		// deleted keys (tasks due later, cancelled or moved, until a
		// compaction drops them) walked all of them before it found the
		// first key past its end (100 000 of them: 28 ms a call against
		// 5–9 µs, BenchmarkDueBetweenOverCancelled). Here the walk stops at
		// the first key past untilMs, deleted or not. A key's versions come
		// newest first; the newest decides. Deleted keys inside the window
		// cost more this way (each version is an item: 20 000 of them 4.9
		// ms against 2.5–3.6, BenchmarkDueBetweenInsideCancelled), but the
		// window is bounded and the keys after it are not.
		opts := badger.DefaultIteratorOptions
		opts.PrefetchValues = false
		opts.Prefix = prefixDue
		opts.AllVersions = true
		it := txn.NewIterator(opts)
		defer it.Close()
		start := prefixDue
		if afterMs >= 0 { // < MaxInt64: returned above
			start = dueKey(afterMs+1, "")
		}
		var end []byte // the first key past untilMs; nil: none is
		if untilMs < math.MaxInt64 {
			end = dueKey(untilMs+1, "")
		}
		var last []byte
		for it.Seek(start); it.Valid(); it.Next() {
			item := it.Item()
			key := item.Key()
			if end != nil && bytes.Compare(key, end) >= 0 {
				return nil
			}
			if !newestVersion(&last, key) {
				continue
			}
			if item.IsDeletedOrExpired() {
				continue
			}
			if due, id := parseDueKey(key); !fn(id, due) {
				return nil
			}
		}
		return nil
	})
}

// newestVersion reports whether key, met in an iteration over every
// version (badger's AllVersions), is the newest version of its key: a
// key's versions come newest first, so it is when key differs from the
// last key met, kept in *last.
func newestVersion(last *[]byte, key []byte) bool {
	if *last != nil && bytes.Equal(key, *last) {
		return false
	}
	*last = append((*last)[:0], key...)
	return true
}

// Running calls fn for each RUNNING task until fn returns false.
func (f *FSM) Running(fn func(t *Task) bool) error {
	var ids []string
	err := f.db.View(func(txn *badger.Txn) error {
		opts := badger.DefaultIteratorOptions
		opts.PrefetchValues = false
		opts.Prefix = prefixRun
		it := txn.NewIterator(opts)
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			ids = append(ids, string(it.Item().Key()[len(prefixRun):]))
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, id := range ids {
		t, err := f.Task(id)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		if !fn(t) {
			return nil
		}
	}
	return nil
}

// Nodes returns every known node record.
func (f *FSM) Nodes() ([]Node, error) {
	var out []Node
	err := f.db.View(func(txn *badger.Txn) error {
		opts := badger.DefaultIteratorOptions
		opts.Prefix = prefixNode
		it := txn.NewIterator(opts)
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			var n Node
			if err := it.Item().Value(func(b []byte) error { return decodeRecord(b, &n) }); err != nil {
				return err
			}
			out = append(out, n)
		}
		return nil
	})
	return out, err
}

// Node returns the record of node id, or ErrNotFound.
func (f *FSM) Node(id string) (*Node, error) {
	var n Node
	err := f.db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(nodeKey(id))
		if errors.Is(err, badger.ErrKeyNotFound) {
			return ErrNotFound
		}
		if err != nil {
			return err
		}
		return item.Value(func(b []byte) error { return decodeRecord(b, &n) })
	})
	if err != nil {
		return nil, err
	}
	return &n, nil
}

// List returns up to limit tasks with ids after `after`, in id order,
// that match handler and state (empty or 0: any). more reports whether
// tasks after the last one returned may match too. It reads at most
// listScanMax task keys per call, deleted ones included, so a filter that
// matches little, or a stretch of purged tasks, returns a short page
// (possibly empty) with more set; the caller continues from the last id
// scanned, which it gets as next.
func (f *FSM) List(handler string, state State, after string, limit int) (tasks []Task, next string, more bool, err error) {
	err = f.db.View(func(txn *badger.Txn) error {
		// Every version, deleted ones too, as in DueBetween: a plain
		// iterator skips deleted keys inside Seek and Next, so a page
		// after many purged tasks (their keys stay until a compaction
		// drops them) walked all of them, unbounded by listScanMax
		// (100 000: 49 ms for a page, BenchmarkListAfterPurge). A key's
		// versions come newest first; the newest decides.
		opts := badger.DefaultIteratorOptions
		opts.PrefetchValues = false
		opts.Prefix = prefixTask
		opts.AllVersions = true
		it := txn.NewIterator(opts)
		defer it.Close()
		scanned := 0
		var last []byte
		for it.Seek(taskKey(after)); it.Valid(); it.Next() {
			item := it.Item()
			key := item.Key()
			if !newestVersion(&last, key) {
				continue
			}
			id := string(key[len(prefixTask):])
			if id == after && after != "" {
				continue
			}
			if len(tasks) == limit || scanned == listScanMax {
				more = true
				return nil
			}
			scanned++
			next = id
			if item.IsDeletedOrExpired() {
				continue
			}
			var t Task
			if err := item.Value(func(b []byte) error { return decodeRecord(b, &t) }); err != nil {
				return err
			}
			if (handler == "" || t.Spec.Handler == handler) && (state == 0 || t.State == state) {
				tasks = append(tasks, t)
			}
		}
		return nil
	})
	return tasks, next, more, err
}

// listScanMax bounds the task keys one List call reads.
const listScanMax = 10000

// ParseState returns the state named s ("WAITING" ...), or 0.
func ParseState(s string) State {
	for i, n := range stateNames {
		if n == s && i > 0 {
			return State(i)
		}
	}
	return 0
}
