package raftfsm

import (
	"fmt"
	"math"
	"slices"
	"testing"
)

// cancelledFuture stores n tasks due from dueMs on and cancels them all:
// n deleted keys of the due-time index after dueMs (badger keeps them as
// tombstones until a compaction drops them), then one WAITING task due
// far later.
func cancelledFuture(e *env, n int, dueMs int64) {
	idx := uint64(1)
	for lo := 0; lo < n; lo += 1000 {
		var sub, cancel []Command
		for i := lo; i < min(lo+1000, n); i++ {
			id := fmt.Sprintf("c%07d", i)
			sub = append(sub, submitCmd(id, spec("h", ""), dueMs+int64(i), 0))
			cancel = append(cancel, cancelCmd(id, 1))
		}
		e.apply(idx, sub...)
		e.apply(idx+1, cancel...)
		idx += 2
	}
	e.apply(idx, submitCmd("later", spec("h", ""), dueMs+int64(n)+1<<30, 0))
}

// DueBetween skips deleted keys of the due-time index inside the window
// and stops at its end without walking the deleted keys after it; a key
// deleted and written again is seen once, with its new due time.
func TestDueBetweenSkipsDeletedKeys(t *testing.T) {
	e := newEnv(t)
	cancelledFuture(e, 2500, 10_000)
	e.apply(10_000,
		submitCmd("in", spec("h", ""), 11_000, 0),   // among the deleted keys
		submitCmd("re", spec("h", ""), 10_500, 0),   // written over a deleted key's due time below
		submitCmd("late", spec("h", ""), 20_000, 0), // past the window
	)
	var got []dueEntry
	if err := e.f.DueBetween(9_999, 12_600, func(id string, due int64) bool {
		got = append(got, dueEntry{id, due})
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if want := []dueEntry{{"re", 10_500}, {"in", 11_000}}; !slices.Equal(got, want) {
		t.Fatalf("(9 999, 12 600]: %v, want %v", got, want)
	}
	// Empty windows: nothing after MaxInt64, nothing at or before a
	// negative time, nothing in (a, b] with b <= a.
	for _, w := range [][2]int64{{math.MaxInt64, math.MaxInt64}, {-5, -1}, {12_000, 11_000}, {11_000, 11_000}} {
		if err := e.f.DueBetween(w[0], w[1], func(id string, due int64) bool {
			t.Errorf("(%d, %d]: %s due %d", w[0], w[1], id, due)
			return true
		}); err != nil {
			t.Fatal(err)
		}
	}
	// Moved: its old key is deleted, its new one seen once; a cancelled
	// task submitted again over itself, due at the same time, writes its
	// deleted key again: seen once.
	e.apply(10_001, cancelCmd("re", 2), submitCmd("re2", spec("h", ""), 10_500, 0),
		overwriteCmd("c0001000", spec("h", ""), 11_000, 0))
	got = nil
	if err := e.f.DueBetween(9_999, 1<<40, func(id string, due int64) bool {
		got = append(got, dueEntry{id, due})
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if want := []dueEntry{{"re2", 10_500}, {"c0001000", 11_000}, {"in", 11_000}, {"late", 20_000}, {"later", 10_000 + 2500 + 1<<30}}; !slices.Equal(got, want) {
		t.Fatalf("after the move: %v, want %v", got, want)
	}
}

// benchDueBetween asks whether anything is due in (after, until] of a
// store where n tasks due from 1 000 000 on were cancelled, and the next
// WAITING task is due much later.
func benchDueBetween(b *testing.B, n int, after, until int64) {
	e := newEnv(b)
	cancelledFuture(e, n, 1_000_000)
	for b.Loop() {
		due := false
		if err := e.f.DueBetween(after, until, func(string, int64) bool { due = true; return false }); err != nil || due {
			b.Fatal(err, due)
		}
	}
}

// BenchmarkDueBetweenOverCancelled is the adaptive GOMAXPROCS's question
// (NothingDueWithin: anything due within 2 s?) on a store where 100 000
// tasks due later were cancelled: their keys of the due-time index are
// deleted, after the window.
func BenchmarkDueBetweenOverCancelled(b *testing.B) { benchDueBetween(b, 100_000, 1_000, 3_000) }

// BenchmarkDueBetweenInsideCancelled is the cost of deleted keys inside
// the window (20 000 tasks due within it, cancelled), which DueBetween
// walks one version at a time.
func BenchmarkDueBetweenInsideCancelled(b *testing.B) {
	benchDueBetween(b, 20_000, 999_999, 1_030_000)
}
