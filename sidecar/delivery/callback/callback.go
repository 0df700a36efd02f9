package callback

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/axsched/ax/clients/go/axapi"
	"github.com/axsched/ax/engine"
	"github.com/axsched/ax/raftfsm"
)

// The callback contract (path, headers, deadline layout) is the wire
// contract's (clients/go/axapi, docs/DESIGN.md section 5); these names keep
// the package's callers short.
const (
	// ExecutePath is the path of the callback, appended to an executor's
	// base URL.
	ExecutePath    = axapi.ExecutePath
	HeaderTaskID   = axapi.HeaderTaskID
	HeaderHandler  = axapi.HeaderHandler
	HeaderAttempt  = axapi.HeaderAttempt
	HeaderRun      = axapi.HeaderRun
	HeaderDeadline = axapi.HeaderDeadline
	// HeaderTraceParent and HeaderTraceState are W3C Trace Context's
	// (lowercase on the wire's spelling; HTTP header names are
	// case-insensitive).
	HeaderTraceParent = axapi.HeaderTraceParent
	HeaderTraceState  = axapi.HeaderTraceState
	// HeaderShardIndex and HeaderShardTotal are sent on a shard task's
	// callbacks (Callback.ShardTotal > 0).
	HeaderShardIndex = axapi.HeaderShardIndex
	HeaderShardTotal = axapi.HeaderShardTotal
	// ShardsPath is where a sharded task in ask mode asks the executor
	// for its run's shard count (Callback.Path).
	ShardsPath = axapi.ShardsPath
	// DeadlineFormat is the layout of the Ax-Deadline header: RFC 3339 in
	// UTC with milliseconds ("2026-11-30T11:25:00.250Z").
	DeadlineFormat = axapi.DeadlineFormat
)

var (
	canonicalTraceParent = http.CanonicalHeaderKey(HeaderTraceParent)
	canonicalTraceState  = http.CanonicalHeaderKey(HeaderTraceState)
	canonicalTaskID      = http.CanonicalHeaderKey(HeaderTaskID)
	canonicalHandler     = http.CanonicalHeaderKey(HeaderHandler)
	canonicalAttempt     = http.CanonicalHeaderKey(HeaderAttempt)
	canonicalRun         = http.CanonicalHeaderKey(HeaderRun)
	canonicalDeadline    = http.CanonicalHeaderKey(HeaderDeadline)
	canonicalShardIndex  = http.CanonicalHeaderKey(HeaderShardIndex)
	canonicalShardTotal  = http.CanonicalHeaderKey(HeaderShardTotal)
)

// Caller defaults (see CallerOptions).
const (
	// DialTimeoutDefault bounds a connect to an executor. An executor runs
	// on the same host (a Unix socket or loopback TCP), where a connect
	// takes well under a millisecond; one that takes 500 ms had its SYN
	// dropped by a full accept queue (the kernel sends it again only
	// after 1 s, then 3 s…): the executor is overloaded, and the
	// callback is classified raftfsm.OutcomeUnavailable, Overloaded.
	DialTimeoutDefault = 500 * time.Millisecond
	// UnackedTimeoutDefault is the TCP_USER_TIMEOUT of a TCP connection to
	// an executor (Linux): a request its kernel has not acknowledged for
	// this long ends the connection (see CallerOptions.UnackedTimeout).
	UnackedTimeoutDefault          = 500 * time.Millisecond
	IdleConnTimeoutDefault         = 90 * time.Second
	MaxIdleConnsPerExecutorDefault = 64
	// errorBodyMaxBytes is how much of an executor's reply is read: a
	// success's body is the run's result (raftfsm.ResultMaxBytes).
	errorBodyMaxBytes = raftfsm.ResultMaxBytes
	// errorTextMaxRunes is how much of it goes into Outcome.Error.
	errorTextMaxRunes = 200
	// unixPathMax is the size of sun_path on Linux, terminating NUL included.
	unixPathMax = 108
)

// Callback is one attempt to deliver, as the sidecar hands it to Execute.
type Callback struct {
	TaskID  string // sent as Ax-Task-Id
	Handler string // sent as Ax-Handler
	Attempt int    // sent as Ax-Attempt: 1 for the first attempt of a run
	Run     int    // sent as Ax-Run: 1 for the first run of a task
	// Deadline ends the attempt: Execute aborts the request when it passes,
	// and sends it as Ax-Deadline. Zero means no deadline (ctx only).
	Deadline time.Time
	// Payload is sent byte for byte as the request body.
	Payload []byte
	// TraceParent is the traceparent the task was submitted with, "" for
	// none, and TraceState its tracestate: the callback carries a
	// traceparent with the task's trace id and flags and the attempt's own
	// parent id (axapi.CallbackTraceParent: derived from TaskID, Run and
	// Attempt, so the same attempt delivered again carries the same one),
	// and the tracestate unchanged when there is one.
	TraceParent, TraceState string
	// ShardIndex (from 0) and ShardTotal, when ShardTotal > 0, are sent
	// as Ax-Shard-Index and Ax-Shard-Total: the callback of a shard task.
	ShardIndex, ShardTotal int
	// Path replaces ExecutePath on the executor's base URL when set
	// (ShardsPath: the shard-count question of a sharded task).
	Path string
	// MaxIdleConns is how many idle connections to keep to this executor
	// (its concurrency limit, so that a burst reuses them instead of
	// dialling again); 0 means CallerOptions.MaxIdleConnsPerExecutor.
	// A change applies at once: the idle connections beyond it are closed.
	MaxIdleConns int
}

// Outcome is the result of one Execute.
type Outcome struct {
	// Kind is how the attempt ended (the status classes: ipc package doc).
	Kind raftfsm.Outcome
	// Status is the HTTP status of the executor's answer; 0 when there was
	// none (timeout, connection error, cancel).
	Status int
	// RetryAfter is the executor's Retry-After (seconds or HTTP date), zero
	// when absent or invalid.
	RetryAfter time.Duration
	// Error describes a failure for Task.LastError: "http 500: boom",
	// "timeout after 1s", "dial unix /run/app.sock: connect: no such file or
	// directory". Empty on success. Never holds more than 200 characters of
	// the executor's body.
	Error string
	// Duration is how long Execute took.
	Duration time.Duration
	// Service is the executor's part of Duration: from the moment a
	// connection was ready (an idle one reused, or a new one connected)
	// to the answer read. The connect wait is not in it, so a slow
	// connect (a full accept queue) is not mistaken for a slow executor.
	// Zero when no connection was had.
	Service time.Duration
	// Overloaded, with raftfsm.OutcomeUnavailable, says the executor is there but
	// did not take the connection: EAGAIN (a Unix socket's accept queue
	// is full), a connect that timed out (a TCP SYN dropped), a reset
	// before the request was sent, or a TCP request left unacknowledged.
	// False with raftfsm.OutcomeUnavailable means absent: connection refused, no
	// socket file, any other connect error.
	Overloaded bool
	// Connect is the part of Duration spent before a connection was
	// ready (dialling, or waiting for an idle one); zero when no
	// connection was had.
	Connect time.Duration
	// Body is a 2xx answer's body, at most raftfsm.ResultMaxBytes;
	// BodyTruncated says the executor sent more. Nil for other answers.
	Body          []byte
	BodyTruncated bool
}

// CallerOptions configures a Caller. The zero value gives the defaults.
type CallerOptions struct {
	// DialTimeout bounds connecting to an executor.
	// Defaults to DialTimeoutDefault (5s).
	DialTimeout time.Duration
	// IdleConnTimeout closes kept-alive connections to an executor idle
	// for this long. Defaults to IdleConnTimeoutDefault (90s).
	IdleConnTimeout time.Duration
	// MaxIdleConnsPerExecutor is how many idle connections are kept per
	// executor for reuse, unless Callback.MaxIdleConns says otherwise.
	// Defaults to MaxIdleConnsPerExecutorDefault (64).
	MaxIdleConnsPerExecutor int
	// UnackedTimeout is the TCP_USER_TIMEOUT set on TCP connections to
	// executors (Linux only; elsewhere it is not set): when request bytes
	// stay unacknowledged by the executor's kernel this long, the kernel
	// ends the connection, and if none of the request was acknowledged
	// the callback is raftfsm.OutcomeUnavailable (Overloaded). That happens when
	// the executor's accept queue was full as the connection completed:
	// the client's connect succeeds, but the server drops the handshake's
	// last ACK and the data after it until it has room. It does not bound
	// a callback's running time (an acknowledged request has nothing
	// unacknowledged while the answer is awaited). Defaults to
	// UnackedTimeoutDefault (500 ms); negative turns it off.
	UnackedTimeout time.Duration
	// UserAgent is sent as User-Agent. Defaults to "ax".
	UserAgent string
	// Clock, when set to a clock other than engine.RealClock() (a test's
	// engine.FakeClock, through the node's Config.Clock), is the clock of
	// Callback.Deadline: the request is aborted when a timer on it fires,
	// not at a context deadline on the wall clock. Nil: the wall clock.
	// Connection time-outs (DialTimeout, UnackedTimeout) and
	// Outcome.Duration stay on the wall clock: they measure real
	// connections and round trips.
	Clock engine.Clock
}

// WithDefaults returns a copy of o with zero fields set to their defaults.
func (o CallerOptions) WithDefaults() CallerOptions {
	if o.DialTimeout <= 0 {
		o.DialTimeout = DialTimeoutDefault
	}
	if o.UnackedTimeout == 0 {
		o.UnackedTimeout = UnackedTimeoutDefault
	}
	if o.IdleConnTimeout <= 0 {
		o.IdleConnTimeout = IdleConnTimeoutDefault
	}
	if o.MaxIdleConnsPerExecutor <= 0 {
		o.MaxIdleConnsPerExecutor = MaxIdleConnsPerExecutorDefault
	}
	if o.UserAgent == "" {
		o.UserAgent = "ax"
	}
	if o.Clock == engine.RealClock() {
		o.Clock = nil
	}
	return o
}

// Caller delivers attempts to executors over HTTP (docs/DESIGN.md section 5).
// It keeps one connection pool per executor address. It is safe for
// concurrent use; it does not limit concurrency (the sidecar's adaptive
// limiter does).
type Caller struct {
	opts CallerOptions

	mu sync.Mutex
	// pools holds the callbacks' connections per executor address
	// (conn.go); clients the net/http clients of the alerts (PostAlert).
	pools   map[endpointKey]*pool
	clients map[endpointKey]*endpointClient
	urls    map[string]executorURL // executorURL's cache
}

// endpointClient is the HTTP client of one executor address and the idle
// connections it keeps.
type endpointClient struct {
	*http.Client
	maxIdle int
}

type endpointKey struct{ network, address string }

// NewCaller returns a Caller.
func NewCaller(opts CallerOptions) *Caller {
	return &Caller{opts: opts.WithDefaults(), pools: make(map[endpointKey]*pool), clients: make(map[endpointKey]*endpointClient), urls: make(map[string]executorURL)}
}

// Close closes the idle connections of every executor. Requests in flight
// are not affected; the Caller remains usable.
func (c *Caller) Close() {
	c.mu.Lock()
	clients, pools := c.clients, c.pools
	c.clients, c.pools = make(map[endpointKey]*endpointClient), make(map[endpointKey]*pool)
	c.mu.Unlock()
	for _, cl := range clients {
		cl.CloseIdleConnections()
	}
	for _, p := range pools {
		p.closeIdle()
	}
}

// client returns the net/http client of one address (the alerts'), keeping maxIdle
// idle connections (0: the default), creating it once per address and
// count: a new count replaces the pool (the old one's idle connections are
// closed; its requests in flight finish).
func (c *Caller) client(k endpointKey, maxIdle int) *http.Client {
	if maxIdle <= 0 {
		maxIdle = c.opts.MaxIdleConnsPerExecutor
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if cl, ok := c.clients[k]; ok {
		if cl.maxIdle == maxIdle {
			return cl.Client
		}
		cl.CloseIdleConnections()
	}
	dialer := &net.Dialer{Timeout: c.opts.DialTimeout}
	if k.network == "tcp" && c.opts.UnackedTimeout > 0 {
		dialer.Control = setUnackedTimeout(c.opts.UnackedTimeout)
	}
	tr := &http.Transport{
		// Whatever host the URL names, dial the executor's own address.
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			conn, err := dialRetrying(ctx, dialer, k.network, k.address, c.opts.DialTimeout)
			if err != nil {
				return nil, err
			}
			return newExecConn(conn), nil
		},
		Proxy:               nil, // never through a proxy, whatever the environment says
		MaxIdleConnsPerHost: maxIdle,
		IdleConnTimeout:     c.opts.IdleConnTimeout,
		DisableCompression:  true,
	}
	cl := &http.Client{
		Transport: tr,
		// A redirect is an answer of its own, never followed.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	c.clients[k] = &endpointClient{Client: cl, maxIdle: maxIdle}
	return cl
}

// Execute delivers cb to the executor at baseURL (see ParseExecutorURL): it
// POSTs the payload, byte for byte, to baseURL + ExecutePath (or cb.Path)
// with headers Ax-Task-Id, Ax-Handler, Ax-Attempt, Ax-Run, Ax-Deadline
// (DeadlineFormat, when cb.Deadline is set), Ax-Shard-Index and
// Ax-Shard-Total (a shard's callback), traceparent (always; see
// Callback.TraceParent), tracestate (when the task has one) and Content-Type:
// application/octet-stream, and
// classifies the answer. Cancelling ctx, or reaching cb.Deadline or ctx's
// deadline, aborts the request in flight (the executor sees its request
// context end) and gives raftfsm.OutcomeCancelled or raftfsm.OutcomeTimeout.
//
// Execute never retries a request the executor may have received (one that
// wrote no byte to a kept-alive connection goes to another); it reads at
// most 1 MiB of the answer's headers and 64 KiB of its body.
func (c *Caller) Execute(ctx context.Context, baseURL string, cb Callback) Outcome {
	start := time.Now()
	parent := ctx
	out := c.execute(ctx, parent, start, baseURL, cb)
	out.Duration = time.Since(start)
	if out.Service > 0 {
		out.Connect = max(0, out.Duration-out.Service)
	}
	return out
}

func (c *Caller) execute(ctx, parent context.Context, start time.Time, baseURL string, cb Callback) Outcome {
	ep, err := c.executorURL(baseURL)
	if err != nil {
		return Outcome{Kind: raftfsm.OutcomeRetryable, Error: err.Error()}
	}
	if c.opts.Clock != nil {
		start = c.opts.Clock.Now() // the deadline's clock
	}
	if !cb.Deadline.IsZero() {
		if !cb.Deadline.After(start) {
			return Outcome{Kind: raftfsm.OutcomeTimeout, Error: "timeout: the deadline passed before the callback started"}
		}
		if c.opts.Clock != nil {
			var cancel context.CancelFunc
			ctx, cancel = c.withDeadline(ctx, cb.Deadline)
			defer cancel()
		}
	}
	if ctx.Err() != nil {
		return aborted(ctx, parent, start, cb.Deadline)
	}

	target := ep.path + ExecutePath
	if cb.Path != "" {
		target = ep.path + cb.Path
	}
	// The headers are written by appendRequest straight into the
	// connection's buffer (not built here: a smaller frame for the
	// attempt's goroutine, whose stack would grow to hold it).
	req := request{host: ep.host, target: target, userAgent: c.opts.UserAgent, cb: &cb}

	// On the wall clock the deadline is the connection's (no timer of a
	// context per callback); on another clock, ctx's (withDeadline).
	var connDeadline time.Time
	if c.opts.Clock == nil {
		connDeadline = cb.Deadline
	}
	var tr sendTrace
	a, err := c.pool(endpointKey{ep.network, ep.address}, cb.MaxIdleConns).roundTrip(ctx, connDeadline, &req, errorBodyMaxBytes, &tr)
	if err != nil {
		// Past the deadline any error is the timeout's: a write or read
		// cut by the connection's deadline, or a dial cut by the dial's
		// context (which is not os.ErrDeadlineExceeded).
		if ctx.Err() != nil || !connDeadline.IsZero() && !time.Now().Before(connDeadline) {
			return aborted(ctx, parent, start, cb.Deadline)
		}
		out := Outcome{Kind: raftfsm.OutcomeRetryable, Error: err.Error(), Service: tr.service()}
		if unavailable, overloaded := tr.notSent(err); unavailable {
			out.Kind, out.Overloaded = raftfsm.OutcomeUnavailable, overloaded
			out.Error = "executor unavailable: " + out.Error
		}
		return out
	}
	resp, body := a.resp, a.body

	out := Outcome{Status: resp.StatusCode, RetryAfter: parseRetryAfter(resp.Header.Get("Retry-After"), time.Now()), Service: tr.service()}
	switch s := resp.StatusCode; {
	case s == http.StatusAccepted:
		out.Kind = raftfsm.OutcomeAccepted
	case s >= 200 && s < 300:
		out.Kind = raftfsm.OutcomeSuccess
	case s == http.StatusTooManyRequests || s == http.StatusServiceUnavailable:
		out.Kind = raftfsm.OutcomeBusy
	case s >= 400 && s < 500:
		out.Kind = raftfsm.OutcomePermanent
	default: // 5xx, 1xx, 3xx
		out.Kind = raftfsm.OutcomeRetryable
	}
	if out.Kind != raftfsm.OutcomeSuccess && out.Kind != raftfsm.OutcomeAccepted {
		out.Error = httpErrorText(resp.StatusCode, body[:min(len(body), errorBodyMaxBytes)])
	} else if out.Kind == raftfsm.OutcomeSuccess && len(body) > 0 {
		out.Body, out.BodyTruncated = body, a.truncated
		if out.BodyTruncated {
			out.Body = body[:errorBodyMaxBytes]
		}
	}
	return out
}

// executorURL is parseExecutorURL of the base URLs seen, kept (a node
// has a few executors; at most urlCacheMax are kept).
func (c *Caller) executorURL(s string) (executorURL, error) {
	c.mu.Lock()
	ep, ok := c.urls[s]
	c.mu.Unlock()
	if ok {
		return ep, nil
	}
	ep, err := parseExecutorURL(s)
	if err != nil {
		return ep, err
	}
	c.mu.Lock()
	if len(c.urls) >= urlCacheMax {
		clear(c.urls)
	}
	c.urls[s] = ep
	c.mu.Unlock()
	return ep, nil
}

// urlCacheMax bounds the parsed executor URLs a Caller keeps.
const urlCacheMax = 1024

// withDeadline is context.WithDeadline on the Caller's clock
// (CallerOptions.Clock, not nil): a timer on it that cancels the context
// with the cause context.DeadlineExceeded. On the wall clock the deadline
// is the connection's (pool.roundTrip).
func (c *Caller) withDeadline(ctx context.Context, deadline time.Time) (context.Context, context.CancelFunc) {
	dctx, cancel := context.WithCancelCause(ctx)
	t := c.opts.Clock.NewTimer(deadline.Sub(c.opts.Clock.Now()))
	go func() {
		select {
		case <-t.C():
			cancel(context.DeadlineExceeded)
		case <-dctx.Done():
			t.Stop()
		}
	}()
	return dctx, func() { cancel(context.Canceled) }
}

// aborted describes a request ended by ctx: cancelled by the caller
// (parent), or past its deadline (the earlier of deadline, when set, and
// ctx's own), measured from start.
func aborted(ctx, parent context.Context, start, deadline time.Time) Outcome {
	if errors.Is(parent.Err(), context.Canceled) {
		return Outcome{Kind: raftfsm.OutcomeCancelled, Error: "cancelled"}
	}
	if d, ok := ctx.Deadline(); ok && (deadline.IsZero() || d.Before(deadline)) {
		deadline = d
	}
	return Outcome{Kind: raftfsm.OutcomeTimeout, Error: "timeout after " + roughly(deadline.Sub(start)).String()}
}

// roughly rounds d to about two significant digits, so that a deadline set
// a moment before Execute started still reads "1s", not "999.87ms".
func roughly(d time.Duration) time.Duration {
	switch {
	case d <= 0:
		return 0
	case d < time.Second:
		return d.Round(10 * time.Millisecond)
	case d < time.Minute:
		return d.Round(100 * time.Millisecond)
	default:
		return d.Round(time.Second)
	}
}

// httpErrorText renders "http 500: <first 200 characters of the body>", or
// the status text when the body is empty.
func httpErrorText(status int, body []byte) string {
	text := strings.TrimSpace(strings.ToValidUTF8(string(body), "\uFFFD"))
	if text == "" {
		text = http.StatusText(status)
	}
	if utf8.RuneCountInString(text) > errorTextMaxRunes {
		n := 0
		for i := range text {
			if n == errorTextMaxRunes {
				text = text[:i]
				break
			}
			n++
		}
	}
	return fmt.Sprintf("http %d: %s", status, text)
}

// retryAfterMax bounds a Retry-After, in either form: an executor's
// answer cannot snooze a task for longer than a day at a time.
const retryAfterMax = 24 * time.Hour

// parseRetryAfter reads a Retry-After value: delay in seconds or an HTTP
// date, at most retryAfterMax; 0 when absent, invalid or in the past.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n <= 0 {
			return 0
		}
		if n > int64(retryAfterMax/time.Second) {
			n = int64(retryAfterMax / time.Second)
		}
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(now); d > 0 {
			// A date far ahead (a maintenance page's "Fri, 31 Dec 9999")
			// snoozed the task until then.
			return min(d, retryAfterMax)
		}
	}
	return 0
}

// executorURL is a parsed executor base URL.
type executorURL struct {
	network, address string
	url              string // full URL of the callback
	base             string // the URL to append a path to (webhook.go)
	host             string // the Host header of its requests
	path             string // the path prefix to append a path to, "" for none
}

// ParseExecutorURL checks an executor base URL and returns the network and
// address to dial:
//
//	unix:///abs/path/to.sock      → "unix", "/abs/path/to.sock"
//	http://127.0.0.1:8080         → "tcp", "127.0.0.1:8080"
//	http://localhost:8080/app     → "tcp", "localhost:8080" (callbacks go to /app/ax/v1/execute)
//
// A Unix socket path must be absolute. An http URL must name a loopback
// address (127.0.0.0/8, ::1 or localhost) and a port: executors run in the
// same pod. https, user info, query and fragment are refused.
func ParseExecutorURL(s string) (network, address string, err error) {
	ep, err := parseExecutorURL(s)
	if err != nil {
		return "", "", err
	}
	return ep.network, ep.address, nil
}

func parseExecutorURL(s string) (executorURL, error) { return parseBaseURL("executor url", s) }

// parseBaseURL parses an executor-style base URL (ParseExecutorURL); what
// names the URL in its errors ("executor url").
func parseBaseURL(what, s string) (executorURL, error) {
	bad := func(format string, args ...any) (executorURL, error) {
		return executorURL{}, fmt.Errorf("%s %q: %s", what, s, fmt.Sprintf(format, args...))
	}
	u, err := url.Parse(s)
	if err != nil {
		return bad("%v", err)
	}
	if u.User != nil || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || u.Opaque != "" {
		return bad("want unix:///path/to.sock or http://127.0.0.1:PORT, without user, query or fragment")
	}
	switch u.Scheme {
	case "unix":
		if u.Host != "" {
			return bad("the socket path must be absolute: unix:///path/to.sock")
		}
		if !filepath.IsAbs(u.Path) {
			return bad("the socket path must be absolute: unix:///path/to.sock")
		}
		if len(u.Path) >= unixPathMax {
			return bad("socket path is %d bytes, the limit is %d", len(u.Path), unixPathMax-1)
		}
		return executorURL{network: "unix", address: u.Path, url: "http://localhost" + ExecutePath, base: "http://localhost", host: "localhost"}, nil
	case "http":
		host, port, err := net.SplitHostPort(u.Host)
		if err != nil {
			return bad("want http://127.0.0.1:PORT (a port is required)")
		}
		if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
			return bad("port %q is not a number from 1 to 65535", port)
		}
		if ip := net.ParseIP(host); !(host == "localhost" || ip != nil && ip.IsLoopback()) {
			return bad("host %q is not a loopback address (127.0.0.1, ::1, localhost)", host)
		}
		prefix := strings.TrimRight(u.EscapedPath(), "/")
		return executorURL{network: "tcp", address: u.Host, url: "http://" + u.Host + prefix + ExecutePath, base: "http://" + u.Host + prefix, host: u.Host, path: prefix}, nil
	case "":
		return bad("missing scheme: want unix:///path/to.sock or http://127.0.0.1:PORT")
	default:
		return bad("scheme %q is not supported: want unix or http", u.Scheme)
	}
}
