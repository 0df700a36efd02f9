package peertls

import (
	"context"
	"crypto/tls"
	"net"
)

// TLSAuth is the Authenticator of mutual TLS: a TLS 1.3 handshake with
// the Reloader's current certificate and CA pool, both sides verifying the
// other's certificate.
type TLSAuth struct{ R *Reloader }

var _ Authenticator = TLSAuth{}

// Client runs the client side of the handshake on conn, dialled to addr
// (HOST:PORT; HOST is checked in the server's certificate unless
// Files.ServerName is set). It returns the *tls.Conn.
func (a TLSAuth) Client(ctx context.Context, conn net.Conn, addr string) (net.Conn, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	c := tls.Client(conn, a.R.ClientConfig(host))
	if err := c.HandshakeContext(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// Server runs the server side of the handshake on conn; a client without
// a certificate the CA pool verifies is refused.
func (a TLSAuth) Server(ctx context.Context, conn net.Conn) (net.Conn, error) {
	c := tls.Server(conn, a.R.ServerConfig())
	if err := c.HandshakeContext(ctx); err != nil {
		return nil, err
	}
	return c, nil
}
