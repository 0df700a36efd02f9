package callback

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/axsched/ax/clients/go/axapi"
)

// The callback's HTTP/1.1 client. A callback is one small POST on a kept-
// alive connection to an executor on the same host, and net/http's
// Transport spent on it about as much CPU as the rest of a task's life
// in the node (two goroutines per connection, a hand-off between them
// and the caller per request, a copy of the request's headers): 22 % of
// a node's CPU processing no-op tasks (docs/perf/processing.md). This
// client writes the request and reads the answer on the caller's own
// goroutine, over a pool of idle connections per executor address:
//
//   - the request is written from a buffer kept with the connection (the
//     request line, the headers, the body when small) in one write;
//   - the answer is read by net/http's own parser (http.ReadResponse:
//     status line, headers, Content-Length, chunked, close-delimited
//     bodies, 1xx answers skipped as net/http's Transport does);
//   - the deadline and the context's end abort the request by the
//     connection's deadline (SetDeadline; context.AfterFunc for the
//     context), and a connection so aborted, one whose answer was not
//     read to its end, or one answered with a 204 or 304 that declares a
//     body (declaresForbiddenBody), is closed, never reused;
//   - an idle connection is checked before reuse by a non-blocking peek
//     (an executor that closed it meanwhile is not sent a request), and
//     a request that could not write a byte to a reused connection goes
//     to another one, as net/http's Transport retries a request that
//     wrote nothing, and a request sent whole on a reused connection
//     that the executor closed without a byte of answer goes once more
//     on a new connection (net/http does so for a request with an
//     Idempotency-Key);
//   - a request whose write failed takes the answer the executor may
//     have sent first (a 413 before reading a large body);
//   - idle connections beyond the executor's count are closed, and those
//     idle for IdleConnTimeout are closed by a timer of the pool.
//
// Everything the Outcome says is told as before: the bytes written to a
// connection (execConn) classify a connection error (sendTrace.notSent),
// and the service time runs from the moment a connection was ready.

// connBufSize is the size of a connection's read buffer, and the largest
// request (headers and body) written from the connection's own buffer in
// one write; a larger body is written after it, without a copy.
const connBufSize = 4096

// pool is the idle connections to one executor address, most recently
// used last.
type pool struct {
	network, address string
	dialer           *net.Dialer
	dialTimeout      time.Duration
	idleTimeout      time.Duration

	mu      sync.Mutex
	maxIdle int
	idle    []*clientConn
	pruning bool // a prune timer is pending
}

// clientConn is one connection to an executor with its buffers.
type clientConn struct {
	ec     *execConn
	lim    *capReader      // under br: bounds an answer's headers
	rc     syscall.RawConn // ec's socket, for peerOpen; nil when not had
	br     *bufio.Reader
	buf    []byte    // the request being written
	idleAt time.Time // when it went back to the pool
}

// pool returns the connection pool of one executor address, keeping at
// most maxIdle idle connections (0: CallerOptions.MaxIdleConnsPerExecutor).
// A new count applies at once: idle connections beyond it are closed.
func (c *Caller) pool(k endpointKey, maxIdle int) *pool {
	if maxIdle <= 0 {
		maxIdle = c.opts.MaxIdleConnsPerExecutor
	}
	c.mu.Lock()
	p := c.pools[k]
	if p == nil {
		dialer := &net.Dialer{Timeout: c.opts.DialTimeout}
		if k.network == "tcp" && c.opts.UnackedTimeout > 0 {
			dialer.Control = setUnackedTimeout(c.opts.UnackedTimeout)
		}
		p = &pool{network: k.network, address: k.address, dialer: dialer, dialTimeout: c.opts.DialTimeout, idleTimeout: c.opts.IdleConnTimeout, maxIdle: maxIdle}
		c.pools[k] = p
	}
	c.mu.Unlock()
	p.mu.Lock()
	if p.maxIdle != maxIdle {
		p.maxIdle = maxIdle
		p.trimLocked(time.Now())
	}
	p.mu.Unlock()
	return p
}

// get returns an idle connection that is still open, or nil when there is
// none.
func (p *pool) get() *clientConn {
	now := time.Now()
	for {
		p.mu.Lock()
		n := len(p.idle)
		if n == 0 {
			p.mu.Unlock()
			return nil
		}
		cc := p.idle[n-1]
		p.idle[n-1] = nil
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		if now.Sub(cc.idleAt) < p.idleTimeout && peerOpen(cc.rc) {
			return cc
		}
		_ = cc.ec.Close()
	}
}

// dial connects to the executor (dialRetrying) by ctx or its deadline.
func (p *pool) dial(ctx context.Context, deadline time.Time) (*clientConn, error) {
	if !deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	conn, err := dialRetrying(ctx, p.dialer, p.network, p.address, p.dialTimeout)
	if err != nil {
		return nil, err
	}
	ec := newExecConn(conn)
	lim := &capReader{r: ec, n: noCap}
	cc := &clientConn{ec: ec, lim: lim, br: bufio.NewReaderSize(lim, connBufSize)}
	if sc, ok := conn.(syscall.Conn); ok {
		cc.rc, _ = sc.SyscallConn()
	}
	return cc, nil
}

// put returns cc to the pool, or closes it when the pool is full.
func (p *pool) put(cc *clientConn) {
	if cap(cc.buf) > 4*connBufSize {
		cc.buf = nil // a large payload's buffer is not kept
	}
	now := time.Now()
	cc.idleAt = now
	p.mu.Lock()
	if len(p.idle) >= p.maxIdle {
		p.mu.Unlock()
		_ = cc.ec.Close()
		return
	}
	p.idle = append(p.idle, cc)
	if !p.pruning {
		p.pruning = true
		time.AfterFunc(p.idleTimeout, p.prune)
	}
	p.mu.Unlock()
}

// prune closes the connections idle for idleTimeout, and runs again while
// some are left.
func (p *pool) prune() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.trimLocked(time.Now())
	if len(p.idle) == 0 {
		p.pruning = false
		return
	}
	time.AfterFunc(max(p.idle[0].idleAt.Add(p.idleTimeout).Sub(time.Now()), time.Millisecond), p.prune)
}

// trimLocked closes the idle connections beyond maxIdle (the oldest) and
// those idle for idleTimeout at now; p.mu is held.
func (p *pool) trimLocked(now time.Time) {
	drop := max(0, len(p.idle)-p.maxIdle)
	for drop < len(p.idle) && now.Sub(p.idle[drop].idleAt) >= p.idleTimeout {
		drop++
	}
	if drop == 0 {
		return
	}
	for _, cc := range p.idle[:drop] {
		_ = cc.ec.Close()
	}
	n := copy(p.idle, p.idle[drop:])
	clear(p.idle[n:])
	p.idle = p.idle[:n]
}

// closeIdle closes every idle connection.
func (p *pool) closeIdle() {
	p.mu.Lock()
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	for _, cc := range idle {
		_ = cc.ec.Close()
	}
}

// request is one callback's POST: its target, Host and User-Agent, and
// the callback (headers and body), written by appendRequest.
type request struct {
	host, target, userAgent string
	cb                      *Callback
}

// errHeaderValue is returned for a header value with a control character
// (CR, LF, NUL…): it would end the header or split the request. net/http
// refuses the same values ("invalid header field value").
type errHeaderValue struct{ name string }

func (e errHeaderValue) Error() string {
	return "net/http: invalid header field value for " + strconv.Quote(e.name)
}

// validHeaderValue reports whether v has no control character but tab
// (httpguts.ValidHeaderFieldValue, which net/http's Transport applies).
func validHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if b := v[i]; b < ' ' && b != '\t' || b == 0x7f {
			return false
		}
	}
	return true
}

// trimHeaderValue drops the spaces and tabs at the ends of v, as net/http
// writes a header value (textproto.TrimString).
func trimHeaderValue(v string) string {
	for len(v) > 0 && (v[0] == ' ' || v[0] == '\t') {
		v = v[1:]
	}
	for len(v) > 0 && (v[len(v)-1] == ' ' || v[len(v)-1] == '\t') {
		v = v[:len(v)-1]
	}
	return v
}

// appendRequest appends the request line and headers of r (with its
// Content-Length) to b: Content-Type, User-Agent, Ax-Task-Id, Ax-Handler,
// Ax-Attempt, Ax-Run, Ax-Deadline (a deadline set), Ax-Shard-Index and
// Ax-Shard-Total (a shard's callback), traceparent and tracestate (when
// the task has one). A value is checked and trimmed as net/http does
// (errHeaderValue).
func appendRequest(b []byte, r *request) ([]byte, error) {
	cb := r.cb
	b = append(b, "POST "...)
	b = append(b, r.target...)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, r.host...)
	b = append(b, "\r\nContent-Type: application/octet-stream\r\n"...)
	var err error
	field := func(b []byte, name, value string) []byte {
		if !validHeaderValue(value) {
			err = errHeaderValue{name}
			return b
		}
		b = append(b, name...)
		b = append(b, ": "...)
		b = append(b, trimHeaderValue(value)...)
		return append(b, "\r\n"...)
	}
	b = field(b, "User-Agent", r.userAgent)
	b = field(b, canonicalTaskID, cb.TaskID)
	b = field(b, canonicalHandler, cb.Handler)
	b = append(append(b, canonicalAttempt...), ": "...)
	b = append(strconv.AppendInt(b, int64(cb.Attempt), 10), "\r\n"...)
	b = append(append(b, canonicalRun...), ": "...)
	b = append(strconv.AppendInt(b, int64(cb.Run), 10), "\r\n"...)
	if !cb.Deadline.IsZero() {
		b = append(append(b, canonicalDeadline...), ": "...)
		b = append(cb.Deadline.UTC().AppendFormat(b, DeadlineFormat), "\r\n"...)
	}
	if cb.ShardTotal > 0 {
		b = append(append(b, canonicalShardIndex...), ": "...)
		b = append(strconv.AppendInt(b, int64(cb.ShardIndex), 10), "\r\n"...)
		b = append(append(b, canonicalShardTotal...), ": "...)
		b = append(strconv.AppendInt(b, int64(cb.ShardTotal), 10), "\r\n"...)
	}
	// The traceparent is written by axapi (valid by construction).
	b = append(append(b, canonicalTraceParent...), ": "...)
	b = append(axapi.CallbackTraceParent(b, cb.TraceParent, cb.TaskID, cb.Run, cb.Attempt), "\r\n"...)
	if cb.TraceState != "" {
		b = field(b, canonicalTraceState, cb.TraceState)
	}
	b = append(b, "Content-Length: "...)
	b = strconv.AppendInt(b, int64(len(cb.Payload)), 10)
	return append(b, "\r\n\r\n"...), err
}

// answer is an executor's answer: its status and headers, and its body,
// at most bodyMax bytes (truncated: it had more).
type answer struct {
	resp      *http.Response
	body      []byte
	truncated bool
}

// roundTrip sends r on a connection of p and reads the answer, its body up
// to bodyMax bytes. ctx's end, or deadline (zero: none) on the wall
// clock, aborts it with the error of the connection's deadline. The
// exchange says which connection it used and how many bytes it had sent
// before (tr), for the classification of an error.
func (p *pool) roundTrip(ctx context.Context, deadline time.Time, r *request, bodyMax int64, tr *sendTrace) (answer, error) {
	// first is the try on a kept-alive connection that the executor
	// closed without an answer, when the request is sent again on a new
	// connection (see below).
	var first *unansweredTry
	for {
		*tr = sendTrace{} // a dial that fails says nothing of a connection tried before
		var cc *clientConn
		if first == nil {
			cc = p.get()
		}
		reused := cc != nil
		if cc == nil {
			var err error
			if cc, err = p.dial(ctx, deadline); err != nil {
				if first != nil {
					// The executor is not there to take the request
					// again: the first try's error stands, with its
					// connection (the request was sent on it, so the
					// attempt counts: an executor that dies on a task
					// cannot keep its attempts from being counted).
					*tr = first.trace
					return answer{}, first.err
				}
				return answer{}, err
			}
		}
		*tr = sendTrace{conn: cc.ec, base: cc.ec.written.Load(), gotAt: time.Now()}
		a, err, keep := p.exchange(ctx, deadline, cc, r, bodyMax)
		if err == nil {
			if keep {
				p.put(cc)
			} else {
				_ = cc.ec.Close()
			}
			return a, nil
		}
		if errors.Is(err, errHeaderValue{}) {
			// Refused before a byte was written: the connection stays
			// good, and the request had none (as net/http's Transport
			// refuses it before taking a connection).
			p.put(cc)
			*tr = sendTrace{}
			return answer{}, err
		}
		_ = cc.ec.Close()
		if reused && ctx.Err() == nil && (deadline.IsZero() || time.Now().Before(deadline)) && cc.ec.written.Load() == tr.base {
			// Not one byte of the request went out on a kept-alive
			// connection (the executor closed it as it was taken):
			// another one, as net/http's Transport does; not once the
			// deadline has passed (that write failed by the deadline,
			// and so would every other connection's).
			continue
		}
		if reused && first == nil && ctx.Err() == nil && (deadline.IsZero() || time.Now().Before(deadline)) && errors.As(err, new(closedUnanswered)) {
			// The whole request went out on a kept-alive connection and
			// the executor closed it without a byte of answer: it most
			// likely closed the connection as idle (its keep-alive
			// time-out) while the request was on its way. The request
			// goes once more, on a new connection, as net/http's
			// Transport sends a request with an Idempotency-Key again
			// after a reused connection's "server closed idle
			// connection"; the executor may see this (task, attempt)
			// twice, which at-least-once delivery allows.
			first = &unansweredTry{err: err, trace: *tr}
			continue
		}
		return answer{}, err
	}
}

// unansweredTry is a try that a kept-alive connection's close ended
// before any answer (roundTrip sends the request again on a new one).
type unansweredTry struct {
	err   error
	trace sendTrace
}

// closedUnanswered wraps the error of an exchange whose request was
// written whole and whose connection then ended (EOF or a reset) before
// a byte of the answer came. It reads as the error it wraps.
type closedUnanswered struct{ err error }

func (e closedUnanswered) Error() string { return e.err.Error() }
func (e closedUnanswered) Unwrap() error { return e.err }

// endedUnanswered reports whether err, from reading an answer of which
// no byte came, is the connection's end: the peer's close (EOF) or reset.
func endedUnanswered(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// Is makes errors.Is(err, errHeaderValue{}) match any header value error.
func (e errHeaderValue) Is(target error) bool {
	_, ok := target.(errHeaderValue)
	return ok
}

// exchange writes r on cc and reads the answer; keep says cc may be
// reused (the answer read to its end, no Connection: close, not aborted).
func (p *pool) exchange(ctx context.Context, deadline time.Time, cc *clientConn, r *request, bodyMax int64) (a answer, err error, keep bool) {
	if cc.buf, err = appendRequest(cc.buf[:0], r); err != nil {
		return answer{}, err, false
	}
	if !deadline.IsZero() {
		_ = cc.ec.SetDeadline(deadline)
	}
	stop := func() bool { return true }
	if ctx.Done() != nil {
		stop = context.AfterFunc(ctx, func() { _ = cc.ec.SetDeadline(aLongTimeAgo) })
	}
	defer func() {
		if !stop() {
			keep = false // ctx ended: the connection's deadline was set meanwhile
		}
		if keep && !deadline.IsZero() {
			_ = cc.ec.SetDeadline(time.Time{})
		}
	}()
	body := r.cb.Payload
	if len(cc.buf)+len(body) <= connBufSize {
		cc.buf, body = append(cc.buf, body...), nil
	}
	before := cc.ec.written.Load()
	if _, err = cc.ec.Write(cc.buf); err == nil && len(body) > 0 {
		_, err = cc.ec.Write(body)
	}
	if err != nil {
		if cc.ec.written.Load() > before && ctx.Err() == nil {
			// The executor may have answered before taking the whole
			// request (a 413 to a large payload) and closed: its answer,
			// when it is there, decides, as net/http's Transport has it.
			wait := time.Now().Add(earlyAnswerWait)
			if !deadline.IsZero() && deadline.Before(wait) {
				wait = deadline
			}
			_ = cc.ec.SetReadDeadline(wait)
			if resp, rerr := readAnswer(cc); rerr == nil {
				a, _ = readBody(resp, cc.br, bodyMax)
				return a, nil, false
			}
		}
		return answer{}, err, false
	}
	readBefore := cc.ec.read.Load()
	resp, err := readAnswer(cc)
	if err != nil {
		if cc.ec.read.Load() == readBefore && endedUnanswered(err) {
			err = closedUnanswered{err}
		}
		return answer{}, err, false
	}
	a, keep = readBody(resp, cc.br, bodyMax)
	return a, nil, keep
}

// earlyAnswerWait bounds the wait for an executor's answer once writing
// the request to it failed (it may have answered first).
const earlyAnswerWait = 50 * time.Millisecond

// readBody reads resp's body, at most bodyMax bytes, from br; keep says
// the connection may carry another request (the body read to its end,
// no Connection: close, nothing more sent).
func readBody(resp *http.Response, br *bufio.Reader, bodyMax int64) (a answer, keep bool) {
	a.resp = resp
	keep = !resp.Close
	if resp.Body != http.NoBody {
		// An error while reading the body leaves the answer as read so far
		// (its status stands), on a connection not reused.
		b, rerr := io.ReadAll(io.LimitReader(resp.Body, bodyMax+1))
		if rerr != nil || int64(len(b)) > bodyMax {
			keep = false // not read to its end: the connection cannot carry another request
		}
		a.body, a.truncated = b, int64(len(b)) > bodyMax
		if rerr == nil && !a.truncated {
			_ = resp.Body.Close() // at its end: nothing left to read
		}
	}
	if br.Buffered() > 0 {
		keep = false // the executor sent more than its answer
	}
	if declaresForbiddenBody(resp) {
		keep = false
	}
	return a, keep
}

// declaresForbiddenBody reports whether resp is a 204 or 304 whose headers
// declare a body (a Content-Length other than 0, or chunked). Such an
// answer ends with its headers (RFC 9110 15.3.5, 15.4.5), so the body is
// not read; but an executor that declares one may send it (Python's
// http.server writes whatever its handler writes), and late enough (a
// second small write that Nagle's algorithm holds until our next segment)
// that neither Buffered nor the peek before reuse sees it: the next
// callback on the connection would read those bytes as the start of its
// answer and fail, after the executor ran it.
func declaresForbiddenBody(resp *http.Response) bool {
	if resp.StatusCode != http.StatusNoContent && resp.StatusCode != http.StatusNotModified {
		return false
	}
	if len(resp.TransferEncoding) > 0 {
		return true
	}
	cl := resp.Header.Get("Content-Length")
	return cl != "" && strings.TrimSpace(cl) != "0"
}

// maxAnswerHeaderBytes bounds the status line and headers of an answer
// (with the informational answers before it), as net/http's Transport
// bounds them (MaxResponseHeaderBytes, 10 MiB by default): an executor
// that sends headers without end fails its callback, not the node.
const maxAnswerHeaderBytes = 1 << 20

// noCap is a capReader's budget while a body is read (bounded by its
// own limit).
const noCap = 1 << 62

// errAnswerHeaderTooLarge is the error of an answer whose headers pass
// maxAnswerHeaderBytes.
var errAnswerHeaderTooLarge = errors.New("executor's answer headers exceed 1 MiB")

// capReader reads from r until its budget n ends, then fails.
type capReader struct {
	r io.Reader
	n int64
}

func (c *capReader) Read(p []byte) (int, error) {
	if c.n <= 0 {
		return 0, errAnswerHeaderTooLarge
	}
	if int64(len(p)) > c.n {
		p = p[:c.n]
	}
	n, err := c.r.Read(p)
	c.n -= int64(n)
	return n, err
}

// readAnswer reads an answer on cc, skipping informational ones (1xx but
// 101), at most maxInformational of them, as net/http's Transport does;
// their headers read at most maxAnswerHeaderBytes from the connection.
func readAnswer(cc *clientConn) (*http.Response, error) {
	const maxInformational = 5
	cc.lim.n = maxAnswerHeaderBytes
	defer func() { cc.lim.n = noCap }()
	for i := 0; ; i++ {
		resp, err := http.ReadResponse(cc.br, nil)
		if err != nil {
			return nil, err
		}
		if resp.StatusCode < 100 || resp.StatusCode > 199 || resp.StatusCode == http.StatusSwitchingProtocols || i == maxInformational {
			if resp.StatusCode == http.StatusSwitchingProtocols {
				resp.Close = true // the connection is no longer HTTP
			}
			return resp, nil
		}
	}
}

// aLongTimeAgo is a deadline in the past: set on a connection, it ends
// its reads and writes at once.
var aLongTimeAgo = time.Unix(1, 0)
