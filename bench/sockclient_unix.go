//go:build unix

package bench

import (
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/valyala/fastjson"
)

// sockSubmitter sends the one-task submits of the throughput workload
// (POST /v1/tasks, HTTP/1.1 with a JSON body, over one keep-alive
// connection to a node's Unix socket, like one app with its own
// connection) and parses each answer: status, headers, and the task view
// (its id and state) or the API's error. The socket is in blocking mode
// and the caller's goroutine writes and reads it with plain write(2) and
// read(2): the kernel wakes the waiting thread itself when the answer
// arrives, with no netpoller, no hand-off between threads and no
// spinning of idle ones. At one caller the bench's CPU per request is on
// the measured path (the caller waits), and fasthttp's client spent
// about 45–55 µs of it per request there, mostly in those wake-ups. With
// many callers a thread blocked per caller costs more than the poller
// (16 callers on two cores: 40 µs of CPU per request against fasthttp's
// 15 µs), so the bench uses it for a single caller only. One per caller;
// not safe for concurrent use.
type sockSubmitter struct {
	socket  string
	timeout time.Duration
	fd      int // -1: not connected
	req     []byte
	buf     []byte
	parser  fastjson.Parser // the answers (checkAnswer)
}

// newSockSubmitter returns a sockSubmitter for socket, with timeout
// bounding each read and write.
func newSockSubmitter(socket string, timeout time.Duration) submitter {
	return &sockSubmitter{socket: socket, timeout: timeout, fd: -1, buf: make([]byte, 0, 4096)}
}

// connect opens the connection, with timeout as the bound of every read
// and write.
func (s *sockSubmitter) connect() error {
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		return fmt.Errorf("socket: %w", err)
	}
	syscall.CloseOnExec(fd)
	tv := syscall.NsecToTimeval(s.timeout.Nanoseconds())
	for _, opt := range []int{syscall.SO_RCVTIMEO, syscall.SO_SNDTIMEO} {
		if err := syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, opt, &tv); err != nil {
			syscall.Close(fd)
			return fmt.Errorf("setsockopt: %w", err)
		}
	}
	for {
		err = syscall.Connect(fd, &syscall.SockaddrUnix{Name: s.socket})
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		syscall.Close(fd)
		return fmt.Errorf("connect %s: %w", s.socket, err)
	}
	s.fd = fd
	return nil
}

// submit posts body, the encoded submit request of task id; an answer
// other than 200 or 201 with the view of task id is an error (with the
// API's code and message when it has them). deadline is not used: every
// read and write is bounded by the submitter's timeout instead.
// A broken or timed-out connection is closed, and the next submit opens
// another.
func (s *sockSubmitter) submit(body []byte, id string, _ time.Time) error {
	status, ans, err := s.exchange(body)
	if err != nil {
		s.closeConn()
		return fmt.Errorf("POST /v1/tasks: %w", err)
	}
	return checkAnswer(&s.parser, status, ans, id)
}

// exchange writes the request and reads the answer: its status and body
// (valid until the next exchange).
func (s *sockSubmitter) exchange(body []byte) (int, []byte, error) {
	if s.fd < 0 {
		if err := s.connect(); err != nil {
			return 0, nil, err
		}
	}
	s.req = appendSubmitRequest(s.req[:0], body)
	for b := s.req; len(b) > 0; {
		n, err := syscall.Write(s.fd, b)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return 0, nil, fmt.Errorf("write: %w", ioErr(err))
		}
		b = b[n:]
	}
	s.buf = s.buf[:0]
	for {
		if len(s.buf) == cap(s.buf) {
			s.buf = append(s.buf, 0)[:len(s.buf)]
		}
		n, err := syscall.Read(s.fd, s.buf[len(s.buf):cap(s.buf)])
		if err == syscall.EINTR {
			continue // a signal (the runtime preempts with SIGURG)
		}
		if err != nil {
			return 0, nil, fmt.Errorf("read: %w", ioErr(err))
		}
		if n == 0 {
			return 0, nil, errors.New("connection closed before the answer")
		}
		s.buf = s.buf[:len(s.buf)+n]
		status, ans, keep, used, err := parseAnswer(s.buf)
		if errors.Is(err, errIncomplete) {
			continue
		}
		if err != nil {
			return 0, nil, err
		}
		if used != len(s.buf) {
			return 0, nil, fmt.Errorf("%d bytes after the answer", len(s.buf)-used)
		}
		if !keep {
			s.closeConn()
		}
		return status, ans, nil
	}
}

// ioErr names a timed-out read or write (SO_RCVTIMEO, SO_SNDTIMEO).
func ioErr(err error) error {
	if err == syscall.EAGAIN {
		return errors.New("timed out")
	}
	return err
}

func (s *sockSubmitter) closeConn() {
	if s.fd >= 0 {
		syscall.Close(s.fd)
		s.fd = -1
	}
}

// close closes the connection.
func (s *sockSubmitter) close() { s.closeConn() }
