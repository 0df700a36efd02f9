//go:build linux && (amd64 || arm64)

package engine

import (
	"os"
	"runtime"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

// newWaitTimer returns the timer that [TimerSet.Run] sleeps on when its
// clock is [RealClock]: a Linux timerfd, waited on by the Go runtime's
// network poller instead of its timer heaps. Two things differ from a
// time.Timer:
//
//   - precision: an idle Go process sleeps in epoll_wait, whose timeout is
//     in whole milliseconds, so a Go timer fires up to about 1 ms late; a
//     timerfd makes epoll_wait return when it expires, within microseconds;
//   - the garbage collector: a P that runs an idle-priority GC mark worker
//     does not look at expired Go timers until the worker yields (the
//     worker polls only the run queues and the network poller, every
//     100 KB of mark work), which can take until the scheduler preempts it
//     10 ms later (Go issue 45632); an expired timerfd is a network-poller
//     event, which makes the worker yield at its next poll.
//
// It costs a file descriptor and a goroutine blocked in a read, released
// by close (or when the timer is garbage collected), and each Reset or
// Stop one system call. Expiries are at least preciseGap apart. If
// timerfd_create fails, it returns a time.Timer.
func newWaitTimer(d time.Duration) Timer {
	t, err := newFDTimer(d)
	if err != nil {
		return realTimer{time.NewTimer(d)}
	}
	return t
}

// fdTimer is a Timer backed by a timerfd. The goroutine of its state reads
// the fd and delivers expirations; the fd is closed, which ends the
// goroutine, by close or when the fdTimer is collected.
type fdTimer struct{ *fdState }

type fdState struct {
	f     *os.File // the timerfd, non-blocking, so reads park in the netpoller
	fd    uintptr
	c     chan time.Time
	mu    sync.Mutex // orders deliveries against Stop and Reset
	armed bool       // set by Reset, cleared by Stop and by delivery
	gen   uint64     // arming number, counts Stop and Reset
	last  time.Time  // when the latest expiration was delivered
}

// preciseGap is the least time between two expirations of one wait
// timer: Reset postpones an expiry that would come sooner
// after the previous one. A timer loop such as TimerSet.Run, which re-arms
// its timer for the next deadline after each batch, then wakes at most
// 1/preciseGap times a second however dense the deadlines, and collects
// the deadlines of each gap in one batch, each at most preciseGap late
// (Go timers coalesce the same way, by the millisecond of epoll_wait).
const preciseGap = 250 * time.Microsecond

const (
	clockMonotonic = 1
	tfdNonblock    = syscall.O_NONBLOCK
	tfdCloexec     = syscall.O_CLOEXEC
)

// itimerspec is struct itimerspec of 64-bit Linux.
type itimerspec struct {
	interval, value syscall.Timespec
}

func newFDTimer(d time.Duration) (*fdTimer, error) {
	fd, _, errno := syscall.Syscall(syscall.SYS_TIMERFD_CREATE, clockMonotonic, tfdNonblock|tfdCloexec, 0)
	if errno != 0 {
		return nil, errno
	}
	st := &fdState{fd: fd, c: make(chan time.Time, 1)}
	st.f = os.NewFile(fd, "timerfd")
	st.mu.Lock()
	err := st.set(d)
	st.armed = err == nil
	st.mu.Unlock()
	if err != nil {
		st.f.Close()
		return nil, err
	}
	go st.loop()
	t := &fdTimer{st}
	runtime.AddCleanup(t, func(f *os.File) { f.Close() }, st.f)
	return t, nil
}

// set arms the fd to expire after d (at least 1 ns: zero would disarm it),
// or disarms it if d < 0. st.mu is held.
func (st *fdState) set(d time.Duration) error {
	var spec itimerspec
	if d >= 0 {
		spec.value = syscall.NsecToTimespec(int64(max(d, 1)))
	}
	_, _, errno := syscall.Syscall6(syscall.SYS_TIMERFD_SETTIME, st.fd, 0, uintptr(unsafe.Pointer(&spec)), 0, 0, 0)
	if errno != 0 {
		return errno
	}
	return nil
}

// pending reports whether the fd is armed and has not expired. st.mu is
// held.
func (st *fdState) pending() bool {
	var spec itimerspec
	_, _, errno := syscall.Syscall(syscall.SYS_TIMERFD_GETTIME, st.fd, uintptr(unsafe.Pointer(&spec)), 0)
	return errno == 0 && (spec.value.Sec != 0 || spec.value.Nsec != 0)
}

func (st *fdState) loop() {
	var buf [8]byte
	for {
		st.mu.Lock()
		gen := st.gen
		st.mu.Unlock()
		if _, err := st.f.Read(buf[:]); err != nil {
			return // closed
		}
		now := time.Now()
		st.mu.Lock()
		// The expiration belongs to arming gen (timerfd_settime clears
		// the expiration count), unless Stop or Reset came in between:
		// then it may belong to the previous arming, and is delivered
		// only if the current one has expired. (A wrong delivery would
		// only wake Run early, which then sleeps again: Run fires nothing
		// before Now() >= due.)
		if st.armed && (st.gen == gen || !st.pending()) {
			st.armed = false
			st.last = now
			select {
			case st.c <- now:
			default:
			}
		}
		st.mu.Unlock()
	}
}

func (t *fdTimer) C() <-chan time.Time { return t.c }

// close releases the fd, which ends the goroutine; the timer is unusable
// afterwards.
func (t *fdTimer) close() { t.f.Close() }

// Stop and Reset report whether the timer was armed and its expiration
// not yet delivered (an expiration that the fd has signalled but the
// goroutine not yet delivered counts as not delivered; it is dropped).

func (t *fdTimer) Stop() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	was := t.armed
	t.gen++
	t.set(-1)
	t.armed = false
	t.drain()
	return was
}

func (t *fdTimer) Reset(d time.Duration) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	was := t.armed
	t.gen++
	t.drain()
	if err := t.set(t.coalesce(d)); err != nil {
		// Cannot happen with a valid fd; deliver at once rather than never.
		t.armed = false
		t.c <- time.Now()
		return was
	}
	t.armed = true
	return was
}

// coalesce returns d, or longer so as to expire at least preciseGap after
// the previous expiration. st.mu is held.
func (st *fdState) coalesce(d time.Duration) time.Duration {
	if st.last.IsZero() {
		return d
	}
	return max(d, preciseGap-time.Since(st.last))
}

// drain drops an undelivered expiration, so none is received after Stop
// or Reset returns. st.mu is held.
func (st *fdState) drain() {
	select {
	case <-st.c:
	default:
	}
}
