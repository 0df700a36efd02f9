package peertls

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"time"
)

// KeyPair is a certificate and its ECDSA P-256 private key, parsed and as
// PEM (CertPEM: "CERTIFICATE"; KeyPEM: PKCS #8 "PRIVATE KEY").
type KeyPair struct {
	Cert    *x509.Certificate
	Key     *ecdsa.PrivateKey
	CertPEM []byte
	KeyPEM  []byte
}

// NewCA returns a self-signed CA certificate named name (its common name)
// valid for validFor from now (a minute of clock skew allowed before).
// It may sign node certificates only (path length 0).
func NewCA(name string, validFor time.Duration) (*KeyPair, error) {
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: name, Organization: []string{"ax"}},
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	return sign(tmpl, nil, validFor)
}

// NewNodeCert returns a certificate for node nodeID (its common name)
// signed by ca, valid for server and client authentication at ips and
// dnsNames (its subject alternative names; at least one), for validFor
// from now.
func NewNodeCert(ca *KeyPair, nodeID string, ips []net.IP, dnsNames []string, validFor time.Duration) (*KeyPair, error) {
	if ca == nil || !ca.Cert.IsCA {
		return nil, errors.New("the signing certificate is not a CA")
	}
	if len(ips) == 0 && len(dnsNames) == 0 {
		return nil, errors.New("a node certificate needs at least one IP or DNS name")
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: nodeID, Organization: []string{"ax"}},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: ips,
		DNSNames:    dnsNames,
	}
	return sign(tmpl, ca, validFor)
}

func sign(tmpl *x509.Certificate, ca *KeyPair, validFor time.Duration) (*KeyPair, error) {
	if validFor <= 0 {
		return nil, fmt.Errorf("validity %v: must be positive", validFor)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl.SerialNumber = serial
	tmpl.NotBefore = now.Add(-time.Minute)
	tmpl.NotAfter = now.Add(validFor)
	parent, signer := tmpl, key
	if ca != nil {
		parent, signer = ca.Cert, ca.Key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, signer)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return &KeyPair{
		Cert: cert, Key: key,
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}),
	}, nil
}

// ParseKeyPair parses a PEM certificate and its PEM ECDSA key (PKCS #8 or
// SEC 1 "EC PRIVATE KEY"), as NewCA writes them.
func ParseKeyPair(certPEM, keyPEM []byte) (*KeyPair, error) {
	certs, err := parseCerts(certPEM)
	if err != nil {
		return nil, err
	}
	blk, _ := pem.Decode(keyPEM)
	if blk == nil {
		return nil, errors.New("key: no PEM block")
	}
	var key *ecdsa.PrivateKey
	if k, err := x509.ParsePKCS8PrivateKey(blk.Bytes); err == nil {
		ek, ok := k.(*ecdsa.PrivateKey)
		if !ok {
			return nil, errors.New("key: not an ECDSA key")
		}
		key = ek
	} else if key, err = x509.ParseECPrivateKey(blk.Bytes); err != nil {
		return nil, fmt.Errorf("key: %w", err)
	}
	if !key.PublicKey.Equal(certs[0].PublicKey) {
		return nil, errors.New("key does not match the certificate")
	}
	return &KeyPair{Cert: certs[0], Key: key, CertPEM: certPEM, KeyPEM: keyPEM}, nil
}
