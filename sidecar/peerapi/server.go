package peerapi

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/axsched/ax/internal/rawio"
	"github.com/axsched/ax/raftfsm"
)

// Node is what the Server asks of the node it serves. Errors that are or
// wrap an *Error are answered with its status and code; others as the
// route's fallback (503 unavailable, or 500 internal for task reads).
type Node interface {
	// Info describes this node.
	Info() Info
	// Join adds the node req to the cluster (on the leader, or through
	// it).
	Join(ctx context.Context, req Info) error
	// Propose commits cmds on this node, which must lead
	// (ErrNotLeader otherwise), and returns one result per command.
	Propose(ctx context.Context, cmds []raftfsm.Command) ([]raftfsm.Result, error)
	// Report records a node's load report (on the leader).
	Report(r LoadReport) ReportReply
	// Task reads task id: as this node has it, or with strong on the
	// leader, linearizably (ErrNotLeader elsewhere). applied is this
	// node's applied index taken before the read (the task is at least
	// that fresh); raftfsm.ErrNotFound when there is no such task.
	Task(ctx context.Context, id string, strong bool) (t *raftfsm.Task, applied uint64, err error)
	// Remove removes node id from the configuration (on the leader, or
	// through it).
	Remove(ctx context.Context, id string) error
	// Members is the leader's view of every member (ErrNotLeader on
	// another node).
	Members() (map[string]MemberStatus, error)
}

// ServerConfig configures a Server.
type ServerConfig struct {
	// Node answers the requests.
	Node Node
	// Token, when set, must come with every request (TokenHeader).
	Token string
	// Routes are further paths, served after the token check.
	Routes map[string]fasthttp.RequestHandler
	// Now is the clock for the callers' deadlines (time.Now when nil).
	Now func() time.Time
	// Listener, when set, wraps the TCP listener: the server answers
	// only the connections it accepts (peertls.NewListener: mutual TLS,
	// the handshake done before a request is read).
	Listener func(net.Listener) net.Listener
	// Hold, when set, makes every accepted connection read and write with
	// raw system calls while it reports true (rawio.Wrap, under
	// Listener's TLS); nil: never.
	Hold func() bool
}

// Server serves the peer API.
type Server struct {
	cfg ServerConfig
	srv *fasthttp.Server
	ln  net.Listener
}

// NewServer returns a Server; it serves once Listen is called.
func NewServer(cfg ServerConfig) *Server {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	s := &Server{cfg: cfg}
	s.srv = &fasthttp.Server{
		Handler:            s.handle,
		Name:               "ax-peer",
		MaxRequestBodySize: maxBody,
		// Limits: limits.go. ReadTimeout is armed when a connection
		// opens or at a request's first byte and covers the headers;
		// headerReceived rearms it for the body.
		ReadTimeout:           HeaderTimeout,
		HeaderReceived:        s.headerReceived,
		IdleTimeout:           IdleTimeout,
		WriteTimeout:          Timeout,
		Concurrency:           MaxConns,
		MaxConnsPerIP:         MaxConnsPerIP,
		ReadBufferSize:        maxHeaderBytes,
		ErrorHandler:          s.handleReadError,
		SecureErrorLogMessage: true,
		Logger:                &fasthttpLogger{},
		NoDefaultDate:         true,
	}
	return s
}

// Listen listens on addr (TCP HOST:PORT) and serves in the background
// (through ServerConfig.Listener when set).
func (s *Server) Listen(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("peer API on %s: %w", addr, err)
	}
	s.ln = ln
	ln = rawio.WrapListener(ln, s.cfg.Hold)
	if s.cfg.Listener != nil {
		ln = s.cfg.Listener(ln)
	}
	go s.srv.Serve(ln)
	return nil
}

// Addr is the address Listen listens on ("" before).
func (s *Server) Addr() string {
	if s.ln == nil {
		return ""
	}
	return s.ln.Addr().String()
}

// Close stops serving.
func (s *Server) Close() {
	if s.ln != nil {
		s.srv.Shutdown()
	}
}

// requestContext bounds a request's work by Timeout and by nine tenths
// of the time its caller said it has left (DeadlineHeader), so that the
// answer arrives before the caller gives up.
func (s *Server) requestContext(ctx *fasthttp.RequestCtx) (context.Context, context.CancelFunc) {
	d := Timeout
	if ms, err := strconv.ParseInt(string(ctx.Request.Header.Peek(DeadlineHeader)), 10, 64); err == nil && ms > 0 {
		d = min(d, time.Duration(ms)*time.Millisecond*9/10)
	}
	return context.WithDeadline(context.Background(), s.cfg.Now().Add(d))
}

func (s *Server) handle(ctx *fasthttp.RequestCtx) {
	if tok := s.cfg.Token; tok != "" && subtle.ConstantTimeCompare(ctx.Request.Header.Peek(TokenHeader), []byte(tok)) != 1 {
		WriteError(ctx, ErrUnauthorized)
		return
	}
	path := string(ctx.Path())
	if h, ok := s.cfg.Routes[path]; ok {
		h(ctx)
		return
	}
	n := s.cfg.Node
	switch path {
	case PathInfo:
		WriteJSON(ctx, 200, n.Info())
	case PathJoin:
		var req Info
		if err := json.Unmarshal(ctx.PostBody(), &req); err != nil || req.ID == "" || req.RaftAddr == "" {
			WriteError(ctx, Errorf(ErrBadRequest, "want JSON {id, raft_addr, peer_addr}"))
			return
		}
		c, cancel := s.requestContext(ctx)
		defer cancel()
		if err := n.Join(c, req); err != nil {
			WriteError(ctx, ErrorOf(err, ErrUnavailable))
			return
		}
		WriteJSON(ctx, 200, n.Info())
	case PathPropose:
		cmds, err := raftfsm.DecodeEntry(ctx.PostBody())
		if err != nil {
			WriteError(ctx, Errorf(ErrBadRequest, "%s", err.Error()))
			return
		}
		c, cancel := s.requestContext(ctx)
		defer cancel()
		res, err := n.Propose(c, cmds)
		if err != nil {
			WriteError(ctx, ErrorOf(err, ErrUnavailable))
			return
		}
		writeResults(ctx, res)
	case PathReport:
		var r LoadReport
		if err := json.Unmarshal(ctx.PostBody(), &r); err != nil || r.ID == "" {
			WriteError(ctx, Errorf(ErrBadRequest, "want JSON {id, in_flight}"))
			return
		}
		WriteJSON(ctx, 200, n.Report(r))
	case PathTask:
		id := string(ctx.QueryArgs().Peek("id"))
		strong := string(ctx.QueryArgs().Peek("consistency")) == "strong"
		c, cancel := s.requestContext(ctx)
		t, applied, err := n.Task(c, id, strong)
		cancel()
		switch {
		case errors.Is(err, raftfsm.ErrNotFound):
			WriteError(ctx, Errorf(ErrNotFound, "task not found"))
		case err != nil:
			WriteError(ctx, ErrorOf(err, ErrInternal))
		default:
			writeResults(ctx, []raftfsm.Result{{Task: t, Index: applied}})
		}
	case PathRemove:
		var req struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal(ctx.PostBody(), &req); err != nil || req.ID == "" {
			WriteError(ctx, Errorf(ErrBadRequest, "want JSON {id}"))
			return
		}
		c, cancel := s.requestContext(ctx)
		defer cancel()
		if err := n.Remove(c, req.ID); err != nil {
			WriteError(ctx, ErrorOf(err, ErrUnavailable))
			return
		}
		ctx.SetStatusCode(204)
	case PathMembers:
		m, err := n.Members()
		if err != nil {
			WriteError(ctx, ErrorOf(err, ErrUnavailable))
			return
		}
		WriteJSON(ctx, 200, m)
	default:
		WriteError(ctx, Errorf(ErrNotFound, "no such peer route"))
	}
}

func writeResults(ctx *fasthttp.RequestCtx, res []raftfsm.Result) {
	b, err := raftfsm.EncodeResults(res)
	if err != nil {
		WriteError(ctx, Errorf(ErrInternal, "%s", err.Error()))
		return
	}
	ctx.SetContentType("application/msgpack")
	ctx.SetBody(b)
}

// WriteJSON answers status with v as JSON.
func WriteJSON(ctx *fasthttp.RequestCtx, status int, v any) {
	b, _ := json.Marshal(v)
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.SetBody(b)
}

// WriteError answers e: its status, and {"error": e} as the body.
func WriteError(ctx *fasthttp.RequestCtx, e *Error) {
	status := e.Status
	if status == 0 {
		status = statusOf(e.Code)
	}
	body := errorBody{Error: e}
	if e.Code == CodeQueueFull {
		body.Handler, body.Depth, body.Limit = e.Handler, e.Depth, e.Limit
	}
	WriteJSON(ctx, status, body)
}
