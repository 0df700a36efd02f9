package ax

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/axsched/ax/clients/go/axapi"
)

// ExecutePath is the path the sidecar posts callbacks to, on the executor's
// base URL (axapi.ExecutePath).
const ExecutePath = axapi.ExecutePath

// Callback headers set by the sidecar (axapi's: the task's id and handler,
// the attempt and run numbers, the deadline, and the W3C trace context of
// the task when it has one).
const (
	HeaderTaskID      = axapi.HeaderTaskID
	HeaderHandler     = axapi.HeaderHandler
	HeaderAttempt     = axapi.HeaderAttempt
	HeaderRun         = axapi.HeaderRun
	HeaderDeadline    = axapi.HeaderDeadline
	HeaderTraceParent = axapi.HeaderTraceParent
	HeaderTraceState  = axapi.HeaderTraceState
	HeaderShardIndex  = axapi.HeaderShardIndex
	HeaderShardTotal  = axapi.HeaderShardTotal
)

// ShardsPath is the path, on the executor's base URL, where the sidecar asks
// how many shards a run of a task with "shards": {"ask": true} gets
// (axapi.ShardsPath); see WithShardCount.
const ShardsPath = axapi.ShardsPath

// FallbackHandler is the handler name that receives deliveries for handlers
// registered under no other name.
const FallbackHandler = "*"

// Delivery is one attempt of a task, delivered to an executor.
//
// Delivery is at least once: a node or network failure mid-attempt can cause
// the same run to be delivered again. TaskID with Run and Attempt (and
// ShardIndex, for a sharded task) identifies an attempt, so handlers can
// de-duplicate.
type Delivery struct {
	// TaskID is the id of the task.
	TaskID string
	// Handler is the handler name the task was submitted with.
	Handler string
	// Attempt numbers the attempts of this run, from 1.
	Attempt int
	// Run numbers the runs of the task, from 1 (a one-off task has one run).
	Run int
	// Deadline is when the sidecar stops waiting for this attempt (the
	// task's timeout from the start of the attempt). The handler's context
	// carries it. Zero when the sidecar sent none.
	Deadline time.Time
	// Payload is the task's payload, byte for byte: the JSON of
	// SubmitRequest.Payload or the bytes of SubmitRequest.PayloadBytes.
	Payload []byte
	// TraceParent is the callback's W3C traceparent: the task's trace id
	// (the one it was submitted with, else one derived from its id) and
	// flags, and a parent id of this attempt's own (the same when the
	// attempt is delivered again). TraceState is the tracestate the task
	// was submitted with. Empty from a sidecar older than trace context.
	// The handler's context carries them as the remote span context
	// (SpanContext), unless a tracing middleware put a span there first.
	TraceParent string
	TraceState  string
	// ShardIndex and ShardTotal are the shard of a sharded task's run (a
	// task submitted with "shards"): this callback is shard ShardIndex,
	// from 0 to ShardTotal-1, of ShardTotal shards of the run, each with
	// its own attempts (the Ax-Shard-Index and Ax-Shard-Total headers).
	// Both are 0 for a task without shards; ShardTotal > 0 tells a shard.
	// A callback with only one of the headers, or a value that is not an
	// integer in range, is answered 400 (a permanent failure).
	ShardIndex int
	ShardTotal int
}

// Handler runs the tasks of one handler name.
//
// The result of Handle tells the sidecar what to do next:
//
//   - nil: success; the task becomes SUCCESS.
//   - an error made by Permanent: permanent failure; the task becomes FAILED
//     and is not retried.
//   - an error made by Snooze: the executor is busy; the attempt is tried
//     again after the given time and is not counted as a failed attempt.
//   - the error of Async: the work goes on after Handle returns; it is
//     reported later with Report (or Client.ReportResult), with heartbeats
//     meanwhile when it may outlast the task's timeout.
//   - any other error: a failed attempt; the task is retried with backoff
//     until its attempts are exhausted (then DEAD). The error's message is
//     recorded as the task's last error.
//
// The context is cancelled when the Delivery's deadline passes, when the task
// is cancelled, when the sidecar gives up the request, and when
// Executor.Shutdown runs out of time. It carries the Delivery
// (DeliveryFromContext) and what Heartbeat and Report need. A handler that
// panics fails the attempt, like an error.
type Handler interface {
	Handle(ctx context.Context, d *Delivery) error
}

// HandlerFunc adapts a function to the Handler interface.
type HandlerFunc func(ctx context.Context, d *Delivery) error

// Handle calls f(ctx, d).
func (f HandlerFunc) Handle(ctx context.Context, d *Delivery) error { return f(ctx, d) }

// Permanent marks err as a permanent failure: the executor answers 422 and
// the sidecar marks the task FAILED without further attempts. Use it for
// tasks that can never succeed (bad payload, the order no longer exists).
// Permanent(nil) returns nil. The result has err's message and wraps err;
// it still counts when wrapped further (fmt.Errorf("...: %w", Permanent(err))).
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Snooze asks the sidecar to deliver the attempt again after d without
// counting it as a failure: the executor answers 503 with Retry-After set to
// d rounded up to whole seconds (at least 1). The sidecar also lowers its
// concurrency limit for this executor, so use Snooze when the executor is
// overloaded or a resource it needs is temporarily missing.
func Snooze(d time.Duration) error { return &snoozeError{d: d} }

type snoozeError struct{ d time.Duration }

func (e *snoozeError) Error() string { return fmt.Sprintf("snoozed for %v", e.d) }

// Async, returned by a handler, answers the callback with 202 Accepted: the
// attempt stays RUNNING and the handler's work goes on elsewhere (a
// goroutine, another process), which reports the outcome later with Report
// or Client.ReportResult and, when the work may outlast the task's timeout,
// sends heartbeats meanwhile (Heartbeat, Client.Heartbeat). Without a report
// or a heartbeat before the lease ends, the sidecar counts the attempt as
// timed out and retries it.
//
// The handler's context ends when Handle returns; give the work
// context.WithoutCancel(ctx), which keeps the values Heartbeat and Report
// need:
//
//	ex.HandleFunc("video.encode", func(ctx context.Context, d *ax.Delivery) error {
//		bg := context.WithoutCancel(ctx)
//		go func() { ax.Report(bg, encode(bg, d.Payload)) }()
//		return ax.Async()
//	})
//
// Executor.Shutdown does not wait for such work.
func Async() error { return errAsync }

var errAsync = errors.New("accepted: the result is reported later")

// Middleware wraps a Handler, for logging, metrics, tracing, recovery or
// de-duplication around every handler of an Executor. It sees the Delivery
// and the handler's result, and may change the result:
//
//	func logAttempts(next ax.Handler) ax.Handler {
//		return ax.HandlerFunc(func(ctx context.Context, d *ax.Delivery) error {
//			start := time.Now()
//			err := next.Handle(ctx, d)
//			log.Printf("%s %s attempt %d: %v in %v", d.Handler, d.TaskID, d.Attempt, err, time.Since(start))
//			return err
//		})
//	}
type Middleware func(Handler) Handler

// ExecutorOption configures an Executor in NewExecutor.
type ExecutorOption func(*Executor)

// WithClient gives the Executor the Client that Heartbeat and Report use,
// from a handler's context, to reach the local sidecar. Without it they
// fail with an error saying so; the rest of the Executor works without one.
func WithClient(c *Client) ExecutorOption {
	return func(e *Executor) { e.client = c }
}

// Executor receives task callbacks from the sidecar and dispatches them to
// Handlers by handler name, through its Middleware. It is an http.Handler:
// mount it at ExecutePath on any HTTP server, or let it serve its own with
// ListenAndServeUnix or Serve. Register handlers before the sidecar can
// call; registering later is safe but racy from the sidecar's point of view
// (unknown handlers fail permanently).
type Executor struct {
	mu          sync.RWMutex
	handlers    map[string]Handler
	middlewares []Middleware
	client      *Client
	srv         *http.Server

	// shardCounters holds the WithShardCount of the handlers given one,
	// by the same names as handlers (guarded by mu).
	shardCounters map[string]ShardCountFunc

	// Shutdown: draining is closed once every callback in flight has
	// returned after Shutdown began; abort cancels the contexts of the
	// handlers still running when Shutdown runs out of time.
	drainMu  sync.Mutex
	inflight int
	draining chan struct{} // nil until Shutdown
	abortCtx context.Context
	abort    context.CancelCauseFunc
}

// errShutdownAbort is the cause of a handler's context cancelled because
// Executor.Shutdown ran out of time.
var errShutdownAbort = errors.New("ax: executor shut down before the handler returned")

// NewExecutor returns an Executor with no handlers, configured by opts (see
// WithClient).
func NewExecutor(opts ...ExecutorOption) *Executor {
	e := &Executor{handlers: make(map[string]Handler)}
	e.abortCtx, e.abort = context.WithCancelCause(context.Background())
	for _, opt := range opts {
		opt(e)
	}
	mux := http.NewServeMux()
	mux.Handle(ExecutePath, e)
	mux.Handle(ShardsPath, e)
	e.srv = &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
	}
	return e
}

// Use appends middleware around every handler of the Executor, including
// those registered before. The first middleware given is the outermost:
// after Use(a, b), a callback runs a, then b, then the handler, and the
// result goes back through b, then a. Use panics on a nil Middleware.
func (e *Executor) Use(mw ...Middleware) {
	for _, m := range mw {
		if m == nil {
			panic("ax: Executor.Use: nil middleware")
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.middlewares = append(slices.Clip(e.middlewares), mw...)
}

// Handle registers h for the handler name. The name FallbackHandler ("*")
// receives deliveries of every handler not registered by name. opts add to
// the handler: WithShardCount. Handle panics if name is empty, h is nil, an
// option is nil, or name is already registered.
func (e *Executor) Handle(name string, h Handler, opts ...HandlerOption) {
	if name == "" {
		panic("ax: Executor.Handle: empty handler name")
	}
	if h == nil {
		panic("ax: Executor.Handle: nil handler for " + strconv.Quote(name))
	}
	var o handlerOptions
	for _, opt := range opts {
		if opt == nil {
			panic("ax: Executor.Handle: nil option for " + strconv.Quote(name))
		}
		opt(&o)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, ok := e.handlers[name]; ok {
		panic("ax: Executor.Handle: handler " + strconv.Quote(name) + " registered twice")
	}
	e.handlers[name] = h
	if o.shardCount != nil {
		if e.shardCounters == nil {
			e.shardCounters = make(map[string]ShardCountFunc)
		}
		e.shardCounters[name] = o.shardCount
	}
}

// HandleFunc registers fn for the handler name, like Handle.
func (e *Executor) HandleFunc(name string, fn func(ctx context.Context, d *Delivery) error, opts ...HandlerOption) {
	if fn == nil {
		panic("ax: Executor.HandleFunc: nil function for " + strconv.Quote(name))
	}
	e.Handle(name, HandlerFunc(fn), opts...)
}

// HandleResult registers fn for the handler name, like HandleFunc, for a
// handler that returns a result: when fn succeeds, its value (encoded as
// JSON; nil sends none) is the body of the executor's answer and the
// sidecar stores it as the run's result (see SetResult). Errors map as
// for any Handler.
func (e *Executor) HandleResult(name string, fn func(ctx context.Context, d *Delivery) (any, error), opts ...HandlerOption) {
	if fn == nil {
		panic("ax: Executor.HandleResult: nil function for " + strconv.Quote(name))
	}
	e.Handle(name, HandlerFunc(func(ctx context.Context, d *Delivery) error {
		v, err := fn(ctx, d)
		if err != nil || v == nil {
			return err
		}
		return SetResult(ctx, v)
	}), opts...)
}

// handler returns the Handler for name wrapped in the middleware, or nil.
func (e *Executor) handler(name string) Handler {
	e.mu.RLock()
	h, ok := e.handlers[name]
	if !ok {
		h = e.handlers[FallbackHandler]
	}
	mws := e.middlewares
	e.mu.RUnlock()
	if h == nil {
		return nil
	}
	for i := len(mws) - 1; i >= 0; i-- {
		h = mws[i](h)
		if h == nil {
			return HandlerFunc(func(context.Context, *Delivery) error {
				return fmt.Errorf("ax: middleware %d of %d returned a nil Handler", i+1, len(mws))
			})
		}
	}
	return h
}

// ServeHTTP serves one callback (POST with the payload as body and the Ax-*
// headers). It answers:
//
//   - 200 when the handler returns nil, with the result it set (SetResult,
//     HandleResult) as a JSON body, or an empty body;
//   - 202 for Async (the result is reported later);
//   - 422 for Permanent errors, 404 for an unknown handler name and 400 for
//     a malformed callback (permanent failures: no retry);
//   - 503 with Retry-After for Snooze (busy, retried later), and once
//     Shutdown has begun (Retry-After: 1);
//   - 500 with the error's message for any other error or a panic (a failed
//     attempt, retried with backoff);
//   - 405 for a method other than POST.
//
// A request whose path ends in ShardsPath is the sidecar asking how many
// shards a run gets, answered from the handler's WithShardCount (see
// there). ServeHTTP looks at the path for nothing else, so it can be
// mounted under any prefix; the sidecar calls ExecutePath and, for a task
// with "shards": {"ask": true}, ShardsPath: mount it at both.
func (e *Executor) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasSuffix(r.URL.Path, ShardsPath) {
		e.serveShards(w, r)
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeText(w, http.StatusMethodNotAllowed, "method not allowed: use POST")
		return
	}
	if !e.enter() {
		w.Header().Set("Retry-After", "1")
		writeText(w, http.StatusServiceUnavailable, "executor is shutting down")
		return
	}
	defer e.leave()
	d, err := parseDelivery(r)
	if err != nil {
		writeText(w, http.StatusBadRequest, err.Error())
		return
	}
	h := e.handler(d.Handler)
	if h == nil {
		writeText(w, http.StatusNotFound, "no handler registered for "+strconv.Quote(d.Handler))
		return
	}
	ctx, info, release := e.attemptContext(r, d)
	defer release()
	err = runHandler(ctx, h, d)

	var perm *permanentError
	var snooze *snoozeError
	switch {
	case err == nil:
		// The body is the run's result (SetResult, HandleResult): none
		// unless the handler set one.
		if res := info.takeResult(); res != nil {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write(res)
		} else {
			w.WriteHeader(http.StatusOK)
		}
	case errors.Is(err, errAsync):
		writeText(w, http.StatusAccepted, "accepted")
	case errors.As(err, &snooze):
		secs := max(1, int64((snooze.d+time.Second-1)/time.Second))
		w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
		writeText(w, http.StatusServiceUnavailable, err.Error())
	case errors.As(err, &perm):
		writeText(w, http.StatusUnprocessableEntity, err.Error())
	default:
		writeText(w, http.StatusInternalServerError, err.Error())
	}
}

// attemptContext is the context a handler or a shard counter runs in for
// delivery d of request r: cancelled when the request ends, when the
// executor aborts (Shutdown's deadline) and at d's deadline, carrying the
// attempt (for Heartbeat, SetResult, Attempt) and the callback's trace
// parent. release frees it.
func (e *Executor) attemptContext(r *http.Request, d *Delivery) (ctx context.Context, info *attemptInfo, release func()) {
	ctx, cancel := context.WithCancelCause(r.Context())
	stop := context.AfterFunc(e.abortCtx, func() { cancel(context.Cause(e.abortCtx)) })
	cancelDeadline := context.CancelFunc(func() {})
	if !d.Deadline.IsZero() {
		ctx, cancelDeadline = context.WithDeadline(ctx, d.Deadline)
	}
	info = &attemptInfo{d: d, client: e.client}
	ctx = context.WithValue(ctx, attemptKey{}, info)
	ctx = withRemoteSpan(ctx, d)
	return ctx, info, func() {
		cancelDeadline()
		stop()
		cancel(nil)
	}
}

// runHandler calls h, turning a panic into an error.
func runHandler(ctx context.Context, h Handler, d *Delivery) (err error) {
	defer func() {
		if p := recover(); p != nil {
			if p == http.ErrAbortHandler {
				panic(p)
			}
			err = fmt.Errorf("panic in handler %q: %v", d.Handler, p)
		}
	}()
	return h.Handle(ctx, d)
}

// parseDelivery reads the callback headers and body.
func parseDelivery(r *http.Request) (*Delivery, error) {
	d := &Delivery{
		TaskID:      r.Header.Get(HeaderTaskID),
		Handler:     r.Header.Get(HeaderHandler),
		TraceParent: r.Header.Get(HeaderTraceParent),
		TraceState:  strings.Join(r.Header.Values(HeaderTraceState), ","),
	}
	if d.TaskID == "" {
		return nil, fmt.Errorf("missing %s header", HeaderTaskID)
	}
	if d.Handler == "" {
		return nil, fmt.Errorf("missing %s header", HeaderHandler)
	}
	var err error
	if d.Attempt, err = intHeader(r, HeaderAttempt); err != nil {
		return nil, err
	}
	if d.Run, err = intHeader(r, HeaderRun); err != nil {
		return nil, err
	}
	if v := r.Header.Get(HeaderDeadline); v != "" {
		if d.Deadline, err = time.Parse(time.RFC3339Nano, v); err != nil {
			return nil, fmt.Errorf("bad %s header %q: want RFC 3339", HeaderDeadline, v)
		}
	}
	if d.ShardIndex, d.ShardTotal, err = parseShard(r); err != nil {
		return nil, err
	}
	if d.Payload, err = io.ReadAll(r.Body); err != nil {
		return nil, fmt.Errorf("read payload: %w", err)
	}
	return d, nil
}

func intHeader(r *http.Request, name string) (int, error) {
	v := r.Header.Get(name)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("bad %s header %q: want a non-negative integer", name, v)
	}
	return n, nil
}

func writeText(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	io.WriteString(w, msg+"\n")
}

// ListenAndServeUnix listens on the Unix socket at path and serves callbacks
// at ExecutePath (and shard-count asks at ShardsPath) until Shutdown. A stale socket file left by a previous
// process is removed first; a socket another process still listens on, or a
// file that is not a socket, is an error. The socket file is removed when
// the server stops.
//
// Register the socket with the sidecar as unix:// followed by its absolute
// path. ListenAndServeUnix always returns a non-nil error: after Shutdown it
// is http.ErrServerClosed.
func (e *Executor) ListenAndServeUnix(path string) error {
	if err := removeStaleSocket(path); err != nil {
		return err
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("ax: executor: %w", err)
	}
	return e.Serve(l)
}

// Serve serves callbacks at ExecutePath (and shard-count asks at
// ShardsPath) on l until Shutdown; use it for a
// loopback TCP executor (http://127.0.0.1:PORT) or a listener made
// elsewhere. Serve closes l when it returns. It always returns a non-nil
// error: after Shutdown it is http.ErrServerClosed.
func (e *Executor) Serve(l net.Listener) error {
	return e.srv.Serve(l)
}

// Shutdown stops the Executor gracefully: it closes the listeners of
// ListenAndServeUnix and Serve, answers new callbacks with 503 and
// Retry-After (busy: the sidecar tries again later, without counting a
// failed attempt; this also holds for an Executor mounted on another server),
// then waits until every handler running has returned. It returns nil once
// they have.
//
// When ctx ends first, Shutdown cancels the contexts of the handlers still
// running (their context.Cause says the executor shut down) and returns
// ctx's error without waiting further; their attempts end as failures and
// are retried. Work continued after Async is not waited for.
//
// Unregister the executor from the sidecar (Client.UnregisterExecutor)
// before Shutdown, so that new attempts go elsewhere. Shutdown may be called
// more than once; an Executor cannot serve again after it.
func (e *Executor) Shutdown(ctx context.Context) error {
	e.drainMu.Lock()
	if e.draining == nil {
		e.draining = make(chan struct{})
		if e.inflight == 0 {
			close(e.draining)
		}
	}
	drained := e.draining
	e.drainMu.Unlock()

	err := e.srv.Shutdown(ctx)
	select {
	case <-drained:
		return err
	case <-ctx.Done():
		e.abort(errShutdownAbort)
		return ctx.Err()
	}
}

// enter counts a callback in flight; false once Shutdown has begun.
func (e *Executor) enter() bool {
	e.drainMu.Lock()
	defer e.drainMu.Unlock()
	if e.draining != nil {
		return false
	}
	e.inflight++
	return true
}

// leave ends a callback counted by enter.
func (e *Executor) leave() {
	e.drainMu.Lock()
	defer e.drainMu.Unlock()
	e.inflight--
	if e.inflight == 0 && e.draining != nil {
		close(e.draining)
	}
}

// removeStaleSocket removes a socket file nobody listens on.
func removeStaleSocket(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("ax: executor: %w", err)
	}
	if fi.Mode()&fs.ModeSocket == 0 {
		return fmt.Errorf("ax: executor: %s exists and is not a socket", path)
	}
	conn, err := net.DialTimeout("unix", path, time.Second)
	if err == nil {
		conn.Close()
		return fmt.Errorf("ax: executor: socket %s is in use by another process", path)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("ax: executor: check socket %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("ax: executor: remove stale socket: %w", err)
	}
	return nil
}
