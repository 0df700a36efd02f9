package sidecar_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/axsched/ax/internal/syncbuf"
	"github.com/axsched/ax/sidecar"
	"github.com/axsched/ax/sidecar/peerapi"
	"github.com/axsched/ax/sidecar/sidecartest"
)

// capturingT is a testing.T whose log lines (the nodes' zerolog output,
// through zerolog.NewTestWriter) are also kept.
type capturingT struct {
	*testing.T
	mu  sync.Mutex
	buf bytes.Buffer
}

func (c *capturingT) Log(args ...any) {
	c.mu.Lock()
	for _, a := range args {
		if s, ok := a.(string); ok {
			c.buf.WriteString(s)
		}
	}
	c.mu.Unlock()
	c.T.Log(args...)
}

func (c *capturingT) Logf(format string, args ...any) {
	c.mu.Lock()
	fmt.Fprintf(&c.buf, format+"\n", args...)
	c.mu.Unlock()
	c.T.Logf(format, args...)
}

func (c *capturingT) text() string { c.mu.Lock(); defer c.mu.Unlock(); return c.buf.String() }

// The cluster token and task payloads appear in no log line (the kit
// logs warnings and up; ipc's TestServer_PayloadsStayOutOfLogs checks its
// debug lines), no error answer of the socket API or the peer API, and not in
// GET /v1/cluster, whatever a client sends: a task submitted on a
// follower (forwarded with the token), a submit refused for another
// field, peer API requests with a wrong token, without one and malformed
// ones that carry it.
func TestSecretsStayOutOfLogsAndAnswers(t *testing.T) {
	const token, payload = "tok-Zq81-SECRET", "payload-Xw42-SECRET"
	stdlog := &syncbuf.Buffer{} // fasthttp's own messages go to the standard logger
	log.SetOutput(stdlog)
	t.Cleanup(func() { log.SetOutput(os.Stderr) })
	ct := &capturingT{T: t}
	peerAddrs := make([]string, 2)
	c := sidecartest.New(ct, sidecartest.Options{Nodes: 2, Config: func(i int, cfg *sidecar.Config) {
		cfg.ClusterToken = token
		peerAddrs[i] = cfg.PeerAddr
	}})
	leader := c.WaitLeader()
	follower := 1 - leader
	spec := sidecartest.Spec("secret-task", "h")
	spec.Payload = []byte(`"` + payload + `"`)
	// Submits are idempotent by id: one that meets a leader change (a
	// two-node cluster under -race has them) is sent again.
	var err error
	for try := 0; try < 50; try++ {
		if _, _, err = c.API(follower).Submit(context.Background(), spec); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	c.Advance(time.Second)
	c.WaitState(follower, "secret-task", "SUCCESS")

	var answers []string
	sock := func(i int, method, path, body string) {
		cl := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", c.Socket(i))
		}}}
		req, _ := http.NewRequest(method, "http://ax"+path, strings.NewReader(body))
		resp, err := cl.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		answers = append(answers, string(b))
	}
	for i := range 2 {
		sock(i, "GET", "/v1/cluster", "")
		sock(i, "POST", "/v1/tasks", `{"handler":"h","payload":"`+payload+`","colour":"red"}`)
		sock(i, "POST", "/v1/tasks", `{"handler":"h","payload":"`+payload+`","delay":"-1s"}`)
		sock(i, "POST", "/v1/tasks", `{"handler":"h","payload":"`+payload+``)
		sock(i, "POST", "/v1/tasks/batch", `{"tasks":[{"handler":"h","payload":"`+payload+`"},{"payload":"`+payload+`"}]}`)
	}
	if !strings.Contains(answers[0], `"members"`) {
		t.Fatalf("GET /v1/cluster: %s", answers[0])
	}
	raw := func(addr, req string) {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		_, _ = io.WriteString(conn, req)
		b, _ := io.ReadAll(conn)
		answers = append(answers, string(b))
	}
	for _, addr := range peerAddrs {
		raw(addr, "GET "+peerapi.PathInfo+" HTTP/1.1\r\nHost: ax\r\n"+peerapi.TokenHeader+": "+token+"x\r\nConnection: close\r\n\r\n")
		raw(addr, "POST "+peerapi.PathJoin+" HTTP/1.1\r\nHost: ax\r\nConnection: close\r\nContent-Length: 8\r\n\r\n{\"id\":1}")
		body := "\x01" + payload
		raw(addr, "POST "+peerapi.PathPropose+" HTTP/1.1\r\nHost: ax\r\n"+peerapi.TokenHeader+": "+token+"\r\nConnection: close\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"+body)
		raw(addr, "GET "+peerapi.PathInfo+" HTTP/1.1\r\nHost: ax\r\n"+peerapi.TokenHeader+": "+token+"\r\nBad Header "+payload+"\r\n\r\n")
		raw(addr, "GET "+peerapi.PathInfo+" HTTP/1.1\r\nHost: ax\r\n"+peerapi.TokenHeader+": "+token+"\r\nContent-Length: x"+payload+"\r\n\r\n")
	}
	// fasthttp logs a connection's error from its worker, which may still
	// run after the client read the end of the connection.
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline) && !strings.Contains(stdlog.String(), "peer API: error when serving connection"); {
		time.Sleep(10 * time.Millisecond)
	}
	for what, text := range map[string]string{"the nodes' logs": ct.text(), "the standard logger": stdlog.String(), "the answers": strings.Join(answers, "\n")} {
		for _, secret := range []string{token, payload} {
			if i := strings.Index(text, secret); i >= 0 {
				t.Errorf("%s hold %q: ...%s...", what, secret, text[max(0, i-200):min(len(text), i+100)])
			}
		}
	}
	if !strings.Contains(stdlog.String(), "peer API: error when serving connection") {
		t.Errorf("the standard logger's output is not captured: %q", stdlog.String())
	}
}
