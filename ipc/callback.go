package ipc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// ExecutePath is the path of the callback, appended to an executor's base URL.
const ExecutePath = "/ax/v1/execute"

// Callback headers (DESIGN.md section 5).
const (
	HeaderTaskID   = "Ax-Task-Id"
	HeaderHandler  = "Ax-Handler"
	HeaderAttempt  = "Ax-Attempt"
	HeaderRun      = "Ax-Run"
	HeaderDeadline = "Ax-Deadline"
)

// DeadlineFormat is the layout of the Ax-Deadline header: RFC 3339 in UTC
// with milliseconds ("2026-11-30T11:25:00.250Z").
const DeadlineFormat = "2006-01-02T15:04:05.000Z07:00"

// Caller defaults (see CallerOptions).
const (
	DialTimeoutDefault             = 5 * time.Second
	IdleConnTimeoutDefault         = 90 * time.Second
	MaxIdleConnsPerExecutorDefault = 64
	// errorBodyMaxBytes is how much of an executor's reply is read.
	errorBodyMaxBytes = 64 << 10
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
}

// OutcomeKind classifies how an attempt ended, which decides what the leader
// does next (DESIGN.md sections 4 and 5).
type OutcomeKind int

const (
	// OutcomeSuccess: the executor answered 2xx other than 202. The run is
	// done.
	OutcomeSuccess OutcomeKind = iota + 1
	// OutcomeAccepted: the executor answered 202; it will report the result
	// itself through POST /v1/tasks/{id}/result.
	OutcomeAccepted
	// OutcomeBusy: the executor answered 429 or 503 (Outcome.RetryAfter from
	// its Retry-After header). Not a failed attempt; the limiter backs off.
	OutcomeBusy
	// OutcomePermanent: the executor answered another 4xx: do not retry
	// (the task becomes FAILED).
	OutcomePermanent
	// OutcomeRetryable: 5xx, any other unexpected status, a connection
	// error or an invalid executor URL: a failed attempt, retried with
	// backoff.
	OutcomeRetryable
	// OutcomeTimeout: the deadline (Callback.Deadline or ctx's) passed
	// before the executor answered; the request was aborted. A failed
	// attempt.
	OutcomeTimeout
	// OutcomeCancelled: ctx was cancelled (the task was cancelled or the
	// node is stopping); the request was aborted. Nothing is known about
	// the attempt.
	OutcomeCancelled
)

var outcomeNames = [...]string{
	OutcomeSuccess:   "success",
	OutcomeAccepted:  "accepted",
	OutcomeBusy:      "busy",
	OutcomePermanent: "permanent",
	OutcomeRetryable: "retryable",
	OutcomeTimeout:   "timeout",
	OutcomeCancelled: "cancelled",
}

// String returns the lower-case name of k ("success"), for logs and metrics.
func (k OutcomeKind) String() string {
	if k > 0 && int(k) < len(outcomeNames) {
		return outcomeNames[k]
	}
	return "unknown(" + strconv.Itoa(int(k)) + ")"
}

// Outcome is the result of one Execute.
type Outcome struct {
	Kind OutcomeKind
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
	// Unreachable is set when the executor could not be connected to at
	// all (its socket is missing or refuses): the request never reached
	// it, so the callback certainly did not run.
	Unreachable bool
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
	// executor for reuse. Defaults to MaxIdleConnsPerExecutorDefault (64).
	MaxIdleConnsPerExecutor int
	// UserAgent is sent as User-Agent. Defaults to "ax".
	UserAgent string
}

// WithDefaults returns a copy of o with zero fields set to their defaults.
func (o CallerOptions) WithDefaults() CallerOptions {
	if o.DialTimeout <= 0 {
		o.DialTimeout = DialTimeoutDefault
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
	return o
}

// Caller delivers attempts to executors over HTTP (DESIGN.md section 5).
// It keeps one connection pool per executor address. It is safe for
// concurrent use; it does not limit concurrency (the sidecar's adaptive
// limiter does).
type Caller struct {
	opts CallerOptions

	mu      sync.Mutex
	clients map[endpointKey]*http.Client
}

type endpointKey struct{ network, address string }

// NewCaller returns a Caller.
func NewCaller(opts CallerOptions) *Caller {
	return &Caller{opts: opts.WithDefaults(), clients: make(map[endpointKey]*http.Client)}
}

// Close closes the idle connections of every executor. Requests in flight
// are not affected; the Caller remains usable.
func (c *Caller) Close() {
	c.mu.Lock()
	clients := c.clients
	c.clients = make(map[endpointKey]*http.Client)
	c.mu.Unlock()
	for _, cl := range clients {
		cl.CloseIdleConnections()
	}
}

// client returns the HTTP client of one executor address, creating it once.
func (c *Caller) client(k endpointKey) *http.Client {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cl, ok := c.clients[k]; ok {
		return cl
	}
	dialer := &net.Dialer{Timeout: c.opts.DialTimeout}
	tr := &http.Transport{
		// Whatever host the URL names, dial the executor's own address.
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return dialer.DialContext(ctx, k.network, k.address)
		},
		Proxy:               nil, // never through a proxy, whatever the environment says
		MaxIdleConnsPerHost: c.opts.MaxIdleConnsPerExecutor,
		IdleConnTimeout:     c.opts.IdleConnTimeout,
		DisableCompression:  true,
	}
	cl := &http.Client{
		Transport: tr,
		// A redirect is an answer of its own, never followed.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	c.clients[k] = cl
	return cl
}

// Execute delivers cb to the executor at baseURL (see ParseExecutorURL): it
// POSTs the payload, byte for byte, to baseURL + ExecutePath with headers
// Ax-Task-Id, Ax-Handler, Ax-Attempt, Ax-Run, Ax-Deadline (DeadlineFormat,
// when cb.Deadline is set) and Content-Type: application/octet-stream, and
// classifies the answer. Cancelling ctx, or reaching cb.Deadline or ctx's
// deadline, aborts the request in flight (the executor sees its request
// context end) and gives OutcomeCancelled or OutcomeTimeout.
//
// Execute never retries; it reads at most 64 KiB of the answer.
func (c *Caller) Execute(ctx context.Context, baseURL string, cb Callback) Outcome {
	start := time.Now()
	parent := ctx
	out := c.execute(ctx, parent, start, baseURL, cb)
	out.Duration = time.Since(start)
	return out
}

func (c *Caller) execute(ctx, parent context.Context, start time.Time, baseURL string, cb Callback) Outcome {
	ep, err := parseExecutorURL(baseURL)
	if err != nil {
		return Outcome{Kind: OutcomeRetryable, Error: err.Error()}
	}
	if !cb.Deadline.IsZero() {
		if !cb.Deadline.After(start) {
			return Outcome{Kind: OutcomeTimeout, Error: "timeout: the deadline passed before the callback started"}
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, cb.Deadline)
		defer cancel()
	}
	if ctx.Err() != nil {
		return aborted(ctx, parent, start)
	}

	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ep.url, bytes.NewReader(cb.Payload))
	if err != nil {
		return Outcome{Kind: OutcomeRetryable, Error: "build request: " + err.Error()}
	}
	h := req.Header
	h.Set("Content-Type", "application/octet-stream")
	h.Set("User-Agent", c.opts.UserAgent)
	h.Set(HeaderTaskID, cb.TaskID)
	h.Set(HeaderHandler, cb.Handler)
	h.Set(HeaderAttempt, strconv.Itoa(cb.Attempt))
	h.Set(HeaderRun, strconv.Itoa(cb.Run))
	if !cb.Deadline.IsZero() {
		h.Set(HeaderDeadline, cb.Deadline.UTC().Format(DeadlineFormat))
	}

	resp, err := c.client(endpointKey{ep.network, ep.address}).Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return aborted(ctx, parent, start)
		}
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		var oe *net.OpError
		unreachable := errors.As(err, &oe) && oe.Op == "dial"
		return Outcome{Kind: OutcomeRetryable, Error: err.Error(), Unreachable: unreachable}
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, errorBodyMaxBytes))
	_ = resp.Body.Close()

	out := Outcome{Status: resp.StatusCode, RetryAfter: parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())}
	switch s := resp.StatusCode; {
	case s == http.StatusAccepted:
		out.Kind = OutcomeAccepted
	case s >= 200 && s < 300:
		out.Kind = OutcomeSuccess
	case s == http.StatusTooManyRequests || s == http.StatusServiceUnavailable:
		out.Kind = OutcomeBusy
	case s >= 400 && s < 500:
		out.Kind = OutcomePermanent
	default: // 5xx, 1xx, 3xx
		out.Kind = OutcomeRetryable
	}
	if out.Kind != OutcomeSuccess && out.Kind != OutcomeAccepted {
		out.Error = httpErrorText(resp.StatusCode, body)
	}
	return out
}

// aborted describes a request ended by ctx: cancelled by the caller, or past
// its deadline.
func aborted(ctx, parent context.Context, start time.Time) Outcome {
	if errors.Is(parent.Err(), context.Canceled) {
		return Outcome{Kind: OutcomeCancelled, Error: "cancelled"}
	}
	d, _ := ctx.Deadline()
	return Outcome{Kind: OutcomeTimeout, Error: "timeout after " + roughly(d.Sub(start)).String()}
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

// parseRetryAfter reads a Retry-After value: delay in seconds or an HTTP
// date. It returns 0 when v is empty, invalid or in the past.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n <= 0 {
			return 0
		}
		if n > int64(24*time.Hour/time.Second) {
			n = int64(24 * time.Hour / time.Second)
		}
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(now); d > 0 {
			return d
		}
	}
	return 0
}

// executorURL is a parsed executor base URL.
type executorURL struct {
	network, address string
	url              string // full URL of the callback
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

func parseExecutorURL(s string) (executorURL, error) {
	bad := func(format string, args ...any) (executorURL, error) {
		return executorURL{}, fmt.Errorf("executor url %q: %s", s, fmt.Sprintf(format, args...))
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
		return executorURL{network: "unix", address: u.Path, url: "http://localhost" + ExecutePath}, nil
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
		return executorURL{network: "tcp", address: u.Host, url: "http://" + u.Host + prefix + ExecutePath}, nil
	case "":
		return bad("missing scheme: want unix:///path/to.sock or http://127.0.0.1:PORT")
	default:
		return bad("scheme %q is not supported: want unix or http", u.Scheme)
	}
}
