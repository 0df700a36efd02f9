package ipc

import (
	"context"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/axsched/ax/internal/syncbuf"
)

// No log line of the socket API, at debug level, holds a payload: not
// the request log of a submit, nor the error of one refused, nor
// fasthttp's error for a request it could not parse (which quotes the
// request's bytes).
func TestServer_PayloadsStayOutOfLogs(t *testing.T) {
	const payload = "payload-Xw42-SECRET"
	var logs syncbuf.Buffer
	path := filepath.Join(t.TempDir(), "ax.sock")
	srv := NewServer(newFakeBackend(), zerolog.New(&logs).Level(zerolog.DebugLevel), ServerOptions{})
	ts := &testServer{t: t, srv: srv, path: path, done: make(chan error, 1)}
	go func() { ts.done <- srv.ServeUnix(path) }()
	waitFor(t, 5*time.Second, func() bool {
		c, err := net.Dial("unix", path)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	ts.client = &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
	}}
	t.Cleanup(ts.stop)

	ts.do("POST", "/v1/tasks", `{"handler":"h","payload":"`+payload+`"}`)
	ts.do("POST", "/v1/tasks", `{"handler":"h","payload":"`+payload+`","colour":1}`)
	ts.do("POST", "/v1/tasks", `{"handler":"h","payload":"`+payload)
	ts.do("POST", "/v1/tasks/batch", `{"tasks":[{"payload":"`+payload+`"}]}`)
	for _, raw := range []string{
		"POST /v1/tasks HTTP/1.1\r\nHost: ax\r\nBad Header " + payload + "\r\n\r\n",
		"POST /v1/tasks " + payload + "\r\n\r\n",
		"POST /v1/tasks HTTP/1.1\r\nHost: ax\r\nContent-Length: " + payload + "\r\n\r\n",
	} {
		r := ts.raw(raw)
		if strings.Contains(string(r.body), payload) {
			t.Errorf("the answer to %q quotes the payload: %s", raw, r.body)
		}
	}
	if !strings.Contains(logs.String(), "ipc: request") {
		t.Fatalf("no request log captured: %q", logs.String())
	}
	if i := strings.Index(logs.String(), payload); i >= 0 {
		l := logs.String()
		t.Errorf("a log line holds the payload: ...%s...", l[max(0, i-300):min(len(l), i+50)])
	}
}
