package sidecar_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/axsched/ax/sidecar"
	"github.com/axsched/ax/sidecar/raftstore"
	"github.com/axsched/ax/sidecar/sidecartest"
)

// TestSocketIOAuto_ClusterOverRawConnections runs three nodes whose
// connections all read and write with raw system calls (OnOneP always
// true, as on one P under the adaptive controller, and SocketIO auto):
// Raft over TCP, plain and behind a cluster token's handshake, submits
// over each node's Unix socket, and the followers' forwards over the peer
// API. Every submit is answered, stored on every node and delivered. The
// Raft log's calls go through the runtime here (RaftLogSync handoff), so
// that OnOneP is asked by the connections alone (raftstore's tests cover
// the log's raw calls).
func TestSocketIOAuto_ClusterOverRawConnections(t *testing.T) {
	for _, token := range []string{"", "tok-raw-io"} {
		name := "plain"
		if token != "" {
			name = "token"
		}
		t.Run(name, func(t *testing.T) {
			var asked [3]atomic.Int64
			c := sidecartest.New(t, sidecartest.Options{Nodes: 3, Config: func(i int, cfg *sidecar.Config) {
				cfg.RaftTransport = nil // Raft over TCP on cfg.RaftAddr
				cfg.PeerDial = nil      // forwards over TCP
				cfg.ClusterToken = token
				cfg.RaftLogSync = raftstore.LogSyncHandoff
				cfg.OnOneP = func() bool { asked[i].Add(1); return true }
			}})
			c.WaitLeader()
			for i := range 3 {
				asked[i].Store(0)
			}
			var ids []string
			for i := range 3 {
				for k := range 4 {
					id := fmt.Sprintf("raw-%d-%d", i, k)
					submitOverSocket(t, c.Socket(i), `{"id":"`+id+`","handler":"h","delay":"1s"}`)
					ids = append(ids, id)
				}
			}
			for i := range 3 {
				if asked[i].Load() == 0 {
					t.Fatalf("node %d's connections never asked whether to hold the P", i)
				}
			}
			c.Advance(time.Second)
			for i := range 3 {
				for _, id := range ids {
					c.WaitState(i, id, "SUCCESS")
				}
			}
		})
	}
}

// submitOverSocket posts body to POST /v1/tasks on the node's Unix
// socket, again while the answer is 503 (no leader yet), and fails the
// test unless it is 201.
func submitOverSocket(t *testing.T, sock, body string) {
	t.Helper()
	cl := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
	defer cl.CloseIdleConnections()
	for try := 0; ; try++ {
		resp, err := cl.Post("http://ax/v1/tasks", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatalf("submit %s: %v", body, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusCreated {
			return
		}
		if resp.StatusCode != http.StatusServiceUnavailable || try == 50 {
			t.Fatalf("submit %s: %d %s", body, resp.StatusCode, b)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
