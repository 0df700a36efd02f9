package callback

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/axsched/ax/raftfsm"
)

// A 204 or 304 answer ends with its headers (RFC 9110 15.3.5, 15.4.5),
// but an executor may declare a body on one and send it anyway (Python's
// http.server writes whatever the handler writes), and late: a second
// small write held back by Nagle's algorithm until the client's next
// segment acknowledges the first, so no peek of the idle connection sees
// it. The connection must not carry another callback, or that callback's
// answer is read after those bytes (malformed HTTP version
// `{"ok":true}HTTP/1.1`): another task's attempt, which the executor ran,
// fails and is run again.
func TestCaller_BodyDeclaredOnANoBodyAnswerEndsTheConnection(t *testing.T) {
	for _, first := range []string{
		"HTTP/1.1 204 No Content\r\nContent-Length: 11\r\n\r\n",
		"HTTP/1.1 304 Not Modified\r\nContent-Length: 11\r\n\r\n",
		"HTTP/1.1 204 No Content\r\nTransfer-Encoding: chunked\r\n\r\n",
	} {
		t.Run(strings.Fields(first)[1]+"/"+strings.SplitN(strings.SplitN(first, "\r\n", 2)[1], ":", 2)[0], func(t *testing.T) {
			ln, err := net.Listen("unix", filepath.Join(t.TempDir(), "x.sock"))
			if err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			t.Cleanup(func() { ln.Close(); wg.Wait() })
			var mu sync.Mutex
			conns := 0
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					mu.Lock()
					conns++
					mu.Unlock()
					wg.Add(1)
					go func() {
						defer wg.Done()
						defer c.Close()
						c.SetDeadline(time.Now().Add(10 * time.Second))
						br := bufio.NewReader(c)
						for n := 0; ; n++ {
							req, err := http.ReadRequest(br)
							if err != nil {
								return
							}
							io.Copy(io.Discard, req.Body)
							if req.Header.Get("Ax-Task-Id") == "first" {
								io.WriteString(c, first)
								time.Sleep(300 * time.Millisecond) // the body comes late
								io.WriteString(c, `{"ok":true}`)
								continue
							}
							io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
						}
					}()
				}
			}()
			base := "unix://" + ln.Addr().String()
			c := newTestCaller(t)
			cb := cb1
			cb.TaskID = "first"
			if out := c.Execute(context.Background(), base, cb); out.Status != 204 && out.Status != 304 {
				t.Fatalf("first callback: %+v, want its 204 or 304", out)
			}
			cb.TaskID = "second"
			if out := c.Execute(context.Background(), base, cb); out.Kind != raftfsm.OutcomeSuccess || string(out.Body) != "ok" {
				t.Fatalf("second callback: kind %v, status %d, error %q, want a success on a new connection", out.Kind, out.Status, out.Error)
			}
			mu.Lock()
			defer mu.Unlock()
			if conns != 2 {
				t.Fatalf("%d connections, want 2", conns)
			}
		})
	}
}
