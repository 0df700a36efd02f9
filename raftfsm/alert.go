package raftfsm

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/dgraph-io/badger/v4"
)

// Alerts (docs/DESIGN.md section 12, "Alerts when a run dies"): a run that
// ends DEAD or FAILED leaves a pending alert, which the leader's sender
// (sidecar/alert) POSTs to the --on-dead-url webhook and then deletes with
// CmdAlertDone.
//
// The FSM must not read a node's flag, so whether alerts are on travels
// in the Complete the leader prepares (Complete.Alert, set when the
// leader has a webhook, like Fire.HistoryRuns): without a webhook no key
// is written and a dead run costs nothing more. With one, the Complete
// that ends the run DEAD or FAILED (a one-off task, a recurring task's
// run that goes on to its next run, a flow stage) writes
// al/<seq BE 8> → Alert in the same transaction, seq from a counter in
// m/alerts. The sender reads them in seq order; each is deleted by its
// CmdAlertDone (idempotent: an absent key changes nothing).
//
// Bound: at most AlertsPendingMax are kept; a new one beyond it deletes
// the oldest (AlertMeta.Dropped counts them), so a webhook that is down
// for good cannot grow the store without bound. Deletes happen in seq
// order (the sender sends the oldest first; drops take the oldest), so
// AlertMeta.Oldest moves only forward and every delete is a point delete,
// never a scan. An alert carries what the webhook needs even after its
// task was purged (id, run, handler, state, finish time, last error).

// AlertsPendingMax bounds the pending alerts kept in the store.
const AlertsPendingMax = 10_000

// alertsPendingMax is AlertsPendingMax; tests lower it.
var alertsPendingMax = AlertsPendingMax

var (
	prefixAlert  = []byte("al/")
	keyAlertMeta = []byte("m/alerts")
)

func alertKey(seq uint64) []byte {
	return binary.BigEndian.AppendUint64(append([]byte{}, prefixAlert...), seq)
}

// Alert is a pending alert: a run of a task that ended DEAD or FAILED.
// Times are Unix milliseconds, UTC.
type Alert struct {
	// Seq orders the alerts (the first is 1); CmdAlertDone names it.
	Seq        uint64 `msgpack:"q"`
	TaskID     string `msgpack:"id"`
	Run        int    `msgpack:"r"`
	Epoch      uint64 `msgpack:"e"`
	Handler    string `msgpack:"h"`
	State      State  `msgpack:"s"` // StateDead or StateFailed
	FinishedMs int64  `msgpack:"f"`
	Error      string `msgpack:"er,omitempty"` // the last attempt's, at most RunErrorMaxBytes
}

// ID is the alert's stable id, "<task id>/<run>": the same whichever
// leader sends it, so a receiver de-duplicates on it.
func (a *Alert) ID() string { return fmt.Sprintf("%s/%d", a.TaskID, a.Run) }

// AlertMeta is the alerts' bookkeeping, stored at m/alerts.
type AlertMeta struct {
	// Next is the seq of the next alert; Oldest the smallest seq that may
	// still be pending; Pending how many are; Dropped how many were
	// deleted unsent because the bound was reached.
	Next    uint64 `msgpack:"n"`
	Oldest  uint64 `msgpack:"o"`
	Pending int    `msgpack:"p"`
	Dropped uint64 `msgpack:"d"`
}

// AlertDone deletes pending alert Seq once the webhook took it (2xx).
// An alert already deleted (sent by an earlier leader, dropped) is left
// alone.
type AlertDone struct {
	Seq uint64 `msgpack:"q"`
}

// runEndsFailed reports whether Complete c, applied to prev (RUNNING, the
// current attempt), ends prev's run DEAD or FAILED, and which.
func runEndsFailed(prev *Task, c *Complete) (State, bool) {
	switch {
	case c.Outcome == OutcomePermanent:
		return StateFailed, true
	case c.Outcome.Failed() && lastAttempt(prev, c.Attempt):
		return StateDead, true
	}
	return 0, false
}

// addAlert writes the pending alert of prev's run, which c ended in
// state, dropping the oldest beyond AlertsPendingMax.
func addAlert(w *writer, prev *Task, c *Complete, state State) error {
	var m AlertMeta
	if _, err := w.get(keyAlertMeta, &m); err != nil {
		return err
	}
	if m.Next == 0 {
		m.Next, m.Oldest = 1, 1
	}
	a := Alert{
		Seq: m.Next, TaskID: prev.ID, Run: prev.RunNumber(), Epoch: prev.Epoch, Handler: prev.Spec.Handler,
		State: state, FinishedMs: c.AtMs, Error: truncateUTF8(c.Error, RunErrorMaxBytes),
	}
	if err := w.putRecord(alertKey(a.Seq), &a); err != nil {
		return err
	}
	m.Next++
	m.Pending++
	for m.Pending > alertsPendingMax && m.Oldest < a.Seq {
		found, err := w.has(alertKey(m.Oldest))
		if err != nil {
			return err
		}
		if found {
			if err := w.del(alertKey(m.Oldest)); err != nil {
				return err
			}
			m.Pending--
			m.Dropped++
		}
		m.Oldest++
	}
	return w.putRecord(keyAlertMeta, &m)
}

func applyAlertDone(w *writer, d *AlertDone) (Result, []Event, error) {
	key := alertKey(d.Seq)
	found, err := w.has(key)
	if err != nil || !found {
		return Result{Code: CodeNotFound}, nil, err
	}
	var m AlertMeta
	if _, err := w.get(keyAlertMeta, &m); err != nil {
		return Result{}, nil, err
	}
	if err := w.del(key); err != nil {
		return Result{}, nil, err
	}
	m.Pending--
	if d.Seq == m.Oldest {
		// Move past the deleted ones; the sender deletes in seq order, so
		// this usually stops at the next one.
		m.Oldest++
		for m.Oldest < m.Next {
			found, err := w.has(alertKey(m.Oldest))
			if err != nil {
				return Result{}, nil, err
			}
			if found {
				break
			}
			m.Oldest++
		}
	}
	if err := w.putRecord(keyAlertMeta, &m); err != nil {
		return Result{}, nil, err
	}
	return Result{}, nil, nil
}

// has reports whether key exists (badger errors are retried, see writer).
func (w *writer) has(key []byte) (bool, error) {
	found := false
	w.f.retryStorage(w.index, func() error {
		_, err := w.txn.Get(key)
		if errors.Is(err, badger.ErrKeyNotFound) {
			found = false
			return nil
		}
		found = err == nil
		return err
	})
	return found, nil
}

// Alerts returns up to limit pending alerts with seq above after, oldest
// first.
func (f *FSM) Alerts(after uint64, limit int) ([]Alert, error) {
	var out []Alert
	err := f.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{PrefetchValues: false, Prefix: prefixAlert})
		defer it.Close()
		for it.Seek(alertKey(after + 1)); it.ValidForPrefix(prefixAlert) && len(out) < limit; it.Next() {
			var a Alert
			if err := it.Item().Value(func(b []byte) error { return decodeRecord(b, &a) }); err != nil {
				return err
			}
			out = append(out, a)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read alerts: %w", err)
	}
	return out, nil
}

// AlertStats returns the alerts' bookkeeping: how many are pending and
// how many were dropped unsent.
func (f *FSM) AlertStats() (AlertMeta, error) {
	var m AlertMeta
	err := f.db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(keyAlertMeta)
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		return item.Value(func(b []byte) error { return decodeRecord(b, &m) })
	})
	if err != nil {
		return AlertMeta{}, fmt.Errorf("read alert stats: %w", err)
	}
	return m, nil
}
