package raftfsm

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// recurringSpec runs every second, at most 3 attempts a run.
func recurringSpec() Spec {
	s := spec("h", "{}")
	s.EveryNs = int64(time.Second)
	return s
}

func (e *env) runs(id string) []RunRecord {
	e.t.Helper()
	rs, _, err := e.f.Runs(id, 0, 1000)
	if err != nil {
		e.t.Fatal(err)
	}
	return rs
}

func (e *env) historyKeys() int {
	n := 0
	err := e.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefixHistory})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			n++
		}
		return nil
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return n
}

// deliveredCmd is a Complete as a delivering node sends it.
func deliveredCmd(id string, epoch uint64, attempt int, o Outcome, status int, errMsg string, atMs int64) Command {
	c := completeCmd(id, epoch, attempt, o, errMsg, atMs+1000, atMs)
	x := c.Complete
	x.Executor, x.HTTPStatus = "app", status
	x.AppliedMs, x.StartedMs, x.EndedMs = atMs-40, atMs-30, atMs-5
	x.DurationNs, x.QueueNs, x.ConnectNs = int64(25*time.Millisecond), int64(8*time.Millisecond), int64(2*time.Millisecond)
	if o == OutcomeSuccess {
		x.Result = []byte(`{"ok":true}`)
	}
	return c
}

// TestHistoryRecordsFromCommands: the run records follow from Fire,
// Complete and Cancel alone: attempts, states, times, lateness, result.
func TestHistoryRecordsFromCommands(t *testing.T) {
	e := newEnv(t)
	e.apply1(1, submitCmd("a", spec("h", "{}"), 1000, 900))
	fire := fireCmd("a", 1, 1, "n1", 1100, 40000)
	fire.Fire.ParkedReason = "handler_limit"
	e.apply1(2, fire)
	// A run going on is shown from the task: a Fire writes no record.
	if rs := e.runs("a"); len(rs) != 1 || rs[0].State != StateRunning || len(rs[0].Attempts) != 1 || rs[0].Attempts[0].Outcome != 0 ||
		rs[0].Attempts[0].Node != "n1" || rs[0].DueMs != 1000 || rs[0].FiredMs != 1100 || e.historyKeys() != 0 {
		t.Fatalf("running run %+v (%d keys)", rs, e.historyKeys())
	}
	e.apply1(3, deliveredCmd("a", 1, 1, OutcomeRetryable, 500, strings.Repeat("é", 1000), 1300))
	if rs := e.runs("a"); len(rs) != 1 || rs[0].State != StateWaiting || len(rs[0].Attempts) != 1 || e.historyKeys() != 1 {
		t.Fatalf("run between attempts %+v", rs)
	}
	e.apply1(4, fireCmd("a", 1, 2, "n2", 2300, 40000))
	if r, err := e.f.Run("a", 1); err != nil || r.State != StateRunning || len(r.Attempts) != 2 || r.Attempts[1].Node != "n2" {
		t.Fatalf("Run 1 while its second attempt runs: %+v %v", r, err)
	}
	e.apply1(5, deliveredCmd("a", 1, 2, OutcomeSuccess, 200, "", 2500))

	rs := e.runs("a")
	if len(rs) != 1 {
		t.Fatalf("%d runs", len(rs))
	}
	r := rs[0]
	if r.Run != 1 || r.State != StateSuccess || r.DueMs != 1000 || r.FiredMs != 1100 || r.StartedMs != 1270 || r.FinishedMs != 2500 {
		t.Fatalf("run %+v", r)
	}
	if r.ParkedReason != "handler_limit" || r.ParkedNs != int64(100*time.Millisecond) ||
		r.CommitNs != int64(160*time.Millisecond) || r.QueueNs != int64(8*time.Millisecond) || r.ConnectNs != int64(2*time.Millisecond) {
		t.Fatalf("lateness %+v", r)
	}
	if len(r.Attempts) != 2 {
		t.Fatalf("attempts %+v", r.Attempts)
	}
	a1, a2 := r.Attempts[0], r.Attempts[1]
	if a1.Attempt != 1 || a1.Node != "n1" || a1.Outcome != OutcomeRetryable || a1.HTTPStatus != 500 || a1.Executor != "app" ||
		len(a1.Error) > RunErrorMaxBytes || !strings.HasPrefix(a1.Error, "éé") || a1.StartedMs != 1270 || a1.EndedMs != 1295 {
		t.Fatalf("attempt 1 %+v", a1)
	}
	if a2.Attempt != 2 || a2.Node != "n2" || a2.Outcome != OutcomeSuccess || a2.HTTPStatus != 200 {
		t.Fatalf("attempt 2 %+v", a2)
	}
	if string(r.Result) != `{"ok":true}` || r.ResultBinary || r.ResultTruncated {
		t.Fatalf("result %q", r.Result)
	}
	if got, err := e.f.Run("a", 1); err != nil || got.State != StateSuccess {
		t.Fatalf("Run: %v %v", got, err)
	}
	if _, err := e.f.Run("a", 2); err == nil {
		t.Fatal("Run 2 found")
	}
	e.checkIndexes()

	// A leader-made Complete (a timeout) and a cancel.
	e.apply1(6, submitCmd("b", spec("h", "{}"), 1000, 900))
	e.apply1(7, fireCmd("b", 6, 1, "n1", 1000, 2000))
	e.apply1(8, completeCmd("b", 6, 1, OutcomeTimeout, "lease expired", 3000, 2000))
	e.apply1(9, cancelCmd("b", 2100))
	r = e.runs("b")[0]
	if r.State != StateCancelled || r.FinishedMs != 2100 || r.Late || r.Attempts[0].EndedMs != 2000 || r.Attempts[0].Outcome != OutcomeTimeout {
		t.Fatalf("cancelled run %+v", r)
	}
	// A run that never fired has no record; a stale command writes none.
	e.apply1(10, submitCmd("c", spec("h", "{}"), 1000, 900))
	e.apply1(11, fireCmd("c", 99, 1, "n1", 1000, 2000))
	e.apply1(12, cancelCmd("c", 1100))
	if n := len(e.runs("c")); n != 0 {
		t.Fatalf("c has %d runs", n)
	}
}

// TestHistoryCommitSplitAfterUnavailable: a run whose first attempt found
// the executor unavailable (no call, the attempt given back) is late by
// the wait for the next try. The record keeps the commit from the run's
// first Fire, as nodes of every version store it; CommitSplitNs shows the
// attempts before the one that reached the executor apart from that
// attempt's own commit.
func TestHistoryCommitSplitAfterUnavailable(t *testing.T) {
	e := newEnv(t)
	e.apply1(1, submitCmd("a", spec("h", "{}"), 1000, 900))
	e.apply1(2, fireCmd("a", 1, 1, "n1", 1100, 40000))
	unavailable := completeCmd("a", 1, 1, OutcomeUnavailable, "connect: no such file", 8100, 1150)
	unavailable.Complete.AppliedMs = 1140 // no StartedMs: no call was made
	e.apply1(3, unavailable)
	e.apply1(4, fireCmd("a", 1, 1, "n2", 8100, 40000))
	e.apply1(5, deliveredCmd("a", 1, 1, OutcomeSuccess, 200, "", 8300)) // applied 8260, started 8270

	r := e.runs("a")[0]
	if r.FiredMs != 1100 || r.StartedMs != 8270 || r.CommitNs != int64(7160*time.Millisecond) {
		t.Fatalf("run %+v", r)
	}
	retries, commit := r.CommitSplitNs()
	if retries != int64(7000*time.Millisecond) || commit != int64(160*time.Millisecond) {
		t.Fatalf("split: retries %v, commit %v; want 7s and 160ms", time.Duration(retries), time.Duration(commit))
	}
	if got := retries + commit + r.ParkedNs + r.QueueNs + r.ConnectNs; got != r.LatenessNs() {
		t.Fatalf("the parts add up to %v, the lateness is %v", time.Duration(got), time.Duration(r.LatenessNs()))
	}

	// The first attempt reached the executor: nothing split off.
	e.apply1(6, submitCmd("b", spec("h", "{}"), 1000, 900))
	e.apply1(7, fireCmd("b", 6, 1, "n1", 1100, 40000))
	e.apply1(8, deliveredCmd("b", 6, 1, OutcomeSuccess, 200, "", 1300))
	rb := e.runs("b")[0]
	if retries, commit := rb.CommitSplitNs(); retries != 0 || commit != rb.CommitNs || commit != int64(160*time.Millisecond) {
		t.Fatalf("b split: retries %v, commit %v (record %v)", time.Duration(retries), time.Duration(commit), time.Duration(rb.CommitNs))
	}
	// The attempt that reached it no longer on record (dropped): all of it
	// stays commit, as before the split.
	r.Attempts = r.Attempts[:1]
	if retries, commit := r.CommitSplitNs(); retries != 0 || commit != r.CommitNs {
		t.Fatalf("without the started attempt: retries %v, commit %v", time.Duration(retries), time.Duration(commit))
	}
}

// TestHistoryRecurringAndBound: each run of a recurring task has its
// record; the Fire's bound keeps the newest; a failed attempt stays on
// record after later runs succeed; history off keeps none.
func TestHistoryRecurringAndBound(t *testing.T) {
	e := newEnv(t)
	e.apply1(1, submitCmd("r", recurringSpec(), 1000, 900))
	idx := uint64(2)
	at := int64(1000)
	for run := 1; run <= 6; run++ {
		f := fireCmd("r", 1, 1, "n1", at, at+30000)
		f.Fire.HistoryRuns = 3
		e.apply1(idx, f)
		idx++
		if run == 2 {
			e.apply1(idx, deliveredCmd("r", 1, 1, OutcomeRetryable, 503, "boom", at+10))
			idx++
			f := fireCmd("r", 1, 2, "n2", at+500, at+30000)
			f.Fire.HistoryRuns = 3
			e.apply1(idx, f)
			idx++
		}
		c := deliveredCmd("r", 1, e.task("r").Attempts, OutcomeSuccess, 200, "", at+600)
		c.Complete.NextSlotMs, c.Complete.NextDueMs = at+1000, at+1000
		e.apply1(idx, c)
		idx++
		at += 1000
	}
	rs := e.runs("r")
	if len(rs) != 3 || rs[0].Run != 6 || rs[2].Run != 4 || e.historyKeys() != 3 {
		t.Fatalf("runs %d (keys %d): %+v", len(rs), e.historyKeys(), rs)
	}
	if tk := e.task("r"); tk.HistFirst != 4 {
		// HistFirst is the oldest that may exist: run 6's fire dropped 3.
		t.Fatalf("HistFirst %d", tk.HistFirst)
	}
	// Pages: newest first, before a run number.
	page, more, err := e.f.Runs("r", 6, 1)
	if err != nil || len(page) != 1 || page[0].Run != 5 || !more {
		t.Fatalf("page %+v more %v err %v", page, more, err)
	}

	// A bigger bound keeps run 2's failed attempt.
	e2 := newEnv(t)
	e2.apply1(1, submitCmd("r", recurringSpec(), 1000, 900))
	e2.apply1(2, fireCmd("r", 1, 1, "n1", 1000, 9000))
	e2.apply1(3, deliveredCmd("r", 1, 1, OutcomeRetryable, 500, "boom", 1100))
	e2.apply1(4, fireCmd("r", 1, 2, "n2", 2100, 9000))
	c := deliveredCmd("r", 1, 2, OutcomeSuccess, 200, "", 2200)
	c.Complete.NextSlotMs, c.Complete.NextDueMs = 3000, 3000
	e2.apply1(5, c)
	e2.apply1(6, fireCmd("r", 1, 1, "n1", 3000, 9000))
	e2.apply1(7, deliveredCmd("r", 1, 1, OutcomeSuccess, 200, "", 3100))
	rs = e2.runs("r")
	if len(rs) != 2 || rs[1].Attempts[0].Error != "boom" || rs[1].Attempts[0].HTTPStatus != 500 || rs[0].State != StateSuccess {
		t.Fatalf("runs %+v", rs)
	}

	// A purge deletes every record of a task of several runs.
	e2.apply1(8, cancelCmd("r", 3200))
	e2.apply1(9, purgeCmd(targetOf(e2.task("r"))))
	if n := e2.historyKeys(); n != 0 {
		t.Fatalf("%d run records after the purge", n)
	}

	// History off.
	e3 := newEnv(t)
	e3.apply1(1, submitCmd("x", spec("h", "{}"), 1000, 900))
	f := fireCmd("x", 1, 1, "n1", 1000, 9000)
	f.Fire.HistoryRuns = -1
	e3.apply1(2, f)
	e3.apply1(3, deliveredCmd("x", 1, 1, OutcomeSuccess, 200, "", 1100))
	if e3.historyKeys() != 0 {
		t.Fatal("history kept while off")
	}
}

// TestHistoryResultTruncatedAndBusy: a result over the bound is cut and
// flagged; a busy answer is an attempt on record with the same number.
func TestHistoryResultTruncatedAndBusy(t *testing.T) {
	e := newEnv(t)
	e.apply1(1, submitCmd("a", spec("h", "{}"), 1000, 900))
	e.apply1(2, fireCmd("a", 1, 1, "n1", 1000, 9000))
	e.apply1(3, deliveredCmd("a", 1, 1, OutcomeBusy, 429, "busy", 1100))
	e.apply1(4, fireCmd("a", 1, 1, "n1", 2100, 9000))
	c := deliveredCmd("a", 1, 1, OutcomeSuccess, 200, "", 2200)
	c.Complete.Result = bytes.Repeat([]byte{0xff}, ResultMaxBytes+10)
	c.Complete.ResultBinary = true
	e.apply1(5, c)
	r := e.runs("a")[0]
	if len(r.Attempts) != 2 || r.Attempts[0].Outcome != OutcomeBusy || r.Attempts[1].Attempt != 1 {
		t.Fatalf("attempts %+v", r.Attempts)
	}
	if len(r.Result) != ResultMaxBytes || !r.ResultTruncated || !r.ResultBinary {
		t.Fatalf("result %d bytes truncated %v", len(r.Result), r.ResultTruncated)
	}
}

// TestHistorySnapshotAndPurge: records travel in a snapshot and go with
// the task's purge.
func TestHistorySnapshotAndPurge(t *testing.T) {
	src := newEnv(t)
	src.apply1(1, submitCmd("a", spec("h", "{}"), 1000, 900))
	src.apply1(2, fireCmd("a", 1, 1, "n1", 1000, 9000))
	src.apply1(3, deliveredCmd("a", 1, 1, OutcomeSuccess, 200, "", 1100))
	src.apply1(4, submitCmd("ab", spec("h", "{}"), 1000, 900)) // a prefix of no other id's key
	src.apply1(5, fireCmd("ab", 4, 1, "n1", 1000, 9000))
	stream := persist(t, src.snapshot())

	dst := newEnv(t)
	if err := dst.restore(stream); err != nil {
		t.Fatal(err)
	}
	if got, want := dst.runs("a"), src.runs("a"); len(got) != 1 || string(got[0].Result) != string(want[0].Result) || got[0].State != StateSuccess {
		t.Fatalf("restored runs %+v", got)
	}

	dst.apply1(6, purgeCmd(targetOf(dst.task("a"))))
	dst.noTask("a")
	// "ab" runs: its run is shown from the task; nothing is stored yet.
	if n := len(dst.runs("a")); n != 0 || dst.historyKeys() != 0 || len(dst.runs("ab")) != 1 || dst.runs("ab")[0].State != StateRunning {
		t.Fatalf("after purge: a %d runs, %d keys", n, dst.historyKeys())
	}
}

// TestHistoryRunEndedEvents: the event of the change that closes a run's
// record names the run (RunEnded), and the node whose own Complete ended
// it (EndedBy); a Complete that leaves a retry due, a leader's Complete
// and a cancel name no node.
func TestHistoryRunEndedEvents(t *testing.T) {
	e := newEnv(t)
	rec := &recorder{}
	e.f.SetObserver(rec)
	last := func() Event {
		t.Helper()
		c := rec.calls[len(rec.calls)-1]
		if len(c.events) != 1 {
			t.Fatalf("events %+v", c.events)
		}
		return c.events[0]
	}
	e.apply1(1, submitCmd("a", spec("h", "{}"), 1000, 900))
	e.apply1(2, fireCmd("a", 1, 1, "n1", 1100, 40000))
	e.apply1(3, deliveredCmd("a", 1, 1, OutcomeRetryable, 500, "boom", 1300))
	if ev := last(); ev.RunEnded != 0 || ev.EndedBy != "" {
		t.Fatalf("a retry due: %+v", ev)
	}
	e.apply1(4, fireCmd("a", 1, 2, "n2", 2300, 40000))
	e.apply1(5, deliveredCmd("a", 1, 2, OutcomeSuccess, 200, "", 2500))
	if ev := last(); ev.RunEnded != 1 || ev.EndedBy != "n2" {
		t.Fatalf("run ended by n2's Complete: %+v", ev)
	}

	e.apply1(6, submitCmd("b", spec("h", "{}"), 1000, 900))
	e.apply1(7, fireCmd("b", 6, 1, "n1", 1100, 40000))
	e.apply1(8, completeCmd("b", 6, 1, OutcomePermanent, "lost", 0, 1300))
	if ev := last(); ev.RunEnded != 1 || ev.EndedBy != "" {
		t.Fatalf("run ended by the leader's Complete: %+v", ev)
	}

	e.apply1(9, submitCmd("c", spec("h", "{}"), 1000, 900))
	e.apply1(10, fireCmd("c", 9, 1, "n1", 1100, 40000))
	e.apply1(11, cancelCmd("c", 1200))
	if ev := last(); ev.Type != CmdCancel || ev.RunEnded != 1 || ev.EndedBy != "" {
		t.Fatalf("run cancelled: %+v", ev)
	}
	e.apply1(12, submitCmd("d", spec("h", "{}"), 1000, 900))
	e.apply1(13, cancelCmd("d", 1200))
	if ev := last(); ev.RunEnded != 0 {
		t.Fatalf("a task cancelled before it fired: %+v", ev)
	}
}
