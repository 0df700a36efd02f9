package peertls

import (
	"context"
	"net"
	"testing"
)

// benchHandshake runs b.N handshakes of a over in-memory connections.
func benchHandshake(b *testing.B, client, server Authenticator) {
	ctx := context.Background()
	for i := 0; i < b.N; i++ {
		c, s := net.Pipe()
		done := make(chan error, 1)
		go func() {
			_, err := server.Server(ctx, s)
			done <- err
		}()
		if _, err := client.Client(ctx, c, "127.0.0.1:1"); err != nil {
			b.Fatal(err)
		}
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		c.Close()
		s.Close()
	}
}

// BenchmarkTokenHandshake is the cost of the Raft port's token handshake
// (both sides, one CPU): two HMAC-SHA256 each and 32 random bytes.
func BenchmarkTokenHandshake(b *testing.B) {
	a := TokenAuth{Token: []byte("a cluster token of some length")}
	benchHandshake(b, a, a)
}

// BenchmarkTLSHandshake is the cost of a full mutual TLS 1.3 handshake
// with ECDSA P-256 certificates (both sides, no session resumption).
func BenchmarkTLSHandshake(b *testing.B) {
	ca := newCA(b, "ca")
	srv := reloader(b, identity(b, b.TempDir(), ca, ca.CertPEM))
	cli := reloader(b, identity(b, b.TempDir(), ca, ca.CertPEM))
	b.ResetTimer()
	benchHandshake(b, TLSAuth{cli}, TLSAuth{srv})
}
