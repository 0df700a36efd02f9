package peerapi

import (
	"crypto/subtle"
	"errors"
	"log"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

// The limits of the peer API's server (docs/DESIGN.md section 11). Its
// clients are other nodes' peerapi.Clients, which write a request as soon
// as they connect and keep at most 64 connections to a node.
const (
	// HeaderTimeout bounds the wait for a new connection's first request
	// (a TLS handshake included) and the reading of each request's
	// headers: a client that connects and sends nothing, or sends its
	// headers a byte at a time (slowloris), is closed after it.
	HeaderTimeout = 5 * time.Second
	// IdleTimeout closes a keep-alive connection idle for this long:
	// longer than the Client keeps one idle (1 minute), so that the
	// client closes it first and never sends on a connection the server
	// is closing.
	IdleTimeout = 90 * time.Second
	// MaxConns bounds the connections served at once; the next is
	// answered 503 and closed.
	MaxConns = 4096
	// MaxConnsPerIP bounds the connections from one address; the next is
	// answered 429 and closed. A node's Client opens at most 64 to a
	// peer, so this leaves room for several nodes behind one address (a
	// test cluster on 127.0.0.1) while one flooding address cannot take
	// every connection.
	MaxConnsPerIP = 512
	// maxHeaderBytes bounds a request's line and headers.
	maxHeaderBytes = 8 << 10
	// maxUnauthenticatedBody bounds the body of a request without the
	// cluster token: it is refused (401) after reading at most this much,
	// so that no one without the token makes a node buffer maxBody.
	maxUnauthenticatedBody = 4 << 10
)

// headerReceived chooses the body's bound and time once a request's
// headers are in: maxBody and Timeout with the right token (or when the
// cluster has none), maxUnauthenticatedBody without it.
func (s *Server) headerReceived(h *fasthttp.RequestHeader) fasthttp.RequestConfig {
	if !s.authorized(h) {
		return fasthttp.RequestConfig{ReadTimeout: HeaderTimeout, MaxRequestBodySize: maxUnauthenticatedBody}
	}
	return fasthttp.RequestConfig{ReadTimeout: Timeout, MaxRequestBodySize: maxBody}
}

// authorized reports whether h carries the cluster token (always true
// when the cluster has none). The comparison takes constant time.
func (s *Server) authorized(h *fasthttp.RequestHeader) bool {
	tok := s.cfg.Token
	return tok == "" || subtle.ConstantTimeCompare(h.Peek(TokenHeader), []byte(tok)) == 1
}

// handleReadError answers a request fasthttp could not read: 401 when it
// lacked the token (whatever else was wrong), 413 for a body over the
// bound, 400 otherwise; a connection that sent nothing before
// HeaderTimeout is closed without an answer. The answer never quotes the
// request (SecureErrorLogMessage keeps fasthttp's errors free of it too).
func (s *Server) handleReadError(ctx *fasthttp.RequestCtx, err error) {
	var ne net.Error
	switch {
	case isNothingRead(err):
		if c := ctx.Conn(); c != nil {
			_ = c.Close()
		}
	case len(ctx.Request.Header.Method()) > 0 && !s.authorized(&ctx.Request.Header):
		WriteError(ctx, ErrUnauthorized)
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		WriteError(ctx, &Error{Status: fasthttp.StatusRequestEntityTooLarge, Code: CodeBadRequest, Message: "request body too large"})
	case errors.As(err, &ne) && ne.Timeout():
		WriteError(ctx, Errorf(ErrBadRequest, "timed out reading the request"))
	default:
		WriteError(ctx, Errorf(ErrBadRequest, "malformed HTTP request"))
	}
}

// isNothingRead reports whether err is fasthttp's error for a connection
// whose first request never began: the read's own error, unwrapped, a
// timeout (a request cut short comes wrapped).
func isNothingRead(err error) bool {
	ne, ok := err.(net.Error) //nolint:errorlint // the bare error only
	return ok && ne.Timeout()
}

// fasthttpLogger passes fasthttp's own messages (a connection's read
// error, a refused connection) to the standard logger, at most one every
// 10 s, with a count of those it dropped: a flood of bad connections
// must not become a flood of log lines. The messages never hold a
// request's bytes.
type fasthttpLogger struct {
	mu      sync.Mutex
	last    time.Time
	dropped int
}

func (l *fasthttpLogger) Printf(format string, args ...any) {
	l.mu.Lock()
	now := time.Now()
	if now.Sub(l.last) < 10*time.Second {
		l.dropped++
		l.mu.Unlock()
		return
	}
	dropped := l.dropped
	l.last, l.dropped = now, 0
	l.mu.Unlock()
	if strings.HasPrefix(format, "error when serving connection") && len(args) == 3 {
		// Without the request bytes fasthttp quotes in some of its
		// errors (SecureErrorLogMessage does not cover them all): they
		// could hold the token or a payload.
		if err, ok := args[2].(error); ok {
			msg := err.Error()
			if i := strings.IndexByte(msg, '"'); i >= 0 {
				msg = msg[:i] + "(request bytes withheld)"
			}
			args = []any{args[0], args[1], msg}
		}
	}
	msg := "peer API: " + strings.TrimSpace(format)
	if dropped > 0 {
		log.Printf(msg+" (and %d more such messages)", append(args, dropped)...)
		return
	}
	log.Printf(msg, args...)
}
