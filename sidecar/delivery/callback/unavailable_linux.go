//go:build linux

package callback

import (
	"net"
	"syscall"
	"time"

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
