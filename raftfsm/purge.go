package raftfsm

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// Purge deletes finished tasks. The FSM checks each task itself, so a
// purge proposed from a stale view (a lagging follower, a deposed leader,
// a retention loop racing a retry) deletes nothing it should not: a task is
// deleted only when it is terminal (SUCCESS, CANCELLED, DEAD, FAILED) and
// still has the Epoch and FinishedMs the proposer saw. A retried task is
// WAITING (and, once it finishes again, has a new FinishedMs), an
// overwritten one has a new Epoch, and a recurring task between runs is
// WAITING: none of them is deleted. Result.Purged says per task (same order)
// whether it was.
type Purge struct {
	Tasks []PurgeTask `msgpack:"ts"`
	// Flows names finished flows to delete, on the same rule (still
	// terminal, same Epoch and FinishedMs; flow_purge.go);
	// Result.PurgedFlows says per flow whether it was.
	Flows []PurgeTask `msgpack:"fl,omitempty"`
}

// PurgeTask names one task of a Purge as the proposer saw it.
type PurgeTask struct {
	ID         string `msgpack:"id"`
	Epoch      uint64 `msgpack:"e"`
	FinishedMs int64  `msgpack:"f"`
}

// FinishedTask is one entry of the finished index: a terminal task, with
// what a purge needs to name it and what filters look at.
type FinishedTask struct {
	ID         string
	Epoch      uint64
	FinishedMs int64 // Unix ms
	State      State
	Handler    string
}

// Target returns the PurgeTask that deletes t as it was read.
func (t FinishedTask) Target() PurgeTask {
	return PurgeTask{ID: t.ID, Epoch: t.Epoch, FinishedMs: t.FinishedMs}
}

// Purged counts the tasks r (the result of a CmdPurge) deleted.
func (r Result) PurgedCount() int { return countTrue(r.Purged) }

func countTrue(bs []bool) int {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}

// Finished-index classes (the byte after "f/"): a task with its own
// retention (Spec.RetentionNs > 0) is indexed by its expiry time, the
// others by their finish time in the class of their state, since the
// retention of those comes from the leader's flags, which the FSM does not
// know (and must not: nodes may differ).
const (
	finishedOK      = 's' // SUCCESS, CANCELLED: --retention
	finishedFailed  = 'd' // DEAD, FAILED: --retention-dead
	finishedExpires = 'x' // own retention: by FinishedMs + RetentionNs
)

var prefixFinished = []byte("f/")

func finishedPrefix(class byte) []byte { return []byte{'f', '/', class, '/'} }

func finishedKeyAt(class byte, ms int64, id string) []byte {
	k := make([]byte, 0, 4+8+len(id))
	k = append(k, finishedPrefix(class)...)
	k = binary.BigEndian.AppendUint64(k, uint64(max(ms, 0)))
	return append(k, id...)
}

// finishedKey is t's key in the finished index, nil when t is nil or not
// terminal.
func finishedKey(t *Task) []byte {
	if t == nil || !t.State.Terminal() {
		return nil
	}
	if t.Spec.RetentionNs > 0 {
		return finishedKeyAt(finishedExpires, expiryMs(t.FinishedMs, t.Spec.RetentionNs), t.ID)
	}
	if t.State == StateDead || t.State == StateFailed {
		return finishedKeyAt(finishedFailed, t.FinishedMs, t.ID)
	}
	return finishedKeyAt(finishedOK, t.FinishedMs, t.ID)
}

// expiryMs is finishedMs plus retentionNs, rounded up to the millisecond,
// saturating at math.MaxInt64.
func expiryMs(finishedMs, retentionNs int64) int64 {
	d := (retentionNs + int64(time.Millisecond) - 1) / int64(time.Millisecond)
	if finishedMs > math.MaxInt64-d {
		return math.MaxInt64
	}
	return finishedMs + d
}

// finishedValue is the value of t's finished-index entry: epoch (8 bytes
// BE), FinishedMs (8 bytes BE), state (1 byte), handler.
func finishedValue(t *Task) []byte {
	v := make([]byte, 0, 17+len(t.Spec.Handler))
	v = binary.BigEndian.AppendUint64(v, t.Epoch)
	v = binary.BigEndian.AppendUint64(v, uint64(t.FinishedMs))
	v = append(v, byte(t.State))
	return append(v, t.Spec.Handler...)
}

func parseFinished(k, v []byte) (FinishedTask, error) {
	if len(k) < 12 || len(v) < 17 {
		return FinishedTask{}, fmt.Errorf("finished index entry %q of %d bytes: %w", k, len(v), ErrBadEntry)
	}
	return FinishedTask{
		ID: string(k[12:]), Epoch: binary.BigEndian.Uint64(v[:8]), FinishedMs: int64(binary.BigEndian.Uint64(v[8:16])),
		State: State(v[16]), Handler: string(v[17:]),
	}, nil
}

// indexFinished keeps the finished index in step with the change from prev
// (nil when t is new) to t.
func indexFinished(w *writer, prev, t *Task) error {
	pk, nk := finishedKey(prev), finishedKey(t)
	if pk != nil && !bytes.Equal(pk, nk) {
		if err := w.del(pk); err != nil {
			return err
		}
	}
	if nk == nil {
		return nil
	}
	nv := finishedValue(t)
	if pk != nil && bytes.Equal(pk, nk) && bytes.Equal(finishedValue(prev), nv) {
		return nil
	}
	return w.set(nk, nv)
}

// delTask deletes t (as stored) with every index entry and count it has.
func delTask(w *writer, t *Task) error {
	w.count(t.Spec.Handler, t.State, -1)
	switch t.State {
	case StateWaiting:
		if err := w.del(dueKey(t.DueMs, t.ID)); err != nil {
			return err
		}
	case StateRunning:
		if err := w.del(runKey(t.ID)); err != nil {
			return err
		}
	}
	if k := finishedKey(t); k != nil {
		if err := w.del(k); err != nil {
			return err
		}
	}
	if err := delHistory(w, t); err != nil {
		return err
	}
	return w.del(taskKey(t.ID))
}

func applyPurge(w *writer, p *Purge) (Result, []Event, error) {
	res := Result{Purged: make([]bool, len(p.Tasks))}
	var evs []Event
	var runs flowRuns // deleting a task changes no flow: one read per flow
	for i, pt := range p.Tasks {
		prev, err := loadTask(w, pt.ID)
		if err != nil {
			return Result{}, nil, err
		}
		if prev == nil || !prev.State.Terminal() || prev.Epoch != pt.Epoch || prev.FinishedMs != pt.FinishedMs {
			continue
		}
		if keep, err := runs.stageOfRunningFlow(w, prev.ID); err != nil || keep {
			if err != nil {
				return Result{}, nil, err
			}
			continue
		}
		if err := delTask(w, prev); err != nil {
			return Result{}, nil, err
		}
		res.Purged[i] = true
		evs = append(evs, Event{Type: CmdPurge, Task: prev, Prev: prev.State, PrevNode: prev.Node})
	}
	if err := purgeFlows(w, p, &res); err != nil {
		return Result{}, nil, err
	}
	return res, evs, nil
}

// PurgeCursor is where a purge cycle's next Expired (or ExpiredFlows)
// call resumes: after the last index entry the previous call returned.
// Without it every call of a cycle would seek its index from the start
// and walk again the deleted keys of the entries the cycle had purged so
// far (badger keeps them until a compaction drops them), so a cycle's
// reads grew with the square of what it purged: 3.8–3.9 s of reads to
// purge 100 000 tasks 512 at a time, against 49–63 ms with a cursor
// (BenchmarkPurgeCycle). The zero value (or nil) starts at the
// beginning. A cursor is for one cycle: an entry returned but not purged
// (it changed since) is not read again until the next cycle's new
// cursor, and neither is one written meanwhile behind the cursor.
//
// Finished takes one too, in its own order of classes; that one has a
// text form (String, ParseFinishedCursor) that POST /v1/tasks/purge hands
// its callers to resume a bulk purge with. A cursor is for one kind of
// call: Expired's and Finished's number the classes differently.
type PurgeCursor struct {
	class int    // index of the class the last entry is in, in the call's class order
	key   []byte // that entry's key; nil: nothing read yet
}

// from returns where class number i of a scan starts: skip says the class
// was read to its end already; from, when not nil, is the key to read
// after (its entry excluded).
func (c *PurgeCursor) from(i int) (from []byte, skip bool) {
	if c == nil || c.key == nil {
		return nil, false
	}
	switch {
	case i < c.class:
		return nil, true
	case i == c.class:
		return bytes.Clone(c.key), false // advance reuses c.key during the scan
	}
	return nil, false
}

// advance records key, of class number i, as the last entry returned.
func (c *PurgeCursor) advance(i int, key []byte) {
	if c != nil {
		c.class, c.key = i, append(c.key[:0], key...)
	}
}

// Expired returns up to limit finished tasks whose retention ended at or
// before nowMs (Unix ms): those with their own retention whose
// FinishedMs + retention is at or before nowMs; SUCCESS and CANCELLED ones
// without it that finished at least retention before nowMs; DEAD and
// FAILED ones that finished at least retentionDead before it. A retention
// of 0 or less keeps that class forever. It passes over the stages of
// flows still running, which a purge keeps (keptStage). It seeks the
// finished index, from after the entries earlier calls with cur returned
// (cur nil: from the start), and moves cur past those it reads.
func (f *FSM) Expired(nowMs int64, retention, retentionDead time.Duration, limit int, cur *PurgeCursor) ([]FinishedTask, error) {
	var out []FinishedTask
	classes := []struct {
		class   byte
		untilMs int64
		on      bool
	}{
		{finishedExpires, nowMs, true},
		{finishedFailed, nowMs - retentionDead.Milliseconds(), retentionDead > 0},
		{finishedOK, nowMs - retention.Milliseconds(), retention > 0},
	}
	err := f.db.View(func(txn *badger.Txn) error {
		var runs flowRuns
		for i, c := range classes {
			from, skip := cur.from(i)
			if skip || !c.on || len(out) >= limit {
				continue
			}
			var kerr error
			err := scanFinished(txn, c.class, c.untilMs, from, func(ft FinishedTask, key []byte) bool {
				cur.advance(i, key)
				kept, err := runs.keptStage(txn, ft.ID)
				if kerr = err; err != nil || kept {
					return err == nil
				}
				out = append(out, ft)
				return len(out) < limit
			})
			if err == nil {
				err = kerr
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
	return out, err
}

// keptStage reports whether task id is a stage of its flow's current run
// while the flow has not ended: a purge keeps such a task
// (stageOfRunningFlow), so Expired and Finished pass over it. Without
// that, a stage that finished long ago in a flow still running (a later
// stage waiting) came back in every read, and a read whose entries were
// all such stages purged nothing: the bulk purge answered 0 purged, and
// whatever finished after them in the index waited (found by review).
// runs remembers the flows read in this transaction (txn): a flow's
// record holds all its stages, so reading it again for each of its stage
// tasks made a read of a big flow's stages grow with the square of its
// size (10 flows of 1 000 cancelled stages: 3.7 s, against 14–19 ms;
// BenchmarkPurgeBigFlows).
func (runs *flowRuns) keptStage(txn *badger.Txn, id string) (bool, error) {
	return runs.stageOfRunning(id, func(flowID string) (fl Flow, found bool, err error) {
		item, err := txn.Get(flowKey(flowID))
		if errors.Is(err, badger.ErrKeyNotFound) {
			return fl, false, nil
		}
		if err != nil {
			return fl, false, err
		}
		err = item.Value(func(b []byte) error { return decodeRecord(b, &fl) })
		return fl, err == nil, err
	})
}

// scanFinished calls fn for the entries of class keyed at or before
// untilMs, in key order, from the first after from (nil: from the
// class's first), until fn returns false. The key given to fn is valid
// only during the call.
func scanFinished(txn *badger.Txn, class byte, untilMs int64, from []byte, fn func(FinishedTask, []byte) bool) error {
	prefix := finishedPrefix(class)
	opts := badger.DefaultIteratorOptions
	opts.PrefetchValues = false
	opts.Prefix = prefix
	it := txn.NewIterator(opts)
	defer it.Close()
	start := prefix
	if from != nil {
		start = from
	}
	for it.Seek(start); it.Valid(); it.Next() {
		item := it.Item()
		k := item.Key()
		if from != nil && bytes.Equal(k, from) {
			continue
		}
		if int64(binary.BigEndian.Uint64(k[4:12])) > untilMs {
			return nil
		}
		var ft FinishedTask
		err := item.Value(func(v []byte) error {
			var err error
			ft, err = parseFinished(k, v)
			return err
		})
		if err != nil {
			return err
		}
		if !fn(ft, k) {
			return nil
		}
	}
	return nil
}

// FinishedQuery selects finished tasks for FSM.Finished.
type FinishedQuery struct {
	// Handler, when not empty, is the handler the tasks must have.
	Handler string
	// State, when not 0, is the terminal state the tasks must be in.
	State State
	// BeforeMs: only tasks that finished before it (Unix ms).
	BeforeMs int64
}

// finishedScanMax bounds the index entries one Finished call reads (a
// variable for tests).
var finishedScanMax = 100000

// finishedClasses is the order in which Finished reads the classes of the
// finished index; a cursor of Finished's numbers its class in it.
var finishedClasses = [...]byte{finishedOK, finishedFailed, finishedExpires}

// ErrBadCursor is returned by ParseFinishedCursor for a text that is not
// a cursor of Finished's.
var ErrBadCursor = errors.New("not a cursor of the finished index")

// ParseFinishedCursor returns the cursor whose text form (String) is s,
// for Finished; a text that no Finished cursor has gives ErrBadCursor.
// The text is the entry's key in the finished index after its "f/",
// base64url without padding: the same on every node, so a cursor from one
// node resumes on another.
func ParseFinishedCursor(s string) (*PurgeCursor, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) < 2+8+1 || b[1] != '/' {
		return nil, ErrBadCursor
	}
	i := bytes.IndexByte(finishedClasses[:], b[0])
	if i < 0 {
		return nil, ErrBadCursor
	}
	return &PurgeCursor{class: i, key: append(bytes.Clone(prefixFinished), b...)}, nil
}

// String returns the text form of a cursor that Finished moved (see
// ParseFinishedCursor), "" for one at the start (nil or zero). A cursor of
// Expired's has no text form that Finished reads the same way (its
// classes are in another order).
func (c *PurgeCursor) String() string {
	if c == nil || len(c.key) <= len(prefixFinished) {
		return ""
	}
	return base64.RawURLEncoding.EncodeToString(c.key[len(prefixFinished):])
}

// Finished returns up to limit finished tasks that match q, oldest first
// within each class of the finished index (finishedClasses), reading from
// after the entries earlier calls with cur read (cur nil or zero: from the
// start). more reports whether more may match: another match was seen, or
// the call stopped after reading finishedScanMax entries; cur is then
// moved past every entry this call has read and not left for the next
// (so a caller that resumes with it makes progress even when no entry of
// finishedScanMax matched), and is to be dropped when more is false. It
// reads the finished index only, never the task records, and passes over
// the stages of flows still running, which a purge keeps (keptStage: it
// reads their flows).
//
// Without a cursor every call seeks the index from its start and walks
// the deleted keys of what earlier calls purged (until badger compacts
// them), and a call whose first finishedScanMax entries the filter drops
// answers nothing with more set, call after call (POST /v1/tasks/purge's
// next_cursor, DESIGN §14).
func (f *FSM) Finished(q FinishedQuery, limit int, cur *PurgeCursor) (tasks []FinishedTask, more bool, err error) {
	var on [len(finishedClasses)]bool
	switch q.State {
	case 0:
		on = [...]bool{true, true, true}
	case StateSuccess, StateCancelled:
		on = [...]bool{true, false, true}
	case StateDead, StateFailed:
		on = [...]bool{false, true, true}
	default:
		return nil, false, nil
	}
	scanned := 0
	err = f.db.View(func(txn *badger.Txn) error {
		var runs flowRuns
		for i, c := range finishedClasses {
			from, skip := cur.from(i)
			if skip || !on[i] {
				continue
			}
			until := q.BeforeMs - 1
			if c == finishedExpires {
				until = math.MaxInt64 // keyed by expiry: FinishedMs is in the value
			}
			var kerr error
			err := scanFinished(txn, c, until, from, func(ft FinishedTask, key []byte) bool {
				if scanned++; scanned > finishedScanMax {
					more = true
					return false
				}
				if ft.FinishedMs >= q.BeforeMs || (q.State != 0 && ft.State != q.State) || (q.Handler != "" && ft.Handler != q.Handler) {
					cur.advance(i, key)
					return true
				}
				if kept, err := runs.keptStage(txn, ft.ID); err != nil || kept {
					if kerr = err; err == nil {
						cur.advance(i, key)
					}
					return err == nil
				}
				if len(tasks) == limit {
					more = true // this one is the next call's first
					return false
				}
				cur.advance(i, key)
				tasks = append(tasks, ft)
				return true
			})
			if err == nil {
				err = kerr
			}
			if err != nil || more {
				return err
			}
		}
		return nil
	})
	return tasks, more, err
}

// backfillFinished gives the terminal tasks that have no finished-index
// entry one: tasks that finished before the index existed, in a store or a
// snapshot written by an older version, which retention would otherwise
// never purge. The entries follow from the stored records alone, so every
// node derives the same ones. It counts the index's entries first (keys
// only) and reads the task records only when fewer than terminal (the
// stored count of terminal tasks); it returns how many entries it wrote.
func backfillFinished(db *badger.DB, terminal int64) (int, error) {
	var have int64
	err := db.View(func(txn *badger.Txn) error {
		opts := badger.DefaultIteratorOptions
		opts.PrefetchValues = false
		opts.Prefix = prefixFinished
		it := txn.NewIterator(opts)
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			have++
		}
		return nil
	})
	if err != nil || have >= terminal {
		return 0, err
	}
	wb := db.NewWriteBatch()
	defer wb.Cancel()
	wrote := 0
	err = db.View(func(txn *badger.Txn) error {
		opts := badger.DefaultIteratorOptions
		opts.Prefix = prefixTask
		it := txn.NewIterator(opts)
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			var t Task
			if err := it.Item().Value(func(b []byte) error { return decodeRecord(b, &t) }); err != nil {
				return err
			}
			if k := finishedKey(&t); k != nil {
				if err := wb.Set(k, finishedValue(&t)); err != nil {
					return err
				}
				wrote++
			}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return wrote, wb.Flush()
}

// terminalCount is the stored number of terminal tasks.
func (f *FSM) terminalCount() int64 {
	c := f.Counts()
	return c[StateSuccess] + c[StateCancelled] + c[StateDead] + c[StateFailed]
}
