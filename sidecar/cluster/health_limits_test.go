package cluster

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// healthGet sends GET /healthz on c and reads the answer; the connection
// stays open (keep-alive).
func healthGet(c net.Conn) (int, error) {
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: ax\r\n\r\n"); err != nil {
		return 0, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// The health port holds at most healthMaxConnsPerIP connections from one
// address: the next is closed without an answer, another address is still
// served, and a slot is given back when a connection closes.
func TestServeHealth_ConnsPerIP(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, err := ServeHealth(ctx, "127.0.0.1:0", func(context.Context) error { return nil }, zerolog.Nop(), func(f func()) { go f() })
	if err != nil {
		t.Fatal(err)
	}
	from := func(ip string) (net.Conn, error) {
		d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
		return d.Dial("tcp", addr)
	}
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for i := range healthMaxConnsPerIP {
		c, err := from("127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
		if st, err := healthGet(c); err != nil || st != 200 {
			t.Fatalf("connection %d: %d %v", i, st, err)
		}
	}
	over, err := from("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	defer over.Close()
	if st, err := healthGet(over); err == nil {
		t.Fatalf("connection %d from one address answered %d, want it closed", healthMaxConnsPerIP+1, st)
	}
	other, err := from("127.0.0.2")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if st, err := healthGet(other); err != nil || st != 200 {
		t.Fatalf("another address: %d %v", st, err)
	}
	// A closed connection gives its slot back (once the server has seen
	// the close: poll).
	held[0].Close()
	held = held[1:]
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := from("127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		st, err := healthGet(c)
		if err == nil && st == 200 {
			held = append(held, c)
			break
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatalf("no slot after a connection closed: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The health port answers a request with oversized headers 431 and
// keeps serving.
func TestServeHealth_HeaderLimit(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, err := ServeHealth(ctx, "127.0.0.1:0", func(context.Context) error { return nil }, zerolog.Nop(), func(f func()) { go f() })
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	_, _ = io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: ax\r\nX-Big: "+strings.Repeat("a", 2*healthMaxHeaderBytes)+"\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("oversized headers: %v %v, want 431", resp, err)
	}
	resp.Body.Close()
	c2, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if st, err := healthGet(c2); err != nil || st != 200 {
		t.Fatalf("after: %d %v", st, err)
	}
}
