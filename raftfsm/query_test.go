package raftfsm

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"testing"
	"time"
)

// cancelledFuture stores n tasks due from dueMs on and cancels them all:
// n deleted keys of the due-time index after dueMs (badger keeps them as
// tombstones until a compaction drops them), then one WAITING task due
// far later. It returns the next free Raft index.
func cancelledFuture(e *env, n int, dueMs int64) uint64 {
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
	return idx + 1
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

// purgeAll purges every task finished before the far future, 1 000 per
// entry from idx on, and returns the next free index.
func purgeAll(t testing.TB, e *env, idx uint64) uint64 {
	fts, err := e.f.Expired(1<<50, time.Millisecond, time.Millisecond, math.MaxInt32, nil)
	if err != nil {
		t.Fatal(err)
	}
	for lo := 0; lo < len(fts); lo += 1000 {
		var ts []PurgeTask
		for _, ft := range fts[lo:min(lo+1000, len(fts))] {
			ts = append(ts, ft.Target())
		}
		e.apply(idx, purgeCmd(ts...))
		idx++
	}
	return idx
}

// List counts deleted task keys (purged tasks, until a compaction drops
// them) against listScanMax: past that many it returns a short page with
// more set and the last id read as next, from which the caller goes on.
// A key deleted and written again is listed once, as it is now.
func TestListSkipsDeletedKeys(t *testing.T) {
	e := newEnv(t)
	n := listScanMax + 500
	idx := cancelledFuture(e, n, 1<<40) // c0000000 … and "later", WAITING
	idx = purgeAll(t, e, idx)
	e.apply(idx, submitCmd("c0010400", spec("h", ""), 1<<42, 0)) // written again after its purge
	var got []string
	var pages, empty int
	after := ""
	for more := true; more; pages++ {
		tasks, next, m, err := e.f.List("", 0, after, 100)
		if err != nil {
			t.Fatal(err)
		}
		if len(tasks) == 0 {
			empty++
		}
		for _, tk := range tasks {
			got = append(got, tk.ID+"@"+strconv.FormatInt(tk.DueMs, 10))
		}
		if m && next <= after {
			t.Fatalf("page %d: next %q does not move past %q", pages, next, after)
		}
		after, more = next, m
	}
	want := []string{"c0010400@" + strconv.FormatInt(1<<42, 10), "later@" + strconv.FormatInt(1<<40+int64(n)+1<<30, 10)}
	if !slices.Equal(got, want) {
		t.Fatalf("listed %v, want %v", got, want)
	}
	// 10 500 purged keys: the first page stops after 10 000 of them.
	if pages != 2 || empty != 1 {
		t.Fatalf("%d pages, %d of them empty; want 2 and 1", pages, empty)
	}
}

// benchList lists the first page (limit 100) of a store whose first n
// tasks (by id) were cancelled and, when purged, deleted (their task keys
// are tombstones until a compaction drops them), with one WAITING task
// after them.
func benchList(b *testing.B, n int, purged bool) {
	e := newEnv(b)
	idx := cancelledFuture(e, n, 1<<40)
	if purged {
		purgeAll(b, e, idx)
	}
	for b.Loop() {
		if _, _, _, err := e.f.List("", 0, "", 100); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkListAfterPurge is the first page of `ax list` after
// 100 000 tasks were purged.
func BenchmarkListAfterPurge(b *testing.B) { benchList(b, 100_000, true) }

// BenchmarkListStored is the first page of a store of 100 000 cancelled
// tasks (each record written twice).
func BenchmarkListStored(b *testing.B) { benchList(b, 100_000, false) }
