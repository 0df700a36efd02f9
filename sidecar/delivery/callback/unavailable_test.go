//go:build linux

package callback

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/axsched/ax/raftfsm"
)

var cb1 = Callback{TaskID: "t", Handler: "h", Attempt: 1, Run: 1, Payload: []byte("payload")}

// listenRaw makes a listening socket with the given listen(2) backlog that
// nobody accepts on, and returns its fd and address (a path for AF_UNIX).
func listenRaw(t *testing.T, family int, backlog int) (fd int, addr string) {
	t.Helper()
	fd, err := syscall.Socket(family, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	switch family {
	case syscall.AF_UNIX:
		addr = filepath.Join(t.TempDir(), "full.sock")
		if err := syscall.Bind(fd, &syscall.SockaddrUnix{Name: addr}); err != nil {
			t.Fatal(err)
		}
	default:
		if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
			t.Fatal(err)
		}
		sa, err := syscall.Getsockname(fd)
		if err != nil {
			t.Fatal(err)
		}
		addr = "127.0.0.1:" + strconv.Itoa(sa.(*syscall.SockaddrInet4).Port)
	}
	if err := syscall.Listen(fd, backlog); err != nil {
		t.Fatal(err)
	}
	return fd, addr
}

// fill connects to a listener nobody accepts on until a connect fails,
// and returns that error; the connections are closed at the test's end.
func fill(t *testing.T, network, addr string) error {
	t.Helper()
	for i := 0; i < 100; i++ {
		c, err := net.DialTimeout(network, addr, 200*time.Millisecond)
		if err != nil {
			return err
		}
		t.Cleanup(func() { c.Close() })
	}
	t.Fatalf("100 connects to a listener that does not accept all succeeded")
	return nil
}

// A Unix socket whose accept queue is full answers connects with EAGAIN:
// the executor is there but overloaded, and the request never reached it.
func TestCaller_UnavailableOverloadEAGAIN(t *testing.T) {
	_, path := listenRaw(t, syscall.AF_UNIX, 1)
	if err := fill(t, "unix", path); !strings.Contains(err.Error(), "resource temporarily unavailable") {
		t.Fatalf("filling the accept queue ended with %v, want EAGAIN", err)
	}
	out := newTestCaller(t).Execute(context.Background(), "unix://"+path, cb1)
	if out.Kind != raftfsm.OutcomeUnavailable || !out.Overloaded || out.Status != 0 || !strings.Contains(out.Error, "resource temporarily unavailable") {
		t.Fatalf("full accept queue: %+v, want unavailable and overloaded", out)
	}
	if out.Service != 0 {
		t.Fatalf("service time %v without a connection", out.Service)
	}
}

// A TCP listener whose accept queue is full drops SYNs: the connect does
// not complete within DialTimeout, which is overload, not a failure.
func TestCaller_UnavailableOverloadSlowConnect(t *testing.T) {
	_, addr := listenRaw(t, syscall.AF_INET, 0)
	if err := fill(t, "tcp", addr); !strings.Contains(err.Error(), "timeout") {
		t.Fatalf("filling the accept queue ended with %v, want a connect time-out", err)
	}
	c := NewCaller(CallerOptions{DialTimeout: 100 * time.Millisecond})
	defer c.Close()
	out := c.Execute(context.Background(), "http://"+addr, Callback{TaskID: "t", Handler: "h", Deadline: time.Now().Add(10 * time.Second)})
	if out.Kind != raftfsm.OutcomeUnavailable || !out.Overloaded {
		t.Fatalf("SYN dropped: %+v, want unavailable and overloaded", out)
	}
}

// Refused and missing are absence: unavailable, not overloaded.
func TestCaller_UnavailableAbsent(t *testing.T) {
	c := newTestCaller(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	for name, url := range map[string]string{
		"refused tcp": "http://" + addr,
		"no socket":   "unix://" + filepath.Join(t.TempDir(), "gone.sock"),
	} {
		out := c.Execute(context.Background(), url, cb1)
		if out.Kind != raftfsm.OutcomeUnavailable || out.Overloaded || !strings.HasPrefix(out.Error, "executor unavailable: ") {
			t.Errorf("%s: %+v, want unavailable, not overloaded", name, out)
		}
	}
	// A socket file nobody listens on refuses too.
	lnu, err := net.Listen("unix", filepath.Join(t.TempDir(), "x.sock"))
	if err != nil {
		t.Fatal(err)
	}
	p := lnu.Addr().String()
	lnu.(*net.UnixListener).SetUnlinkOnClose(false)
	lnu.Close()
	out := c.Execute(context.Background(), "unix://"+p, cb1)
	if out.Kind != raftfsm.OutcomeUnavailable || out.Overloaded || !strings.Contains(out.Error, "connection refused") {
		t.Errorf("socket file without a listener: %+v, want unavailable (refused), not overloaded", out)
	}
}

// readRequest reads one HTTP request with its body from r.
func readRequest(t *testing.T, r *bufio.Reader) {
	tp := textproto.NewReader(r)
	if _, err := tp.ReadLine(); err != nil {
		t.Error(err)
		return
	}
	h, err := tp.ReadMIMEHeader()
	if err != nil {
		t.Error(err)
		return
	}
	n, _ := strconv.Atoi(h.Get("Content-Length"))
	if _, err := io.ReadFull(r, make([]byte, n)); err != nil {
		t.Error(err)
	}
}

// An executor that read the request and then reset the connection may
// have run it: a failed attempt, never unavailable.
func TestCaller_ResetAfterRequestIsFailedAttempt(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// Every connection is answered so: a port from 127.0.0.1:0 may also
	// get a stray connection (a client on this machine dialling the port's
	// former owner), which must not leave the callback's unanswered.
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.SetDeadline(time.Now().Add(30 * time.Second)) // a silent stray one ends too
			go func() {
				// A stray connection's bytes need not be a request: read
				// what comes (not reporting it), then reset.
				if req, err := http.ReadRequest(bufio.NewReader(c)); err == nil {
					io.Copy(io.Discard, req.Body)
				}
				c.(*net.TCPConn).SetLinger(0) // close with RST
				c.Close()
			}()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // a failure, not a hang
	defer cancel()
	out := newTestCaller(t).Execute(ctx, "http://"+ln.Addr().String(), cb1)
	ln.Close()
	wg.Wait()
	if out.Kind != raftfsm.OutcomeRetryable || out.Overloaded {
		t.Fatalf("reset after the request was read: %+v, want retryable (a failed attempt)", out)
	}
}

// tcpi_bytes_acked counts the request's bytes and not the handshake's, as
// synAcked says.
func TestTCPBytesAcked(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan struct{})
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		io.ReadFull(c, make([]byte, 10))
		close(got)
		io.Copy(io.Discard, c)
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if acked, ok := tcpBytesAcked(c); !ok || acked != synAcked {
		t.Fatalf("before writing: acked %d ok %v, want %d", acked, ok, synAcked)
	}
	c.Write([]byte("0123456789"))
	<-got
	var acked int64
	for i := 0; i < 100; i++ { // the ACK is sent as the data arrives; allow its way back
		if acked, _ = tcpBytesAcked(c); acked == 10+synAcked {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if acked != 10+synAcked {
		t.Fatalf("after 10 bytes read by the peer: acked %d, want %d", acked, 10+synAcked)
	}
}

// A TCP connection ended by TCP_USER_TIMEOUT with none of this request's
// bytes acknowledged did not reach the executor; with some, it may have.
func TestSendTrace_UnackedRequest(t *testing.T) {
	ec := newExecConn(nil)
	ec.written.Store(300) // an earlier request of 100 bytes, then this one
	tr := &sendTrace{conn: ec, base: 100, gotAt: time.Now()}
	timeout := &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ETIMEDOUT)}
	ec.ackedAtTimeout.Store(100 + synAcked)
	if un, over := tr.notSent(timeout); !un || !over {
		t.Fatalf("nothing of the request acknowledged: unavailable %v overloaded %v, want both", un, over)
	}
	ec.ackedAtTimeout.Store(150 + synAcked)
	if un, _ := tr.notSent(timeout); un {
		t.Fatal("part of the request acknowledged, yet unavailable")
	}
	ec.ackedAtTimeout.Store(-1)
	if un, _ := tr.notSent(io.ErrUnexpectedEOF); un {
		t.Fatal("request written, connection dropped: unavailable, want a failed attempt")
	}
	ec.written.Store(100)
	if un, over := tr.notSent(io.ErrUnexpectedEOF); !un || !over {
		t.Fatalf("nothing written: unavailable %v overloaded %v, want both", un, over)
	}
}

// The Caller keeps as many idle connections to an executor as
// Callback.MaxIdleConns says (its limit), not the default 64: a second
// burst of 100 reuses the first one's 100 connections.
func TestCaller_IdleConnsFollowTheLimit(t *testing.T) {
	const n = 100
	var conns connCounter // the connections that carried a request
	var gate sync.WaitGroup
	ex := startExecutorWith(t, "unix", func(w http.ResponseWriter, r *http.Request) { gate.Done(); gate.Wait() }, conns.hook)
	c := newTestCaller(t)
	// A connection goes back to the pool before its Execute returns: the
	// second burst finds the first one's connections idle.
	ctx := context.Background()
	for round := 0; round < 2; round++ {
		gate.Add(n) // every callback of a round is in flight at once
		var wg sync.WaitGroup
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				cb := cb1
				cb.MaxIdleConns = n
				if out := c.Execute(ctx, ex.base, cb); out.Kind != raftfsm.OutcomeSuccess {
					t.Errorf("outcome %+v", out)
				}
			}()
		}
		wg.Wait()
	}
	// With the default of 64 idle connections the second burst would
	// open 36 more (136 in all).
	if got := conns.count(); got != n {
		t.Fatalf("two bursts of %d used %d connections, want %d", n, got, n)
	}
}

// A connect that finds the accept queue full is retried within DialTimeout:
// once the executor's accept loop has room (here it starts accepting a
// moment later), the callback goes through, as a normal success.
func TestCaller_OverloadedConnectIsRetried(t *testing.T) {
	fd, path := listenRaw(t, syscall.AF_UNIX, 1)
	if err := fill(t, "unix", path); !strings.Contains(err.Error(), "resource temporarily unavailable") {
		t.Fatalf("filling the accept queue ended with %v, want EAGAIN", err)
	}
	dup, err := syscall.Dup(fd)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(dup), "listener")
	defer f.Close()
	var calls sync.WaitGroup
	calls.Add(1)
	go func() {
		time.Sleep(30 * time.Millisecond) // the accept loop is busy for a moment
		ln, err := net.FileListener(f)
		if err != nil {
			t.Error(err)
			return
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { calls.Done() })}
		t.Cleanup(func() { srv.Close() })
		srv.Serve(ln)
	}()
	out := newTestCaller(t).Execute(context.Background(), "unix://"+path, cb1)
	if out.Kind != raftfsm.OutcomeSuccess {
		t.Fatalf("outcome %+v, want success after retried connects", out)
	}
	calls.Wait()
	if out.Service >= out.Duration {
		t.Fatalf("service %v not below duration %v: the connect wait was counted", out.Service, out.Duration)
	}
}

// A Unix socket's connect never waits, so a try of it has no time-out of
// its own: on a host short of CPU the goroutine may run again only after
// such a time-out (here the dialer's Control stalls each try for twice
// dialTryMin), and the try would then close a connection the kernel had
// made (the executor accepts it and sees it closed before a byte) and
// connect again.
func TestDialRetrying_UnixTryHasNoTimeoutOfItsOwn(t *testing.T) {
	path := filepath.Join(t.TempDir(), "exec.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	d := &net.Dialer{Control: func(string, string, syscall.RawConn) error {
		time.Sleep(2 * dialTryMin) // the goroutine is not run for a while
		return nil
	}}
	conn, err := dialRetrying(context.Background(), d, "unix", path, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	// The accept queue is in order: a connection closed by a try before
	// this one is accepted first.
	var b [1]byte
	for n := 1; ; n++ {
		c := <-accepted
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err := c.Read(b[:])
		c.Close()
		if err == nil {
			if n != 1 {
				t.Fatalf("the executor accepted %d connections for one dial, %d closed before a byte", n, n-1)
			}
			return
		}
	}
}
