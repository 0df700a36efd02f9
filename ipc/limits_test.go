package ipc

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// A connection past MaxConns is answered 503 and closed; a new
// connection that sends nothing is closed at HeaderTimeout without an
// answer; one that sends its headers too slowly gets 400 with a code.
func TestServer_ConnectionLimits(t *testing.T) {
	ts := startServer(t, ServerOptions{MaxConns: 3, HeaderTimeout: 300 * time.Millisecond})
	dial := func() net.Conn {
		c, err := net.Dial("unix", ts.path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		return c
	}
	get := func(c net.Conn) (*http.Response, error) {
		if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: ax\r\n\r\n"); err != nil {
			return nil, err
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		return resp, err
	}

	// Silent close of a connection that sent nothing.
	c := dial()
	if b, err := io.ReadAll(c); err != nil || len(b) != 0 {
		t.Fatalf("idle new connection: read %q, %v; want a close without an answer", b, err)
	}
	// A slow request line: 400 bad_request.
	c = dial()
	_, _ = io.WriteString(c, "GET /heal")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 400 || !strings.Contains(string(b), `"code":"bad_request"`) {
		t.Fatalf("slow headers: %d %s", resp.StatusCode, b)
	}

	// MaxConns: three keep-alive connections are held, the fourth is
	// refused. (The connections above give their slots back once the
	// server has closed its end: until then a new one may be refused.)
	for range 3 {
		waitFor(t, 5*time.Second, func() bool {
			resp, err := get(dial())
			return err == nil && resp.StatusCode == 200
		})
	}
	over := dial()
	b, _ = io.ReadAll(over)
	if !strings.HasPrefix(string(b), "HTTP/1.1 503") {
		t.Fatalf("connection past MaxConns: %q, want 503 and a close", b)
	}
}
