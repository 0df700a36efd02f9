package raftfsm

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// Backoff of the storage retry loop: the first retry waits
// storageRetryMin, each next one twice as long, at most storageRetryMax.
const (
	storageRetryMin = 10 * time.Millisecond
	storageRetryMax = 5 * time.Second
)

// StorageError says why the FSM is degraded: a badger read or commit failed
// (disk full, permission, I/O error) or the write gate refused (see
// SetWriteGate) while applying the entry at Index. The FSM neither skips
// that entry nor returns from Apply: it retries the write with backoff
// until it succeeds.
type StorageError struct {
	// Index is the Raft index of the entry whose write is retried.
	Index uint64
	// Attempts counts the failed attempts of this spell (1 on the first).
	Attempts int
	// Err is the last failure.
	Err error
}

func (e *StorageError) Error() string {
	return fmt.Sprintf("storage error applying entry %d (%d failed attempts): %v", e.Index, e.Attempts, e.Err)
}

// Unwrap returns the last failure.
func (e *StorageError) Unwrap() error { return e.Err }

// storageState is the degraded-mode part of FSM.
type storageState struct {
	storageErr atomic.Pointer[StorageError] // nil while healthy
	retries    atomic.Uint64                // failed attempts, ever
	gate       atomic.Pointer[func(freesSpace bool) error]
	hook       atomic.Pointer[func(error)]

	abortCh   chan struct{}
	abortOnce sync.Once

	// Test hooks: nil means badger's Txn.Commit and a real timer.
	commitTxn func(*badger.Txn) error
	sleep     func(time.Duration)
}

// StorageError returns the storage failure the FSM is retrying, or nil when
// it is healthy (the last badger write succeeded). While it is non-nil the
// apply goroutine is blocked on that entry: the applied index does not move.
func (f *FSM) StorageError() *StorageError { return f.storageErr.Load() }

// StorageRetries returns how many badger writes (or reads) failed and were
// retried since Open.
func (f *FSM) StorageRetries() uint64 { return f.retries.Load() }

// SetWriteGate installs g, called before every badger commit of Apply and
// StoreConfiguration; nil removes it. A non-nil error from g counts as a
// storage error: the FSM becomes degraded and retries with backoff, without
// writing. The sidecar uses it to stop writing before the disk is full:
// badger writes its memtable log through mmap, so a full disk is a SIGBUS
// that kills the process, never an error badger could return. g must be
// cheap and must not call into the FSM.
func (f *FSM) SetWriteGate(g func() error) {
	if g == nil {
		f.gate.Store(nil)
		return
	}
	f.SetSpaceGate(func(bool) error { return g() })
}

// SetStorageHook installs h, called from the apply goroutine when the FSM
// becomes degraded (once per spell, with the *StorageError) and when it
// recovers (with nil); nil removes it. h must not block or call into Apply.
func (f *FSM) SetStorageHook(h func(err error)) {
	if h == nil {
		f.hook.Store(nil)
		return
	}
	f.hook.Store(&h)
}

// Abort stops the storage retry loop for good: an Apply (or
// StoreConfiguration) that is retrying a failed write, or that fails one
// later, ends its goroutine with runtime.Goexit instead, leaving the entry
// unapplied (the applied index does not move, so a restart applies it).
// Call it before raft.Shutdown, which waits for raft's FSM goroutine.
func (f *FSM) Abort() { f.abortOnce.Do(func() { close(f.abortCh) }) }

func (f *FSM) aborted() bool {
	select {
	case <-f.abortCh:
		return true
	default:
		return false
	}
}

// retryStorage runs op until it returns nil. Each failure marks the FSM
// degraded (the hook hears of the first one) and waits with capped
// exponential backoff; the first success after a failure clears it.
func (f *FSM) retryStorage(index uint64, op func() error) {
	delay := storageRetryMin
	for attempt := 1; ; attempt++ {
		err := op()
		if err == nil {
			if attempt > 1 {
				f.storageErr.Store(nil)
				if h := f.hook.Load(); h != nil {
					(*h)(nil)
				}
			}
			return
		}
		f.retries.Add(1)
		prev := f.storageErr.Swap(&StorageError{Index: index, Attempts: attempt, Err: err})
		if prev == nil {
			if h := f.hook.Load(); h != nil {
				(*h)(f.storageErr.Load())
			}
		}
		if !f.wait(delay) {
			runtime.Goexit() // Abort: see its doc
		}
		delay = min(delay*2, storageRetryMax)
	}
}

// wait sleeps d; false when the FSM was aborted meanwhile.
func (f *FSM) wait(d time.Duration) bool {
	if f.aborted() {
		return false
	}
	if f.sleep != nil {
		f.sleep(d)
		return !f.aborted()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-f.abortCh:
		return false
	}
}
