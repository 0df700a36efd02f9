package peertls

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"github.com/rs/zerolog"

	"github.com/axsched/ax/internal/rawio"
)

// Authenticator authenticates one new connection, on the side that dialled
// it (Client) or accepted it (Server), before any other byte is exchanged,
// and returns the connection to use from then on (the same or a wrapper:
// a *tls.Conn). ctx carries the handshake's deadline. A non-nil error means
// the peer is not trusted; the caller closes conn.
type Authenticator interface {
	Client(ctx context.Context, conn net.Conn, addr string) (net.Conn, error)
	Server(ctx context.Context, conn net.Conn) (net.Conn, error)
}

// Defaults of StreamConfig.
const (
	// HandshakeTimeoutDefault bounds an accepted connection's handshake.
	HandshakeTimeoutDefault = 5 * time.Second
	// MaxPendingHandshakesDefault bounds the accepted connections whose
	// handshake is under way; more are closed at once.
	MaxPendingHandshakesDefault = 256
)

// ListenerConfig configures a Listener.
type ListenerConfig struct {
	// Auth authenticates every accepted connection (its Server side).
	Auth Authenticator
	// HandshakeTimeout bounds an accepted connection's handshake
	// (HandshakeTimeoutDefault when 0).
	HandshakeTimeout time.Duration
	// MaxPendingHandshakes bounds the handshakes under way
	// (MaxPendingHandshakesDefault when 0); a connection past it is
	// closed at once.
	MaxPendingHandshakes int
	// Log receives the refused connections (rate-limited: logBurst lines
	// per logWindow, then a count of the ones left out).
	Log zerolog.Logger
	// Port names the port in the log lines ("raft port", "peer API").
	Port string
}

// Listener is a net.Listener whose Accept returns only connections that
// passed Config.Auth's server side. The handshakes run aside, at most
// MaxPendingHandshakes at once, each bounded by HandshakeTimeout, so a
// slow or silent client holds no other connection up; a refused one is
// closed and logged with its remote address.
type Listener struct {
	cfg  ListenerConfig
	ln   net.Listener
	conn chan net.Conn
	done chan struct{}
	once sync.Once
	sem  chan struct{}
	lim  logLimiter
	wg   sync.WaitGroup
}

// NewListener wraps ln (which it owns from then on) and starts accepting.
func NewListener(ln net.Listener, cfg ListenerConfig) *Listener {
	if cfg.HandshakeTimeout <= 0 {
		cfg.HandshakeTimeout = HandshakeTimeoutDefault
	}
	if cfg.MaxPendingHandshakes <= 0 {
		cfg.MaxPendingHandshakes = MaxPendingHandshakesDefault
	}
	if cfg.Port == "" {
		cfg.Port = "peer port"
	}
	l := &Listener{cfg: cfg, ln: ln, conn: make(chan net.Conn), done: make(chan struct{}), sem: make(chan struct{}, cfg.MaxPendingHandshakes)}
	l.wg.Add(1)
	go l.acceptLoop()
	return l
}

// ErrClosed is Accept's error once the Listener is closed.
var ErrClosed = errors.New("listener closed")

// Accept implements net.Listener: the next connection that passed its
// handshake; ErrClosed after Close.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conn:
		return c, nil
	case <-l.done:
		return nil, ErrClosed
	}
}

// Close implements net.Listener: it stops accepting, closes the
// connections whose handshake is under way and waits for their goroutines.
func (l *Listener) Close() error {
	var err error
	l.once.Do(func() {
		close(l.done)
		err = l.ln.Close()
		l.wg.Wait()
	})
	return err
}

// Addr implements net.Listener.
func (l *Listener) Addr() net.Addr { return l.ln.Addr() }

func (l *Listener) acceptLoop() {
	defer l.wg.Done()
	backoff := 5 * time.Millisecond
	for {
		c, err := l.ln.Accept()
		if err != nil {
			select {
			case <-l.done:
				return
			default:
			}
			// A transient error (EMFILE): back off as net/http does.
			time.Sleep(backoff)
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 5 * time.Millisecond
		select {
		case l.sem <- struct{}{}:
		default:
			l.refuse(c, errors.New("too many handshakes under way"))
			continue
		}
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			defer func() { <-l.sem }()
			l.handshake(c)
		}()
	}
}

func (l *Listener) handshake(c net.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), l.cfg.HandshakeTimeout)
	defer cancel()
	go func() { // Close ends a handshake under way
		select {
		case <-l.done:
			c.Close()
		case <-ctx.Done():
		}
	}()
	_ = c.SetDeadline(time.Now().Add(l.cfg.HandshakeTimeout))
	ac, err := l.cfg.Auth.Server(ctx, c)
	if err != nil {
		l.refuse(c, err)
		return
	}
	_ = ac.SetDeadline(time.Time{})
	select {
	case l.conn <- ac:
	case <-l.done:
		ac.Close()
	}
}

// refuse closes c and logs why, rate-limited.
func (l *Listener) refuse(c net.Conn, why error) {
	remote := c.RemoteAddr().String()
	c.Close()
	if ok, suppressed := l.lim.allow(time.Now()); ok {
		ev := l.cfg.Log.Warn().Str("port", l.cfg.Port).Str("remote", remote).Err(why)
		if suppressed > 0 {
			ev = ev.Int("suppressed", suppressed)
		}
		ev.Msg(l.cfg.Port + ": connection refused: it did not authenticate")
	}
}

// StreamConfig configures a StreamLayer.
type StreamConfig struct {
	// Bind is the TCP HOST:PORT to listen on (--raft-addr).
	Bind string
	// Advertise is the address other nodes dial (nil: the listener's);
	// it must not be an unspecified IP (0.0.0.0), as raft requires.
	Advertise net.Addr
	// Auth authenticates every connection, both ways.
	Auth Authenticator
	// HandshakeTimeout and MaxPendingHandshakes bound the accept side
	// (ListenerConfig); a dialled connection's handshake is bounded by
	// the dial's own timeout.
	HandshakeTimeout     time.Duration
	MaxPendingHandshakes int
	// Log receives the refused connections (rate-limited).
	Log zerolog.Logger
	// Hold, when set, makes every connection read and write with raw
	// system calls while it reports true (rawio.Wrap, under the
	// handshake); nil: never.
	Hold func() bool
}

// StreamLayer is a raft.StreamLayer over TCP whose every connection is
// authenticated (Config.Auth) before raft sees it: Dial returns only a
// connection whose handshake succeeded, and Accept (a Listener) only hands
// raft the connections that passed theirs. Use it with
// raft.NewNetworkTransport*.
type StreamLayer struct {
	*Listener
	auth Authenticator
	adv  net.Addr
	hold func() bool
}

var _ raft.StreamLayer = (*StreamLayer)(nil)

// Listen listens on cfg.Bind and returns the StreamLayer; it handshakes
// accepted connections in the background until Close.
func Listen(cfg StreamConfig) (*StreamLayer, error) {
	if cfg.Auth == nil {
		return nil, errors.New("peertls: StreamConfig.Auth is nil")
	}
	ln, err := net.Listen("tcp", cfg.Bind)
	if err != nil {
		return nil, err
	}
	adv := cfg.Advertise
	if adv == nil {
		adv = ln.Addr()
	}
	if ta, ok := adv.(*net.TCPAddr); !ok || ta.IP == nil || ta.IP.IsUnspecified() {
		ln.Close()
		return nil, fmt.Errorf("raft advertise address %v: not a routable TCP address", adv)
	}
	l := NewListener(rawio.WrapListener(ln, cfg.Hold), ListenerConfig{Auth: cfg.Auth, HandshakeTimeout: cfg.HandshakeTimeout, MaxPendingHandshakes: cfg.MaxPendingHandshakes, Log: cfg.Log, Port: "raft port"})
	return &StreamLayer{Listener: l, auth: cfg.Auth, adv: adv, hold: cfg.Hold}, nil
}

// Dial implements raft.StreamLayer: a TCP dial and the client side of the
// handshake, both within timeout.
func (s *StreamLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	deadline := time.Now().Add(timeout)
	c, err := net.DialTimeout("tcp", string(addr), timeout)
	if err != nil {
		return nil, err
	}
	c = rawio.Wrap(c, s.hold)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	_ = c.SetDeadline(deadline)
	ac, err := s.auth.Client(ctx, c, string(addr))
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("raft connection to %s: handshake: %w", addr, err)
	}
	_ = ac.SetDeadline(time.Time{})
	return ac, nil
}

// Addr implements net.Listener: the advertised address.
func (s *StreamLayer) Addr() net.Addr { return s.adv }

// logLimiter lets logBurst lines through per logWindow and counts the
// others, reported with the next line let through.
type logLimiter struct {
	mu         sync.Mutex
	start      time.Time
	n, dropped int
}

const (
	logWindow = 10 * time.Second
	logBurst  = 5
)

func (l *logLimiter) allow(now time.Time) (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.start) >= logWindow {
		l.start, l.n = now, 0
	}
	if l.n >= logBurst {
		l.dropped++
		return false, 0
	}
	l.n++
	d := l.dropped
	l.dropped = 0
	return true, d
}
