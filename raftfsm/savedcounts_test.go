package raftfsm

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// savedCountsFixture fills e with tasks of three handlers in every state
// (purgeFixture) plus 50 WAITING tasks of a third handler, and returns
// the next entry's index.
func savedCountsFixture(e *env) uint64 {
	next := purgeFixture(e)
	var cmds []Command
	for i := range 50 {
		cmds = append(cmds, submitCmd(fmt.Sprintf("w-%02d", i), spec("h3", "x"), 1<<40, 10))
	}
	e.apply(next, cmds...)
	return next + 1
}

// wantCountsTaken checks that e's last Open or Restore (after what) took
// the saved counts: they are want, the record is gone, and the id filter
// holds the stored ids (a submit of a stored id at entry next is a
// duplicate, which changes no count).
func wantCountsTaken(t *testing.T, e *env, want map[string][numStates]int64, next uint64, after string) {
	t.Helper()
	if !e.f.countsSaved {
		t.Fatalf("after %s the tasks were counted again: the saved counts were not taken", after)
	}
	if got := e.f.HandlerCounts(); !mapsEqual(got, want) {
		t.Fatalf("counts after %s %v, want %v", after, got, want)
	}
	if hasSavedCounts(t, e) {
		t.Fatalf("the saved counts outlived %s", after)
	}
	if e.f.ids == nil || !e.f.ids.mayContain(taskKey("w-07")) || !e.f.ids.mayContain(taskKey("cancelled")) {
		t.Fatal("the id filter was not built from the task keys")
	}
	if r := e.apply1(next, submitCmd("w-07", spec("h3", "x"), 1<<40, 10)); r.Created || r.Code != CodeOK {
		t.Fatalf("submit of a stored id after %s: %+v", after, r)
	}
	if got := e.f.HandlerCounts(); !mapsEqual(got, want) {
		t.Fatalf("counts after the duplicate %v, want %v", got, want)
	}
}

// hasSavedCounts reports whether keySavedCounts is in e's store.
func hasSavedCounts(t *testing.T, e *env) bool {
	t.Helper()
	err := e.db.View(func(txn *badger.Txn) error { _, err := txn.Get(keySavedCounts); return err })
	if err != nil && !errors.Is(err, badger.ErrKeyNotFound) {
		t.Fatal(err)
	}
	return err == nil
}

// A clean stop's saved counts are what the next Open takes: the same
// counts as a scan, the id filter built (a submit of a stored id is still
// a duplicate), and the record gone after it.
func TestSavedHandlerCounts(t *testing.T) {
	e := newEnv(t)
	next := savedCountsFixture(e)
	want := e.f.HandlerCounts()
	if err := e.f.SaveHandlerCounts(); err != nil {
		t.Fatal(err)
	}
	e.reopen()
	wantCountsTaken(t, e, want, next, "a clean stop")
	// The next Open, with nothing saved, counts again.
	e.reopen()
	if e.f.countsSaved {
		t.Fatal("a second Open took saved counts")
	}
	if got := e.f.HandlerCounts(); !mapsEqual(got, want) {
		t.Fatalf("counts after a second restart %v, want %v", got, want)
	}
}

// Saved counts that no longer hold are dropped and counted again: saved
// before a later entry (a crash after an earlier clean stop would leave
// that), not adding up to the per-state counts, or not decodable.
func TestSavedHandlerCountsThatDoNotHold(t *testing.T) {
	for _, tc := range []struct {
		name  string
		spoil func(t *testing.T, e *env, next uint64)
	}{
		{"an entry after", func(t *testing.T, e *env, next uint64) {
			e.apply(next, submitCmd("late", spec("h4", "x"), 1<<40, 10), cancelCmd("w-01", 20))
		}},
		{"sums differ", func(t *testing.T, e *env, _ uint64) {
			c := e.f.HandlerCounts()
			h := c["h3"]
			h[StateWaiting]--
			c["h3"] = h
			writeSavedCounts(t, e, newSavedCounts(e.f.AppliedIndex(), c))
		}},
		{"negative", func(t *testing.T, e *env, _ uint64) {
			c := e.f.HandlerCounts()
			c["h9"] = [numStates]int64{StateWaiting: -1}
			h := c["h3"]
			h[StateWaiting]++
			c["h3"] = h
			writeSavedCounts(t, e, newSavedCounts(e.f.AppliedIndex(), c))
		}},
		{"state 0", func(t *testing.T, e *env, _ uint64) {
			c := e.f.HandlerCounts()
			c["h9"] = [numStates]int64{0: 1}
			writeSavedCounts(t, e, newSavedCounts(e.f.AppliedIndex(), c))
		}},
		{"a handler twice", func(t *testing.T, e *env, _ uint64) {
			rec := newSavedCounts(e.f.AppliedIndex(), e.f.HandlerCounts())
			h := rec.Handlers[0]
			h.Counts = [numStates]int64{}
			rec.Handlers = append(rec.Handlers, h)
			writeSavedCounts(t, e, rec)
		}},
		{"not a record", func(t *testing.T, e *env, _ uint64) {
			if err := e.db.Update(func(txn *badger.Txn) error { return txn.Set(keySavedCounts, []byte{9, 9}) }); err != nil {
				t.Fatal(err)
			}
		}},
		{"not msgpack", func(t *testing.T, e *env, _ uint64) {
			if err := e.db.Update(func(txn *badger.Txn) error { return txn.Set(keySavedCounts, []byte{recordVersion, 0xc1}) }); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			next := savedCountsFixture(e)
			if err := e.f.SaveHandlerCounts(); err != nil {
				t.Fatal(err)
			}
			tc.spoil(t, e, next)
			want := e.f.HandlerCounts()
			e.reopen()
			if e.f.countsSaved {
				t.Fatal("Open took saved counts that do not hold")
			}
			if got := e.f.HandlerCounts(); !mapsEqual(got, want) {
				t.Fatalf("counts %v, want %v", got, want)
			}
			if hasSavedCounts(t, e) {
				t.Fatal("the saved counts outlived Open")
			}
		})
	}
}

// A snapshot carries its counts per handler, those of its read view even
// when entries were applied between Snapshot and Persist; a restore takes
// them (and builds the id filter from the keys), and leaves no record
// behind. A snapshot without them (written before they were) is counted.
func TestRestoreTakesSnapshotCounts(t *testing.T) {
	e := newEnv(t)
	next := savedCountsFixture(e)
	want := e.f.HandlerCounts()
	snap := e.snapshot()
	e.apply(next, submitCmd("after-the-view", spec("h5", "x"), 1<<40, 10), cancelCmd("w-03", 20))
	stream := persist(t, snap)

	e2 := newEnv(t)
	e2.apply(1, submitCmd("gone", spec("h6", "x"), 1<<40, 10))
	if err := e2.restore(stream); err != nil {
		t.Fatal(err)
	}
	wantCountsTaken(t, e2, want, next, "the restore of a snapshot")

	// The same view without its counts (as written before): counted.
	old := e.snapshot().(*snapshot)
	old.counts = nil
	want = e.f.HandlerCounts()
	e3 := newEnv(t)
	if err := e3.restore(persist(t, old)); err != nil {
		t.Fatal(err)
	}
	if e3.f.countsSaved {
		t.Fatal("a snapshot without counts: the restore says it took some")
	}
	if got := e3.f.HandlerCounts(); !mapsEqual(got, want) {
		t.Fatalf("counts after restoring a snapshot without them %v, want %v", got, want)
	}
}

func writeSavedCounts(t *testing.T, e *env, rec *savedCounts) {
	t.Helper()
	b, err := encodeRecord(rec)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.db.Update(func(txn *badger.Txn) error { return txn.Set(keySavedCounts, b) }); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkRestoreSavedCounts is a Restore of a snapshot of 1M WAITING
// tasks of one handler, with the counts per handler it carries and
// without them (every record decoded to count them) (restore-ms).
func BenchmarkRestoreSavedCounts(b *testing.B) {
	e := newEnv(b)
	loadCeilingTasks(e, 1_000_000)
	for _, saved := range []bool{false, true} {
		name := "counted"
		if saved {
			name = "carried"
		}
		b.Run(name, func(b *testing.B) {
			snap := e.snapshot().(*snapshot)
			if !saved {
				snap.counts = nil
			}
			stream := persist(b, snap)
			e2 := newEnv(b)
			for range b.N {
				t0 := time.Now()
				if err := e2.restore(stream); err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(time.Since(t0).Milliseconds()), "restore-ms")
				if e2.f.countsSaved != saved || e2.f.HandlerCounts()["ceil.load"][StateWaiting] != 1_000_000 {
					b.Fatalf("saved %v, counts %v", e2.f.countsSaved, e2.f.HandlerCounts())
				}
			}
		})
	}
}

// loadCeilingTasks applies n WAITING tasks of one handler to e, 1 000 an
// entry (ids of 14 bytes, no payload, as in the ceiling's runs).
func loadCeilingTasks(e *env, n int) {
	idx := uint64(1)
	for lo := 0; lo < n; lo += 1000 {
		var sub []Command
		for i := lo; i < min(lo+1000, n); i++ {
			sub = append(sub, submitCmd(fmt.Sprintf("ceil-%09d", i), spec("ceil.load", ""), 1<<40, 0))
		}
		e.apply(idx, sub...)
		idx++
	}
}

// BenchmarkOpenSavedCounts is Open over 1M WAITING tasks of one handler
// (ids of 14 bytes, no payload, as in the ceiling's runs), after a clean
// stop (saved counts: the id filter from the keys) and after a crash
// (every record decoded) (open-ms).
func BenchmarkOpenSavedCounts(b *testing.B) {
	e := newEnv(b)
	loadCeilingTasks(e, 1_000_000)
	if err := e.db.Flatten(2); err != nil {
		b.Fatal(err)
	}
	for _, saved := range []bool{false, true} {
		name := "crash"
		if saved {
			name = "clean-stop"
		}
		b.Run(name, func(b *testing.B) {
			for range b.N {
				if saved {
					if err := e.f.SaveHandlerCounts(); err != nil {
						b.Fatal(err)
					}
				}
				t0 := time.Now()
				f, err := Open(e.db)
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(time.Since(t0).Milliseconds()), "open-ms")
				if f.countsSaved != saved || f.HandlerCounts()["ceil.load"][StateWaiting] != 1_000_000 {
					b.Fatalf("saved %v, counts %v", f.countsSaved, f.HandlerCounts())
				}
				e.f = f
			}
		})
	}
}
