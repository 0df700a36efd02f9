package raftfsm

import (
	"github.com/bits-and-blooms/bloom/v3"
	"github.com/dgraph-io/badger/v4"
)

// idFilter answers "is there a task record with this id?" in memory, with
// no false "absent": a submit of a new id (the usual case) then needs no
// badger read, which was 11–17 % of a node's CPU on the batch path
// (docs/perf/README.md). A "maybe present" falls back to the read.
//
// It is a chain of Bloom filters (bits-and-blooms/bloom, idFilterFP false
// positives each): the first sized for the tasks stored when it was built,
// each next one twice the last, started when the last has taken its
// capacity; an id is maybe present when any part says so. Ids are only
// added: a purged or replaced task's id stays "maybe present" (a read tells)
// until the filter is built again from the stored keys: at Open and
// Restore, and in steps while the FSM runs once it has taken many more ids
// than are stored (stepIDRebuild). 9.6 bits per id of capacity at 1 %: 18 MB after a start with
// 10M stored ids (the first part takes half as many again), 18 MB for 10M
// ids added from empty (parts of 1, 2, 4 and 8M ids); a plain map of the
// ids would take about 1 GB.
//
// putTask adds the id of each record it creates (prev nil; it is the one
// writer of task records), so the filter grows with ids, not with the
// writes of fires and completions. The FSM's apply goroutine is its only
// user once the FSM is open (Open, Restore, putTask and loadSubmitted all
// run there).
type idFilter struct {
	parts []*bloom.BloomFilter
	// last is the newest part's capacity, room how many more ids it
	// takes at idFilterFP.
	last, room uint
	added      uint64 // ids added since the filter was built
}

// idFilterFP is each part's rate of false "maybe present" answers.
const idFilterFP = 0.01

// idFilterMin is the capacity of the first part of an empty store's
// filter: 1Mi ids, 1.2 MB. A new id is tested against every part (a cache
// miss or two each, and each part's idFilterFP of false "maybe present"
// reads badger), so a chain grown from a small first part costs: from
// 64Ki, a store grown to 1.3M ids in a stream of batches had 6 parts and
// the filter took 4-5 % of the node's CPU (docs/perf/README.md).
const idFilterMin = 1 << 20

// newIDFilter returns an empty filter sized for about expected ids.
func newIDFilter(expected uint64) *idFilter {
	f := &idFilter{}
	f.grow(uint(max(expected+expected/2, idFilterMin)))
	return f
}

func (f *idFilter) grow(capacity uint) {
	f.parts = append(f.parts, bloom.NewWithEstimates(capacity, idFilterFP))
	f.last, f.room = capacity, capacity
}

// add records that a task record with the task key k (prefixTask and the
// id) exists.
func (f *idFilter) add(k []byte) {
	if f.room == 0 {
		f.grow(2 * f.last)
	}
	f.parts[len(f.parts)-1].Add(k)
	f.room--
	f.added++
}

// mayContain reports false only when no record with task key k was added.
// With several parts, k is hashed once (the parts differ in size only).
func (f *idFilter) mayContain(k []byte) bool {
	if len(f.parts) == 1 {
		return f.parts[0].Test(k)
	}
	newest := f.parts[len(f.parts)-1]
	locs := bloom.Locations(k, newest.K())
	for i := len(f.parts) - 1; i >= 0; i-- {
		p := f.parts[i]
		if p.K() == newest.K() && p.TestLocations(locs) || p.K() != newest.K() && p.Test(k) {
			return true
		}
	}
	return false
}

// A filter takes every id created since it was built, purged ones too,
// so a node that creates and purges tasks for months would grow it
// without bound. Once it holds more than idRebuildSlack plus twice the
// stored tasks, the FSM builds the next one from the stored keys
// (idRebuild), a step of idRebuildStep keys at the start of each
// ApplyBatch on the apply goroutine (no goroutine, no long read view, no
// stall: about a millisecond a step), and swaps it in when the scan ends.
const (
	idRebuildSlack = 1 << 20
	idRebuildStep  = 1024
)

// idRebuild is a filter being built from the stored task keys. Never a
// false "absent" in next: a key stored before the rebuild started is at
// or after cursor, or was scanned already; one created since is added by
// putTask (to the current filter and to next).
type idRebuild struct {
	next   *idFilter
	cursor []byte // the next task key to scan from
}

// stepIDRebuild starts a rebuild of the id filter when it is due, or scans
// the next step of the one going on, and swaps the new filter in when its
// scan is done. It runs on the apply goroutine, before an ApplyBatch's
// writer opens: every earlier write is committed, so the scan sees it.
// A read error drops the rebuild (the current filter stays; a later
// ApplyBatch starts again).
func (f *FSM) stepIDRebuild() {
	if f.ids == nil {
		return
	}
	r := f.rebuild
	if r == nil {
		live := f.TotalTasks()
		if f.ids.added <= 2*uint64(live)+f.idRebuildSlack {
			return
		}
		r = &idRebuild{next: newIDFilter(uint64(live)), cursor: append([]byte(nil), prefixTask...)}
		f.rebuild = r
	}
	done := false
	err := f.db.View(func(txn *badger.Txn) error {
		opts := badger.DefaultIteratorOptions
		opts.PrefetchValues = false
		opts.Prefix = prefixTask
		it := txn.NewIterator(opts)
		defer it.Close()
		n := 0
		for it.Seek(r.cursor); it.Valid(); it.Next() {
			k := it.Item().Key()
			if n == f.idRebuildStep {
				r.cursor = append(r.cursor[:0], k...)
				return nil
			}
			r.next.add(k)
			n++
		}
		done = true
		return nil
	})
	switch {
	case err != nil:
		f.rebuild = nil
	case done:
		f.ids, f.rebuild = r.next, nil
	}
}
