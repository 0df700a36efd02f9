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
// from the commands it applies anyway — the first Fire of a run creates
// it, every Fire adds an attempt, every Complete closes one (with the
// facts the delivering node put in it), a Cancel closes the run. No
// command exists for it alone.
//
// The bound per task (--history-runs) travels in the Fire that creates a
// record (Fire.HistoryRuns), so every replica keeps exactly the same
// runs whatever its own flags say. Task.HistFirst is the oldest run
// number that may still have a record: creating run N deletes the runs
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

// historyFire records attempt f of t (after fireTask) in its run record,
// creating the record at the run's first Fire and dropping runs beyond
// the bound. It may set t.HistFirst. prev is the task before the Fire.
func historyFire(w *writer, prev, t *Task, f *Fire) error {
	if f.HistoryRuns < 0 {
		return nil
	}
	run := t.RunNumber()
	key := historyKey(t.ID, run)
	var r RunRecord
	found := false
	// A run's first Fire finds no record (no read): its task has no
	// attempt yet and none handed back (HeldBy, set by a busy or
	// unavailable answer, is cleared by every Fire and is 0 whenever a
	// run ends).
	if prev.Attempts > 0 || prev.HeldBy != 0 {
		var err error
		if found, err = w.get(key, &r); err != nil {
			return err
		}
	}
	if !found || r.Epoch != t.Epoch {
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
		r = RunRecord{Run: run, Epoch: t.Epoch, DueMs: prev.DueMs, FiredMs: f.AtMs, ParkedReason: f.ParkedReason}
	}
	r.State = StateRunning
	if n := len(r.Attempts); n > 0 && r.Attempts[n-1].Attempt == f.Attempt && r.Attempts[n-1].Outcome == 0 {
		r.Attempts = r.Attempts[:n-1] // a repeat of an attempt never closed
	}
	r.Attempts = append(r.Attempts, AttemptRecord{Attempt: f.Attempt, Node: f.Node, FiredMs: f.AtMs})
	if n := len(r.Attempts) - RunAttemptsMax; n > 0 {
		r.Attempts = append(r.Attempts[:0], r.Attempts[n:]...)
		r.DroppedAttempts += n
	}
	return w.putRecord(key, &r)
}

// historyComplete closes attempt c.Attempt of prev's run (the task before
// the Complete) and, when the run ended, the run.
func historyComplete(w *writer, prev *Task, c *Complete) error {
	if prev.HistFirst == 0 {
		return nil // no run of the task has a record (history off): no read
	}
	key := historyKey(prev.ID, prev.RunNumber())
	var r RunRecord
	found, err := w.get(key, &r)
	if err != nil || !found || r.Epoch != prev.Epoch {
		return err
	}
	var a *AttemptRecord
	for i := len(r.Attempts) - 1; i >= 0; i-- {
		if r.Attempts[i].Attempt == c.Attempt && r.Attempts[i].Outcome == 0 {
			a = &r.Attempts[i]
			break
		}
	}
	if a == nil {
		r.Attempts = append(r.Attempts, AttemptRecord{Attempt: c.Attempt, Node: prev.Node, FiredMs: prev.FiredMs})
		a = &r.Attempts[len(r.Attempts)-1]
	}
	a.Outcome, a.Executor, a.HTTPStatus = c.Outcome, c.Executor, c.HTTPStatus
	a.Error = truncateUTF8(c.Error, RunErrorMaxBytes)
	a.StartedMs, a.EndedMs, a.DurationNs = c.StartedMs, c.EndedMs, c.DurationNs
	if a.EndedMs == 0 {
		a.EndedMs = c.AtMs
	}
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
	if r.State.Terminal() {
		r.FinishedMs = c.AtMs
	}
	return w.putRecord(key, &r)
}

// historyCancel closes the run of prev (cancelled) when it has a record.
func historyCancel(w *writer, prev *Task, c *Cancel) error {
	if prev.State.Terminal() || prev.HistFirst == 0 {
		return nil
	}
	key := historyKey(prev.ID, prev.RunNumber())
	var r RunRecord
	found, err := w.get(key, &r)
	if err != nil || !found || r.Epoch != prev.Epoch || r.State.Terminal() {
		return err
	}
	for i := range r.Attempts {
		if r.Attempts[i].Outcome == 0 {
			r.Attempts[i].Outcome, r.Attempts[i].EndedMs = OutcomeCancelled, c.AtMs
		}
	}
	r.State, r.FinishedMs = StateCancelled, c.AtMs
	return w.putRecord(key, &r)
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

// Runs returns up to limit run records of task id, newest first, with run
// numbers below before (0: from the newest); more reports whether older
// ones remain. A task without records (or no task) returns none.
func (f *FSM) Runs(id string, before, limit int) (runs []RunRecord, more bool, err error) {
	prefix := historyPrefix(id)
	err = f.db.View(func(txn *badger.Txn) error {
		opts := badger.IteratorOptions{PrefetchValues: false, Prefix: prefix, Reverse: true}
		it := txn.NewIterator(opts)
		defer it.Close()
		seek := historyKey(id, -1) // the largest run number
		if before > 0 {
			seek = historyKey(id, before-1)
		}
		for it.Seek(seek); it.ValidForPrefix(prefix); it.Next() {
			if len(runs) == limit {
				more = true
				return nil
			}
			var r RunRecord
			if err := it.Item().Value(func(b []byte) error { return decodeRecord(b, &r) }); err != nil {
				return err
			}
			runs = append(runs, r)
		}
		return nil
	})
	return runs, more, err
}

// Run returns the record of run number run of task id, or ErrNotFound.
func (f *FSM) Run(id string, run int) (*RunRecord, error) {
	var r RunRecord
	err := f.db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(historyKey(id, run))
		if errors.Is(err, badger.ErrKeyNotFound) {
			return ErrNotFound
		}
		if err != nil {
			return err
		}
		return item.Value(func(b []byte) error { return decodeRecord(b, &r) })
	})
	if err != nil {
		return nil, fmt.Errorf("run %d of %s: %w", run, id, err)
	}
	return &r, nil
}
