package callback

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/axsched/ax/raftfsm"
)

// connCounter counts the connections that carried a request to an
// executor's http.Server and keeps them, for a test to close one from the
// executor's side. Not every accepted connection: a connect try that
// timed out on a loaded host (dialTryMin) may have been completed by the
// kernel already, and the executor sees it closed before a byte.
type connCounter struct {
	mu    sync.Mutex
	conns []net.Conn
	seen  map[net.Conn]bool
}

func (cc *connCounter) hook(hs *http.Server) {
	hs.ConnState = func(c net.Conn, s http.ConnState) {
		if s == http.StateActive {
			cc.mu.Lock()
			if !cc.seen[c] {
				if cc.seen == nil {
					cc.seen = map[net.Conn]bool{}
				}
				cc.seen[c] = true
				cc.conns = append(cc.conns, c)
			}
			cc.mu.Unlock()
		}
	}
}

func (cc *connCounter) count() int {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	return len(cc.conns)
}

// idleConn returns the one idle connection the Caller keeps to base.
func idleConn(t *testing.T, c *Caller, base string) *clientConn {
	t.Helper()
	ep, err := parseExecutorURL(base)
	if err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	p := c.pools[endpointKey{ep.network, ep.address}]
	c.mu.Unlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.idle) != 1 {
		t.Fatalf("%d idle connections, want 1", len(p.idle))
	}
	return p.idle[0]
}

// A kept-alive connection that the executor closed while it was idle (its
// idle time-out, a restart) is not given the next callback: that one goes
// on a new connection and succeeds. Over TCP a request written to such a
// connection would be sent, and then reset: a failed attempt, not a
// success.
func TestCaller_IdleConnClosedByTheExecutorIsNotUsed(t *testing.T) {
	for _, network := range []string{"unix", "tcp"} {
		t.Run(network, func(t *testing.T) {
			var conns connCounter
			ex := startExecutorWith(t, network, func(w http.ResponseWriter, r *http.Request) {}, conns.hook)
			c := newTestCaller(t)
			if out := c.Execute(context.Background(), ex.base, cb1); out.Kind != raftfsm.OutcomeSuccess {
				t.Fatalf("first callback: %+v", out)
			}
			cc := idleConn(t, c, ex.base)
			conns.mu.Lock()
			conns.conns[0].Close() // the executor ends the idle connection
			conns.mu.Unlock()
			// Wait until the close reached the Caller's side of it.
			for deadline := time.Now().Add(10 * time.Second); peerOpen(cc.rc); time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("the executor's close never reached the idle connection")
				}
			}
			if out := c.Execute(context.Background(), ex.base, cb1); out.Kind != raftfsm.OutcomeSuccess {
				t.Fatalf("callback after the executor closed the idle connection: %+v", out)
			}
			if n := conns.count(); n != 2 {
				t.Fatalf("%d connections, want 2", n)
			}
		})
	}
}

// peerOpen: an idle connection is open while the peer has sent nothing;
// not after the peer sent bytes unasked or closed it.
func TestPeerOpen(t *testing.T) {
	ln, err := net.Listen("unix", filepath.Join(t.TempDir(), "p.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	pair := func() (client, server net.Conn, rc syscall.RawConn) {
		client, err := net.Dial("unix", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		server, err = ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		rc, err = client.(*net.UnixConn).SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { client.Close(); server.Close() })
		return client, server, rc
	}
	_, server, rc := pair()
	if !peerOpen(rc) {
		t.Fatal("open connection: peerOpen false")
	}
	server.Write([]byte("HTTP/1.1 408 Request Timeout\r\n\r\n"))
	if peerOpen(rc) {
		t.Fatal("bytes waiting: peerOpen true")
	}
	_, server, rc = pair()
	server.Close()
	if peerOpen(rc) {
		t.Fatal("closed by the peer: peerOpen true")
	}
}

// Answers that leave a connection unfit for another request close it: a
// Connection: close, a body beyond the limit (not read to its end). A
// chunked answer read to its end keeps it.
func TestCaller_ConnectionKeptOnlyAfterACleanAnswer(t *testing.T) {
	cases := []struct {
		name   string
		handle http.HandlerFunc
		conns  int // for two callbacks
		body   int // bytes of the first answer's body kept
		trunc  bool
	}{
		{"plain", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, `{"ok":true}`) }, 1, 11, false},
		{"chunked", func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "a")
			w.(http.Flusher).Flush() // no Content-Length: chunked
			io.WriteString(w, "b")
		}, 1, 2, false},
		{"connection close", func(w http.ResponseWriter, r *http.Request) { w.Header().Set("Connection", "close") }, 2, 0, false},
		{"body over the limit", func(w http.ResponseWriter, r *http.Request) {
			w.Write(make([]byte, errorBodyMaxBytes+10))
		}, 2, errorBodyMaxBytes, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var conns connCounter
			ex := startExecutorWith(t, "unix", tc.handle, conns.hook)
			c := newTestCaller(t)
			for i := 0; i < 2; i++ {
				out := c.Execute(context.Background(), ex.base, cb1)
				if out.Kind != raftfsm.OutcomeSuccess || len(out.Body) != tc.body || out.BodyTruncated != tc.trunc {
					t.Fatalf("callback %d: kind %v, %d bytes of body (truncated %v), want success, %d (%v); error %q",
						i, out.Kind, len(out.Body), out.BodyTruncated, tc.body, tc.trunc, out.Error)
				}
			}
			if n := conns.count(); n != tc.conns {
				t.Fatalf("two callbacks used %d connections, want %d", n, tc.conns)
			}
		})
	}
}

// Informational answers (here a 100 Continue the executor sends unasked)
// are skipped: the final answer decides.
func TestCaller_SkipsInformationalAnswers(t *testing.T) {
	ln, err := net.Listen("unix", filepath.Join(t.TempDir(), "x.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		req, err := http.ReadRequest(bufio.NewReader(c))
		if err != nil {
			return
		}
		io.Copy(io.Discard, req.Body)
		io.WriteString(c, "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 503 Service Unavailable\r\nRetry-After: 7\r\nContent-Length: 4\r\n\r\nbusy")
	}()
	out := newTestCaller(t).Execute(context.Background(), "unix://"+ln.Addr().String(), cb1)
	if out.Kind != raftfsm.OutcomeBusy || out.Status != 503 || out.RetryAfter != 7*time.Second || out.Error != "http 503: busy" {
		t.Fatalf("outcome %+v, want busy 503 after 7s", out)
	}
}

// A header value with a control character is refused before anything is
// sent (it would split the request), as net/http refuses it: the
// executor gets nothing.
func TestCaller_RefusesAHeaderValueWithANewline(t *testing.T) {
	var conns connCounter
	got := make(chan string, 1)
	ex := startExecutorWith(t, "unix", func(w http.ResponseWriter, r *http.Request) { got <- r.Header.Get("Ax-Task-Id") }, conns.hook)
	c := newTestCaller(t)
	cb := cb1
	cb.TaskID = "a\r\nX-Injected: 1"
	out := c.Execute(context.Background(), ex.base, cb)
	if out.Kind != raftfsm.OutcomeUnavailable || out.Overloaded || !strings.Contains(out.Error, `invalid header field value for "Ax-Task-Id"`) {
		t.Fatalf("outcome %+v, want unavailable, an invalid header value", out)
	}
	// The connection it took is still good: the next callback uses it.
	if out := c.Execute(context.Background(), ex.base, cb1); out.Kind != raftfsm.OutcomeSuccess {
		t.Fatalf("next callback: %+v", out)
	}
	if id := <-got; id != cb1.TaskID {
		t.Fatalf("executor got task id %q, want %q", id, cb1.TaskID)
	}
	select {
	case id := <-got:
		t.Fatalf("the refused callback reached the executor (%q)", id)
	default:
	}
}

// Idle connections are closed after IdleConnTimeout by the pool's timer,
// with no callback to find them.
func TestCaller_IdleConnsClosedAfterTheirTimeout(t *testing.T) {
	closed := make(chan struct{})
	ex := startExecutorWith(t, "unix", func(w http.ResponseWriter, r *http.Request) {}, func(hs *http.Server) {
		hs.ConnState = func(_ net.Conn, s http.ConnState) {
			if s == http.StateClosed {
				close(closed)
			}
		}
	})
	c := NewCaller(CallerOptions{IdleConnTimeout: 20 * time.Millisecond})
	defer c.Close()
	if out := c.Execute(context.Background(), ex.base, cb1); out.Kind != raftfsm.OutcomeSuccess {
		t.Fatalf("outcome %+v", out)
	}
	select {
	case <-closed:
	case <-time.After(30 * time.Second):
		t.Fatal("the idle connection was not closed")
	}
}

// An executor that answers before reading the whole request (here 413
// after the headers of a large payload) and closes: its answer decides
// the outcome, as with net/http's Transport, not the write cut short.
func TestCaller_EarlyAnswerToALargeRequest(t *testing.T) {
	for _, network := range []string{"unix", "tcp"} {
		t.Run(network, func(t *testing.T) {
			var ln net.Listener
			var err error
			if network == "unix" {
				ln, err = net.Listen("unix", filepath.Join(t.TempDir(), "x.sock"))
			} else {
				ln, err = net.Listen("tcp", "127.0.0.1:0")
			}
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			done := make(chan struct{})
			defer close(done)
			go func() {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				defer c.Close()
				br := bufio.NewReader(c)
				for { // the headers only
					line, err := br.ReadString('\n')
					if err != nil || line == "\r\n" {
						break
					}
				}
				io.WriteString(c, "HTTP/1.1 413 Request Entity Too Large\r\nContent-Length: 8\r\nConnection: close\r\n\r\ntoo big!")
				if tc, ok := c.(*net.TCPConn); ok {
					tc.CloseWrite()
					// Closed with the body unread, the connection is reset,
					// and a caller that has not read the answer by then
					// sees only the reset: held open until the caller is
					// done (a fixed 100 ms here failed once on a loaded CI
					// host: "write: connection timed out" at 794 ms).
					select {
					case <-done:
					case <-time.After(10 * time.Second):
					}
				}
			}()
			base := "unix://" + ln.Addr().String()
			if network == "tcp" {
				base = "http://" + ln.Addr().String()
			}
			cb := cb1
			cb.Payload = make([]byte, 8<<20)
			out := newTestCaller(t).Execute(context.Background(), base, cb)
			if out.Kind != raftfsm.OutcomePermanent || out.Status != 413 {
				t.Fatalf("outcome %+v, want permanent 413", out)
			}
		})
	}
}

// An executor whose answer's headers do not end fails its callback (a
// failed attempt: it had the request) once 1 MiB of them came, as
// net/http's Transport bounds them, instead of the node reading on.
func TestCaller_AnswerHeadersAreBounded(t *testing.T) {
	ln, err := net.Listen("unix", filepath.Join(t.TempDir(), "x.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	sent := make(chan int, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		req, err := http.ReadRequest(bufio.NewReader(c))
		if err != nil {
			return
		}
		io.Copy(io.Discard, req.Body)
		n, _ := io.WriteString(c, "HTTP/1.1 200 OK\r\n")
		line := "X-Pad: " + strings.Repeat("x", 1000) + "\r\n"
		for n < 64<<20 { // 64 MiB of headers at most, then give up
			k, err := io.WriteString(c, line)
			n += k
			if err != nil {
				break
			}
		}
		sent <- n
	}()
	out := newTestCaller(t).Execute(context.Background(), "unix://"+ln.Addr().String(), cb1)
	if out.Kind != raftfsm.OutcomeRetryable || !strings.Contains(out.Error, "exceed 1 MiB") {
		t.Fatalf("outcome %+v, want a failed attempt for headers over 1 MiB", out)
	}
	if n := <-sent; n >= 64<<20 {
		t.Fatalf("the executor could send %d bytes of headers", n)
	}
}

// A deadline that passes while the callback is on its way (before the
// dial, between taking a kept-alive connection and writing, during the
// read) is a timeout, never an unavailable executor: the retry of a
// request that wrote nothing stops at the deadline, and a dial cut by the
// deadline counts as the timeout. Deadlines from 0 to 400 µs ahead land in
// each of those steps on some of the 81 callbacks.
func TestCaller_DeadlinePassingOnTheWayIsATimeout(t *testing.T) {
	ex := startExecutorWith(t, "unix", func(w http.ResponseWriter, r *http.Request) {}, nil)
	c := newTestCaller(t)
	for i := 0; i <= 80; i++ {
		if i%10 == 0 { // refill the pool with kept-alive connections
			if out := c.Execute(context.Background(), ex.base, Callback{TaskID: "w", Handler: "h"}); out.Kind != raftfsm.OutcomeSuccess {
				t.Fatalf("warm-up outcome = %+v", out)
			}
		}
		out := c.Execute(context.Background(), ex.base,
			Callback{TaskID: "t", Handler: "h", Deadline: time.Now().Add(time.Duration(i*5) * time.Microsecond)})
		if out.Kind != raftfsm.OutcomeTimeout && out.Kind != raftfsm.OutcomeSuccess {
			t.Fatalf("deadline %d µs ahead: outcome = %+v, want a timeout (or success)", i*5, out)
		}
	}
}

// rawExecutor serves callbacks by hand: for the n-th request on a
// connection (from 0), close says whether it reads the request and then
// closes the connection without an answer (as an executor whose
// keep-alive time-out ends the connection just as a request comes).
type rawExecutor struct {
	ln    net.Listener
	base  string
	close func(n int) bool
	// beforeClose runs before such a close (the test may stop the
	// listener there, an executor that is gone for the next try).
	beforeClose func()

	mu    sync.Mutex
	conns int
	seen  []string // Ax-Task-Id/Ax-Attempt of each request read
	wg    sync.WaitGroup
}

func startRawExecutor(t *testing.T, network string, close func(n int) bool, beforeClose func()) *rawExecutor {
	t.Helper()
	addr := "127.0.0.1:0"
	if network == "unix" {
		addr = filepath.Join(t.TempDir(), "raw.sock")
	}
	ln, err := net.Listen(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	ex := &rawExecutor{ln: ln, close: close, beforeClose: beforeClose, base: "http://" + ln.Addr().String()}
	if network == "unix" {
		ex.base = "unix://" + addr
	}
	ex.wg.Add(1)
	go func() {
		defer ex.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			ex.wg.Add(1)
			go ex.serve(c)
		}
	}()
	t.Cleanup(func() { ln.Close(); ex.wg.Wait() })
	return ex
}

func (ex *rawExecutor) serve(c net.Conn) {
	defer ex.wg.Done()
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second)) // a stray silent connection ends too
	br := bufio.NewReader(c)
	for n := 0; ; n++ {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		io.Copy(io.Discard, req.Body)
		ex.mu.Lock()
		if n == 0 {
			// A connection counts once it carries a request (see
			// connCounter).
			ex.conns++
		}
		ex.seen = append(ex.seen, req.Header.Get("Ax-Task-Id")+"/"+req.Header.Get("Ax-Attempt"))
		ex.mu.Unlock()
		if ex.close(n) {
			if ex.beforeClose != nil {
				ex.beforeClose()
			}
			return
		}
		if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"); err != nil {
			return
		}
	}
}

func (ex *rawExecutor) counts() (conns int, seen []string) {
	ex.mu.Lock()
	defer ex.mu.Unlock()
	return ex.conns, append([]string(nil), ex.seen...)
}

// A kept-alive connection that the executor closes without an answer once
// the whole request is on it (its idle time-out met the request on the
// way) does not cost the attempt: the request goes once more on a new
// connection and its answer counts; the executor saw the (task, attempt)
// twice. Without the second send the callback failed as a counted attempt
// ("unexpected EOF").
func TestCaller_KeptAliveConnClosedUnansweredIsSentAgain(t *testing.T) {
	for _, network := range []string{"unix", "tcp"} {
		t.Run(network, func(t *testing.T) {
			// The second request on each connection is read and not answered.
			ex := startRawExecutor(t, network, func(n int) bool { return n == 1 }, nil)
			c := newTestCaller(t)
			for i := range 2 {
				if out := c.Execute(context.Background(), ex.base, cb1); out.Kind != raftfsm.OutcomeSuccess {
					t.Fatalf("callback %d: %+v, want success", i, out)
				}
			}
			conns, seen := ex.counts()
			if conns != 2 || len(seen) != 3 || seen[1] != seen[2] {
				t.Fatalf("%d connections, requests %v; want 2 connections and the second callback sent twice", conns, seen)
			}
		})
	}
}

// Sent once more and the executor is not there (gone after it closed the
// kept-alive connection without an answer): the first try's failure
// stands, a counted attempt, not "unavailable" (an executor that dies on a
// task must not keep the task's attempts from counting). A request on a
// new connection that ends so is not sent again.
func TestCaller_ClosedUnansweredAndGoneIsAFailedAttempt(t *testing.T) {
	for _, network := range []string{"unix", "tcp"} {
		t.Run(network, func(t *testing.T) {
			var ex *rawExecutor
			ex = startRawExecutor(t, network, func(n int) bool { return n == 1 }, func() { ex.ln.Close() })
			c := newTestCaller(t)
			if out := c.Execute(context.Background(), ex.base, cb1); out.Kind != raftfsm.OutcomeSuccess {
				t.Fatalf("first callback: %+v", out)
			}
			out := c.Execute(context.Background(), ex.base, cb1)
			if out.Kind != raftfsm.OutcomeRetryable || out.Overloaded {
				t.Fatalf("closed unanswered, then gone: %+v, want a failed attempt (retryable)", out)
			}
			if conns, seen := ex.counts(); conns != 1 || len(seen) != 2 {
				t.Fatalf("%d connections, %d requests; want 1 and 2", conns, len(seen))
			}
		})
	}
	t.Run("new connection", func(t *testing.T) {
		ex := startRawExecutor(t, "tcp", func(n int) bool { return true }, nil)
		out := newTestCaller(t).Execute(context.Background(), ex.base, cb1)
		if out.Kind != raftfsm.OutcomeRetryable {
			t.Fatalf("closed unanswered on a new connection: %+v, want a failed attempt", out)
		}
		if conns, seen := ex.counts(); conns != 1 || len(seen) != 1 {
			t.Fatalf("%d connections, %d requests; want the request sent once", conns, len(seen))
		}
	})
}
