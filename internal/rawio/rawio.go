package rawio

import (
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Mode says whether ax's connections may read and write with raw
// system calls (--socket-io).
type Mode string

const (
	// ModeAuto reads and writes with raw system calls while the adaptive
	// GOMAXPROCS controller has the process on one P (the default).
	ModeAuto Mode = "auto"
	// ModeHandoff reads and writes through the Go runtime always.
	ModeHandoff Mode = "handoff"
)

// ParseMode returns the Mode named s ("" is ModeAuto); an error names
// the choices.
func ParseMode(s string) (Mode, error) {
	switch Mode(s) {
	case "", ModeAuto:
		return ModeAuto, nil
	case ModeHandoff:
		return ModeHandoff, nil
	}
	return "", fmt.Errorf("socket io %q: want %s or %s", s, ModeAuto, ModeHandoff)
}

// Hold returns the hold function of m: oneP for ModeAuto, nil (never)
// for ModeHandoff or a nil oneP.
func (m Mode) Hold(oneP func() bool) func() bool {
	if m == ModeHandoff {
		return nil
	}
	return oneP
}

// MaxRaw bounds the kernel's work in one raw call: a Read asks for at
// most MaxRaw bytes (a short read, which io.Reader allows), and a Write
// of more than MaxRaw bytes goes through the runtime. A raw call keeps
// the P for as long as the kernel copies, so a long one would serialize
// the kernel's copy with the process's Go code, where through the
// runtime sysmon hands the P to another thread once the call has run 20
// µs; 16 KiB is a few µs of copying, and holds a forward, an answer and
// a Raft entry of single submits (13-16 commands of ~400 bytes).
const MaxRaw = 16 << 10

// Conn is a stream connection (TCP or Unix) whose Read and Write are raw
// system calls, which keep the calling thread's P, while Hold reports
// true; otherwise they are the wrapped connection's own. Deadlines,
// Close and the poller's wait for readiness are the wrapped
// connection's in both cases (syscall.RawConn's Read and Write).
type Conn struct {
	net.Conn
	rc     syscall.RawConn
	hold   func() bool
	rd, wr rawCall
}

// rawCall is one direction's raw call: its buffer and outcome, and the
// function syscall.RawConn runs, made once by Wrap, so that a Read or
// Write allocates nothing (a closure over the call's own variables
// escaped to the heap with them on every call: BenchmarkConnPingPong had
// 8 allocations a round trip). mu serializes the calls of a direction,
// as the connection's own read or write lock does.
type rawCall struct {
	mu    sync.Mutex
	buf   []byte
	n     int
	errno syscall.Errno
	fn    func(fd uintptr) bool
}

// Wrap returns c as a *Conn when c is a syscall.Conn (a *net.TCPConn or
// *net.UnixConn) and hold is not nil; c itself otherwise.
func Wrap(c net.Conn, hold func() bool) net.Conn {
	if hold == nil {
		return c
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return c
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return c
	}
	rw := &Conn{Conn: c, rc: rc, hold: hold}
	rw.rd.fn, rw.wr.fn = rw.rd.read, rw.wr.write
	return rw
}

// SyscallConn returns the wrapped connection's syscall.RawConn.
func (c *Conn) SyscallConn() (syscall.RawConn, error) { return c.rc, nil }

// Read implements net.Conn: one read(2) of at most min(len(b), MaxRaw)
// bytes, after waiting in the poller for the connection to be readable;
// io.EOF at the end of the stream.
func (c *Conn) Read(b []byte) (int, error) {
	if len(b) == 0 || !c.hold() {
		return c.Conn.Read(b)
	}
	r := &c.rd
	r.mu.Lock()
	r.buf, r.n, r.errno = b[:min(len(b), MaxRaw)], 0, 0
	err := c.rc.Read(r.fn)
	n, errno := r.n, r.errno
	r.buf = nil
	r.mu.Unlock()
	if err != nil {
		return 0, c.opError("read", unwrapRaw(err))
	}
	if errno != 0 {
		return 0, c.opError("read", os.NewSyscallError("read", errno))
	}
	if n == 0 {
		return 0, io.EOF
	}
	return n, nil
}

// read is one read(2) into r.buf, again on EINTR; false (wait in the
// poller) on EAGAIN.
func (r *rawCall) read(fd uintptr) bool {
	for {
		n, _, e := unix.RawSyscall(unix.SYS_READ, fd, uintptr(unsafe.Pointer(&r.buf[0])), uintptr(len(r.buf)))
		switch e {
		case 0:
			r.n = int(n)
			return true
		case unix.EINTR:
		case unix.EAGAIN:
			return false
		default:
			r.errno = e
			return true
		}
	}
}

// Write implements net.Conn: write(2) until all of b is written, waiting
// in the poller while the connection's send buffer is full; through the
// wrapped connection when b is longer than MaxRaw.
func (c *Conn) Write(b []byte) (int, error) {
	if len(b) == 0 || len(b) > MaxRaw || !c.hold() {
		return c.Conn.Write(b)
	}
	w := &c.wr
	w.mu.Lock()
	w.buf, w.n, w.errno = b, 0, 0
	err := c.rc.Write(w.fn)
	n, errno := w.n, w.errno
	w.buf = nil
	w.mu.Unlock()
	if err != nil {
		return n, c.opError("write", unwrapRaw(err))
	}
	if errno != 0 {
		return n, c.opError("write", os.NewSyscallError("write", errno))
	}
	return n, nil
}

// write is write(2)s of w.buf from w.n until all of it is written, again
// on EINTR; false (wait in the poller) on EAGAIN.
func (w *rawCall) write(fd uintptr) bool {
	for w.n < len(w.buf) {
		n, _, e := unix.RawSyscall(unix.SYS_WRITE, fd, uintptr(unsafe.Pointer(&w.buf[w.n])), uintptr(len(w.buf)-w.n))
		switch e {
		case 0:
			w.n += int(n)
		case unix.EINTR:
		case unix.EAGAIN:
			return false
		default:
			w.errno = e
			return true
		}
	}
	return true
}

// unwrapRaw returns the cause of a RawConn error (net.OpError "raw-read"
// or "raw-write"): net.ErrClosed, os.ErrDeadlineExceeded, ...
func unwrapRaw(err error) error {
	if oe, ok := err.(*net.OpError); ok {
		return oe.Err
	}
	return err
}

func (c *Conn) opError(op string, err error) error {
	return &net.OpError{Op: op, Net: c.LocalAddr().Network(), Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
}

// Listener wraps every connection Accept returns (Wrap).
type Listener struct {
	net.Listener
	hold func() bool
}

// WrapListener returns ln whose accepted connections are wrapped with
// hold; ln itself when hold is nil.
func WrapListener(ln net.Listener, hold func() bool) net.Listener {
	if hold == nil {
		return ln
	}
	return &Listener{Listener: ln, hold: hold}
}

// Accept implements net.Listener.
func (l *Listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return Wrap(c, l.hold), nil
}
