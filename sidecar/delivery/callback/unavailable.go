package callback

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"sync/atomic"
	"syscall"
	"time"
)

// Telling "the executor never got the request" (raftfsm.OutcomeUnavailable) from
// "it may have run" (a failed attempt) needs to know whether any byte of
// the request left for the executor. So every connection to an executor
// is an execConn, which counts the bytes written to it, and a sendTrace
// tells which connection a request got and how many bytes it had written
// before. The request reached the executor's socket
// when that count grew. Over TCP, bytes in the socket still need the
// executor's kernel to take them: with a full accept queue it drops them
// (see CallerOptions.UnackedTimeout), so a connection the kernel ended for
// unacknowledged data, with none of this request acknowledged, did not
// reach the executor either.

// execConn is a connection to an executor that counts the bytes written to
// it and, when TCP ends it for unacknowledged data, how many of its bytes
// the peer had acknowledged.
type execConn struct {
	net.Conn
	written atomic.Int64
	// read counts the bytes read from the connection.
	read atomic.Int64
	// ackedAtTimeout is the peer's acknowledged byte count (TCP_INFO's
	// tcpi_bytes_acked) when a read or write failed with ETIMEDOUT (the
	// TCP_USER_TIMEOUT expired); -1 when that did not happen or is
	// unknown.
	ackedAtTimeout atomic.Int64
}

func newExecConn(c net.Conn) *execConn {
	ec := &execConn{Conn: c}
	ec.ackedAtTimeout.Store(-1)
	return ec
}

func (c *execConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.written.Add(int64(n))
	if err != nil {
		c.noteTimeout(err)
	}
	return n, err
}

func (c *execConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.read.Add(int64(n))
	if err != nil {
		c.noteTimeout(err)
	}
	return n, err
}

// noteTimeout records the acknowledged byte count when err is TCP's
// user time-out, before the transport closes the socket.
func (c *execConn) noteTimeout(err error) {
	if !errors.Is(err, syscall.ETIMEDOUT) {
		return
	}
	if acked, ok := tcpBytesAcked(c.Conn); ok {
		c.ackedAtTimeout.CompareAndSwap(-1, acked)
	}
}

// sendTrace is the connection one request got (pool.roundTrip), how
// many bytes had been written to it before, and when it was ready.
type sendTrace struct {
	conn  *execConn
	base  int64     // conn's bytes written before this request
	gotAt time.Time // when a connection was ready
}

// service returns the time since a connection was ready, zero if none was.
func (t *sendTrace) service() time.Duration {
	if t.gotAt.IsZero() {
		return 0
	}
	return time.Since(t.gotAt)
}

// notSent classifies a transport error err: unavailable when the request
// certainly did not reach the executor, and then overloaded when the
// executor is there but did not take it (see Outcome.Overloaded).
func (t *sendTrace) notSent(err error) (unavailable, overloaded bool) {
	switch {
	case t.conn == nil:
		// No connection: the connect failed.
		return true, dialOverloaded(err)
	case t.conn.written.Load() == t.base:
		// Connected, but not one byte went out: the executor closed or
		// reset the connection first. It is there.
		return true, true
	}
	if acked := t.conn.ackedAtTimeout.Load(); acked >= 0 && acked-synAcked <= t.base {
		// TCP gave up on bytes nobody acknowledged, and none of this
		// request's were: the executor's kernel never took them.
		return true, true
	}
	return false, false
}

// dialOverloaded tells, for a failed connect, overload (EAGAIN: a Unix
// socket's accept queue is full; a connect that timed out: a TCP SYN
// dropped by a full accept queue; a reset) from absence (refused, no
// socket file, anything else).
func dialOverloaded(err error) bool {
	if errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ETIMEDOUT) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// Connect retries within DialTimeout (see dialRetrying).
const (
	// dialTryMin is the first connect try's time-out: a same-host connect
	// that the executor's kernel takes completes in microseconds (the
	// loopback handshake runs in the connect call's own softirq), one
	// whose SYN a full accept queue dropped never does (the kernel would
	// send it again only after 1 s). Grown by a quarter per try, so that
	// a dropped SYN is sent again, in a new connect, about ten times
	// within DialTimeout, each a chance to find the queue with room.
	//
	// A Unix socket's connect never waits (it connects or fails with
	// EAGAIN at once), so its tries have no time-out of their own: one
	// would only expire on a host short of CPU, after the kernel had
	// connected, and the executor would accept a connection closed
	// before a byte while the try was made again.
	dialTryMin = 20 * time.Millisecond
	// dialPauseMin and dialPauseMax bound the pause between tries after
	// an overload (jittered, doubled per try): an accept loop drains its
	// queue in about a millisecond.
	dialPauseMin = time.Millisecond
	dialPauseMax = 20 * time.Millisecond
)

// dialRetrying connects to an executor, retrying an overloaded connect
// (EAGAIN: the accept queue of a Unix socket is full; a TCP try not
// completed in its time-out: a SYN dropped) with short jittered pauses
// until budget has passed, since nothing was sent yet and the executor's
// accept loop frees its queue within milliseconds: a burst of connects
// larger than its listen backlog (socketserver's 5) is absorbed here, not
// turned into unavailable callbacks. Absence (refused, no socket file) is
// returned at once. Only an overload that outlasts budget reaches the
// caller (raftfsm.OutcomeUnavailable, Overloaded).
func dialRetrying(ctx context.Context, d *net.Dialer, network, address string, budget time.Duration) (net.Conn, error) {
	end := time.Now().Add(budget)
	try, pause := dialTryMin, dialPauseMin
	// eagain is the first EAGAIN seen: a Unix socket's last try, given
	// what is left of budget as its time-out, may time out on a host
	// short of CPU, and the overload is then said by the EAGAIN, not by
	// that i/o timeout.
	var eagain error
	failed := func(err error) error {
		var ne net.Error
		if eagain != nil && errors.As(err, &ne) && ne.Timeout() {
			return eagain
		}
		return err
	}
	for {
		left := time.Until(end)
		if network == "unix" {
			try = left // no time-out of its own (dialTryMin)
		}
		tctx, cancel := context.WithTimeout(ctx, max(min(try, left), time.Millisecond))
		conn, err := d.DialContext(tctx, network, address)
		cancel()
		if err == nil || ctx.Err() != nil || !dialOverloaded(err) {
			return conn, err
		}
		try += try / 4
		if eagain == nil && errors.Is(err, syscall.EAGAIN) {
			eagain = err
		}
		var ne net.Error
		if !errors.Is(err, syscall.EAGAIN) && errors.As(err, &ne) && ne.Timeout() {
			// A try that timed out has waited already: try again at once.
			if time.Until(end) <= 0 {
				return nil, failed(err)
			}
			continue
		}
		p := pause/2 + rand.N(pause/2+1)
		if time.Until(end) <= p {
			return nil, failed(err)
		}
		timer := time.NewTimer(p)
		select {
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return nil, failed(err)
		}
		pause = min(2*pause, dialPauseMax)
	}
}
