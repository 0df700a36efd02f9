//go:build unix

package bench

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestSockSubmitterAgainstNetHTTP runs the bench's blocking submitter
// against a net/http server on a temporary Unix socket: the server parses
// the request as any HTTP/1.1 server would, and the submitter reuses its
// connection, reads the API's errors, and connects again after an answer
// that closes the connection.
func TestSockSubmitterAgainstNetHTTP(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "ax.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var conns atomic.Int32
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var req struct {
				ID string `json:"id"`
			}
			if r.Method != http.MethodPost || r.URL.Path != "/v1/tasks" || r.Header.Get("Content-Type") != "application/json" {
				w.WriteHeader(http.StatusBadRequest)
				io.WriteString(w, `{"error":{"code":"invalid","message":"bad request line or header"}}`)
				return
			}
			if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
				w.WriteHeader(http.StatusBadRequest)
				io.WriteString(w, `{"error":{"code":"invalid","message":"body"}}`)
				return
			}
			switch {
			case req.ID == "dup":
				w.WriteHeader(http.StatusConflict)
				io.WriteString(w, `{"error":{"code":"conflict","message":"task dup exists"}}`)
				return
			case strings.HasPrefix(req.ID, "close"):
				w.Header().Set("Connection", "close")
			}
			// A body larger than the submitter's first buffer, with its
			// length (as ax's server sends it).
			body, _ := json.Marshal(map[string]any{"id": req.ID, "state": "WAITING", "payload": strings.Repeat("p", 6000)})
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Content-Length", strconv.Itoa(len(body)))
			w.WriteHeader(http.StatusCreated)
			w.Write(body)
		}),
		ConnState: func(_ net.Conn, st http.ConnState) {
			if st == http.StateNew {
				conns.Add(1)
			}
		},
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })

	s := newSockSubmitter(sock, 10*time.Second)
	defer s.close()
	post := func(id string) error {
		return s.submit([]byte(`{"id":"`+id+`","handler":"h"}`), id, time.Now().Add(10*time.Second))
	}
	for _, id := range []string{"a", "b", "c"} {
		if err := post(id); err != nil {
			t.Fatalf("submit %s: %v", id, err)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("%d connections for 3 submits, want 1 (keep-alive)", n)
	}
	if err := post("dup"); err == nil || !strings.Contains(err.Error(), "409 conflict: task dup exists") {
		t.Fatalf("submit dup: %v, want the API's conflict", err)
	}
	if err := post("close-1"); err != nil {
		t.Fatal(err)
	}
	if err := post("d"); err != nil {
		t.Fatal(err)
	}
	if n := conns.Load(); n != 2 {
		t.Fatalf("%d connections, want 2 (a new one after Connection: close)", n)
	}
}

// TestSockSubmitterBrokenConnection: a connection the server drops
// before answering is an error, and the next submit connects again.
func TestSockSubmitterBrokenConnection(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "ax.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		buf := make([]byte, 4096)
		c.Read(buf)
		c.Close() // no answer
		c, err = ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		c.Read(buf)
		body := `{"id":"b","state":"WAITING"}`
		io.WriteString(c, "HTTP/1.1 201 Created\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"+body)
	}()
	s := newSockSubmitter(sock, 10*time.Second)
	defer s.close()
	if err := s.submit([]byte(`{"id":"a"}`), "a", time.Time{}); err == nil || !strings.Contains(err.Error(), "closed before the answer") {
		t.Fatalf("submit a: %v, want the connection closed before the answer", err)
	}
	if err := s.submit([]byte(`{"id":"b"}`), "b", time.Time{}); err != nil {
		t.Fatalf("submit b on a new connection: %v", err)
	}
}
