//go:build !linux

package callback

import (
	"net"
	"syscall"
	"time"
)

const synAcked = 0

// setUnackedTimeout sets nothing: TCP_USER_TIMEOUT is Linux's.
func setUnackedTimeout(time.Duration) func(network, address string, c syscall.RawConn) error {
	return nil
}

// tcpBytesAcked is unknown outside Linux.
func tcpBytesAcked(net.Conn) (int64, bool) { return 0, false }

// peerOpen cannot peek outside Linux: an idle connection is taken as open
// (a request that writes nothing on it goes to another, pool.roundTrip).
func peerOpen(syscall.RawConn) bool { return true }
