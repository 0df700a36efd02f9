//go:build linux

package callback

import (
	"net"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// synAcked is what tcpi_bytes_acked counts for the handshake itself: the
// SYN's one sequence number (TestTCPBytesAcked).
const synAcked = 1

// setUnackedTimeout returns a net.Dialer Control that sets TCP_USER_TIMEOUT
// to d on the socket.
func setUnackedTimeout(d time.Duration) func(network, address string, c syscall.RawConn) error {
	ms := int(max(d.Milliseconds(), 1))
	return func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, ms)
		}); err != nil {
			return err
		}
		return serr
	}
}

// tcpBytesAcked returns TCP_INFO's tcpi_bytes_acked of c, if c is TCP and
// still open.
func tcpBytesAcked(c net.Conn) (int64, bool) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return 0, false
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return 0, false
	}
	var info *unix.TCPInfo
	var ierr error
	if err := rc.Control(func(fd uintptr) {
		info, ierr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	}); err != nil || ierr != nil {
		return 0, false
	}
	return int64(info.Bytes_acked), true
}

// peerOpen reports whether an idle connection is still open for a request:
// nothing to read, not even its end (a non-blocking peek, one recvfrom).
// An executor that closed it (its idle time-out, a restart) gives the end
// of the stream; bytes it sent unasked (an error answer before closing)
// make it unfit too. rc is the connection's syscall.RawConn (nil: taken
// as open).
func peerOpen(rc syscall.RawConn) bool {
	if rc == nil {
		return true
	}
	open := false
	var b [1]byte
	if err := rc.Read(func(fd uintptr) bool {
		// The raw call: unix.Recvfrom allocates for the address.
		_, _, errno := unix.Syscall6(unix.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&b[0])), 1, unix.MSG_PEEK|unix.MSG_DONTWAIT, 0, 0)
		open = errno == unix.EAGAIN
		return true // never wait
	}); err != nil {
		return false
	}
	return open
}
