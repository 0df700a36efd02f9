package peertls

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/rs/zerolog"
)

// identity writes a node certificate of ca (for 127.0.0.1) and caPEM into
// dir and returns their Files.
func identity(t testing.TB, dir string, ca *KeyPair, caPEM []byte) Files {
	t.Helper()
	kp, err := NewNodeCert(ca, "n1", []net.IP{net.ParseIP("127.0.0.1")}, []string{"localhost"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	f := Files{Cert: filepath.Join(dir, "node.pem"), Key: filepath.Join(dir, "node-key.pem"), CA: filepath.Join(dir, "ca.pem")}
	writeFile(t, f.Cert, kp.CertPEM)
	writeFile(t, f.Key, kp.KeyPEM)
	writeFile(t, f.CA, caPEM)
	return f
}

func writeFile(t testing.TB, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func newCA(t testing.TB, name string) *KeyPair {
	t.Helper()
	ca, err := NewCA(name, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func reloader(t testing.TB, f Files) *Reloader {
	t.Helper()
	r, err := NewReloader(f, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// tlsServer serves TLS handshakes with r on 127.0.0.1 until the test ends.
func tlsServer(t *testing.T, r *Reloader) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", r.ServerConfig())
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
				if c.(*tls.Conn).Handshake() == nil {
					c.Write([]byte{1})
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// handshake dials addr with client's identity and returns the server's
// certificate serial, or the error.
func handshake(client *Reloader, addr string) (string, error) {
	raw, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return "", err
	}
	defer raw.Close()
	raw.SetDeadline(time.Now().Add(5 * time.Second))
	c, err := TLSAuth{client}.Client(context.Background(), raw, addr)
	if err != nil {
		return "", err
	}
	// TLS 1.3: the server's verdict on our certificate comes after the
	// client's handshake ends; the byte it writes proves it accepted us.
	if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
		return "", err
	}
	return c.(*tls.Conn).ConnectionState().PeerCertificates[0].SerialNumber.Text(16), nil
}

func TestLoadNamesTheFileAtFault(t *testing.T) {
	ca, other := newCA(t, "ca"), newCA(t, "other")
	dir := t.TempDir()
	f := identity(t, dir, ca, ca.CertPEM)
	if err := Load(f); err != nil {
		t.Fatalf("good files: %v", err)
	}
	otherKey := identity(t, t.TempDir(), ca, ca.CertPEM).Key
	foreign := identity(t, t.TempDir(), other, other.CertPEM).Cert
	for _, c := range []struct {
		name  string
		f     Files
		field string
	}{
		{"missing cert", Files{Cert: filepath.Join(dir, "nope"), Key: f.Key, CA: f.CA}, FieldCert},
		{"no key set", Files{Cert: f.Cert, CA: f.CA}, FieldKey},
		{"ca not PEM", Files{Cert: f.Cert, Key: f.Key, CA: f.Key}, FieldCA},
		{"key of another cert", Files{Cert: f.Cert, Key: otherKey, CA: f.CA}, FieldKey},
		{"cert of another CA", Files{Cert: foreign, Key: f.Key, CA: f.CA}, FieldKey}, // the key is n1's, not foreign's
		{"cert not under the CA", identityUnder(t, other, ca), FieldCert},
	} {
		err := Load(c.f)
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != c.field {
			t.Errorf("%s: %v, want a FieldError on %s", c.name, err, c.field)
		}
	}
}

// identityUnder writes a certificate of signer with trusted as the CA file.
func identityUnder(t *testing.T, signer, trusted *KeyPair) Files {
	return identity(t, t.TempDir(), signer, trusted.CertPEM)
}

func TestReloaderRotatesTheCertificate(t *testing.T) {
	ca := newCA(t, "ca")
	srvDir := t.TempDir()
	srvFiles := identity(t, srvDir, ca, ca.CertPEM)
	srv := reloader(t, srvFiles)
	client := reloader(t, identity(t, t.TempDir(), ca, ca.CertPEM))
	addr := tlsServer(t, srv)
	first, err := handshake(client, addr)
	if err != nil || first != srv.Certificate().SerialNumber.Text(16) {
		t.Fatalf("handshake: serial %s, %v", first, err)
	}
	if changed, err := srv.Reload(); changed || err != nil {
		t.Fatalf("unchanged files: changed %v, %v", changed, err)
	}
	// New key, same CA, in place.
	identity(t, srvDir, ca, ca.CertPEM)
	if changed, err := srv.Reload(); !changed || err != nil {
		t.Fatalf("new files: changed %v, %v", changed, err)
	}
	second, err := handshake(client, addr)
	if err != nil || second == first || second != srv.Certificate().SerialNumber.Text(16) {
		t.Fatalf("after rotation: serial %s (before %s), %v", second, first, err)
	}
}

func TestReloaderTrustsANewCAAlongsideTheOld(t *testing.T) {
	ca1, ca2 := newCA(t, "ca1"), newCA(t, "ca2")
	bundle := append(append([]byte{}, ca1.CertPEM...), ca2.CertPEM...)
	srvDir := t.TempDir()
	srv := reloader(t, identity(t, srvDir, ca1, ca1.CertPEM))
	addr := tlsServer(t, srv)
	old := reloader(t, identity(t, t.TempDir(), ca1, ca1.CertPEM))
	newer := reloader(t, identity(t, t.TempDir(), ca2, bundle))
	if _, err := handshake(newer, addr); err == nil {
		t.Fatal("a certificate of ca2 was accepted before the server trusts ca2")
	}
	writeFile(t, filepath.Join(srvDir, "ca.pem"), bundle)
	if changed, err := srv.Reload(); !changed || err != nil {
		t.Fatalf("bundle: changed %v, %v", changed, err)
	}
	for name, c := range map[string]*Reloader{"ca1 client": old, "ca2 client": newer} {
		if _, err := handshake(c, addr); err != nil {
			t.Errorf("%s after the bundle: %v", name, err)
		}
	}
	// The server moves to a ca2 certificate: the ca1 client, which trusts
	// only ca1, refuses it; the bundle client takes it.
	identity(t, srvDir, ca2, bundle)
	if changed, err := srv.Reload(); !changed || err != nil {
		t.Fatalf("ca2 certificate: changed %v, %v", changed, err)
	}
	if _, err := handshake(newer, addr); err != nil {
		t.Errorf("ca2 client, ca2 server: %v", err)
	}
	if _, err := handshake(old, addr); err == nil {
		t.Error("a client trusting only ca1 accepted a ca2 server certificate")
	}
}

func TestReloaderKeepsTheOldCertificateOnABadFile(t *testing.T) {
	ca := newCA(t, "ca")
	dir := t.TempDir()
	f := identity(t, dir, ca, ca.CertPEM)
	srv := reloader(t, f)
	before := srv.Certificate().SerialNumber
	other := identity(t, t.TempDir(), ca, ca.CertPEM)
	key, _ := os.ReadFile(other.Key)
	writeFile(t, f.Key, key) // half a rotation: a new key, the old cert
	changed, err := srv.Reload()
	var fe *FieldError
	if changed || !errors.As(err, &fe) || fe.Field != FieldKey {
		t.Fatalf("mismatched key: changed %v, %v", changed, err)
	}
	if srv.Certificate().SerialNumber.Cmp(before) != 0 {
		t.Fatal("the certificate changed to a bad set")
	}
	if _, err := handshake(reloader(t, other), tlsServer(t, srv)); err != nil {
		t.Fatalf("the old certificate no longer serves: %v", err)
	}
	if changed, err := srv.Reload(); changed || err != nil {
		t.Fatalf("the same bad set again: changed %v, %v (want it skipped)", changed, err)
	}
	cert, _ := os.ReadFile(other.Cert)
	writeFile(t, f.Cert, cert) // the rotation completes
	if changed, err := srv.Reload(); !changed || err != nil {
		t.Fatalf("completed rotation: changed %v, %v", changed, err)
	}
}

// pipe runs a's Client against b's Server over an in-memory connection.
func pipe(client, server Authenticator) (clientErr, serverErr error) {
	c, s := net.Pipe()
	defer c.Close()
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := server.Server(ctx, s)
		s.Close()
		done <- err
	}()
	_, clientErr = client.Client(ctx, c, "x:1")
	c.Close()
	return clientErr, <-done
}

func TestTokenHandshake(t *testing.T) {
	good := TokenAuth{Token: []byte("s3cret")}
	if ce, se := pipe(good, good); ce != nil || se != nil {
		t.Fatalf("same token: client %v, server %v", ce, se)
	}
	ce, se := pipe(TokenAuth{Token: []byte("wrong")}, good)
	if !errors.Is(ce, ErrBadToken) || se == nil {
		t.Fatalf("wrong token: client %v, server %v; want both refused", ce, se)
	}
}

// recorder records what is written to a conn.
type recorder struct {
	net.Conn
	w bytes.Buffer
}

func (r *recorder) Write(b []byte) (int, error) { r.w.Write(b); return r.Conn.Write(b) }

func TestTokenHandshakeRefusesAReplay(t *testing.T) {
	auth := TokenAuth{Token: []byte("s3cret")}
	// Record a good client's handshake.
	c, s := net.Pipe()
	rec := &recorder{Conn: c}
	go auth.Server(context.Background(), s)
	if _, err := auth.Client(context.Background(), rec, "x:1"); err != nil {
		t.Fatal(err)
	}
	c.Close()
	s.Close()
	sent := rec.w.Bytes()
	hello, answer := sent[:len(tokenMagic)+nonceSize], sent[len(tokenMagic)+nonceSize:]
	// Replay it on a new connection: the server's nonce is new, so the
	// recorded answer is not its HMAC.
	c, s = net.Pipe()
	defer c.Close()
	done := make(chan error, 1)
	go func() {
		_, err := auth.Server(context.Background(), s)
		s.Close()
		done <- err
	}()
	c.Write(hello)
	io.ReadFull(c, make([]byte, len(tokenMagic)+nonceSize+macSize))
	c.Write(answer)
	if err := <-done; !errors.Is(err, ErrBadToken) {
		t.Fatalf("replayed handshake: server %v, want ErrBadToken", err)
	}
	if n, _ := c.Read(make([]byte, 1)); n != 0 {
		t.Fatal("the server acknowledged a replayed handshake")
	}
}

// streamPair is a StreamLayer with auth on 127.0.0.1 and a raft transport
// over it; its consumer's RPCs come out of the returned channel.
func raftServer(t *testing.T, auth Authenticator, timeout time.Duration) (*raft.NetworkTransport, *StreamLayer) {
	t.Helper()
	sl, err := Listen(StreamConfig{Bind: "127.0.0.1:0", Auth: auth, HandshakeTimeout: timeout, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	tr := raft.NewNetworkTransport(sl, 3, 5*time.Second, io.Discard)
	t.Cleanup(func() { tr.Close() })
	return tr, sl
}

func raftClient(t *testing.T, auth Authenticator) *raft.NetworkTransport {
	t.Helper()
	if auth == nil {
		tr, err := raft.NewTCPTransport("127.0.0.1:0", nil, 3, 5*time.Second, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tr.Close() })
		return tr
	}
	tr, _ := raftServer(t, auth, 0)
	return tr
}

// answerOne answers the first RPC of tr and returns its term.
func answerOne(tr *raft.NetworkTransport) chan uint64 {
	terms := make(chan uint64, 1)
	go func() {
		rpc := <-tr.Consumer()
		terms <- rpc.Command.(*raft.AppendEntriesRequest).Term
		rpc.Respond(&raft.AppendEntriesResponse{Success: true}, nil)
	}()
	return terms
}

func TestRaftPortRefusesAClientWithoutTheHandshake(t *testing.T) {
	auth := TokenAuth{Token: []byte("s3cret")}
	srv, sl := raftServer(t, auth, 0)
	terms := answerOne(srv)
	addr := raft.ServerAddress(sl.Addr().String())
	for name, rogue := range map[string]*raft.NetworkTransport{
		"no handshake": raftClient(t, nil),
		"wrong token":  raftClient(t, TokenAuth{Token: []byte("guess")}),
	} {
		var resp raft.AppendEntriesResponse
		err := rogue.AppendEntries("n1", addr, &raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{ID: []byte("rogue")}, Term: 1_000_000}, &resp)
		if err == nil {
			t.Errorf("%s: AppendEntries answered %+v", name, resp)
		}
	}
	var resp raft.AppendEntriesResponse
	if err := raftClient(t, auth).AppendEntries("n1", addr, &raft.AppendEntriesRequest{Term: 7}, &resp); err != nil || !resp.Success {
		t.Fatalf("good client: %v %+v", err, resp)
	}
	if term := <-terms; term != 7 {
		t.Fatalf("the first RPC the server's raft saw has term %d, want the good client's 7", term)
	}
}

func TestRaftPortSlowHandshakeHoldsNoOneUp(t *testing.T) {
	auth := TokenAuth{Token: []byte("s3cret")}
	srv, sl := raftServer(t, auth, 300*time.Millisecond)
	terms := answerOne(srv)
	slow, err := net.Dial("tcp", sl.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	slow.Write([]byte(tokenMagic[:2])) // and stalls
	var resp raft.AppendEntriesResponse
	if err := raftClient(t, auth).AppendEntries("n1", raft.ServerAddress(sl.Addr().String()), &raft.AppendEntriesRequest{Term: 3}, &resp); err != nil {
		t.Fatalf("good client behind a stalled one: %v", err)
	}
	if <-terms != 3 {
		t.Fatal("wrong RPC")
	}
	// The stalled one is closed at its handshake deadline.
	slow.SetReadDeadline(time.Now().Add(30 * time.Second))
	n, err := slow.Read(make([]byte, 64))
	if n != 0 || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("stalled handshake: read %d bytes, %v; want it closed by the server", n, err)
	}
}

func TestRaftOverTLS(t *testing.T) {
	ca, other := newCA(t, "ca"), newCA(t, "other")
	srv, sl := raftServer(t, TLSAuth{reloader(t, identity(t, t.TempDir(), ca, ca.CertPEM))}, 0)
	terms := answerOne(srv)
	addr := raft.ServerAddress(sl.Addr().String())
	var resp raft.AppendEntriesResponse
	for name, rogue := range map[string]*raft.NetworkTransport{
		"plaintext":     raftClient(t, nil),
		"another CA":    raftClient(t, TLSAuth{reloader(t, identity(t, t.TempDir(), other, other.CertPEM))}),
		"trusts the CA": raftClient(t, TLSAuth{reloader(t, identity(t, t.TempDir(), other, append(append([]byte{}, other.CertPEM...), ca.CertPEM...)))}),
	} {
		if err := rogue.AppendEntries("n1", addr, &raft.AppendEntriesRequest{Term: 1_000_000}, &resp); err == nil {
			t.Errorf("%s: AppendEntries answered %+v", name, resp)
		}
	}
	if err := raftClient(t, TLSAuth{reloader(t, identity(t, t.TempDir(), ca, ca.CertPEM))}).AppendEntries("n1", addr, &raft.AppendEntriesRequest{Term: 5}, &resp); err != nil {
		t.Fatal(err)
	}
	if term := <-terms; term != 5 {
		t.Fatalf("first RPC seen has term %d, want 5", term)
	}
}

func TestLogLimiter(t *testing.T) {
	var l logLimiter
	now := time.Unix(0, 0)
	for i := 0; i < logBurst; i++ {
		if ok, _ := l.allow(now); !ok {
			t.Fatalf("line %d held back", i)
		}
	}
	for i := 0; i < 3; i++ {
		if ok, _ := l.allow(now); ok {
			t.Fatal("line past the burst let through")
		}
	}
	if ok, d := l.allow(now.Add(logWindow)); !ok || d != 3 {
		t.Fatalf("next window: %v, %d suppressed; want true, 3", ok, d)
	}
}

func TestServerNameIsCheckedInsteadOfTheDialledHost(t *testing.T) {
	ca := newCA(t, "ca")
	dir := t.TempDir()
	kp, err := NewNodeCert(ca, "shared", nil, []string{"ax-peers"}, time.Hour) // no IP SAN
	if err != nil {
		t.Fatal(err)
	}
	f := Files{Cert: filepath.Join(dir, "c.pem"), Key: filepath.Join(dir, "k.pem"), CA: filepath.Join(dir, "ca.pem")}
	writeFile(t, f.Cert, kp.CertPEM)
	writeFile(t, f.Key, kp.KeyPEM)
	writeFile(t, f.CA, ca.CertPEM)
	addr := tlsServer(t, reloader(t, f))
	if _, err := handshake(reloader(t, f), addr); err == nil {
		t.Fatal("a certificate without 127.0.0.1 passed for 127.0.0.1")
	}
	f.ServerName = "ax-peers"
	if _, err := handshake(reloader(t, f), addr); err != nil {
		t.Fatalf("with ServerName ax-peers: %v", err)
	}
	f.ServerName = "other"
	if _, err := handshake(reloader(t, f), addr); err == nil {
		t.Fatal("ServerName other passed for a certificate of ax-peers")
	}
}

// stallAuth's Server blocks until its conn fails (a peer that never
// answers), counting the handshakes under way.
type stallAuth struct{ started chan struct{} }

func (a stallAuth) Client(ctx context.Context, c net.Conn, _ string) (net.Conn, error) { return c, nil }
func (a stallAuth) Server(ctx context.Context, c net.Conn) (net.Conn, error) {
	a.started <- struct{}{}
	_, err := c.Read(make([]byte, 1))
	if err == nil {
		err = errors.New("unexpected byte")
	}
	return nil, err
}

func TestListenerCapsHandshakesAndCloseEndsThem(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	auth := stallAuth{started: make(chan struct{}, 4)}
	l := NewListener(raw, ListenerConfig{Auth: auth, HandshakeTimeout: time.Hour, MaxPendingHandshakes: 1, Log: zerolog.Nop()})
	first, err := net.Dial("tcp", raw.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	<-auth.started // the one slot is taken
	second, err := net.Dial("tcp", raw.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	second.SetReadDeadline(time.Now().Add(30 * time.Second))
	if n, err := second.Read(make([]byte, 1)); n != 0 || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a connection past the cap: read %d, %v; want it closed at once", n, err)
	}
	// Close ends the stalled handshake (its deadline is an hour away).
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	first.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := first.Read(make([]byte, 1)); errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatal("Close left a handshake under way open")
	}
	if _, err := l.Accept(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Accept after Close: %v", err)
	}
}
