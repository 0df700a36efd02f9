package ipc

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"
)

// The socket API's fuzz targets drive the real request handler
// (Server.Handler, routing included) in process over the fake backend;
// FuzzRawHTTP drives the fasthttp.Server itself over an in-memory
// loopback connection, so that its request parser and ErrorHandler are covered too.
// The property of all of them: no panic, no hang, never a 5xx (the fake
// backend does not fail), and every 4xx carries the API's error shape
// {"error": {"code": "...", "message": "..."}} with a non-empty code. The
// seed corpora are in testdata/fuzz/<target>, the cases below, and the
// requests of the other tests of this package.

// fuzzServer is a Server over a fresh fake backend, logging nowhere.
func fuzzServer() *Server {
	return NewServer(newFakeBackend(), zerolog.Nop(), ServerOptions{RequestTimeout: time.Second})
}

// fuzzDo answers one request with s's handler and checks the reply.
func fuzzDo(t *testing.T, s *Server, method, uri string, body []byte) (status int, reply []byte) {
	t.Helper()
	var req fasthttp.Request
	req.Header.SetMethod(method)
	req.SetRequestURI(uri)
	req.Header.SetContentType("application/json")
	req.SetBody(body)
	var ctx fasthttp.RequestCtx
	ctx.Init(&req, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}, nil)
	s.Handler()(&ctx)
	status, reply = ctx.Response.StatusCode(), ctx.Response.Body()
	checkReply(t, method+" "+uri, status, reply)
	return status, reply
}

// checkReply fails t when a reply breaks the property above.
func checkReply(t *testing.T, what string, status int, body []byte) {
	t.Helper()
	switch {
	case status >= 500:
		t.Fatalf("%s: %d %s", what, status, body)
	case status >= 400:
		var e struct {
			Error struct {
				Code    string `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal(body, &e); err != nil || e.Error.Code == "" || e.Error.Message == "" {
			t.Fatalf("%s: %d with body %q: not the API's error shape (%v)", what, status, body, err)
		}
	case status < 200:
		t.Fatalf("%s: status %d", what, status)
	}
}

// submitSeeds are submit requests: valid ones of every kind and the
// invalid ones TestServer_BadInput names.
var submitSeeds = []string{
	`{"handler":"h"}`,
	`{"id":"order|42","handler":"order.timeout","payload":{"id":42},"delay":"5s","priority":1,"max_attempts":3,"timeout":"30s"}`,
	`{"handler":"h","run_at":"2026-01-02T15:04:05Z","payload_base64":"AAEC"}`,
	`{"handler":"h","cron":"0 2 * * *","timezone":"Europe/Berlin","repeats":3,"until":"2030-01-01T00:00:00Z"}`,
	`{"handler":"h","every":"5m","backoff":{"initial":"1s","max":"1m","multiplier":2}}`,
	`{"handler":"h","labels":{"a":"b"},"route_key":"k","retention":"24h","if_exists":"overwrite"}`,
	`{"handler":"h","cron":"0 25 * * *"}`,
	`{"handler":"h","delay":"-1s"}`,
	`{"handler":"h","priority":1.5}`,
	`{"handler":"h","payload":1,"payload_base64":"AA=="}`,
	`{"id":"a\nb","handler":"h"}`,
	`{"id":"\ud800","handler":"h\u0000"}`,
	`{"handler":"h"} {}`,
	`["h"]`,
	``,
}

func FuzzSubmit(f *testing.F) {
	for _, s := range submitSeeds {
		f.Add([]byte(s))
	}
	s := fuzzServer()
	f.Fuzz(func(t *testing.T, body []byte) {
		status, reply := fuzzDo(t, s, "POST", "/v1/tasks", body)
		if status == 200 || status == 201 {
			var task Task
			if err := json.Unmarshal(reply, &task); err != nil || task.ID == "" {
				t.Fatalf("accepted %q, reply %q does not decode as a task (%v)", body, reply, err)
			}
			// What was accepted reads back.
			if st, _ := fuzzDo(t, s, "GET", "/v1/tasks/"+url.PathEscape(task.ID), nil); st != 200 {
				t.Fatalf("accepted %q as %q, GET answers %d", body, task.ID, st)
			}
		}
	})
}

func FuzzBatch(f *testing.F) {
	for _, s := range submitSeeds {
		f.Add([]byte(`{"tasks":[` + s + `]}`))
	}
	f.Add([]byte(`{"tasks":[{"handler":"a"},{"handler":"b","id":"x"},{"handler":"c","id":"x"}]}`))
	f.Add([]byte(`{"tasks":[]}`))
	f.Add([]byte(`{"tasks":null}`))
	f.Add([]byte(`{"tasks":[1,"x",null,[]]}`))
	f.Add([]byte(`{}`))
	s := fuzzServer()
	f.Fuzz(func(t *testing.T, body []byte) {
		status, reply := fuzzDo(t, s, "POST", "/v1/tasks/batch", body)
		if status == 200 || status == 207 {
			if !json.Valid(reply) {
				t.Fatalf("accepted %q, reply %q is not JSON", body, reply)
			}
		}
	})
}

// FuzzRequest sends any method, path, query string and body: every route,
// its path ids and names, its query parameters (listing's filters and
// cursor, consistency, purge) and the small bodies (heartbeat, result,
// executor registration, purge, pause and resume, retry).
func FuzzRequest(f *testing.F) {
	for _, c := range []struct{ method, uri, body string }{
		{"GET", "/v1/tasks?handler=h&state=waiting&limit=10&after=x&label=a%3Db", ""},
		{"GET", "/v1/tasks?state=bogus&limit=-1&limit=2", ""},
		{"GET", "/v1/tasks/order%7C42?consistency=strong", ""},
		{"HEAD", "/v1/tasks/x?consistency=weird", ""},
		{"DELETE", "/v1/tasks/x?purge=true", ""},
		{"DELETE", "/v1/tasks/a%zz?purge=maybe", ""},
		{"POST", "/v1/tasks/purge", `{"handler":"h","state":"succeeded","finished_before":"2026-01-01T00:00:00Z","limit":100}`},
		{"POST", "/v1/tasks/purge", `{"older_than":"24h"}`},
		{"POST", "/v1/tasks/x/retry", ``},
		{"POST", "/v1/tasks/x/heartbeat", `{"attempt":1}`},
		{"POST", "/v1/tasks/x/heartbeat", `{"attempt":-1}`},
		{"POST", "/v1/tasks/x/result", `{"attempt":1,"outcome":"success"}`},
		{"POST", "/v1/tasks/x/result", `{"attempt":2,"outcome":"retry","error":"boom","retry_after":"5s"}`},
		{"POST", "/v1/tasks/x/pause", `{}`},
		{"POST", "/v1/tasks/x/resume", ``},
		{"GET", "/v1/handlers", ""},
		{"POST", "/v1/handlers/h/pause", `{}`},
		{"POST", "/v1/handlers/h%2Fx/resume", `[]`},
		{"GET", "/v1/executors", ""},
		{"POST", "/v1/executors", `{"name":"e","url":"http://127.0.0.1:8080/run","handlers":["h","*"],"concurrency":4}`},
		{"POST", "/v1/executors", `{"name":"","url":"ftp://x"}`},
		{"DELETE", "/v1/executors/e", ""},
		{"GET", "/v1/cluster", ""},
		{"DELETE", "/v1/cluster/members/n2", ""},
		{"GET", "/healthz", ""},
		{"GET", "/readyz", ""},
		{"GET", "/metrics", ""},
		{"PUT", "/v1/tasks", "{}"},
		{"GET", "/v1/tasks/", ""},
		{"GET", "//v1/../v1/tasks", ""},
		{"OPTIONS", "*", ""},
	} {
		f.Add(c.method, c.uri, []byte(c.body))
	}
	f.Fuzz(func(t *testing.T, method, uri string, body []byte) {
		if method == "" || strings.ContainsAny(method, " \r\n") {
			return // not a method a client can send
		}
		s := fuzzServer()
		fuzzDo(t, s, method, uri, body)
		s.cancelBase()
	})
}

// FuzzRawHTTP writes arbitrary bytes as a request to the fasthttp.Server
// the socket API runs (its parser, limits and ErrorHandler): whatever it
// answers is a status line, and a 4xx or 5xx from its ErrorHandler has the
// API's error shape. It reads one reply, or none when the server closes
// the connection.
func FuzzRawHTTP(f *testing.F) {
	for _, c := range []string{
		"GET /healthz HTTP/1.1\r\nHost: ax\r\n\r\n",
		"POST /v1/tasks HTTP/1.1\r\nHost: ax\r\nContent-Type: application/json\r\nContent-Length: 15\r\n\r\n{\"handler\":\"h\"}",
		"POST /v1/tasks HTTP/1.1\r\nHost: ax\r\nTransfer-Encoding: chunked\r\n\r\nf\r\n{\"handler\":\"h\"}\r\n0\r\n\r\n",
		"POST /v1/tasks HTTP/1.1\r\nHost: ax\r\nContent-Length: 99999999999\r\n\r\n",
		"POST /v1/tasks HTTP/1.1\r\nHost: ax\r\nContent-Length: -1\r\n\r\n",
		"GET /v1/tasks/a%zz HTTP/1.1\r\nHost: ax\r\n\r\n",
		"GET /v1/tasks HTTP/1.0\r\n\r\n",
		"GET\r\n\r\n",
		"\x00\x01\x02\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: ax\r\n" + strings.Repeat("X: y\r\n", 300) + "\r\n",
	} {
		f.Add([]byte(c))
	}
	s := NewServer(newFakeBackend(), zerolog.Nop(), ServerOptions{RequestTimeout: time.Second, ReadTimeout: time.Second})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.Fatal(err)
	}
	go s.Serve(ln)
	f.Cleanup(func() { _ = s.Shutdown(context.Background()) })
	f.Fuzz(func(t *testing.T, raw []byte) {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		go func() {
			_, _ = c.Write(raw)
			// Half-close: a request cut short is read as such, not
			// waited for.
			_ = c.(*net.TCPConn).CloseWrite()
		}()
		var resp fasthttp.Response
		resp.SkipBody = bytes.HasPrefix(raw, []byte("HEAD"))
		br := bufio.NewReader(c)
		if _, err := br.Peek(1); err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatalf("no reply to %q and no close within 5 s", raw)
			}
			return // closed without a reply
		}
		if err := resp.Read(br); err != nil {
			t.Fatalf("reply to %q does not parse: %v", raw, err)
		}
		if resp.StatusCode() >= 400 && !resp.SkipBody {
			// The fake backend does not fail, so no 5xx either.
			checkReply(t, "raw "+string(raw), resp.StatusCode(), resp.Body())
		}
	})
}
