package ipc

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"

	"github.com/axsched/ax/clients/go/axapi"
)

// Server defaults (see ServerOptions).
const (
	// RequestTimeoutDefault bounds the Backend call of one request.
	RequestTimeoutDefault = 30 * time.Second
	// HeaderTimeoutDefault bounds the wait for a new connection's first
	// request and the reading of each request's headers (from its first
	// byte on a keep-alive connection). A client that connects and sends
	// nothing, or sends its headers a byte at a time (slowloris), is
	// closed after it. A connection that sent nothing is closed without
	// an answer, as an idle keep-alive one is: HTTP clients (Go's among
	// them) open spare connections that stay idle before their first
	// request, and an error reply there would be one they never asked
	// for ("unsolicited response on idle channel").
	HeaderTimeoutDefault = 10 * time.Second
	// ReadTimeoutDefault bounds reading one request's body, once its
	// headers are in: room for a MaxRequestBodyDefault body from a slow
	// client.
	ReadTimeoutDefault = 30 * time.Second
	// WriteTimeoutDefault bounds writing one response.
	WriteTimeoutDefault = 10 * time.Second
	// IdleTimeoutDefault closes keep-alive connections idle for this long:
	// longer than clients keep theirs (Go's net/http 90 s), so that the
	// client, not the server, closes an idle connection.
	IdleTimeoutDefault = 2 * time.Minute
	// MaxConnsDefault bounds the connections the server holds at once;
	// one more is answered 503 and closed. It is far above what the
	// applications of one node open, and below the descriptors a node
	// has (Go raises the soft RLIMIT_NOFILE to the hard one, 1 048 576 in
	// most container runtimes): a client that opens connections without
	// end gets refused, and Raft, badger and the peer API keep theirs.
	// The socket has no per-client bound: a Unix socket's clients have no
	// address to tell them apart, and only those its mode and group admit
	// can connect at all.
	MaxConnsDefault = 16 << 10
	// MaxHeaderBytes bounds a request's line and headers; larger ones are
	// answered 413 payload_too_large.
	MaxHeaderBytes = 8 << 10
	// SocketModeDefault is the permission of the Unix socket (DESIGN.md
	// section 11): owner and group may connect, others may not.
	SocketModeDefault os.FileMode = 0o660
	// MaxRequestBodyDefault is the default bound on a request body: a
	// PayloadMaxBytes payload sent as base64 (4 bytes per 3), plus 64 KiB
	// for the other fields.
	MaxRequestBodyDefault = (PayloadMaxBytes+2)/3*4 + 64<<10
)

// ErrServerClosed is returned by Serve and ServeUnix when called after
// Shutdown.
var ErrServerClosed = errors.New("ipc: server closed")

// ServerOptions configures a Server. The zero value gives the defaults.
type ServerOptions struct {
	// IdleTimeout closes keep-alive connections idle for this long.
	// Defaults to IdleTimeoutDefault (2m).
	IdleTimeout time.Duration
	// MaxRequestBodyBytes bounds a request body; a larger one is answered
	// with 413 payload_too_large. Defaults to MaxRequestBodyDefault (about
	// 1.4 MiB: room for a PayloadMaxBytes payload in base64).
	MaxRequestBodyBytes int
	// HeaderTimeout bounds the wait for a connection's first request and
	// the reading of each request's headers. Defaults to
	// HeaderTimeoutDefault (10s).
	HeaderTimeout time.Duration
	// MaxConns bounds the connections served at once; the next is
	// answered 503 and closed. Defaults to MaxConnsDefault (16 384).
	MaxConns int
	// ReadTimeout bounds reading a request's body once its headers are
	// in. Defaults to ReadTimeoutDefault (30s).
	ReadTimeout time.Duration
	// RequestTimeout bounds the work of one request: it is the timeout of
	// the context passed to the Backend. When it expires the client gets 503
	// not_ready with Retry-After. Defaults to RequestTimeoutDefault (30s).
	RequestTimeout time.Duration
	// SocketMode is the permission ServeUnix gives the socket file.
	// Defaults to SocketModeDefault (0660).
	SocketMode os.FileMode
	// WriteTimeout bounds writing a response.
	// Defaults to WriteTimeoutDefault (10s).
	WriteTimeout time.Duration
	// Metrics answers GET /metrics (Prometheus text format). Nil: 404.
	Metrics fasthttp.RequestHandler
}

// WithDefaults returns a copy of o with zero fields set to their defaults.
func (o ServerOptions) WithDefaults() ServerOptions {
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = IdleTimeoutDefault
	}
	if o.MaxRequestBodyBytes <= 0 {
		o.MaxRequestBodyBytes = MaxRequestBodyDefault
	}
	if o.HeaderTimeout <= 0 {
		o.HeaderTimeout = HeaderTimeoutDefault
	}
	if o.MaxConns <= 0 {
		o.MaxConns = MaxConnsDefault
	}
	if o.ReadTimeout <= 0 {
		o.ReadTimeout = ReadTimeoutDefault
	}
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = RequestTimeoutDefault
	}
	if o.SocketMode == 0 {
		o.SocketMode = SocketModeDefault
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = WriteTimeoutDefault
	}
	return o
}

// Server serves the application API (docs/DESIGN.md section 5) over fasthttp,
// normally on the node's Unix socket. Create it with NewServer, run it with
// ServeUnix or Serve, stop it with Shutdown. Its methods are safe for
// concurrent use.
type Server struct {
	backend Backend
	log     zerolog.Logger
	opts    ServerOptions
	fs      *fasthttp.Server

	// base is the parent of every request context; it is cancelled when a
	// Shutdown gives up waiting, so Backend calls in flight return.
	base       context.Context
	cancelBase context.CancelFunc

	mu        sync.Mutex
	closed    bool
	listeners []net.Listener
}

// NewServer returns a Server answering with b. Requests are logged to log at
// debug level (method, path, status, duration; never payloads); internal
// errors at error level.
func NewServer(b Backend, log zerolog.Logger, opts ServerOptions) *Server {
	s := &Server{backend: b, log: log, opts: opts.WithDefaults()}
	s.base, s.cancelBase = context.WithCancel(context.Background())
	s.fs = &fasthttp.Server{
		Handler:            s.Handler(),
		ErrorHandler:       s.handleParseError,
		Name:               "ax",
		MaxRequestBodySize: s.opts.MaxRequestBodyBytes,
		Concurrency:        s.opts.MaxConns,
		ReadBufferSize:     MaxHeaderBytes,
		// fasthttp's ReadTimeout is armed when a connection opens (for
		// its first request) or at a request's first byte, and covers the
		// headers; HeaderReceived rearms it for the body.
		ReadTimeout:  s.opts.HeaderTimeout,
		WriteTimeout: s.opts.WriteTimeout,
		IdleTimeout:  s.opts.IdleTimeout,
		HeaderReceived: func(*fasthttp.RequestHeader) fasthttp.RequestConfig {
			return fasthttp.RequestConfig{ReadTimeout: s.opts.ReadTimeout}
		},
		// Errors of fasthttp's own (a malformed request) never quote the
		// request's bytes: they could hold a payload.
		SecureErrorLogMessage:        true,
		DisablePreParseMultipartForm: true,
		NoDefaultServerHeader:        true,
		Logger:                       fasthttpLogger{log},
	}
	return s
}

// ServeUnix listens on the Unix socket at path and serves until Shutdown,
// when it returns nil (also when Shutdown comes while it is still setting
// up the socket). A stale socket file at path (left by a process that died)
// is removed first; a socket that still accepts connections, or a file that
// is not a socket, is an error. The socket appears at path already with
// ServerOptions.SocketMode (0660 by default): it is made under a temporary
// name in the same directory, given its mode, then renamed into place, so
// no client can connect while it has the umask's mode. It is removed when
// the server stops. ServeUnix after Shutdown returns ErrServerClosed.
func (s *Server) ServeUnix(path string) error {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return ErrServerClosed
	}
	if err := removeStaleSocket(path); err != nil {
		return err
	}
	mode := s.opts.SocketMode
	ln, err := ListenUnix(path, func(tmp string) error {
		if err := os.Chmod(tmp, mode); err != nil {
			return fmt.Errorf("chmod %s to %#o: %w", path, mode, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	ln = &removingListener{Listener: ln, path: path}
	if testHookListening != nil {
		testHookListening(path)
	}
	return s.serveOn(ln, nil)
}

// testHookListening, when set by a test, runs in ServeUnix once the socket
// accepts connections at path and before the server serves it.
var testHookListening func(path string)

// ListenUnix listens on a Unix socket that appears at path already
// prepared: it listens at a temporary name beside path, calls access with
// that name (chmod, chown) and renames it to path (rename is atomic within
// a directory), so no client can connect while the socket has the umask's
// mode. The listener's Addr is path; closing it leaves the file (the
// caller removes it). An error of access is returned as it is.
func ListenUnix(path string, access func(tmp string) error) (net.Listener, error) {
	// A short name: a socket path has at most 107 bytes.
	var nonce [4]byte
	_, _ = rand.Read(nonce[:])
	tmp := filepath.Join(filepath.Dir(path), ".ax"+hex.EncodeToString(nonce[:]))
	ln, err := net.Listen("unix", tmp)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	ul := ln.(*net.UnixListener)
	ul.SetUnlinkOnClose(false) // the file is at path now, not at tmp
	fail := func(err error) (net.Listener, error) {
		_ = ul.Close()
		_ = os.Remove(tmp)
		return nil, err
	}
	if err := access(tmp); err != nil {
		return fail(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fail(fmt.Errorf("listen on %s: %w", path, err))
	}
	return pathListener{ul, &net.UnixAddr{Name: path, Net: "unix"}}, nil
}

// pathListener is a listener whose Addr is its socket's path, not the
// temporary name it was made under.
type pathListener struct {
	net.Listener
	addr net.Addr
}

func (l pathListener) Addr() net.Addr { return l.addr }

// removingListener removes its socket file once, when first closed.
type removingListener struct {
	net.Listener
	path string
	once sync.Once
}

func (l *removingListener) Close() error {
	err := l.Listener.Close()
	l.once.Do(func() { _ = os.Remove(l.path) })
	return err
}

// removeStaleSocket removes path if it is a socket nobody listens on.
func removeStaleSocket(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("stat socket %s: %w", path, err)
	}
	if fi.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("socket path %s exists and is not a socket; not removing it", path)
	}
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		_ = c.Close()
		return fmt.Errorf("socket %s is in use by a running server", path)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove stale socket %s: %w", path, err)
	}
	return nil
}

// Serve serves connections accepted on ln until Shutdown, when it returns
// nil (any other error ends it too). It takes ownership of ln. Tests use it
// with a listener of their own; it also serves TCP.
func (s *Server) Serve(ln net.Listener) error {
	return s.serveOn(ln, ErrServerClosed)
}

// serveOn is Serve; ifClosed is what it returns when Shutdown came first.
func (s *Server) serveOn(ln net.Listener, ifClosed error) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = ln.Close()
		return ifClosed
	}
	s.listeners = append(s.listeners, ln)
	s.mu.Unlock()
	s.log.Info().Str("addr", ln.Addr().String()).Msg("ipc: serving")
	err := s.fs.Serve(ln)
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return nil
	}
	return err
}

// Shutdown stops the server: it closes the listeners (Serve and ServeUnix
// return nil), lets requests in flight finish and closes idle connections.
// When ctx ends first it cancels the contexts of the requests still running
// and returns ctx.Err(). Serve after Shutdown returns ErrServerClosed.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	lns := s.listeners
	s.listeners = nil
	s.mu.Unlock()

	err := s.fs.ShutdownWithContext(ctx)
	// A listener that Serve registered but fasthttp had not taken yet is not
	// closed by fasthttp; closing it twice is harmless.
	for _, ln := range lns {
		_ = ln.Close()
	}
	s.cancelBase()
	return err
}

// Handler returns the request handler of the API, for use with a
// fasthttp.Server of the caller's own (tests, or several listeners).
func (s *Server) Handler() fasthttp.RequestHandler {
	return s.serve
}

// WriteGuard is implemented by a Backend that can refuse all writes at
// once: a node whose storage cannot take writes (ErrStorageUnavailable).
// The server calls WriteAllowed before every route that is not a GET; a
// non-nil error is answered as is and the Backend's method is not called.
// Reads (GET, HEAD) are never refused by it. WriteAllowed must be cheap.
type WriteGuard interface {
	WriteAllowed() error
}

// serve is the fasthttp handler: it routes, calls the Backend with a
// per-request context, writes the JSON reply and logs the request.
func (s *Server) serve(ctx *fasthttp.RequestCtx) {
	start := time.Now()
	rawPath := ctx.Request.URI().PathOriginal()
	method := string(ctx.Method())
	var failure error // the error answered, for the log
	defer func() {
		if p := recover(); p != nil {
			failure = fmt.Errorf("panic: %v", p)
			s.log.Error().Str("method", method).Bytes("path", rawPath).Interface("panic", p).Msg("ipc: handler panicked")
			ctx.Response.Reset()
			s.writeError(ctx, ErrInternal)
		}
		if e := s.log.Debug(); e.Enabled() {
			e = e.Str("method", method).Bytes("path", rawPath).Int("status", ctx.Response.StatusCode()).
				Dur("duration", time.Since(start))
			if failure != nil {
				_, code, _, _ := MapError(failure)
				e = e.Str("code", code)
			}
			e.Msg("ipc: request")
		}
	}()

	def, param, allow := match(method, rawPath)
	if def == nil {
		if allow == "" {
			failure = Errorf(ErrNotFound, "no route for %s %s", method, rawPath)
		} else {
			ctx.Response.Header.Set("Allow", allow)
			failure = Errorf(ErrMethodNotAllowed, "method %s not allowed on %s; allowed: %s", method, rawPath, allow)
		}
		s.writeError(ctx, failure)
		return
	}

	if refusesQuery[def] {
		if failure = noQuery(ctx, def.Method+" "+def.Pattern, ""); failure != nil {
			s.writeError(ctx, failure)
			return
		}
	}
	if def.Method != "GET" {
		if failure = s.writeAllowed(def); failure != nil {
			s.writeError(ctx, failure)
			return
		}
	}

	rctx, cancel := context.WithTimeout(s.base, s.opts.RequestTimeout)
	defer cancel()
	if failure = def.handle(s, rctx, ctx, param); failure != nil {
		s.writeError(ctx, failure)
	}
}

// metrics answers GET /metrics with ServerOptions.Metrics.
func (s *Server) metrics(_ context.Context, ctx *fasthttp.RequestCtx, _ string) error {
	if s.opts.Metrics == nil {
		return Errorf(ErrNotFound, "metrics are not served by this server")
	}
	s.opts.Metrics(ctx)
	return nil
}

// health answers GET /healthz.
func (s *Server) health(_ context.Context, ctx *fasthttp.RequestCtx, _ string) error {
	s.writeJSON(ctx, fasthttp.StatusOK, map[string]string{"status": "ok"})
	return nil
}

// ready answers GET /readyz.
func (s *Server) ready(rctx context.Context, ctx *fasthttp.RequestCtx, _ string) error {
	err := s.backend.Ready(rctx)
	if err == nil {
		s.writeJSON(ctx, fasthttp.StatusOK, map[string]string{"status": "ready"})
		return nil
	}
	var e *Error
	if !errors.As(err, &e) && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
		err = Errorf(ErrNotReady, "not ready: %w", err)
	}
	return err
}

// cluster answers GET /v1/cluster.
func (s *Server) cluster(rctx context.Context, ctx *fasthttp.RequestCtx, _ string) error {
	info, err := s.backend.Cluster(rctx)
	if err != nil {
		return err
	}
	if info.Members == nil {
		info.Members = []Member{}
	}
	s.writeJSON(ctx, fasthttp.StatusOK, info)
	return nil
}

// removeMember answers DELETE /v1/cluster/members/{id}: 204.
func (s *Server) removeMember(rctx context.Context, ctx *fasthttp.RequestCtx, rawID string) error {
	id, err := url.PathUnescape(rawID)
	if err != nil || id == "" {
		return Errorf(ErrInvalid, "member id: bad URL escape in %q", rawID)
	}
	if err := s.backend.RemoveMember(rctx, id); err != nil {
		return err
	}
	ctx.SetStatusCode(fasthttp.StatusNoContent)
	return nil
}

// submit answers POST /v1/tasks.
func (s *Server) submit(rctx context.Context, ctx *fasthttp.RequestCtx, _ string) error {
	spec, err := DecodeSubmit(ctx.PostBody())
	if err != nil {
		return err
	}
	tc, err := requestTrace(ctx)
	if err != nil {
		return err
	}
	spec.inheritTrace(tc)
	task, created, err := s.backend.Submit(rctx, spec)
	if err != nil {
		return err
	}
	status := fasthttp.StatusOK
	if created {
		status = fasthttp.StatusCreated
		ctx.Response.Header.Set("Location", "/v1/tasks/"+url.PathEscape(task.ID))
	}
	if task.BacklogWarning != "" {
		ctx.Response.Header.Set(axapi.HeaderBacklogWarning, task.BacklogWarning)
	}
	s.writeTask(ctx, status, task)
	return nil
}

// getTask answers GET /v1/tasks/{id}[?consistency=local|strong].
func (s *Server) getTask(rctx context.Context, ctx *fasthttp.RequestCtx, rawID string) error {
	id, err := pathID(rawID)
	if err != nil {
		return err
	}
	// Its one parameter: another is refused, as DELETE's are (it was
	// ignored, so ?consistent=true, a typo, read locally when a strong
	// read was meant).
	c, _, err := onlyParam(ctx, "consistency")
	if err != nil {
		return err
	}
	switch c {
	case "", "local":
	case "strong":
		rctx = WithStrongRead(rctx)
	default:
		return Errorf(ErrInvalid, "consistency %q: want local (the default) or strong", c)
	}
	task, err := s.backend.Task(rctx, id)
	if err != nil {
		return err
	}
	s.writeTask(ctx, fasthttp.StatusOK, task)
	return nil
}

type strongReadKey struct{}

// WithStrongRead marks a read as linearizable (?consistency=strong): the
// Backend answers only with state that includes every write acknowledged
// before the read began.
func WithStrongRead(ctx context.Context) context.Context {
	return context.WithValue(ctx, strongReadKey{}, true)
}

// StrongRead reports whether ctx asks for a linearizable read.
func StrongRead(ctx context.Context) bool {
	v, _ := ctx.Value(strongReadKey{}).(bool)
	return v
}

// cancelTask answers DELETE /v1/tasks/{id}; with ?purge=true it deletes a
// finished task instead (purgeTask).
func (s *Server) cancelTask(rctx context.Context, ctx *fasthttp.RequestCtx, rawID string) error {
	id, err := pathID(rawID)
	if err != nil {
		return err
	}
	if purge, err := purgeParam(ctx); err != nil || purge {
		if err != nil {
			return err
		}
		return s.purgeTask(rctx, ctx, id)
	}
	task, err := s.backend.Cancel(rctx, id)
	if err != nil {
		return err
	}
	s.writeTask(ctx, fasthttp.StatusOK, task)
	return nil
}

// pathID unescapes and checks the {id} segment of a task path.
func pathID(rawID string) (string, error) {
	id, err := url.PathUnescape(rawID)
	if err != nil {
		return "", Errorf(ErrInvalid, "id: bad URL escape in %q", rawID)
	}
	if err := ValidateID(id); err != nil {
		return "", err
	}
	return id, nil
}

// writeTask writes a task view, payload bytes as submitted.
func (s *Server) writeTask(ctx *fasthttp.RequestCtx, status int, t Task) {
	b, err := t.MarshalJSON()
	if err != nil {
		s.log.Error().Err(err).Str("task_id", t.ID).Msg("ipc: encode task view")
		s.writeError(ctx, ErrInternal)
		return
	}
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.SetBody(append(b, '\n'))
}

// writeJSON writes v as a JSON reply.
func (s *Server) writeJSON(ctx *fasthttp.RequestCtx, status int, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		s.log.Error().Err(err).Msg("ipc: encode reply")
		s.writeError(ctx, ErrInternal)
		return
	}
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.SetBody(buf.Bytes())
}

// writeError writes the JSON error reply for err (see MapError) and logs
// errors that map to 500 with their detail.
func (s *Server) writeError(ctx *fasthttp.RequestCtx, err error) {
	status, code, msg, retryAfter := MapError(err)
	if status == ErrInternal.Status && err != ErrInternal {
		s.log.Error().Err(err).Bytes("method", ctx.Method()).Bytes("path", ctx.Request.URI().PathOriginal()).
			Msg("ipc: internal error")
	}
	if retryAfter > 0 {
		ctx.Response.Header.Set("Retry-After", strconv.FormatInt(retryAfterSeconds(retryAfter), 10))
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf) // ends the body with a newline
	enc.SetEscapeHTML(false)     // "> 0", not "\u003e 0", in messages
	detail := errorDetail{Code: code, Message: msg}
	var e *Error
	if errors.As(err, &e) {
		detail.Depth, detail.Limit = e.Depth, e.Limit
	}
	_ = enc.Encode(errorBody{Error: detail})
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.SetBody(buf.Bytes())
}

// handleParseError answers requests fasthttp could not read.
func (s *Server) handleParseError(ctx *fasthttp.RequestCtx, err error) {
	var small *fasthttp.ErrSmallBuffer
	var ne net.Error
	switch {
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		s.writeError(ctx, Errorf(ErrTooLarge, "request body over %d bytes (the bound of one request, batches included: send fewer or smaller tasks per batch)", s.opts.MaxRequestBodyBytes))
	case errors.As(err, &small):
		s.writeError(ctx, Errorf(ErrTooLarge, "request headers too large"))
	case isNothingRead(err):
		// A new connection that sent nothing before HeaderTimeout: closed
		// without an answer (see HeaderTimeoutDefault). fasthttp passes
		// the read's own error for it, unwrapped; a request cut short
		// comes wrapped ("error when reading request headers: ...").
		if c := ctx.Conn(); c != nil {
			_ = c.Close()
		}
		return
	case errors.As(err, &ne) && ne.Timeout():
		s.writeError(ctx, Errorf(ErrInvalid, "timed out reading the request"))
	default:
		s.writeError(ctx, Errorf(ErrInvalid, "malformed HTTP request: %s", withheld(err)))
	}
	s.log.Debug().Str("error", withheld(err)).Int("status", ctx.Response.StatusCode()).Msg("ipc: unreadable request")
}

// isNothingRead reports whether err is fasthttp's error for a connection
// whose first request never began: the bare read error, a timeout.
func isNothingRead(err error) bool {
	ne, ok := err.(net.Error) //nolint:errorlint // the bare error only, not one wrapping it
	return ok && ne.Timeout()
}

// fasthttpLogger sends fasthttp's own messages to zerolog: errors of single
// connections (a client's fault, already answered) at debug level, the rest
// (accept errors, concurrency limit) at warn level. A connection's error
// is logged without the request bytes fasthttp quotes in some of its
// errors (SecureErrorLogMessage does not cover them all): they could hold
// a payload.
type fasthttpLogger struct{ log zerolog.Logger }

func (l fasthttpLogger) Printf(format string, args ...any) {
	ev := l.log.Warn()
	if strings.HasPrefix(format, "error when serving connection") {
		ev = l.log.Debug()
		args = withheldRequestBytes(args)
	}
	ev.Msgf("fasthttp: "+format, args...)
}

// withheldRequestBytes replaces the error of fasthttp's "error when
// serving connection %q<->%q: %v" by withheld's text.
func withheldRequestBytes(args []any) []any {
	out := slices.Clone(args)
	if len(out) == 3 {
		if err, ok := out[2].(error); ok {
			out[2] = withheld(err)
		}
	}
	return out
}

// withheld is err's text up to its first quote, where fasthttp begins to
// quote the request's bytes.
func withheld(err error) string {
	msg := err.Error()
	if i := strings.IndexByte(msg, '"'); i >= 0 {
		msg = msg[:i] + "(request bytes withheld)"
	}
	return msg
}
