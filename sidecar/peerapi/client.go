package peerapi

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/axsched/ax/internal/rawio"
	"github.com/axsched/ax/raftfsm"
)

// Client calls other nodes' peer APIs and remembers their addresses. Its
// methods return an *Error (wrapped, naming the peer and the call) for
// every error answer; a transport error (dial, timeout, the context)
// as it came.
type Client struct {
	c     *fasthttp.Client
	token string
	now   func() time.Time
	// dial is the raw dial (SetDial; nil: TCP); tlsConfig, when set,
	// makes every connection TLS (SetTLS).
	dial      func(addr string) (net.Conn, error)
	tlsConfig func(host string) *tls.Config
	// hold, when set, makes every dialled connection read and write with
	// raw system calls while it reports true (SetHold, rawio.Wrap).
	hold func() bool

	mu     sync.Mutex
	byID   map[string]string // node id → peer addr
	byRaft map[string]string // raft addr → peer addr
}

// NewClient returns a Client that sends token (when set) with every
// request; now is the clock of the deadlines it sends (time.Now when nil).
func NewClient(token string, now func() time.Time) *Client {
	if now == nil {
		now = time.Now
	}
	return &Client{
		token: token,
		now:   now,
		c: &fasthttp.Client{
			Name:                "ax-peer",
			MaxConnsPerHost:     64,
			MaxIdleConnDuration: time.Minute,
			ReadTimeout:         Timeout,
			WriteTimeout:        Timeout,
			MaxResponseBodySize: maxBody,
		},
		byID:   map[string]string{},
		byRaft: map[string]string{},
	}
}

// SetDial makes the client dial peers with dial (addr is HOST:PORT)
// instead of a TCP dial; for tests (sidecar.Config.PeerDial). Call it
// before the first request.
func (p *Client) SetDial(dial func(addr string) (net.Conn, error)) {
	p.dial = dial
	p.installDial()
}

// SetHold makes every connection dialled from now on read and write with
// raw system calls while hold reports true (rawio.Wrap, under TLS); nil:
// never. Call it before the first request.
func (p *Client) SetHold(hold func() bool) {
	p.hold = hold
	p.installDial()
}

// SetTLS makes the client speak TLS to every peer: config returns the
// tls.Config of one dial to host (peertls.Reloader.ClientConfig, built
// per dial so that a reloaded certificate is used). The handshake is part
// of the dial, within Timeout; its failure is a dial failure (DialFailed).
// Call it before the first request.
func (p *Client) SetTLS(config func(host string) *tls.Config) {
	p.tlsConfig = config
	p.installDial()
}

// installDial sets the fasthttp client's dial: with TLS, dialTLS; with a
// test dial, dialRaw; with only a hold function, dialTCP, which keeps the
// request's own time-out for the dial as fasthttp's default does; with
// none, fasthttp's default.
func (p *Client) installDial() {
	p.c.Dial, p.c.DialTimeout = nil, nil
	switch {
	case p.tlsConfig != nil:
		p.c.Dial = p.dialTLS
	case p.dial != nil:
		p.c.Dial = p.dialRaw
	case p.hold != nil:
		p.c.DialTimeout = p.dialTCP
	}
}

// dialTCP dials addr within timeout (0: none), as fasthttp's default
// dial does, and wraps the connection (SetHold).
func (p *Client) dialTCP(addr string, timeout time.Duration) (net.Conn, error) {
	var c net.Conn
	var err error
	if timeout > 0 {
		c, err = fasthttp.DialTimeout(addr, timeout)
	} else {
		c, err = fasthttp.Dial(addr)
	}
	if err != nil {
		return nil, err
	}
	return rawio.Wrap(c, p.hold), nil
}

// TLSHandshakeError is a failed TLS handshake with a peer: the request was
// not sent.
type TLSHandshakeError struct {
	Addr string
	Err  error
}

func (e *TLSHandshakeError) Error() string {
	return fmt.Sprintf("peer %s: tls handshake: %v", e.Addr, e.Err)
}
func (e *TLSHandshakeError) Unwrap() error { return e.Err }

// dialRaw is the dial under TLS, or without it: SetDial's or TCP, wrapped
// (SetHold).
func (p *Client) dialRaw(addr string) (net.Conn, error) {
	var c net.Conn
	var err error
	if p.dial != nil {
		c, err = p.dial(addr)
	} else {
		c, err = fasthttp.DialTimeout(addr, Timeout)
	}
	if err != nil {
		return nil, err
	}
	return rawio.Wrap(c, p.hold), nil
}

func (p *Client) dialTLS(addr string) (net.Conn, error) {
	deadline := time.Now().Add(Timeout)
	raw, err := p.dialRaw(addr)
	if err != nil {
		return nil, err
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	c := tls.Client(raw, p.tlsConfig(host))
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	if err := c.HandshakeContext(ctx); err != nil {
		raw.Close()
		return nil, &TLSHandshakeError{Addr: addr, Err: err}
	}
	return c, nil
}

// Learn records the peer address of the node with id and raft address
// (either may be ""); an empty peerAddr is ignored.
func (p *Client) Learn(id, raftAddr, peerAddr string) {
	if peerAddr == "" {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if id != "" {
		p.byID[id] = peerAddr
	}
	if raftAddr != "" {
		p.byRaft[raftAddr] = peerAddr
	}
}

// Known returns the peer address learnt for node id, else for its raft
// address, else "".
func (p *Client) Known(id, raftAddr string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if a := p.byID[id]; a != "" {
		return a
	}
	return p.byRaft[raftAddr]
}

// Do sends one request and returns the status and a copy of the body. It
// gives up when ctx ends (returning context.Cause(ctx)) or after Timeout;
// ctx's deadline goes with the request (DeadlineHeader).
func (p *Client) Do(ctx context.Context, method, addr, path, ctype string, body []byte) (int, []byte, error) {
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	release := func() {
		fasthttp.ReleaseRequest(req)
		fasthttp.ReleaseResponse(resp)
	}
	req.SetRequestURI("http://" + addr + path)
	req.Header.SetMethod(method)
	if p.token != "" {
		req.Header.Set(TokenHeader, p.token)
	}
	if body != nil {
		req.Header.SetContentType(ctype)
		req.SetBody(body)
	}
	timeout := Timeout
	if d, ok := ctx.Deadline(); ok {
		timeout = min(timeout, d.Sub(p.now()))
		req.Header.Set(DeadlineHeader, strconv.FormatInt(max(timeout.Milliseconds(), 1), 10))
	}
	answer := func(err error) (int, []byte, error) {
		defer release()
		if err != nil {
			return 0, nil, err
		}
		return resp.StatusCode(), append([]byte(nil), resp.Body()...), nil
	}
	if ctx.Done() == nil {
		return answer(p.c.DoTimeout(req, resp, timeout))
	}
	// fasthttp does not watch a context: run the call aside and give up
	// on it when ctx ends (a forward whose leader was replaced). The
	// abandoned call keeps req and resp until its own timeout.
	done := make(chan error, 1)
	go func() { done <- p.c.DoTimeout(req, resp, timeout) }()
	select {
	case err := <-done:
		return answer(err)
	case <-ctx.Done():
		go func() {
			<-done
			release()
		}()
		return 0, nil, context.Cause(ctx)
	}
}

// call sends one request; an answer with another status than want is
// returned as an *Error (legacy gives the codes of an older node's bare
// answers by status).
func (p *Client) call(ctx context.Context, method, addr, path, ctype string, body []byte, want int, legacy map[int]string) ([]byte, error) {
	status, b, err := p.Do(ctx, method, addr, path, ctype, body)
	if err != nil {
		return nil, err
	}
	if status != want {
		return nil, &callError{addr: addr, path: path, err: decodeError(status, b, legacy)}
	}
	return b, nil
}

// callError names the peer and the call of an error answer; it unwraps
// to the *Error.
type callError struct {
	addr, path string
	err        *Error
}

func (e *callError) Error() string {
	return fmt.Sprintf("peer %s: %s: http %d %s: %s", e.addr, e.path, e.err.Status, e.err.Code, e.err.Message)
}

func (e *callError) Unwrap() error { return e.err }

// callJSON sends in (when not nil) as JSON and decodes a 200 answer into
// out (when not nil).
func (p *Client) callJSON(ctx context.Context, method, addr, path string, in, out any, legacy map[int]string) error {
	var body []byte
	if in != nil {
		body, _ = json.Marshal(in)
	}
	b, err := p.call(ctx, method, addr, path, "application/json", body, 200, legacy)
	if err != nil || out == nil {
		return err
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("peer %s: %s: bad answer: %w", addr, path, err)
	}
	return nil
}

// Info asks the node at addr who it is, and learns its addresses.
func (p *Client) Info(ctx context.Context, addr string) (Info, error) {
	var pi Info
	if err := p.callJSON(ctx, "GET", addr, PathInfo, nil, &pi, nil); err != nil {
		return pi, err
	}
	p.Learn(pi.ID, pi.RaftAddr, pi.PeerAddr)
	return pi, nil
}

// Join asks the node at addr (which forwards to the leader) to add req to
// the cluster; it answers its own Info.
func (p *Client) Join(ctx context.Context, addr string, req Info) (Info, error) {
	var pi Info
	err := p.callJSON(ctx, "POST", addr, PathJoin, req, &pi, nil)
	return pi, err
}

// Propose sends cmds to the leader at addr and returns one result per
// command. The leader's refusals come as *Error: ErrNotLeader,
// ErrQueueFull (with the backlog), ErrStorageUnavailable (with the cause).
func (p *Client) Propose(ctx context.Context, addr string, cmds []raftfsm.Command) ([]raftfsm.Result, error) {
	data, err := raftfsm.EncodeEntry(cmds)
	if err != nil {
		return nil, err
	}
	body, err := p.call(ctx, "POST", addr, PathPropose, "application/octet-stream", data, 200,
		map[int]string{http.StatusTooManyRequests: CodeQueueFull})
	if err != nil {
		return nil, err
	}
	res, err := raftfsm.DecodeResults(body)
	if err != nil {
		return nil, err
	}
	if len(res) != len(cmds) {
		return nil, fmt.Errorf("peer %s: %d results for %d commands", addr, len(res), len(cmds))
	}
	return res, nil
}

// Report sends this node's load report to the leader at addr.
func (p *Client) Report(ctx context.Context, addr string, r LoadReport) (ReportReply, error) {
	var rr ReportReply
	err := p.callJSON(ctx, "POST", addr, PathReport, r, &rr, nil)
	return rr, err
}

// Members asks the leader at addr for its view of every member
// (ErrNotLeader from another node).
func (p *Client) Members(ctx context.Context, addr string) (map[string]MemberStatus, error) {
	var out map[string]MemberStatus
	err := p.callJSON(ctx, "GET", addr, PathMembers, nil, &out, nil)
	return out, err
}

// Remove asks the node at addr (which forwards to the leader) to remove
// node id from the configuration: ErrNoSuchMember, ErrLastVoter.
func (p *Client) Remove(ctx context.Context, addr, id string) error {
	b, _ := json.Marshal(map[string]string{"id": id})
	_, err := p.call(ctx, "POST", addr, PathRemove, "application/json", b, 204,
		map[int]string{http.StatusNotFound: CodeNoSuchMember, http.StatusConflict: CodeLastVoter})
	return err
}

// Task reads a task from the node at addr; nil, nil when it has none.
func (p *Client) Task(ctx context.Context, addr, id string) (*raftfsm.Task, error) {
	t, _, err := p.TaskAt(ctx, addr, id)
	return t, err
}

// TaskAt is Task with the applied index of the node at addr when it read
// the task (0 when it has no such task: nil, 0, nil).
func (p *Client) TaskAt(ctx context.Context, addr, id string) (*raftfsm.Task, uint64, error) {
	return p.readTask(ctx, addr, "?id="+url.QueryEscape(id))
}

// StrongTask is a linearizable read of a task on the leader at addr;
// nil, nil when there is no such task.
func (p *Client) StrongTask(ctx context.Context, addr, id string) (*raftfsm.Task, error) {
	t, _, err := p.readTask(ctx, addr, "?consistency=strong&id="+url.QueryEscape(id))
	return t, err
}

func (p *Client) readTask(ctx context.Context, addr, query string) (*raftfsm.Task, uint64, error) {
	body, err := p.call(ctx, "GET", addr, PathTask+query, "", nil, 200, map[int]string{http.StatusNotFound: CodeNotFound})
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			return nil, 0, nil
		}
		return nil, 0, err
	}
	rs, err := raftfsm.DecodeResults(body)
	if err != nil || len(rs) != 1 || rs[0].Task == nil {
		return nil, 0, fmt.Errorf("peer %s: task: bad answer", addr)
	}
	return rs[0].Task, rs[0].Index, nil
}

// DialFailed reports whether a call's error says the request never reached
// the peer: the connection was refused, could not be dialled in time, its
// TLS handshake failed, or the client had no free connection. Any other error may have been
// delivered (and a proposal committed) before it failed.
func DialFailed(err error) bool {
	var dial *fasthttp.ErrDialWithUpstream
	var hs *TLSHandshakeError
	return errors.As(err, &dial) || errors.As(err, &hs) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, fasthttp.ErrDialTimeout) || errors.Is(err, fasthttp.ErrNoFreeConns)
}
