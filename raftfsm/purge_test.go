package raftfsm

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
)

func purgeCmd(ts ...PurgeTask) Command {
	return Command{Type: CmdPurge, Purge: &Purge{Tasks: ts}}
}

func targetOf(tk *Task) PurgeTask {
	return PurgeTask{ID: tk.ID, Epoch: tk.Epoch, FinishedMs: tk.FinishedMs}
}

func retrySubCmd(id string, atMs int64) Command {
	return Command{Type: CmdRetry, Retry: &Retry{ID: id, AtMs: atMs}}
}

// checkFinished verifies the finished index and the counts against the
// task records: each terminal task has exactly one f/ entry, of its class,
// with its epoch, finish time, state and handler; no other task has one;
// no entry names a missing task; the counts equal the records per state.
func (e *env) checkFinished() {
	e.t.Helper()
	e.checkIndexes()
	tasks := map[string]*Task{}
	entries := map[string][]string{} // id -> keys
	values := map[string][]byte{}
	err := e.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.DefaultIteratorOptions)
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			k := it.Item().KeyCopy(nil)
			v, err := it.Item().ValueCopy(nil)
			if err != nil {
				return err
			}
			switch {
			case bytes.HasPrefix(k, prefixTask):
				var tk Task
				if err := decodeRecord(v, &tk); err != nil {
					return err
				}
				tasks[tk.ID] = &tk
			case bytes.HasPrefix(k, prefixFinished):
				id := string(k[12:])
				entries[id] = append(entries[id], string(k))
				values[string(k)] = v
			}
		}
		return nil
	})
	if err != nil {
		e.t.Fatalf("scan: %v", err)
	}
	var counts [numStates]int64
	for id, tk := range tasks {
		counts[tk.State]++
		want := finishedKey(tk)
		got := entries[id]
		if want == nil {
			if len(got) != 0 {
				e.t.Errorf("%v task %q has finished entries %q", tk.State, id, got)
			}
			continue
		}
		if len(got) != 1 || got[0] != string(want) {
			e.t.Errorf("%v task %q: finished entries %q, want %q", tk.State, id, got, want)
			continue
		}
		if v := values[got[0]]; !bytes.Equal(v, finishedValue(tk)) {
			e.t.Errorf("task %q: finished value %x, want %x", id, v, finishedValue(tk))
		}
	}
	for id, ks := range entries {
		if tasks[id] == nil {
			e.t.Errorf("finished entries %q of missing task %q", ks, id)
		}
	}
	if c := e.f.Counts(); c != counts {
		e.t.Errorf("Counts() = %v, records say %v", c, counts)
	}
}

// purgeFixture applies, from index 1, one task in each situation a purge
// must tell apart, and returns the next free index. Times: submits at 10,
// finishes at 100..900.
func purgeFixture(e *env) uint64 {
	rec := spec("h", "rec")
	rec.EveryNs = int64(time.Minute)
	long := spec("h", "long")
	long.RetentionNs = int64(1000 * time.Hour)
	long.MaxAttempts = 1
	e.apply(1,
		submitCmd("ok", spec("h", "ok"), 50, 10),
		submitCmd("cancelled", spec("h2", "c"), 5000, 10),
		submitCmd("dead", Spec{Handler: "h", Payload: []byte("d"), TimeoutNs: 1e9, MaxAttempts: 1}, 50, 10),
		submitCmd("failed", spec("h", "f"), 50, 10),
		submitCmd("waiting", spec("h", "w"), 5000, 10),
		submitCmd("running", spec("h", "r"), 50, 10),
		submitCmd("recurring", rec, 50, 10),
		submitCmd("retried", Spec{Handler: "h", Payload: []byte("rt"), TimeoutNs: 1e9, MaxAttempts: 1}, 50, 10),
		submitCmd("overwritten", spec("h", "o1"), 50, 10),
		submitCmd("long", long, 50, 10),
		submitCmd("refinished", Spec{Handler: "h", Payload: []byte("rf"), TimeoutNs: 1e9, MaxAttempts: 1}, 50, 10),
	)
	var fires []Command
	for _, id := range []string{"ok", "dead", "failed", "running", "recurring", "retried", "overwritten", "long", "refinished"} {
		fires = append(fires, fireCmd(id, 1, 1, "n1", 50, 30050))
	}
	e.apply(2, fires...)
	e.apply(3,
		completeCmd("ok", 1, 1, OutcomeSuccess, "", 0, 100),
		completeCmd("dead", 1, 1, OutcomeRetryable, "500", 0, 200),
		completeCmd("failed", 1, 1, OutcomePermanent, "400", 0, 300),
		completeCmd("retried", 1, 1, OutcomeRetryable, "500", 0, 400),
		completeCmd("overwritten", 1, 1, OutcomeSuccess, "", 0, 500),
		completeCmd("long", 1, 1, OutcomePermanent, "400", 0, 600),
		completeCmd("refinished", 1, 1, OutcomeRetryable, "500", 0, 650),
		cancelCmd("cancelled", 700),
	)
	// The recurring task's run succeeds and its next run is WAITING.
	e.apply1(4, Command{Type: CmdComplete, Complete: &Complete{ID: "recurring", Epoch: 1, Attempt: 1, Outcome: OutcomeSuccess,
		NextSlotMs: 60050, NextDueMs: 60050, AtMs: 800}})
	return 5
}

func TestPurge(t *testing.T) {
	cases := []struct {
		name   string
		id     string
		target func(e *env, tk *Task) PurgeTask // nil: as read
		change func(e *env, idx uint64) uint64  // between read and purge
		purged bool
	}{
		{name: "SUCCESS is purged", id: "ok", purged: true},
		{name: "CANCELLED is purged", id: "cancelled", purged: true},
		{name: "DEAD is purged", id: "dead", purged: true},
		{name: "FAILED is purged", id: "failed", purged: true},
		{name: "own retention is purged on demand", id: "long", purged: true},
		{name: "WAITING is kept", id: "waiting"},
		{name: "RUNNING is kept", id: "running"},
		{name: "recurring between runs is kept", id: "recurring"},
		{name: "unknown id", id: "nope"},
		{name: "stale epoch is kept", id: "ok", target: func(e *env, tk *Task) PurgeTask {
			p := targetOf(tk)
			p.Epoch++
			return p
		}},
		{name: "FinishedMs mismatch is kept", id: "ok", target: func(e *env, tk *Task) PurgeTask {
			p := targetOf(tk)
			p.FinishedMs--
			return p
		}},
		{name: "retried DEAD task, now WAITING, is kept", id: "retried", change: func(e *env, idx uint64) uint64 {
			e.apply1(idx, retrySubCmd("retried", 1000))
			return idx + 1
		}},
		{name: "retried and DEAD again is kept (new FinishedMs)", id: "refinished", change: func(e *env, idx uint64) uint64 {
			e.apply1(idx, retrySubCmd("refinished", 1000))
			e.apply1(idx+1, fireCmd("refinished", 1, 1, "n1", 1000, 31000))
			e.apply1(idx+2, completeCmd("refinished", 1, 1, OutcomeRetryable, "500", 0, 1100))
			return idx + 3
		}},
		{name: "overwritten after finish is kept", id: "overwritten", change: func(e *env, idx uint64) uint64 {
			e.apply1(idx, overwriteCmd("overwritten", spec("h", "o2"), 5000, 1000))
			return idx + 1
		}},
		{name: "overwritten and finished again is kept (new epoch)", id: "overwritten", change: func(e *env, idx uint64) uint64 {
			e.apply1(idx, overwriteCmd("overwritten", spec("h", "o2"), 50, 1000))
			ep := e.task("overwritten").Epoch
			e.apply1(idx+1, fireCmd("overwritten", ep, 1, "n1", 1000, 31000))
			e.apply1(idx+2, completeCmd("overwritten", ep, 1, OutcomeSuccess, "", 0, 500)) // same FinishedMs as before
			return idx + 3
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			idx := purgeFixture(e)
			e.checkFinished()
			target := PurgeTask{ID: tc.id, Epoch: 1, FinishedMs: 1}
			if tk, err := e.f.Task(tc.id); err == nil {
				target = targetOf(tk)
				if tc.target != nil {
					target = tc.target(e, tk)
				}
			}
			if tc.change != nil {
				idx = tc.change(e, idx)
			}
			before := e.f.Counts()
			prev, _ := e.f.Task(tc.id)
			dump := e.dump()
			var rec recorder
			e.f.SetObserver(&rec)
			r := e.apply1(idx, purgeCmd(target))
			if r.Code != CodeOK || len(r.Purged) != 1 || r.Purged[0] != tc.purged || r.PurgedCount() != map[bool]int{true: 1}[tc.purged] {
				t.Fatalf("result %+v, want purged %v", r, tc.purged)
			}
			e.checkFinished()
			after := e.f.Counts()
			if !tc.purged {
				e.assertUnchanged(dump)
				if after != before {
					t.Fatalf("counts %v -> %v", before, after)
				}
				if len(rec.calls) != 0 {
					t.Fatalf("events %+v for a purge that deleted nothing", rec.calls)
				}
				return
			}
			e.noTask(tc.id)
			before[prev.State]--
			if after != before {
				t.Fatalf("counts %v, want %v", after, before)
			}
			if len(rec.calls) != 1 || len(rec.calls[0].events) != 1 {
				t.Fatalf("events %+v", rec.calls)
			}
			ev := rec.calls[0].events[0]
			if ev.Type != CmdPurge || ev.Task.ID != tc.id || ev.Prev != prev.State || ev.Task.State != prev.State {
				t.Fatalf("event %+v", ev)
			}
			// Nothing of the task is left: no key names it.
			for k := range e.dump() {
				if bytes.HasSuffix([]byte(k), []byte(tc.id)) && k != string(countKey(prev.State)) {
					t.Errorf("key %q left", k)
				}
			}
			// The counts are stored: a restart reads the same.
			e.reopen()
			if c := e.f.Counts(); c != after {
				t.Fatalf("counts after reopen %v, want %v", c, after)
			}
		})
	}
}

// One purge of many tasks, some twice: each is deleted once, and the
// results line up with the list.
func TestPurgeManyInOneCommand(t *testing.T) {
	e := newEnv(t)
	idx := purgeFixture(e)
	var ts []PurgeTask
	for _, id := range []string{"ok", "waiting", "dead", "ok", "failed", "recurring"} {
		ts = append(ts, targetOf(e.task(id)))
	}
	r := e.apply1(idx, purgeCmd(ts...))
	if want := []bool{true, false, true, false, true, false}; !slices.Equal(r.Purged, want) {
		t.Fatalf("purged %v, want %v", r.Purged, want)
	}
	e.checkFinished()
	for _, id := range []string{"ok", "dead", "failed"} {
		e.noTask(id)
	}
	// Applying the same entry again (a restart's replay) is skipped, and
	// a repeat at a new index deletes nothing more.
	if out := e.applyEntry(idx, purgeCmd(ts...)); out != nil {
		t.Fatalf("replay: %v", out)
	}
	if r := e.apply1(idx+1, purgeCmd(ts...)); r.PurgedCount() != 0 {
		t.Fatalf("second purge: %v", r.Purged)
	}
	e.checkFinished()
}

func ids(fts []FinishedTask) []string {
	var out []string
	for _, ft := range fts {
		out = append(out, ft.ID)
	}
	sort.Strings(out)
	return out
}

func TestExpired(t *testing.T) {
	e := newEnv(t)
	purgeFixture(e)
	// Finish times: ok 100, dead 200, failed 300, retried 400 (DEAD),
	// overwritten 500 (SUCCESS), long 600 (FAILED, own retention of
	// 1000 h), refinished 650 (DEAD), cancelled 700.
	longExpiry := int64(600 + 1000*3600*1000)
	cases := []struct {
		nowMs           int64
		retention, dead time.Duration
		limit           int
		want            []string
	}{
		{nowMs: 99, retention: time.Nanosecond, dead: time.Nanosecond, limit: 100, want: nil},
		{nowMs: 100, retention: time.Millisecond, dead: time.Millisecond, limit: 100, want: nil},
		{nowMs: 101, retention: time.Millisecond, dead: time.Millisecond, limit: 100, want: []string{"ok"}},
		{nowMs: 1000, retention: 300 * time.Millisecond, dead: time.Hour, limit: 100, want: []string{"cancelled", "ok", "overwritten"}},
		{nowMs: 1000, retention: time.Hour, dead: 700 * time.Millisecond, limit: 100, want: []string{"dead", "failed"}},
		{nowMs: 1000, retention: time.Millisecond, dead: time.Millisecond, limit: 100, want: []string{"cancelled", "dead", "failed", "ok", "overwritten", "refinished", "retried"}},
		{nowMs: 1000, retention: time.Millisecond, dead: time.Millisecond, limit: 2, want: []string{"dead", "failed"}},
		{nowMs: 1000, retention: -1, dead: 0, limit: 100, want: nil}, // off
		{nowMs: longExpiry - 1, retention: -1, dead: 0, limit: 100, want: nil},
		{nowMs: longExpiry, retention: -1, dead: 0, limit: 100, want: []string{"long"}},
		{nowMs: math.MaxInt64 / 2, retention: time.Millisecond, dead: time.Millisecond, limit: 100, want: []string{"cancelled", "dead", "failed", "long", "ok", "overwritten", "refinished", "retried"}},
	}
	for i, tc := range cases {
		got, err := e.f.Expired(tc.nowMs, tc.retention, tc.dead, tc.limit, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(ids(got), tc.want) {
			t.Errorf("case %d: Expired(%d, %v, %v, %d) = %v, want %v", i, tc.nowMs, tc.retention, tc.dead, tc.limit, ids(got), tc.want)
		}
		for _, ft := range got {
			tk := e.task(ft.ID)
			if ft.Epoch != tk.Epoch || ft.FinishedMs != tk.FinishedMs || ft.State != tk.State || ft.Handler != tk.Spec.Handler {
				t.Errorf("entry %+v of task %+v", ft, tk)
			}
		}
	}
}

// Expired with a cursor resumes after the entries earlier calls returned,
// across the classes (own retention, DEAD and FAILED, SUCCESS and
// CANCELLED): a cycle reads each expired entry once, whether it purged
// the ones before or not; without a cursor every call starts over.
func TestExpiredCursor(t *testing.T) {
	e := newEnv(t)
	idx := purgeFixture(e)
	const now = math.MaxInt64 / 2
	order := []string{"long", "dead", "failed", "retried", "refinished", "ok", "overwritten", "cancelled"}
	var cur PurgeCursor
	var got []string
	for range 10 {
		fts, err := e.f.Expired(now, time.Millisecond, time.Millisecond, 3, &cur)
		if err != nil {
			t.Fatal(err)
		}
		if len(fts) == 0 {
			break
		}
		for _, ft := range fts {
			got = append(got, ft.ID)
		}
	}
	if !slices.Equal(got, order) {
		t.Fatalf("cycle without purges read %v, want %v", got, order)
	}
	// Purging what each call returns; "dead" changes before its purge
	// (retried: a new epoch), so it stays, and this cycle's cursor does
	// not read it again; a new cycle's does.
	e.apply(idx, Command{Type: CmdRetry, Retry: &Retry{ID: "dead", AtMs: 900}})
	idx++
	cur, got = PurgeCursor{}, nil
	for range 10 {
		fts, err := e.f.Expired(now, time.Millisecond, time.Millisecond, 2, &cur)
		if err != nil {
			t.Fatal(err)
		}
		if len(fts) == 0 {
			break
		}
		var ts []PurgeTask
		for _, ft := range fts {
			got = append(got, ft.ID)
			if ft.ID == "dead" {
				ft.FinishedMs = 200 // as read before the retry: stale
			}
			ts = append(ts, ft.Target())
		}
		e.apply(idx, purgeCmd(ts...))
		idx++
	}
	// "dead" was retried: no longer finished, so not in the index.
	want := []string{"long", "failed", "retried", "refinished", "ok", "overwritten", "cancelled"}
	if !slices.Equal(got, want) {
		t.Fatalf("cycle with purges read %v, want %v", got, want)
	}
	if fts, _ := e.f.Expired(now, time.Millisecond, time.Millisecond, 10, nil); len(fts) != 0 {
		t.Fatalf("left after the cycle: %v", ids(fts))
	}
	// One entry read and not purged: the same cursor does not return it
	// again, a new one (the next cycle) does.
	e.apply(idx, cancelCmd("waiting", 1000))
	cur = PurgeCursor{}
	for i, want := range []int{1, 0} {
		if fts, _ := e.f.Expired(now, time.Millisecond, time.Millisecond, 10, &cur); len(fts) != want {
			t.Fatalf("call %d with the cursor: %v, want %d entries", i, ids(fts), want)
		}
	}
	if fts, _ := e.f.Expired(now, time.Millisecond, time.Millisecond, 10, &PurgeCursor{}); len(fts) != 1 {
		t.Fatalf("a new cursor: %v", ids(fts))
	}
}

// The cursor's key is not the scan's start: a read that returns a key
// shorter than the one it resumed after ("b-1" after "a-99") must not
// change where that same read skips, or the entry equal to the new key
// with the old one's tail ("b-19") would be passed over (found by review).
func TestExpiredCursorKeysOfOtherLengths(t *testing.T) {
	e := newEnv(t)
	e.apply(1,
		submitCmd("a-99", spec("h", "x"), 5000, 10),
		submitCmd("b-1", spec("h", "x"), 5000, 10),
		submitCmd("b-19", spec("h", "x"), 5000, 10),
		submitCmd("b-2", spec("h", "x"), 5000, 10),
	)
	e.apply(2, cancelCmd("a-99", 100))
	e.apply(3, cancelCmd("b-1", 200), cancelCmd("b-19", 200), cancelCmd("b-2", 200))
	var cur PurgeCursor
	var got []string
	for _, limit := range []int{1, 10, 10} {
		fts, err := e.f.Expired(10000, time.Millisecond, time.Millisecond, limit, &cur)
		if err != nil {
			t.Fatal(err)
		}
		for _, ft := range fts {
			got = append(got, ft.ID)
		}
	}
	if want := []string{"a-99", "b-1", "b-19", "b-2"}; !slices.Equal(got, want) {
		t.Fatalf("cycle read %v, want %v", got, want)
	}
}

// timedPurgeCycle is one retention cycle on e: it reads the expired tasks
// 512 at a time (the proposer's entry bound) with cur (nil: every read
// from the start) and purges each batch in the entry at *next (moved on),
// until nothing expired is left. It returns the time the reads and the
// purges' applies took, and the tasks purged.
func timedPurgeCycle(tb testing.TB, e *env, next *uint64, cur *PurgeCursor) (read, apply time.Duration, purged int) {
	return timedPurges(tb, e, next, func() ([]FinishedTask, bool, error) {
		fts, err := e.f.Expired(1<<50, time.Millisecond, time.Millisecond, 512, cur)
		return fts, len(fts) > 0, err
	})
}

// timedPurges calls read and purges what it returns in the entry at *next
// (moved on) until read says no more; it returns the time the reads and
// the purges' applies took, and the tasks purged.
func timedPurges(tb testing.TB, e *env, next *uint64, read func() ([]FinishedTask, bool, error)) (reads, apply time.Duration, purged int) {
	for {
		t0 := time.Now()
		fts, more, err := read()
		reads += time.Since(t0)
		if err != nil {
			tb.Fatal(err)
		}
		if len(fts) > 0 {
			ts := make([]PurgeTask, len(fts))
			for i, ft := range fts {
				ts[i] = ft.Target()
			}
			t0 = time.Now()
			r := e.apply1(*next, purgeCmd(ts...))
			apply += time.Since(t0)
			*next++
			purged += r.PurgedCount()
		}
		if !more {
			return reads, apply, purged
		}
	}
}

// BenchmarkPurgeCycle is one retention cycle's reads of the finished
// index over 100 000 expired tasks (read-ms; the purges' applies are not
// counted). Without a cursor every read walks again the deleted keys of
// all the batches purged before it.
func BenchmarkPurgeCycle(b *testing.B) {
	benchPurgeReads(b, func(e *env, cur *PurgeCursor) ([]FinishedTask, bool, error) {
		fts, err := e.f.Expired(1<<50, time.Millisecond, time.Millisecond, 512, cur)
		return fts, len(fts) > 0, err
	})
}

// BenchmarkBulkPurge is a bulk purge's reads (POST /v1/tasks/purge at its
// default limit, 1 000, called until more is false) over 100 000
// cancelled tasks (read-ms; the purges' applies are not counted): from
// the start each time, as without next_cursor, or resumed from the
// previous call's cursor.
func BenchmarkBulkPurge(b *testing.B) {
	benchPurgeReads(b, func(e *env, cur *PurgeCursor) ([]FinishedTask, bool, error) {
		return e.f.Finished(FinishedQuery{BeforeMs: math.MaxInt64, State: StateCancelled}, 1000, cur)
	})
}

// benchPurgeReads purges 100 000 cancelled tasks with what read returns
// (timedPurges) until it says no more, each read from the start (a new
// cursor each time) or resumed from the previous one's cursor, and
// reports the reads' time (read-ms).
func benchPurgeReads(b *testing.B, read func(e *env, cur *PurgeCursor) ([]FinishedTask, bool, error)) {
	for _, withCursor := range []bool{false, true} {
		name := "from-start"
		if withCursor {
			name = "cursor"
		}
		b.Run(name, func(b *testing.B) {
			b.StopTimer()
			for range b.N {
				e := newEnv(b)
				next := cancelledFuture(e, 100_000, 1<<40)
				cur := &PurgeCursor{}
				reads, _, n := timedPurges(b, e, &next, func() ([]FinishedTask, bool, error) {
					if !withCursor {
						cur = &PurgeCursor{}
					}
					return read(e, cur)
				})
				if n != 100_000 {
					b.Fatalf("purged %d, want 100 000", n)
				}
				b.ReportMetric(float64(reads.Milliseconds()), "read-ms")
			}
		})
	}
}

func TestFinishedQuery(t *testing.T) {
	e := newEnv(t)
	purgeFixture(e)
	cases := []struct {
		q     FinishedQuery
		limit int
		want  []string
		more  bool
	}{
		{q: FinishedQuery{BeforeMs: math.MaxInt64}, limit: 100, want: []string{"cancelled", "dead", "failed", "long", "ok", "overwritten", "refinished", "retried"}},
		{q: FinishedQuery{BeforeMs: 300}, limit: 100, want: []string{"dead", "ok"}},
		{q: FinishedQuery{BeforeMs: 601}, limit: 100, want: []string{"dead", "failed", "long", "ok", "overwritten", "retried"}},
		{q: FinishedQuery{BeforeMs: 600}, limit: 100, want: []string{"dead", "failed", "ok", "overwritten", "retried"}},
		{q: FinishedQuery{BeforeMs: math.MaxInt64, State: StateFailed}, limit: 100, want: []string{"failed", "long"}},
		{q: FinishedQuery{BeforeMs: math.MaxInt64, State: StateCancelled}, limit: 100, want: []string{"cancelled"}},
		{q: FinishedQuery{BeforeMs: math.MaxInt64, Handler: "h2"}, limit: 100, want: []string{"cancelled"}},
		{q: FinishedQuery{BeforeMs: math.MaxInt64, Handler: "h", State: StateSuccess}, limit: 100, want: []string{"ok", "overwritten"}},
		{q: FinishedQuery{BeforeMs: math.MaxInt64, State: StateWaiting}, limit: 100, want: nil},
		{q: FinishedQuery{BeforeMs: math.MaxInt64}, limit: 2, want: []string{"ok", "overwritten"}, more: true},
		{q: FinishedQuery{BeforeMs: math.MaxInt64, State: StateSuccess}, limit: 1, want: []string{"ok"}, more: true},
	}
	for i, tc := range cases {
		got, more, err := e.f.Finished(tc.q, tc.limit, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(ids(got), tc.want) || more != tc.more {
			t.Errorf("case %d: Finished(%+v, %d) = %v more %v, want %v more %v", i, tc.q, tc.limit, ids(got), more, tc.want, tc.more)
		}
	}
}

// The finished index travels in snapshots: a restored FSM finds the same
// expired tasks, and purging them there leaves the same state as on the
// original.
func TestPurgeSnapshotRoundTrip(t *testing.T) {
	e := newEnv(t)
	idx := purgeFixture(e)
	stream := persist(t, e.snapshot())
	e2 := newEnv(t)
	e2.apply1(1, submitCmd("other", spec("h", "x"), 100, 10))
	if err := e2.restore(stream); err != nil {
		t.Fatal(err)
	}
	e2.checkFinished()
	if d := diffDumps(e2.dump(), e.dump()); d != "" {
		t.Fatalf("restored state differs:\n%s", d)
	}
	want, _ := e.f.Expired(10000, time.Millisecond, time.Millisecond, 100, nil)
	got, _ := e2.f.Expired(10000, time.Millisecond, time.Millisecond, 100, nil)
	if !slices.Equal(got, want) || len(got) != 7 {
		t.Fatalf("restored Expired %v, want %v", got, want)
	}
	var ts []PurgeTask
	for _, ft := range got {
		ts = append(ts, ft.Target())
	}
	r1, r2 := e.apply1(idx, purgeCmd(ts...)), e2.apply1(idx, purgeCmd(ts...))
	if r1.PurgedCount() != 7 || r2.PurgedCount() != 7 {
		t.Fatalf("purged %v and %v", r1.Purged, r2.Purged)
	}
	if d := diffDumps(e2.dump(), e.dump()); d != "" {
		t.Fatalf("after purge states differ:\n%s", d)
	}
	e2.checkFinished()
}

// A purge that overflows one badger transaction splits it and keeps the
// counts right.
func TestPurgeHugeEntry(t *testing.T) {
	e := newEnv(t)
	const n = 20000
	var cmds []Command
	for i := range n {
		cmds = append(cmds, submitCmd(fmt.Sprintf("t%05d", i), spec("h", fmt.Sprint(i)), 100, 10))
	}
	e.apply(1, cmds...)
	cmds = cmds[:0]
	for i := range n {
		cmds = append(cmds, cancelCmd(fmt.Sprintf("t%05d", i), 200))
	}
	e.apply(2, cmds...)
	fts, err := e.f.Expired(1000, time.Millisecond, time.Millisecond, n, nil)
	if err != nil || len(fts) != n {
		t.Fatalf("expired %d, %v", len(fts), err)
	}
	var ts []PurgeTask
	for _, ft := range fts {
		ts = append(ts, ft.Target())
	}
	if r := e.apply1(3, purgeCmd(ts...)); r.PurgedCount() != n {
		t.Fatalf("purged %d", r.PurgedCount())
	}
	if c := e.f.Counts(); c != ([numStates]int64{}) {
		t.Fatalf("counts %v", c)
	}
	e.reopen()
	if c := e.f.Counts(); c != ([numStates]int64{}) {
		t.Fatalf("counts after reopen %v", c)
	}
	if d := withoutApplied(e.dump()); len(d) != len(countKeysOf(d)) {
		t.Fatalf("keys left: %d", len(d))
	}
}

// countKeysOf returns the m/count/ keys of a dump.
func countKeysOf(d map[string]string) []string {
	var out []string
	for k := range d {
		if bytes.HasPrefix([]byte(k), []byte("m/count/")) {
			out = append(out, k)
		}
	}
	return out
}

// dropFinishedIndex deletes every f/ key, as a store written before the
// finished index existed.
func dropFinishedIndex(t *testing.T, db *badger.DB) {
	t.Helper()
	if err := db.DropPrefix(prefixFinished); err != nil {
		t.Fatal(err)
	}
}

// A store (or a snapshot) from before the finished index gets it at Open
// (or Restore): its finished tasks are found by Expired and purged.
func TestFinishedIndexBackfill(t *testing.T) {
	e := newEnv(t)
	purgeFixture(e)
	want := e.dump()
	dropFinishedIndex(t, e.db)
	if fts, _ := e.f.Expired(math.MaxInt64/2, time.Millisecond, time.Millisecond, 100, nil); len(fts) != 0 {
		t.Fatalf("index not dropped: %v", fts)
	}
	stream := persist(t, e.snapshot()) // an old version's snapshot
	e.reopen()
	e.checkFinished()
	if d := diffDumps(e.dump(), want); d != "" {
		t.Fatalf("after the backfill at Open:\n%s", d)
	}
	dst := newEnv(t)
	if err := dst.restore(stream); err != nil {
		t.Fatal(err)
	}
	dst.checkFinished()
	if d := diffDumps(dst.dump(), want); d != "" {
		t.Fatalf("after the backfill at Restore:\n%s", d)
	}
	if fts, _ := dst.f.Expired(math.MaxInt64/2, time.Millisecond, time.Millisecond, 100, nil); len(fts) != 8 {
		t.Fatalf("expired after the backfill: %v", ids(fts))
	}
	// A store whose index is complete is not rewritten.
	if n, err := backfillFinished(dst.db, dst.f.terminalCount()); n != 0 || err != nil {
		t.Fatalf("second backfill wrote %d (%v)", n, err)
	}
}

// finishedPages reads q through Finished limit entries at a time, each
// call resuming from the previous one's cursor in its text form (as POST
// /v1/tasks/purge hands it over), purging each page when purge is set
// (entries from *next on), until more is false; it returns the ids of
// every page in order and the number of calls.
func finishedPages(t *testing.T, e *env, q FinishedQuery, limit int, purge bool, next *uint64) (got []string, calls int) {
	t.Helper()
	text := ""
	for calls < 1000 {
		cur := &PurgeCursor{}
		if text != "" {
			var err error
			if cur, err = ParseFinishedCursor(text); err != nil {
				t.Fatalf("ParseFinishedCursor(%q): %v", text, err)
			}
		}
		fts, more, err := e.f.Finished(q, limit, cur)
		calls++
		if err != nil {
			t.Fatal(err)
		}
		if len(fts) > limit {
			t.Fatalf("a page of %d entries, limit %d", len(fts), limit)
		}
		got = append(got, ids(fts)...)
		if purge && len(fts) > 0 {
			ts := make([]PurgeTask, len(fts))
			for i, ft := range fts {
				ts[i] = ft.Target()
			}
			e.apply1(*next, purgeCmd(ts...))
			*next++
		}
		if !more {
			return got, calls
		}
		if text = cur.String(); text == "" {
			t.Fatalf("more after %v but no cursor", ids(fts))
		}
	}
	t.Fatalf("no end after %d calls", calls)
	return nil, calls
}

// Pages of Finished joined by cursors are the one big answer: nothing
// skipped, nothing twice, in every class and filter, also when each page
// is purged before the next is read.
func TestFinishedCursor(t *testing.T) {
	for _, q := range []FinishedQuery{
		{BeforeMs: math.MaxInt64},
		{BeforeMs: 601},
		{BeforeMs: math.MaxInt64, Handler: "h"},
		{BeforeMs: math.MaxInt64, State: StateSuccess},
		{BeforeMs: math.MaxInt64, State: StateFailed},
		{BeforeMs: math.MaxInt64, Handler: "nobody"},
	} {
		for _, limit := range []int{1, 2, 3} {
			for _, purge := range []bool{false, true} {
				e := newEnv(t)
				next := purgeFixture(e)
				all, more, err := e.f.Finished(q, 100, nil)
				if err != nil || more {
					t.Fatal(more, err)
				}
				got, _ := finishedPages(t, e, q, limit, purge, &next)
				slices.Sort(got) // ids sorts too
				if !slices.Equal(got, ids(all)) {
					t.Errorf("%+v limit %d purge %v: pages %v, want %v", q, limit, purge, got, ids(all))
				}
				if rest, _, _ := e.f.Finished(q, 100, nil); purge && len(rest) > 0 {
					t.Errorf("%+v limit %d: %v left after purging every page", q, limit, ids(rest))
				}
			}
		}
	}
}

// A call that reads finishedScanMax entries the filter drops answers
// nothing with more set: without a cursor the next call answers the
// same, for ever (the bulk purge made no progress behind more than
// 100 000 entries of other handlers); with one it goes on past them.
func TestFinishedCursorPastScanMax(t *testing.T) {
	defer func(n int) { finishedScanMax = n }(finishedScanMax)
	finishedScanMax = 3
	e := newEnv(t)
	var subs, cancels []Command
	for i := range 10 {
		id := fmt.Sprintf("other-%02d", i)
		subs = append(subs, submitCmd(id, spec("other", "x"), 5000, 10))
		cancels = append(cancels, cancelCmd(id, int64(100+i)))
	}
	for i := range 2 {
		id := fmt.Sprintf("mine-%d", i)
		subs = append(subs, submitCmd(id, spec("h", "x"), 5000, 10))
		cancels = append(cancels, cancelCmd(id, int64(200+i)))
	}
	e.apply(1, subs...)
	e.apply(2, cancels...)
	q := FinishedQuery{BeforeMs: math.MaxInt64, Handler: "h"}
	for range 2 {
		if fts, more, err := e.f.Finished(q, 10, nil); err != nil || len(fts) != 0 || !more {
			t.Fatalf("without a cursor: %v more %v %v, want nothing and more", ids(fts), more, err)
		}
	}
	next := uint64(3)
	got, calls := finishedPages(t, e, q, 10, true, &next)
	if want := []string{"mine-0", "mine-1"}; !slices.Equal(got, want) {
		t.Fatalf("with a cursor: %v, want %v", got, want)
	}
	if calls != 4 { // 12 entries, 3 a call; the fourth reads the last 3 and the end
		t.Errorf("%d calls, want 4", calls)
	}
}

func TestParseFinishedCursor(t *testing.T) {
	for _, c := range []*PurgeCursor{
		{class: 0, key: finishedKeyAt(finishedOK, 12345, "a")},
		{class: 1, key: finishedKeyAt(finishedFailed, 0, "b/c")},
		{class: 2, key: finishedKeyAt(finishedExpires, math.MaxInt64, strings.Repeat("é", 100))},
	} {
		got, err := ParseFinishedCursor(c.String())
		if err != nil || got.class != c.class || !bytes.Equal(got.key, c.key) {
			t.Errorf("ParseFinishedCursor(%q) = %+v %v, want %+v", c.String(), got, err, c)
		}
	}
	if s := (&PurgeCursor{}).String(); s != "" {
		t.Errorf("zero cursor's text %q, want empty", s)
	}
	for _, s := range []string{"", "!!", "cy8", base64.RawURLEncoding.EncodeToString([]byte("s/12345678")),
		base64.RawURLEncoding.EncodeToString([]byte("q/12345678a")), base64.RawURLEncoding.EncodeToString([]byte("s-12345678a")),
		base64.StdEncoding.EncodeToString(finishedKeyAt(finishedOK, 1, "a")[2:]) + "="} {
		if _, err := ParseFinishedCursor(s); !errors.Is(err, ErrBadCursor) {
			t.Errorf("ParseFinishedCursor(%q): %v, want ErrBadCursor", s, err)
		}
	}
}
