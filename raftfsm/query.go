package raftfsm

import (
	"errors"

	"github.com/dgraph-io/badger/v4"
)

// Task returns the task with id, or ErrNotFound.
func (f *FSM) Task(id string) (*Task, error) {
	var t Task
	err := f.db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(taskKey(id))
		if errors.Is(err, badger.ErrKeyNotFound) {
			return ErrNotFound
		}
		if err != nil {
			return err
		}
		return item.Value(func(b []byte) error { return decodeRecord(b, &t) })
	})
	if err != nil {
		return nil, err
	}
	return &t, nil
}

// Due calls fn for each WAITING task due at or before untilMs, in due order,
// with its id and due time, until fn returns false.
func (f *FSM) Due(untilMs int64, fn func(id string, dueMs int64) bool) error {
	return f.db.View(func(txn *badger.Txn) error {
		opts := badger.DefaultIteratorOptions
		opts.PrefetchValues = false
		opts.Prefix = prefixDue
		it := txn.NewIterator(opts)
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			due, id := parseDueKey(it.Item().Key())
			if due > untilMs || !fn(id, due) {
				return nil
			}
		}
		return nil
	})
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
