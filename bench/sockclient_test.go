package bench

import (
	"errors"
	"strings"
	"testing"

	"github.com/valyala/fastjson"
)

func TestAppendSubmitRequest(t *testing.T) {
	got := string(appendSubmitRequest([]byte("x"), []byte(`{"id":"a"}`)))
	want := "xPOST /v1/tasks HTTP/1.1\r\nHost: ax\r\nContent-Type: application/json\r\nContent-Length: 10\r\n\r\n{\"id\":\"a\"}"
	if got != want {
		t.Fatalf("request %q, want %q", got, want)
	}
}

func TestParseAnswer(t *testing.T) {
	ok := "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\ncontent-length: 7\r\n\r\n{\"a\":1}"
	for _, tc := range []struct {
		name, in   string
		status     int
		body       string
		keep       bool
		n          int
		incomplete bool
		err        string
	}{
		{name: "whole", in: ok, status: 201, body: `{"a":1}`, keep: true, n: len(ok)},
		{name: "followed by more", in: ok + "HTTP/1.1", status: 201, body: `{"a":1}`, keep: true, n: len(ok)},
		{name: "close", in: "HTTP/1.1 409 Conflict\r\nConnection: close\r\nContent-Length: 2\r\n\r\n{}", status: 409, body: "{}", n: 65},
		{name: "http/1.0", in: "HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", status: 200, body: "", n: 38},
		{name: "http/1.0 keep-alive", in: "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n", status: 200, keep: true, n: 62},
		{name: "header cut", in: ok[:30], incomplete: true},
		{name: "body cut", in: ok[:len(ok)-1], incomplete: true},
		{name: "no length", in: "HTTP/1.1 200 OK\r\n\r\n", err: "without Content-Length"},
		{name: "chunked", in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", err: "Transfer-Encoding"},
		{name: "bad length", in: "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", err: "Content-Length"},
		{name: "bad status", in: "HTTP/1.1 OK\r\nContent-Length: 0\r\n\r\n", err: "status line"},
		{name: "not http", in: "SSH-2.0 x\r\n\r\n", err: "status line"},
		{name: "bad header", in: "HTTP/1.1 200 OK\r\nnocolon\r\n\r\n", err: "header line"},
		{name: "huge header", in: "HTTP/1.1 200 OK\r\nX: " + strings.Repeat("a", 70<<10), err: "64 KiB"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body, keep, n, err := parseAnswer([]byte(tc.in))
			switch {
			case tc.incomplete:
				if !errors.Is(err, errIncomplete) {
					t.Fatalf("err %v, want errIncomplete", err)
				}
				return
			case tc.err != "":
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want one naming %q", err, tc.err)
				}
				return
			case err != nil:
				t.Fatal(err)
			}
			if status != tc.status || string(body) != tc.body || keep != tc.keep || n != tc.n {
				t.Fatalf("got %d %q keep %v n %d, want %d %q keep %v n %d", status, body, keep, n, tc.status, tc.body, tc.keep, tc.n)
			}
		})
	}
}

func TestCheckAnswer(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		body   string
		err    string // "" for nil
	}{
		{"created", 201, `{"id":"t-1","state":"WAITING","handler":"h"}`, ""},
		{"same spec", 200, `{"id":"t-1","state":"WAITING"}`, ""},
		{"other task", 201, `{"id":"t-2","state":"WAITING"}`, `answer for task "t-2"`},
		{"no state", 201, `{"id":"t-1"}`, "state"},
		{"id not a string", 201, `{"id":1,"state":"WAITING"}`, `answer for task ""`},
		{"empty state", 200, `{"id":"t-1","state":""}`, "state"},
		{"truncated", 201, `{"id":"t-1","state":"WAI`, "answer"},
		{"not json", 201, `<html>`, "answer"},
		{"api error", 409, `{"error":{"code":"conflict","message":"task t-1 exists with another spec"}}`, "409 conflict: task t-1 exists"},
		{"other error", 502, `bad gateway`, "502: bad gateway"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var p fastjson.Parser
			err := checkAnswer(&p, tc.status, []byte(tc.body), "t-1")
			if tc.err == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("err %v, want one containing %q", err, tc.err)
			}
		})
	}
}

// BenchmarkCheckAnswer checks the answer the bench's callers get for each
// submit: a node's task view, as ax dev answers one (336 bytes).
func BenchmarkCheckAnswer(b *testing.B) {
	body := []byte(`{"id":"axb5f3a0-3-1234","handler":"ax-bench.throughput","state":"WAITING","priority":2,"attempts":0,` +
		`"max_attempts":4,"timeout":"30s","delay":"24h0m0s","next_run_at":"2026-12-08T15:52:30.641Z","run":1,` +
		`"snoozes":0,"created_at":"2026-12-07T15:52:30.64Z","updated_at":"2026-12-07T15:52:30.64Z",` +
		`"trace_id":"9211d8805bf5bf7b814639e67215e649"}`)
	var p fastjson.Parser
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if err := checkAnswer(&p, 201, body, "axb5f3a0-3-1234"); err != nil {
			b.Fatal(err)
		}
	}
}
