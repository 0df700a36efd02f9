package rawio

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// pair returns two connected stream connections of network ("tcp" on
// 127.0.0.1 or "unix" in a temp dir), the accepted one wrapped with hold
// through WrapListener and the dialled one wrapped with Wrap.
func pair(t testing.TB, network string, hold func() bool) (accepted, dialled net.Conn) {
	t.Helper()
	addr := "127.0.0.1:0"
	if network == "unix" {
		addr = filepath.Join(t.TempDir(), "s")
	}
	ln, err := net.Listen(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	wl := WrapListener(ln, hold)
	t.Cleanup(func() { wl.Close() })
	got := make(chan net.Conn, 1)
	go func() {
		c, err := wl.Accept()
		if err != nil {
			close(got)
			return
		}
		got <- c
	}()
	d, err := net.Dial(network, ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	dialled = Wrap(d, hold)
	accepted = <-got
	if accepted == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { accepted.Close(); dialled.Close() })
	return accepted, dialled
}

func always() bool { return true }

func TestWrapKeepsWhatItCannotWrap(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if got := Wrap(a, always); got != a {
		t.Fatalf("net.Pipe conn (no syscall.Conn) wrapped: %T", got)
	}
	_, d := pair(t, "tcp", nil)
	if _, ok := d.(*Conn); ok {
		t.Fatal("nil hold wrapped a connection")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if WrapListener(ln, nil) != ln {
		t.Fatal("nil hold wrapped a listener")
	}
}

// TestConnCarriesABulkTransfer sends 8 MiB each way at once through
// both kinds of socket, more than the socket buffers hold, so that raw
// writes meet EAGAIN and wait in the poller, and raw reads wait for data.
func TestConnCarriesABulkTransfer(t *testing.T) {
	for _, network := range []string{"tcp", "unix"} {
		t.Run(network, func(t *testing.T) {
			var held atomic.Int64
			hold := func() bool { held.Add(1); return true }
			a, b := pair(t, network, hold)
			if _, ok := a.(*Conn); !ok {
				t.Fatalf("accepted %T, want *Conn", a)
			}
			if _, ok := b.(*Conn); !ok {
				t.Fatalf("dialled %T, want *Conn", b)
			}
			const size = 8 << 20
			send := func(c net.Conn, seed byte) []byte {
				p := make([]byte, size)
				for i := range p {
					p[i] = seed + byte(i%251)
				}
				return p
			}
			pa, pb := send(a, 1), send(b, 7)
			errs := make(chan error, 2)
			write := func(c net.Conn, p []byte) {
				n, err := c.Write(p)
				if err == nil && n != len(p) {
					err = io.ErrShortWrite
				}
				errs <- err
			}
			go write(a, pa)
			go write(b, pb)
			gotA, gotB := make(chan []byte, 1), make(chan []byte, 1)
			read := func(c net.Conn, out chan<- []byte) {
				p := make([]byte, size)
				_, err := io.ReadFull(c, p)
				if err != nil {
					t.Error(err)
				}
				out <- p
			}
			go read(a, gotA)
			go read(b, gotB)
			for range 2 {
				if err := <-errs; err != nil {
					t.Fatal(err)
				}
			}
			if !bytes.Equal(<-gotB, pa) || !bytes.Equal(<-gotA, pb) {
				t.Fatal("bytes differ after the transfer")
			}
			if held.Load() == 0 {
				t.Fatal("hold was never asked")
			}
		})
	}
}

// TestConnHoldFalseUsesTheWrappedConn checks that a Conn asks hold on
// every call and, while it reports false, reads and writes through the
// wrapped connection's own methods.
func TestConnHoldFalseUsesTheWrappedConn(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			io.Copy(c, c) // echo
			c.Close()
		}
	}()
	d, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	cc := &countingConn{TCPConn: d.(*net.TCPConn)}
	var hold atomic.Bool
	c := Wrap(cc, hold.Load)
	defer c.Close()
	buf := make([]byte, 5)
	roundTrip := func() {
		t.Helper()
		if _, err := c.Write([]byte("hello")); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "hello" {
			t.Fatalf("read %q, %v", buf, err)
		}
	}
	roundTrip()
	if cc.reads.Load() == 0 || cc.writes.Load() != 1 {
		t.Fatalf("hold false: %d reads, %d writes through the wrapped conn, want them all", cc.reads.Load(), cc.writes.Load())
	}
	hold.Store(true)
	r, w := cc.reads.Load(), cc.writes.Load()
	roundTrip()
	if cc.reads.Load() != r || cc.writes.Load() != w {
		t.Fatalf("hold true: the wrapped conn's Read/Write were called (%d, %d more)", cc.reads.Load()-r, cc.writes.Load()-w)
	}
	// A write longer than MaxRaw goes through the wrapped conn; a raw
	// read asks for MaxRaw bytes at most, whatever its buffer.
	big := bytes.Repeat([]byte("x"), 4*MaxRaw)
	if _, err := c.Write(big); err != nil {
		t.Fatal(err)
	}
	if cc.writes.Load() != w+1 {
		t.Fatalf("a write of %d bytes: %d through the wrapped conn, want 1", len(big), cc.writes.Load()-w)
	}
	got := 0
	for got < len(big) {
		n, err := c.Read(make([]byte, 4*MaxRaw))
		if err != nil {
			t.Fatal(err)
		}
		if n > MaxRaw {
			t.Fatalf("a raw read returned %d bytes, more than MaxRaw (%d)", n, MaxRaw)
		}
		got += n
	}
	if cc.reads.Load() != r {
		t.Fatalf("hold true: %d reads through the wrapped conn", cc.reads.Load()-r)
	}
}

type countingConn struct {
	*net.TCPConn
	reads, writes atomic.Int64
}

func (c *countingConn) Read(b []byte) (int, error) {
	c.reads.Add(1)
	return c.TCPConn.Read(b)
}

func (c *countingConn) Write(b []byte) (int, error) {
	c.writes.Add(1)
	return c.TCPConn.Write(b)
}

// TestConnErrorsAsNetsOwn checks that a raw Read and Write fail as the
// net package's would: io.EOF at the end of the stream, a timeout past a
// deadline, net.ErrClosed after Close, and the peer's reset as a
// syscall error, each in a *net.OpError.
func TestConnErrorsAsNetsOwn(t *testing.T) {
	t.Run("eof", func(t *testing.T) {
		a, b := pair(t, "tcp", always)
		b.Close()
		if n, err := a.Read(make([]byte, 8)); n != 0 || err != io.EOF {
			t.Fatalf("read after the peer closed: %d, %v; want 0, io.EOF", n, err)
		}
	})
	t.Run("deadline", func(t *testing.T) {
		a, _ := pair(t, "tcp", always)
		a.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
		_, err := a.Read(make([]byte, 8))
		var ne net.Error
		if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("read past its deadline: %v; want a timeout", err)
		}
		var oe *net.OpError
		if !errors.As(err, &oe) || oe.Op != "read" {
			t.Fatalf("read past its deadline: %#v; want *net.OpError read", err)
		}
		a.SetWriteDeadline(time.Now().Add(-time.Second))
		if _, err := a.Write([]byte("x")); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("write past its deadline: %v; want a timeout", err)
		}
	})
	t.Run("closed", func(t *testing.T) {
		a, _ := pair(t, "unix", always)
		a.Close()
		if _, err := a.Read(make([]byte, 8)); !errors.Is(err, net.ErrClosed) {
			t.Fatalf("read after Close: %v; want net.ErrClosed", err)
		}
		if _, err := a.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
			t.Fatalf("write after Close: %v; want net.ErrClosed", err)
		}
	})
	t.Run("close unblocks", func(t *testing.T) {
		a, _ := pair(t, "tcp", always)
		done := make(chan error, 1)
		go func() {
			_, err := a.Read(make([]byte, 8)) // waits in the poller: nothing comes
			done <- err
		}()
		time.Sleep(20 * time.Millisecond) // let the read reach the poller
		a.Close()
		select {
		case err := <-done:
			if !errors.Is(err, net.ErrClosed) {
				t.Fatalf("a waiting raw read after Close: %v; want net.ErrClosed", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Close did not end a waiting raw read")
		}
	})
	t.Run("reset", func(t *testing.T) {
		a, b := pair(t, "tcp", always)
		b.(*Conn).Conn.(*net.TCPConn).SetLinger(0) // close sends a reset
		b.Close()                                  // over loopback the reset reaches a's socket within Close
		var err error
		for range 100 { // the first writes may land before the reset is seen
			if _, err = a.Write(make([]byte, 1024)); err != nil {
				break
			}
		}
		if !errors.Is(err, syscall.EPIPE) && !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("write to a reset connection: %v; want EPIPE or ECONNRESET (and no SIGPIPE)", err)
		}
	})
}

// pingPong returns a round trip of 64 bytes over a Unix socket pair, both
// ends raw (hold true): a write of the dialled end, echoed by the accepted
// one, then read back. The echo ends with the test.
func pingPong(tb testing.TB) (roundTrip func() error) {
	a, d := pair(tb, "unix", always)
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 64)
		for {
			if _, err := io.ReadFull(a, buf); err != nil {
				return
			}
			if _, err := a.Write(buf); err != nil {
				return
			}
		}
	}()
	tb.Cleanup(func() { d.Close(); <-done })
	msg, buf := make([]byte, 64), make([]byte, 64)
	return func() error {
		if _, err := d.Write(msg); err != nil {
			return err
		}
		_, err := io.ReadFull(d, buf)
		return err
	}
}

// BenchmarkConnPingPong is one request and answer of 64 bytes each over a
// Unix socket pair, both ends raw (hold true): the system calls and what
// Conn adds to them.
func BenchmarkConnPingPong(b *testing.B) {
	roundTrip := pingPong(b)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if err := roundTrip(); err != nil {
			b.Fatal(err)
		}
	}
}

// A raw Read or Write allocates nothing (each used to allocate its
// closure and the variables it wrote: 8 allocations a round trip).
func TestConnRawCallsAllocateNothing(t *testing.T) {
	roundTrip := pingPong(t)
	allocs := testing.AllocsPerRun(200, func() {
		if err := roundTrip(); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%.1f allocations a round trip, want 0", allocs)
	}
}
