//go:build !race

// The race detector allows 8 128 goroutines, fewer than the connections
// these tests hold: they run without it (.ci/test's hostile-input step).

package peerapi

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/axsched/ax/internal/attack"
	"github.com/axsched/ax/raftfsm"
)

// TestAttackIdleHelper is the helper process of TestAttack_* (it skips
// when run on its own).
func TestAttackIdleHelper(t *testing.T) { attack.IdleHelper(t) }

// TestAttack_PeerIdleAndSlowloris opens 10 000 idle connections from one
// address (127.0.0.1, in a helper process) and 20 slowloris clients
// (127.0.0.3) to the peer API, and checks that a node's Client (from
// 127.0.0.2) is served meanwhile, on its pooled connections and on new
// ones; that the attacker's connections were refused past MaxConnsPerIP
// (429) and the rest closed at HeaderTimeout without an answer; and that
// every slowloris connection was closed before its headers were in. It
// logs the Client's p50/p99 latency before, during and after the attack
// (figures, not bounds).
func TestAttack_PeerIdleAndSlowloris(t *testing.T) {
	attack.Require(t)
	const idleConns, slowConns = 10_000, 20
	attack.RaiseNoFile(t, idleConns+2_000)
	node := &fakeNode{info: Info{ID: "n1", RaftAddr: "127.0.0.1:1", PeerAddr: "127.0.0.1:2"},
		results: []raftfsm.Result{{Index: 4}}}
	addr := serve(t, ServerConfig{Node: node, Token: "s3cret-token"})
	from := func(ip string) func(string) (net.Conn, error) {
		d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
		return func(a string) (net.Conn, error) { return d.Dial("tcp", a) }
	}
	client := func() func() error {
		c := NewClient("s3cret-token", nil)
		c.SetDial(from("127.0.0.2"))
		return func() error {
			_, err := c.Propose(context.Background(), addr, []raftfsm.Command{{Type: raftfsm.CmdCancel, Cancel: &raftfsm.Cancel{ID: "a", AtMs: 1}}})
			return err
		}
	}
	pooled := client()
	const n = 300
	before := attack.Latencies(t, n, pooled)

	idle := attack.StartIdle(t, "TestAttackIdleHelper", "tcp", addr, idleConns, "127.0.0.1")
	slowDial := from("127.0.0.3")
	slow := attack.StartSlowloris(t, slowConns, "POST "+PathPropose+" HTTP/1.1\r\nHost: ax\r\nX-Slow: "+strings.Repeat("a", 600)+"\r\n\r\n",
		func() (net.Conn, error) { return slowDial(addr) })
	during := attack.Latencies(t, n, pooled)
	attack.Latencies(t, 50, client()) // a new client, new connections

	r := idle.Wait(t)
	refused := r.Answers["HTTP/1.1 429 Too Many Requests"]
	if r.Dialed != idleConns || r.Open != 0 || refused != r.Answered || refused == 0 || r.Silent == 0 {
		t.Errorf("idle connections: %+v; want all %d dialed, those past %d refused with 429, the others closed without an answer", r, idleConns, MaxConnsPerIP)
	}
	for i, s := range slow.Wait() {
		if !s.Closed {
			t.Errorf("slowloris %d: the server did not close the connection (sent all %d bytes)", i, s.Sent)
		}
	}
	after := attack.Latencies(t, n, pooled)
	t.Logf("idle connections: %d refused (429), %d closed by the server at HeaderTimeout", refused, r.Silent)
	t.Logf("a peer's proposals (%d each): no attack p50 %v p99 %v; during %d idle + %d slowloris connections p50 %v p99 %v; after p50 %v p99 %v",
		n, attack.Pct(before, 50), attack.Pct(before, 99), idleConns, slowConns,
		attack.Pct(during, 50), attack.Pct(during, 99), attack.Pct(after, 50), attack.Pct(after, 99))
}
