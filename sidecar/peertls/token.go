package peertls

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
)

// The token handshake (TokenAuth), before any Raft frame, in both
// directions of a new connection:
//
//	client → server: magic (4 bytes) | client nonce (32)
//	server → client: magic | server nonce (32) | HMAC(token, "server" | cn | sn)
//	client → server: HMAC(token, "client" | cn | sn)
//	server → client: tokenOK (1 byte)
//
// HMAC is HMAC-SHA256 with the token as key; "server" and "client" are the
// direction labels (serverLabel, clientLabel), so that one side's answer
// is never valid for the other (no reflection). Each side checks the
// other's MAC with hmac.Equal and closes the connection on a mismatch. The
// server's fresh nonce makes a recorded client answer worthless on any
// other connection (no replay); the client's makes the server prove the
// token too, so a node never sends Raft frames to an impostor.
const (
	tokenMagic  = "AXR1"
	nonceSize   = 32
	macSize     = sha256.Size
	serverLabel = "ax-raft-v1 server"
	clientLabel = "ax-raft-v1 client"
	tokenOK     = 0x01
)

// Errors of TokenAuth.
var (
	// ErrNoHandshake: the peer did not open with the handshake (e.g. a
	// raw Raft client).
	ErrNoHandshake = errors.New("peer did not open with the ax token handshake")
	// ErrBadToken: the peer's answer is not the HMAC of this node's token.
	ErrBadToken = errors.New("peer does not hold the cluster token")
)

// TokenAuth is the Authenticator of --cluster-token on the Raft port
// (without TLS): the challenge-response described above. Token must not
// be empty.
type TokenAuth struct{ Token []byte }

var _ Authenticator = TokenAuth{}

func (a TokenAuth) mac(label string, cn, sn []byte) []byte {
	h := hmac.New(sha256.New, a.Token)
	h.Write([]byte(label))
	h.Write(cn)
	h.Write(sn)
	return h.Sum(nil)
}

// setDeadline bounds conn's I/O by ctx's deadline, if any.
func setDeadline(ctx context.Context, conn net.Conn) {
	if d, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(d)
	}
}

// Client runs the client side on conn: ErrBadToken when the server does
// not prove the token or refuses ours; I/O errors as they come.
func (a TokenAuth) Client(ctx context.Context, conn net.Conn, _ string) (net.Conn, error) {
	setDeadline(ctx, conn)
	cn := make([]byte, nonceSize)
	if _, err := rand.Read(cn); err != nil {
		return nil, err
	}
	if _, err := conn.Write(append([]byte(tokenMagic), cn...)); err != nil {
		return nil, fmt.Errorf("token handshake: %w", err)
	}
	in := make([]byte, len(tokenMagic)+nonceSize+macSize)
	if _, err := io.ReadFull(conn, in); err != nil {
		return nil, fmt.Errorf("token handshake: %w", err)
	}
	if string(in[:len(tokenMagic)]) != tokenMagic {
		return nil, ErrNoHandshake
	}
	sn, smac := in[len(tokenMagic):len(tokenMagic)+nonceSize], in[len(tokenMagic)+nonceSize:]
	if !hmac.Equal(smac, a.mac(serverLabel, cn, sn)) {
		return nil, ErrBadToken
	}
	if _, err := conn.Write(a.mac(clientLabel, cn, sn)); err != nil {
		return nil, fmt.Errorf("token handshake: %w", err)
	}
	ok := make([]byte, 1)
	if _, err := io.ReadFull(conn, ok); err != nil || ok[0] != tokenOK {
		return nil, fmt.Errorf("token handshake: server refused our answer: %w", ErrBadToken)
	}
	return conn, nil
}

// Server runs the server side on conn: ErrNoHandshake when the first bytes
// are not the handshake's, ErrBadToken when the client's answer is wrong;
// I/O errors (a deadline) as they come.
func (a TokenAuth) Server(ctx context.Context, conn net.Conn) (net.Conn, error) {
	setDeadline(ctx, conn)
	in := make([]byte, len(tokenMagic)+nonceSize)
	if _, err := io.ReadFull(conn, in[:len(tokenMagic)]); err != nil {
		return nil, fmt.Errorf("token handshake: %w", err)
	}
	if string(in[:len(tokenMagic)]) != tokenMagic {
		return nil, fmt.Errorf("%w (first bytes %x)", ErrNoHandshake, in[:len(tokenMagic)])
	}
	if _, err := io.ReadFull(conn, in[len(tokenMagic):]); err != nil {
		return nil, fmt.Errorf("token handshake: %w", err)
	}
	cn := in[len(tokenMagic):]
	sn := make([]byte, nonceSize)
	if _, err := rand.Read(sn); err != nil {
		return nil, err
	}
	if bytes.Equal(cn, sn) { // 2^-256; refuse rather than reason about it
		return nil, ErrBadToken
	}
	out := append(append([]byte(tokenMagic), sn...), a.mac(serverLabel, cn, sn)...)
	if _, err := conn.Write(out); err != nil {
		return nil, fmt.Errorf("token handshake: %w", err)
	}
	cmac := make([]byte, macSize)
	if _, err := io.ReadFull(conn, cmac); err != nil {
		return nil, fmt.Errorf("token handshake: %w", err)
	}
	if !hmac.Equal(cmac, a.mac(clientLabel, cn, sn)) {
		return nil, ErrBadToken
	}
	if _, err := conn.Write([]byte{tokenOK}); err != nil {
		return nil, fmt.Errorf("token handshake: %w", err)
	}
	return conn, nil
}
