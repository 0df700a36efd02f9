package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	stdlog "log"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/axsched/ax/ipc"
)

// HealthHandler serves GET /healthz (200 while the node runs) and GET
// /readyz (200 when ready() is nil, else 503 with the API's error shape:
// the *ipc.Error's code and message, else not_ready and the error's
// text); every other path is 404, another method 405. ready is called
// with a 2 s deadline.
func HealthHandler(ready func(context.Context) error) http.Handler {
	write := func(w http.ResponseWriter, status int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(v)
	}
	fail := func(w http.ResponseWriter, status int, code, msg string) {
		write(w, status, map[string]any{"error": map[string]string{"code": code, "message": msg}})
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" && r.URL.Path != "/readyz" {
			fail(w, http.StatusNotFound, ipc.ErrNotFound.Code, "the health port serves GET /healthz and /readyz only")
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			fail(w, http.StatusMethodNotAllowed, ipc.ErrMethodNotAllowed.Code, r.Method+" "+r.URL.Path+": only GET")
			return
		}
		if r.URL.Path == "/healthz" {
			write(w, http.StatusOK, map[string]string{"status": "ok"})
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		err := ready(ctx)
		if err == nil {
			write(w, http.StatusOK, map[string]string{"status": "ready"})
			return
		}
		code, msg := ipc.ErrNotReady.Code, err.Error()
		var e *ipc.Error
		if errors.As(err, &e) && e.Message != "" {
			code, msg = e.Code, e.Message
		}
		fail(w, http.StatusServiceUnavailable, code, msg)
	})
}

// The health port's limits (docs/DESIGN.md section 11). Its clients are
// probes (the kubelet's, a load balancer's) that send one small GET and
// wait at most a few seconds.
const (
	// healthHeaderTimeout bounds the wait for a request and its reading
	// (it has no body worth reading).
	healthHeaderTimeout = 5 * time.Second
	// healthWriteTimeout bounds an answer: /readyz waits at most 2 s.
	healthWriteTimeout = 10 * time.Second
	// healthIdleTimeout closes keep-alive connections idle this long.
	healthIdleTimeout = time.Minute
	// healthMaxHeaderBytes bounds a request's headers.
	healthMaxHeaderBytes = 8 << 10
	// healthMaxConns and healthMaxConnsPerIP bound the connections held
	// at once, in all and from one address; one more is closed at once.
	healthMaxConns      = 256
	healthMaxConnsPerIP = 32
)

// limitListener wraps ln so that it holds at most total connections, and
// at most perIP from one IP address: a connection over either bound is
// closed as soon as it is accepted (a probe retries), so a client that
// opens connections without end cannot take the descriptors of the node.
func limitListener(ln net.Listener, total, perIP int) net.Listener {
	return &connLimiter{Listener: ln, total: total, perIP: perIP, byIP: map[string]int{}}
}

type connLimiter struct {
	net.Listener
	total, perIP int

	mu   sync.Mutex
	open int
	byIP map[string]int
}

func (l *connLimiter) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		ip := ""
		if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
			ip = a.IP.String()
		}
		l.mu.Lock()
		if l.open >= l.total || ip != "" && l.byIP[ip] >= l.perIP {
			l.mu.Unlock()
			_ = c.Close()
			continue
		}
		l.open++
		if ip != "" {
			l.byIP[ip]++
		}
		l.mu.Unlock()
		return &limitedConn{Conn: c, l: l, ip: ip}, nil
	}
}

// release gives back the slot of a closed connection.
func (l *connLimiter) release(ip string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.open--
	if ip != "" {
		if l.byIP[ip]--; l.byIP[ip] <= 0 {
			delete(l.byIP, ip)
		}
	}
}

type limitedConn struct {
	net.Conn
	l    *connLimiter
	ip   string
	once sync.Once
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c.ip) })
	return err
}

// ServeHealth listens on addr and serves HealthHandler(ready) until ctx
// ends, in goroutines started with goRun. It returns the address it
// listens on (its port resolved when addr asked for port 0).
func ServeHealth(ctx context.Context, addr string, ready func(context.Context) error, log zerolog.Logger, goRun func(func())) (string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("health-addr: %w", err)
	}
	srv := &http.Server{
		Handler:           HealthHandler(ready),
		ReadHeaderTimeout: healthHeaderTimeout,
		ReadTimeout:       healthHeaderTimeout,
		WriteTimeout:      healthWriteTimeout,
		IdleTimeout:       healthIdleTimeout,
		MaxHeaderBytes:    healthMaxHeaderBytes,
		ErrorLog:          stdlog.New(io.Discard, "", 0), // a client's bad request is not the node's error
	}
	ln = limitListener(ln, healthMaxConns, healthMaxConnsPerIP)
	goRun(func() {
		<-ctx.Done()
		_ = srv.Close()
	})
	goRun(func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error().Err(err).Msg("health port stopped")
		}
	})
	return ln.Addr().String(), nil
}
