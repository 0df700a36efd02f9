package peertls

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
)

// Files names the PEM files of a node's TLS identity: --tls-cert (the
// node's certificate, optionally followed by intermediates), --tls-key
// (its private key), --tls-ca (the CA certificates a peer's certificate
// must chain to; a bundle of several while a CA is rotated) and, when set,
// --tls-server-name: the name a node checks in the certificate of every
// node it dials, instead of the host of the address it dials.
type Files struct {
	Cert, Key, CA string
	ServerName    string
}

// Enabled reports whether any of the three files is set.
func (f Files) Enabled() bool { return f.Cert != "" || f.Key != "" || f.CA != "" }

// The fields of Files that a FieldError names.
const (
	FieldCert = "cert"
	FieldKey  = "key"
	FieldCA   = "ca"
)

// FieldError is an error of Load about one of the files: Field is
// FieldCert, FieldKey or FieldCA.
type FieldError struct {
	Field string
	Path  string
	Err   error
}

func (e *FieldError) Error() string { return fmt.Sprintf("%s %s: %v", e.Field, e.Path, e.Err) }
func (e *FieldError) Unwrap() error { return e.Err }

// material is one loaded, checked set of files.
type material struct {
	sum    [32]byte // of the three files' contents
	cert   tls.Certificate
	leaf   *x509.Certificate
	pool   *x509.CertPool
	server *tls.Config // served to every client (GetConfigForClient)
	client *tls.Config // cloned per dial (ServerName set)
}

// Load reads and checks the three files of f (all must be set): each
// readable; the certificate file holds at least one PEM certificate, the
// key file a private key that matches the first one, the CA file at least
// one PEM certificate; and the certificate, at the current time, chains to
// the CA for both server and client authentication (so the node's peers
// will accept it). Every error is a *FieldError naming the file at fault.
func Load(f Files) error {
	_, err := load(f, readFiles)
	return err
}

// contents are the bytes of the three files.
type contents struct{ cert, key, ca []byte }

func (c contents) sum() [32]byte {
	h := sha256.New()
	for _, b := range [][]byte{c.cert, c.key, c.ca} {
		fmt.Fprintf(h, "%d:", len(b))
		h.Write(b)
	}
	var s [32]byte
	copy(s[:], h.Sum(nil))
	return s
}

func readFiles(f Files) (contents, error) {
	var c contents
	for _, x := range []struct {
		field, path string
		dst         *[]byte
	}{{FieldCert, f.Cert, &c.cert}, {FieldKey, f.Key, &c.key}, {FieldCA, f.CA, &c.ca}} {
		if x.path == "" {
			return c, &FieldError{x.field, x.path, errors.New("not set (give --tls-cert, --tls-key and --tls-ca together)")}
		}
		b, err := os.ReadFile(x.path)
		if err != nil {
			return c, &FieldError{x.field, x.path, err}
		}
		*x.dst = b
	}
	return c, nil
}

func load(f Files, read func(Files) (contents, error)) (*material, error) {
	c, err := read(f)
	if err != nil {
		return nil, err
	}
	return parse(f, c)
}

func parse(f Files, c contents) (*material, error) {
	certs, err := parseCerts(c.cert)
	if err != nil {
		return nil, &FieldError{FieldCert, f.Cert, err}
	}
	cas, err := parseCerts(c.ca)
	if err != nil {
		return nil, &FieldError{FieldCA, f.CA, err}
	}
	pair, err := tls.X509KeyPair(c.cert, c.key)
	if err != nil {
		return nil, &FieldError{FieldKey, f.Key, fmt.Errorf("does not hold the private key of the certificate in %s: %w", f.Cert, err)}
	}
	pool := x509.NewCertPool()
	for _, ca := range cas {
		pool.AddCert(ca)
	}
	inter := x509.NewCertPool()
	for _, ic := range certs[1:] {
		inter.AddCert(ic)
	}
	leaf := certs[0]
	for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
			return nil, &FieldError{FieldCert, f.Cert, fmt.Errorf("not valid for server and client authentication under the CA in %s: %w", f.CA, err)}
		}
	}
	pair.Leaf = leaf
	m := &material{sum: c.sum(), cert: pair, leaf: leaf, pool: pool}
	m.server = &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{pair},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pool,
	}
	m.client = &tls.Config{
		MinVersion: tls.VersionTLS13,
		RootCAs:    pool,
		// Always send this node's certificate: the server's verdict
		// ("unknown authority") is clearer than a handshake without one.
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &m.cert, nil },
	}
	return m, nil
}

// parseCerts returns the PEM CERTIFICATE blocks of b, parsed; an error
// when there is none or one does not parse.
func parseCerts(b []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			break
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate %d: %w", len(out)+1, err)
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, errors.New("no PEM CERTIFICATE block")
	}
	return out, nil
}
