package raftfsm

import (
	"github.com/bits-and-blooms/bloom/v3"
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
// until the filter is built again from the stored keys, at Open and
// Restore. 9.6 bits per id of capacity at 1 %: 18 MB after a start with
// 10M stored ids (the first part takes half as many again), 20 MB for 10M
// ids added from empty (a plain map of the ids would take about 1 GB).
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

// idFilterMin is the capacity of the first part of an empty store's filter.
const idFilterMin = 1 << 16

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

// bytes returns the memory the filter's bit sets take.
func (f *idFilter) bytes() uint64 {
	var n uint64
	for _, p := range f.parts {
		n += uint64(p.Cap()) / 8
	}
	return n
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
