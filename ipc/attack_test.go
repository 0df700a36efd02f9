//go:build !race

// The race detector allows 8 128 goroutines, fewer than the connections
// these tests hold: they run without it (.ci/test's hostile-input step).

package ipc

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/axsched/ax/internal/attack"
)

// TestAttackIdleHelper is the helper process of TestAttack_* (it skips
// when run on its own).
func TestAttackIdleHelper(t *testing.T) { attack.IdleHelper(t) }

// TestAttack_SocketIdleAndSlowloris holds 10 000 idle connections (in a
// helper process) and 20 slowloris clients (headers one byte every
// 100 ms) on the socket API, and checks that other clients are served
// meanwhile, on the connection they had and on new ones; then that the
// server closed every idle connection without an answer (at
// HeaderTimeout; an answer nobody asked for would confuse an HTTP client)
// and every slowloris one before its headers were in. It logs the other
// clients' p50/p99 latency before, during and after the attack (figures,
// not bounds).
func TestAttack_SocketIdleAndSlowloris(t *testing.T) {
	attack.Require(t)
	const idleConns, slowConns = 10_000, 20
	attack.RaiseNoFile(t, idleConns+2_000)
	path := filepath.Join(t.TempDir(), "ax.sock")
	srv := NewServer(newFakeBackend(), zerolog.Nop(), ServerOptions{HeaderTimeout: 5 * time.Second})
	done := make(chan error, 1)
	go func() { done <- srv.ServeUnix(path) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	})
	dial := func() (net.Conn, error) { return net.DialTimeout("unix", path, 5*time.Second) }
	waitFor(t, 5*time.Second, func() bool {
		c, err := dial()
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	client := func(keepAlive bool) func() error {
		c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
			DisableKeepAlives: !keepAlive,
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "unix", path)
			},
		}}
		return func() error {
			resp, err := c.Post("http://ax/v1/tasks", "application/json", strings.NewReader(`{"handler":"h","payload":{"n":1}}`))
			if err != nil {
				return err
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 201 {
				return fmt.Errorf("status %d", resp.StatusCode)
			}
			return nil
		}
	}
	kept, fresh := client(true), client(false)
	const n = 300
	before := attack.Latencies(t, n, kept)

	idle := attack.StartIdle(t, "TestAttackIdleHelper", "unix", path, idleConns, "")
	slow := attack.StartSlowloris(t, slowConns, "POST /v1/tasks HTTP/1.1\r\nHost: ax\r\nX-Slow: "+strings.Repeat("a", 600)+"\r\n\r\n", dial)
	during := attack.Latencies(t, n, kept)
	attack.Latencies(t, 50, fresh) // new connections are accepted too

	r := idle.Wait(t)
	if r.Dialed != idleConns || r.Silent != idleConns {
		t.Errorf("idle connections: %+v; want all %d dialed and closed by the server without an answer", r, idleConns)
	}
	for i, s := range slow.Wait() {
		if !s.Closed {
			t.Errorf("slowloris %d: the server did not close the connection (sent all %d bytes)", i, s.Sent)
		}
	}
	after := attack.Latencies(t, n, kept)
	t.Logf("other clients' submits (%d each): no attack p50 %v p99 %v; during %d idle + %d slowloris connections p50 %v p99 %v; after p50 %v p99 %v",
		n, attack.Pct(before, 50), attack.Pct(before, 99), idleConns, slowConns,
		attack.Pct(during, 50), attack.Pct(during, 99), attack.Pct(after, 50), attack.Pct(after, 99))
}
