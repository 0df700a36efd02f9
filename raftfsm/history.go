package raftfsm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// Run history (docs/DESIGN.md section 12): one record per run of a task
// that fired, under h/<id length BE 2><id><run BE 8>, built by the FSM
// from the commands it applies anyway; no command exists for it alone.
//
// To keep the apply path cheap, a Fire writes no record: the first Fire
// of a run notes the run's due time, start time and park reason in the
// task (Task.RunDueMs, RunFiredMs, RunParked), which it writes anyway.
// The record is written when an attempt ends (Complete) or the run is
// cancelled: a run's first attempt builds it from the task, without a
// read (one blind write per run in the common case); a later one reads
// it back (Task.HistRun says it exists) and appends. The attempt still
// running, and a run between attempts, are shown from the task (Runs).
//
// The bound per task (--history-runs) travels in the Fire that starts a
// run (Fire.HistoryRuns), so every replica keeps exactly the same runs
// whatever its own flags say. Task.HistFirst is the oldest run number
// that may still have a record: the first Fire of run N deletes the runs
// from HistFirst to N−bound by point deletes, without a read.

// Bounds of a run record.
const (
	// HistoryRunsDefault is the number of runs kept per task when a Fire
	// names no bound (HistoryRuns 0, also entries older than history).
	HistoryRunsDefault = 100
	// RunErrorMaxBytes bounds an attempt's error text in a record.
	RunErrorMaxBytes = 1 << 10
	// RunAttemptsMax bounds the attempts kept in one run record; older
	// ones are dropped (RunRecord.DroppedAttempts counts them).
	RunAttemptsMax = 32
	// ResultMaxBytes bounds a stored result: an executor's answer body
	// beyond it is cut and flagged (RunRecord.ResultTruncated).
	ResultMaxBytes = 64 << 10
)

var prefixHistory = []byte("h/")

// historyPrefix is the key prefix of every run record of id.
func historyPrefix(id string) []byte {
	k := make([]byte, 0, len(prefixHistory)+2+len(id)+8)
	k = append(k, prefixHistory...)
	k = binary.BigEndian.AppendUint16(k, uint16(len(id)))
	return append(k, id...)
}

func historyKey(id string, run int) []byte {
	return binary.BigEndian.AppendUint64(historyPrefix(id), uint64(run))
}

// RunRecord is the stored history of one run of a task. Times are Unix
// milliseconds, UTC (0: not yet); durations nanoseconds.
type RunRecord struct {
	// Run is the executor-visible run number (Task.RunNumber).
	Run   int    `msgpack:"r"`
	Epoch uint64 `msgpack:"e"`
	// State is RUNNING while an attempt runs, WAITING between attempts
	// (a retry is due), then the run's final state: SUCCESS, FAILED,
	// DEAD or CANCELLED.
	State State `msgpack:"s"`
	// DueMs is when the run was due (the task's due time at its first
	// Fire); FiredMs the start time the leader put in that Fire.
	DueMs      int64 `msgpack:"du"`
	FiredMs    int64 `msgpack:"fi"`
	StartedMs  int64 `msgpack:"st,omitempty"` // first callback start (the delivering node's clock)
	FinishedMs int64 `msgpack:"f,omitempty"`
	// ParkedReason is why the leader held the run back before its first
	// Fire ("handler_limit", "no_executor" ...), "" when it did not.
	ParkedReason string `msgpack:"pr,omitempty"`
	// Lateness of the first callback start after DueMs, split: parked on
	// the leader (first Fire's time − due), Raft commit (Fire time →
	// applied on the node), queue on the node (→ the call began) and
	// connect. Set by the first Complete that carries a start.
	Late      bool  `msgpack:"lt,omitempty"`
	ParkedNs  int64 `msgpack:"lp,omitempty"`
	CommitNs  int64 `msgpack:"lc,omitempty"`
	QueueNs   int64 `msgpack:"lq,omitempty"`
	ConnectNs int64 `msgpack:"ln,omitempty"`

	Attempts        []AttemptRecord `msgpack:"a"`
	DroppedAttempts int             `msgpack:"da,omitempty"`

	// Result is the executor's answer body of the successful attempt (or
	// of the app's report), at most ResultMaxBytes; ResultBinary says it
	// is not UTF-8 JSON text; ResultTruncated that it was cut.
	Result          []byte `msgpack:"res,omitempty"`
	ResultBinary    bool   `msgpack:"rb,omitempty"`
	ResultTruncated bool   `msgpack:"rt,omitempty"`

	// Shards is the number of shard tasks of a sharded task's run
	// (ShardID(id, Run, i), i < Shards), 0 for a run without; the run is
	// RUNNING until they have all ended. ShardsSucceeded and
	// ShardsFailed count those that ended SUCCESS and otherwise.
	Shards          int `msgpack:"sh,omitempty"`
	ShardsSucceeded int `msgpack:"shs,omitempty"`
	ShardsFailed    int `msgpack:"shf,omitempty"`
}

// AttemptRecord is one attempt of a run: what the Fire decided and what
// its Complete reported.
type AttemptRecord struct {
	Attempt   int    `msgpack:"a"`
	Node      string `msgpack:"n"`
	FiredMs   int64  `msgpack:"fi"`
	Executor  string `msgpack:"x,omitempty"`
	StartedMs int64  `msgpack:"st,omitempty"`
	// EndedMs is the delivering node's end of the call, or the leader's
	// time of the Complete when the node reported none (a timeout, a
	// lost node).
	EndedMs    int64   `msgpack:"en,omitempty"`
	DurationNs int64   `msgpack:"d,omitempty"`
	Outcome    Outcome `msgpack:"o,omitempty"` // 0 while running
	HTTPStatus int     `msgpack:"hs,omitempty"`
	Error      string  `msgpack:"er,omitempty"`
}

// LatenessNs returns the lateness of the run's first callback start: the
// sum of its parts (0 until known).
func (r *RunRecord) LatenessNs() int64 { return r.ParkedNs + r.CommitNs + r.QueueNs + r.ConnectNs }

// CommitSplitNs splits CommitNs, which runs from the run's first Fire to
// the apply of the Fire whose attempt first reached an executor, into
// the attempts before that one and the waits after them (retries: the
// attempts that found the executor unavailable, or ended with no report
// of a call, a lost node, and their waits for the next attempt), and the
// commit of that attempt's own Fire (commit). retries is 0 when the first
// attempt reached the executor, and when the attempt that did is no
// longer among Attempts (dropped beyond RunAttemptsMax): then all of
// CommitNs is commit, as before the split existed.
//
// It is computed when the record is read, from what every node stores
// alike, not stored itself: nodes of different versions keep the same
// records.
func (r *RunRecord) CommitSplitNs() (retries, commit int64) {
	if !r.Late || r.StartedMs == 0 {
		return 0, r.CommitNs
	}
	for i := range r.Attempts {
		if a := &r.Attempts[i]; a.StartedMs == r.StartedMs {
			retries = min(max(0, a.FiredMs-r.FiredMs)*int64(time.Millisecond), r.CommitNs)
			return retries, r.CommitNs - retries
		}
	}
	return 0, r.CommitNs
}

// historyFire notes the first Fire of a run in t (the task after
// fireTask; prev before it) and drops the runs beyond the bound. It
// writes no record and reads nothing.
func historyFire(w *writer, prev, t *Task, f *Fire) error {
	if !runStarted(prev) {
		// The run's first Fire: the task has no attempt yet and none
		// handed back (HeldBy, set by a busy or unavailable answer, is
		// cleared by every Fire and is 0 whenever a run ends).
		t.RunDueMs, t.RunFiredMs, t.RunParked = 0, 0, ""
		if f.HistoryRuns < 0 {
			return nil // history off for this run
		}
		run := t.RunNumber()
		bound := f.HistoryRuns
		if bound == 0 {
			bound = HistoryRunsDefault
		}
		first := t.HistFirst
		if first == 0 {
			first = run
		}
		for n := first; n <= run-bound; n++ {
			if err := w.del(historyKey(t.ID, n)); err != nil {
				return err
			}
		}
		t.HistFirst = max(first, run-bound+1)
		t.RunDueMs, t.RunFiredMs, t.RunParked = prev.DueMs, f.AtMs, f.ParkedReason
	}
	return nil
}

// runStarted reports whether the current run of t has had a Fire.
func runStarted(t *Task) bool {
	return t.State == StateRunning || t.Attempts > 0 || t.HeldBy != 0
}

// runHistory reports whether the current run of t has had a Fire with
// history on: its record is written when an attempt ends.
func runHistory(t *Task) bool { return runStarted(t) && t.RunFiredMs != 0 }

// loadRun returns the record of prev's current run: stored when an
// earlier attempt of it ended (Task.HistRun), else a new one from the task.
func loadRun(w *writer, prev *Task) (RunRecord, []byte, error) {
	run := prev.RunNumber()
	key := historyKey(prev.ID, run)
	if prev.HistRun == run {
		var r RunRecord
		found, err := w.get(key, &r)
		if err != nil {
			return RunRecord{}, nil, err
		}
		if found && r.Epoch == prev.Epoch {
			return r, key, nil
		}
	}
	return RunRecord{Run: run, Epoch: prev.Epoch, DueMs: prev.RunDueMs, FiredMs: prev.RunFiredMs, ParkedReason: prev.RunParked}, key, nil
}

// addAttempt appends a to r, dropping the oldest beyond RunAttemptsMax.
func (r *RunRecord) addAttempt(a AttemptRecord) {
	r.Attempts = append(r.Attempts, a)
	if n := len(r.Attempts) - RunAttemptsMax; n > 0 {
		r.Attempts = append(r.Attempts[:0], r.Attempts[n:]...)
		r.DroppedAttempts += n
	}
}

// historyComplete writes the record of prev's run (the task before the
// Complete) with attempt c.Attempt ended and, when the run ended, the run;
// t is the task after it (HistRun set). It returns the run's number when
// this Complete ended it (0 otherwise, and when the run has no history).
func historyComplete(w *writer, prev, t *Task, c *Complete) (int, error) {
	if !runHistory(prev) {
		return 0, nil
	}
	r, key, err := loadRun(w, prev)
	if err != nil {
		return 0, err
	}
	a := AttemptRecord{
		Attempt: c.Attempt, Node: prev.Node, FiredMs: prev.FiredMs,
		Outcome: c.Outcome, Executor: c.Executor, HTTPStatus: c.HTTPStatus,
		Error:     truncateUTF8(c.Error, RunErrorMaxBytes),
		StartedMs: c.StartedMs, EndedMs: c.EndedMs, DurationNs: c.DurationNs,
	}
	if a.EndedMs == 0 {
		a.EndedMs = c.AtMs
	}
	r.addAttempt(a)
	if c.StartedMs != 0 && r.StartedMs == 0 {
		r.StartedMs = c.StartedMs
	}
	if c.StartedMs != 0 && !r.Late {
		r.Late = true
		r.ParkedNs = max(0, r.FiredMs-r.DueMs) * int64(time.Millisecond)
		if c.AppliedMs != 0 {
			r.CommitNs = max(0, c.AppliedMs-r.FiredMs) * int64(time.Millisecond)
		}
		r.QueueNs, r.ConnectNs = max(0, c.QueueNs), max(0, c.ConnectNs)
	}
	switch {
	case c.Outcome == OutcomeSuccess:
		r.State = StateSuccess
		r.Result, r.ResultBinary, r.ResultTruncated = c.Result, c.ResultBinary, c.ResultTruncated
		if len(r.Result) > ResultMaxBytes {
			r.Result, r.ResultTruncated = r.Result[:ResultMaxBytes], true
		}
	case c.Outcome == OutcomePermanent:
		r.State = StateFailed
	case c.Outcome.Failed() && lastAttempt(prev, c.Attempt):
		r.State = StateDead
	default:
		r.State = StateWaiting
	}
	if t.AwaitingShards() {
		r.State, r.Shards = StateRunning, t.Shards.Total
	}
	ended := 0
	if r.State.Terminal() {
		r.FinishedMs = c.AtMs
		ended = r.Run
	}
	t.HistRun = r.Run
	return ended, w.putRecord(key, &r)
}

// historyCancel closes prev's run, CANCELLED at c.AtMs, when it had a Fire
// with history on; t is the task after the cancel (nil: none is stored,
// an overwrite). It returns the number of the run it closed (0: none).
func historyCancel(w *writer, prev, t *Task, c *Cancel) (int, error) {
	if prev.State.Terminal() || !runHistory(prev) {
		return 0, nil
	}
	r, key, err := loadRun(w, prev)
	if err != nil {
		return 0, err
	}
	if prev.State == StateRunning && !prev.AwaitingShards() { // a run waiting for its shards has no attempt running
		r.addAttempt(AttemptRecord{Attempt: prev.Attempts, Node: prev.Node, FiredMs: prev.FiredMs, Outcome: OutcomeCancelled, EndedMs: c.AtMs})
	}
	r.State, r.FinishedMs = StateCancelled, c.AtMs
	if t != nil {
		t.HistRun = r.Run
	}
	return r.Run, w.putRecord(key, &r)
}

// currentRun returns the view of t's current run while it goes on (the
// attempt running, or a retry due), merged with its stored record; ok is
// false when the run has ended, never fired, or has no history.
func currentRun(t *Task, stored *RunRecord) (r RunRecord, ok bool) {
	if t.State.Terminal() || !runHistory(t) {
		return RunRecord{}, false
	}
	if stored != nil && stored.Run == t.RunNumber() && stored.Epoch == t.Epoch {
		r = *stored
		r.Attempts = append([]AttemptRecord(nil), stored.Attempts...)
	} else {
		r = RunRecord{Run: t.RunNumber(), Epoch: t.Epoch, DueMs: t.RunDueMs, FiredMs: t.RunFiredMs, ParkedReason: t.RunParked}
	}
	r.State = StateWaiting
	if t.AwaitingShards() {
		r.State, r.Shards = StateRunning, t.Shards.Total
		r.ShardsSucceeded, r.ShardsFailed = t.Shards.Succeeded, t.Shards.Failed
	} else if t.State == StateRunning {
		r.State = StateRunning
		r.addAttempt(AttemptRecord{Attempt: t.Attempts, Node: t.Node, FiredMs: t.FiredMs})
	}
	return r, true
}

// delHistory deletes every run record of t (a purge): they are among the
// runs HistFirst … RunNumber (none when HistFirst is 0), deleted by point
// deletes. A scan would be wrong here: an iterator of a write transaction
// sorts all its pending writes, once per task of a purge of thousands.
func delHistory(w *writer, t *Task) error {
	if t.HistFirst == 0 {
		return nil
	}
	for n := t.HistFirst; n <= t.RunNumber(); n++ {
		if err := w.del(historyKey(t.ID, n)); err != nil {
			return err
		}
	}
	return nil
}

// truncateUTF8 cuts s to at most n bytes, not inside a UTF-8 sequence.
func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xc0 == 0x80 {
		n--
	}
	return s[:n]
}

// Runs returns up to limit runs of task id, newest first, with run
// numbers below before (0: from the newest); more reports whether older
// ones remain. The run going on (an attempt running, or a retry due) is
// shown from the task merged with its stored record (currentRun). A task
// without runs (or no task) returns none.
func (f *FSM) Runs(id string, before, limit int) (runs []RunRecord, more bool, err error) {
	prefix := historyPrefix(id)
	err = f.db.View(func(txn *badger.Txn) error {
		task, err := txnTask(txn, id)
		if err != nil {
			return err
		}
		opts := badger.IteratorOptions{PrefetchValues: false, Prefix: prefix, Reverse: true}
		it := txn.NewIterator(opts)
		defer it.Close()
		seek := historyKey(id, -1) // the largest run number
		if before > 0 {
			seek = historyKey(id, before-1)
		}
		for it.Seek(seek); it.ValidForPrefix(prefix) && len(runs) <= limit; it.Next() {
			var r RunRecord
			if err := it.Item().Value(func(b []byte) error { return decodeRecord(b, &r) }); err != nil {
				return err
			}
			runs = append(runs, r)
		}
		if task != nil {
			var stored *RunRecord
			if len(runs) > 0 && runs[0].Run == task.RunNumber() {
				stored = &runs[0]
			}
			if cur, ok := currentRun(task, stored); ok && (before <= 0 || cur.Run < before) {
				if stored != nil {
					runs[0] = cur
				} else {
					runs = append([]RunRecord{cur}, runs...)
				}
			}
		}
		if len(runs) > limit {
			runs, more = runs[:limit], true
		}
		return nil
	})
	return runs, more, err
}

// Run returns run number run of task id (the run going on merged from the
// task, as in Runs), or ErrNotFound.
func (f *FSM) Run(id string, run int) (*RunRecord, error) {
	var out *RunRecord
	err := f.db.View(func(txn *badger.Txn) error {
		var stored *RunRecord
		item, err := txn.Get(historyKey(id, run))
		switch {
		case err == nil:
			var r RunRecord
			if err := item.Value(func(b []byte) error { return decodeRecord(b, &r) }); err != nil {
				return err
			}
			stored = &r
		case !errors.Is(err, badger.ErrKeyNotFound):
			return err
		}
		task, err := txnTask(txn, id)
		if err != nil {
			return err
		}
		if task != nil && task.RunNumber() == run {
			if cur, ok := currentRun(task, stored); ok {
				out = &cur
				return nil
			}
		}
		if stored == nil {
			return ErrNotFound
		}
		out = stored
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("run %d of %s: %w", run, id, err)
	}
	return out, nil
}

// txnTask reads task id in txn; nil when there is none.
func txnTask(txn *badger.Txn, id string) (*Task, error) {
	item, err := txn.Get(taskKey(id))
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var t Task
	if err := item.Value(func(b []byte) error { return decodeRecord(b, &t) }); err != nil {
		return nil, err
	}
	return &t, nil
}
