package raftfsm

import (
	"errors"
	"fmt"
	"sync"

	"github.com/dgraph-io/badger/v4"
)

// Pause pauses (Paused true) or resumes (Paused false) the runs of a
// handler (Handler set) or of one task (ID set); exactly one of Handler
// and ID is set. A paused run is not fired: it waits until it is resumed.
// A RUNNING attempt is not interrupted. Both directions are idempotent.
//
// Results: a task that does not exist gives CodeNotFound; pausing a
// terminal task gives CodeState (resuming one clears its flag, or changes
// nothing). A handler is known when it has tasks, an executor's pattern
// matches it, or it is paused; pausing or resuming an unknown handler
// gives CodeNotFound. The leader fills AtMs.
type Pause struct {
	Handler string `msgpack:"h,omitempty"`
	ID      string `msgpack:"id,omitempty"`
	Paused  bool   `msgpack:"p,omitempty"`
	AtMs    int64  `msgpack:"at"`
}

// PausedHandler is the record of a paused handler (key hp/<name>); a
// resume deletes it.
type PausedHandler struct {
	Name     string `msgpack:"n"`
	PausedMs int64  `msgpack:"at"`
}

// prefixPausedHandler keys the PausedHandler records: hp/<handler>.
var prefixPausedHandler = []byte("hp/")

func pausedHandlerKey(name string) []byte {
	return append(append([]byte{}, prefixPausedHandler...), name...)
}

func applyPause(w *writer, p *Pause) (Result, []Event, error) {
	switch {
	case (p.Handler == "") == (p.ID == ""):
		return Result{}, nil, fmt.Errorf("pause names %q and %q: want exactly one of a handler and a task: %w", p.Handler, p.ID, ErrBadEntry)
	case p.ID != "":
		return applyPauseTask(w, p)
	}
	return applyPauseHandler(w, p)
}

func applyPauseTask(w *writer, p *Pause) (Result, []Event, error) {
	prev, err := loadTask(w, p.ID)
	if err != nil {
		return Result{}, nil, err
	}
	if prev == nil {
		return Result{Code: CodeNotFound}, nil, nil
	}
	t, res := pauseTask(prev, p)
	if t == nil {
		return res, nil, nil
	}
	if err := putTask(w, prev, t); err != nil {
		return Result{}, nil, err
	}
	pc := *p
	return res, []Event{{Type: CmdPause, Task: t, Pause: &pc}}, nil
}

func applyPauseHandler(w *writer, p *Pause) (Result, []Event, error) {
	key := pausedHandlerKey(p.Handler)
	var rec PausedHandler
	paused, err := w.get(key, &rec)
	if err != nil {
		return Result{}, nil, err
	}
	if !paused {
		known, err := w.knownHandler(p.Handler)
		if err != nil {
			return Result{}, nil, err
		}
		if !known {
			return Result{Code: CodeNotFound}, nil, nil
		}
	}
	if paused == p.Paused {
		return Result{}, nil, nil
	}
	if p.Paused {
		err = w.putRecord(key, &PausedHandler{Name: p.Handler, PausedMs: p.AtMs})
	} else {
		err = w.del(key)
	}
	if err != nil {
		return Result{}, nil, err
	}
	pc := *p
	return Result{}, []Event{{Type: CmdPause, Pause: &pc}}, nil
}

// knownHandler reports whether handler has tasks (as stored, plus this
// entry's changes so far) or an executor of some node runs it.
func (w *writer) knownHandler(handler string) (bool, error) {
	var n int64
	for _, c := range w.f.handlerCounts.get(handler) {
		n += c
	}
	if hd := w.hdeltas[handler]; hd != nil {
		for _, c := range hd {
			n += c
		}
	}
	if n > 0 {
		return true, nil
	}
	found := false
	var decErr error // not a storage error: never retried
	w.f.retryStorage(w.index, func() error {
		found, decErr = false, nil
		opts := badger.DefaultIteratorOptions
		opts.Prefix = prefixNode
		it := w.txn.NewIterator(opts)
		defer it.Close()
		for it.Rewind(); it.Valid() && !found; it.Next() {
			var nd Node
			if err := it.Item().Value(func(b []byte) error {
				decErr = decodeRecord(b, &nd)
				return nil
			}); err != nil {
				return err
			}
			if decErr != nil {
				return nil
			}
			found = nd.Runs(handler)
		}
		return nil
	})
	return found, decErr
}

// PausedHandlers returns the names of the paused handlers, sorted.
func (f *FSM) PausedHandlers() ([]string, error) {
	var out []string
	err := f.db.View(func(txn *badger.Txn) error {
		opts := badger.DefaultIteratorOptions
		opts.PrefetchValues = false
		opts.Prefix = prefixPausedHandler
		it := txn.NewIterator(opts)
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			out = append(out, string(it.Item().Key()[len(prefixPausedHandler):]))
		}
		return nil
	})
	return out, err
}

// HandlerCounts returns, for every handler that has tasks, how many it has
// in each state (indexed by State; index 0 is unused). O(handlers): the
// counts are kept in memory with every apply, and counted from the store
// after a restore and when the FSM opens, unless it takes those saved at a
// clean stop (savedcounts.go).
func (f *FSM) HandlerCounts() map[string][numStates]int64 {
	return f.handlerCounts.all()
}

// handlerCounts is the FSM's count of tasks per handler and state. The
// apply goroutine writes it; queries read it.
type handlerCounts struct {
	hmu sync.Mutex
	hc  map[string]*[numStates]int64
}

func (h *handlerCounts) get(handler string) [numStates]int64 {
	h.hmu.Lock()
	defer h.hmu.Unlock()
	if c := h.hc[handler]; c != nil {
		return *c
	}
	return [numStates]int64{}
}

func (h *handlerCounts) all() map[string][numStates]int64 {
	h.hmu.Lock()
	defer h.hmu.Unlock()
	out := make(map[string][numStates]int64, len(h.hc))
	for k, c := range h.hc {
		out[k] = *c
	}
	return out
}

// addHandlerCounts adds an entry's deltas; a handler left with no task
// is dropped.
func (f *FSM) addHandlerCounts(d map[string]*[numStates]int64) {
	if len(d) == 0 {
		return
	}
	h := &f.handlerCounts
	h.hmu.Lock()
	defer h.hmu.Unlock()
	if h.hc == nil {
		h.hc = map[string]*[numStates]int64{}
	}
	for name, hd := range d {
		c := h.hc[name]
		if c == nil {
			c = new([numStates]int64)
			h.hc[name] = c
		}
		var total int64
		for i, v := range hd {
			c[i] += v
			total += c[i]
		}
		if total <= 0 {
			delete(h.hc, name)
		}
	}
}

// loadHandlerCounts counts the stored tasks per handler and state, and
// builds the filter of stored task ids (idfilter.go), in one scan of the
// task records. The filter stays off (nil: every lookup reads badger) when
// the scan fails.
func (f *FSM) loadHandlerCounts() error {
	f.ids = nil
	hc := map[string]*[numStates]int64{}
	ids := newIDFilter(uint64(f.TotalTasks()))
	err := f.db.View(func(txn *badger.Txn) error {
		opts := badger.DefaultIteratorOptions
		opts.Prefix = prefixTask
		opts.PrefetchValues = false // each record is decoded from its block, not copied first
		it := txn.NewIterator(opts)
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			var t struct {
				Spec struct {
					Handler string `msgpack:"h"`
				} `msgpack:"s"`
				State State `msgpack:"st"`
			}
			if err := it.Item().Value(func(b []byte) error { return decodeRecord(b, &t) }); err != nil {
				return err
			}
			if int(t.State) >= numStates {
				return fmt.Errorf("task %q: state %d: %w", it.Item().Key(), t.State, ErrBadEntry)
			}
			c := hc[t.Spec.Handler]
			if c == nil {
				c = new([numStates]int64)
				hc[t.Spec.Handler] = c
			}
			c[t.State]++
			ids.add(it.Item().Key())
		}
		return nil
	})
	if err != nil {
		return err
	}
	f.ids = ids
	f.handlerCounts.hmu.Lock()
	f.handlerCounts.hc = hc
	f.handlerCounts.hmu.Unlock()
	return nil
}

// IsHandlerPaused reports whether handler is paused (a store read).
func (f *FSM) IsHandlerPaused(handler string) (bool, error) {
	err := f.db.View(func(txn *badger.Txn) error {
		_, err := txn.Get(pausedHandlerKey(handler))
		return err
	})
	if errors.Is(err, badger.ErrKeyNotFound) {
		return false, nil
	}
	return err == nil, err
}
