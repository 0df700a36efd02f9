package harness

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// echoServer answers every line with the same line; t.Cleanup closes it.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

// roundTrip writes line through c and reads the echo, waiting at most d.
func roundTrip(c net.Conn, r *bufio.Reader, line string, d time.Duration) (string, error) {
	if _, err := c.Write([]byte(line + "\n")); err != nil {
		return "", err
	}
	_ = c.SetReadDeadline(time.Now().Add(d))
	got, err := r.ReadString('\n')
	return got, err
}

// A cut link is a black hole (the connection stays open, what is written
// is dropped, no echo comes back); Heal closes the connections that lived
// through the cut, and new ones are forwarded again.
func TestFaultProxy_CutIsABlackHoleAndHealCloses(t *testing.T) {
	p := StartFaultProxy(t, "test", echoServer(t))
	c, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	if got, err := roundTrip(c, r, "before", 5*time.Second); err != nil || got != "before\n" {
		t.Fatalf("before the cut: %q, %v", got, err)
	}

	p.Cut()
	if !p.IsCut() {
		t.Fatal("IsCut is false after Cut")
	}
	if _, err := c.Write([]byte("during\n")); err != nil {
		t.Fatalf("write during the cut: %v (a black hole accepts writes)", err)
	}
	WaitFor(t, 5*time.Second, 10*time.Millisecond, "the proxy drops the bytes", func() error {
		if p.dropped.Load() == 0 {
			return errors.New("nothing dropped yet")
		}
		return nil
	})
	_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if got, err := r.ReadString('\n'); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read during the cut: %q, %v; want nothing (the connection open, no echo)", got, err)
	}

	p.Heal()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if got, err := r.ReadString('\n'); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("after Heal the connection that lived through the cut reads %q, %v; want it closed", got, err)
	}
	c2, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if got, err := roundTrip(c2, bufio.NewReader(c2), "after", 5*time.Second); err != nil || got != "after\n" {
		t.Fatalf("a new connection after Heal: %q, %v", got, err)
	}
}
