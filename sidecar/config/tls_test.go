package config

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/axsched/ax/sidecar/peertls"
)

// tlsFiles writes a CA and a node certificate of it into a temp dir.
func tlsFiles(t *testing.T, ca *peertls.KeyPair) (cert, key, caFile string) {
	t.Helper()
	kp, err := peertls.NewNodeCert(ca, "n1", []net.IP{net.ParseIP("127.0.0.1")}, nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cert, key, caFile = filepath.Join(dir, "n1.pem"), filepath.Join(dir, "n1-key.pem"), filepath.Join(dir, "ca.pem")
	for p, b := range map[string][]byte{cert: kp.CertPEM, key: kp.KeyPEM, caFile: ca.CertPEM} {
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return cert, key, caFile
}

// TestConfigValidate_TLS checks the TLS fields: all three or none,
// readable, a matching key, a certificate of the CA; each error names the
// field and its flag.
func TestConfigValidate_TLS(t *testing.T) {
	ca, err := peertls.NewCA("ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	other, _ := peertls.NewCA("other", time.Hour)
	cert, key, caFile := tlsFiles(t, ca)
	_, otherKey, otherCA := tlsFiles(t, other)
	good := func(c *Config) { c.TLSCert, c.TLSKey, c.TLSCA = cert, key, caFile }
	c := validRaftTestConfig(t)
	good(&c)
	if err := c.Validate(); err != nil {
		t.Fatalf("good TLS files: %v", err)
	}
	cases := []struct {
		name        string
		set         func(*Config)
		field, flag string
	}{
		{"cert only", func(c *Config) { c.TLSCert = cert }, "TLSKey", "--tls-key"},
		{"no ca", func(c *Config) { good(c); c.TLSCA = "" }, "TLSCA", "--tls-ca"},
		{"server name alone", func(c *Config) { c.TLSServerName = "ax" }, "TLSServerName", "--tls-server-name"},
		{"unreadable cert", func(c *Config) { good(c); c.TLSCert = filepath.Join(t.TempDir(), "none.pem") }, "TLSCert", "--tls-cert"},
		{"key of another cert", func(c *Config) { good(c); c.TLSKey = otherKey }, "TLSKey", "--tls-key"},
		{"ca not PEM", func(c *Config) { good(c); c.TLSCA = key }, "TLSCA", "--tls-ca"},
		{"cert of another CA", func(c *Config) { good(c); c.TLSCA = otherCA }, "TLSCert", "--tls-cert"},
		{"reload 1ms", func(c *Config) { good(c); c.TLSReloadInterval = time.Millisecond }, "TLSReloadInterval", "--tls-reload-interval"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := validRaftTestConfig(t)
			tc.set(&c)
			err := c.Validate()
			if err == nil {
				t.Fatal("Validate() = nil, want an error")
			}
			for _, w := range []string{tc.field, tc.flag} {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate() = %q, want it to name %q", err, w)
				}
			}
		})
	}
}
