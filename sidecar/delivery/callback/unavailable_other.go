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
