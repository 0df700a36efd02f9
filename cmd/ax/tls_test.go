package main

import (
	"bytes"
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/axsched/ax/sidecar/peertls"
)

func TestTLSCommandsWriteAWorkingIdentity(t *testing.T) {
	dir := t.TempDir()
	if _, stderr, code := runAx(t, "tls", "ca", "--out-dir", dir); code != 0 {
		t.Fatalf("ax tls ca: exit %d: %s", code, stderr)
	}
	stdout, stderr, code := runAx(t, "tls", "cert", "--out-dir", dir, "--node-id", "n1", "--ip", "127.0.0.1,::1", "--dns", "n1.ax.local")
	if code != 0 {
		t.Fatalf("ax tls cert: exit %d: %s", code, stderr)
	}
	if !strings.Contains(stdout, filepath.Join(dir, "n1-key.pem")) {
		t.Errorf("stdout %q does not name the key it wrote", stdout)
	}
	for name, want := range map[string]os.FileMode{"ca-key.pem": 0o600, "n1-key.pem": 0o600, "ca.pem": 0o644, "n1.pem": 0o644} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: %v, mode %v; want %v", name, err, fi.Mode().Perm(), want)
		}
	}
	f := peertls.Files{Cert: filepath.Join(dir, "n1.pem"), Key: filepath.Join(dir, "n1-key.pem"), CA: filepath.Join(dir, "ca.pem")}
	if err := peertls.Load(f); err != nil {
		t.Fatalf("the written files do not load: %v", err)
	}
	b, _ := os.ReadFile(f.Cert)
	kp, err := peertls.ParseKeyPair(b, mustRead(t, f.Key))
	if err != nil {
		t.Fatal(err)
	}
	if c := kp.Cert; c.Subject.CommonName != "n1" || len(c.IPAddresses) != 2 || len(c.DNSNames) != 1 || c.VerifyHostname("n1.ax.local") != nil ||
		len(c.ExtKeyUsage) != 2 || c.ExtKeyUsage[0] != x509.ExtKeyUsageServerAuth {
		t.Errorf("certificate: CN %q, IPs %v, DNS %v, usage %v", c.Subject.CommonName, c.IPAddresses, c.DNSNames, c.ExtKeyUsage)
	}
	// The flags take the files.
	cfg, err := parseNodeFlags(t, "--node-id", "n1", "--data-dir", filepath.Join(dir, "data"), "--socket", filepath.Join(dir, "ax.sock"),
		"--tls-cert", f.Cert, "--tls-key", f.Key, "--tls-ca", f.CA, "--tls-server-name", "n1.ax.local")
	if err != nil || cfg.TLSCert != f.Cert || cfg.TLSServerName != "n1.ax.local" {
		t.Fatalf("sidecar flags: %v, %+v", err, cfg.TLSFiles())
	}
	// No overwrite without --force.
	before := mustRead(t, f.Key)
	if _, stderr, code := runAx(t, "tls", "cert", "--out-dir", dir, "--node-id", "n1", "--ip", "127.0.0.1"); code != 1 || !strings.Contains(stderr, "--force") {
		t.Errorf("second cert without --force: exit %d, %q", code, stderr)
	}
	if !bytes.Equal(before, mustRead(t, f.Key)) {
		t.Error("the key was overwritten without --force")
	}
	if _, stderr, code := runAx(t, "tls", "cert", "--out-dir", dir, "--node-id", "n1", "--ip", "127.0.0.1", "--force"); code != 0 {
		t.Errorf("with --force: exit %d, %s", code, stderr)
	}
	if bytes.Equal(before, mustRead(t, f.Key)) {
		t.Error("--force did not write a new key")
	}
}

func TestTLSCertUsageErrors(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"tls", "cert", "--out-dir", dir, "--ip", "127.0.0.1"}, 2, "--node-id"},
		{[]string{"tls", "cert", "--out-dir", dir, "--node-id", "n1"}, 2, "--ip or --dns"},
		{[]string{"tls", "cert", "--out-dir", dir, "--node-id", "n1", "--ip", "nope"}, 2, `--ip "nope"`},
		{[]string{"tls", "cert", "--out-dir", dir, "--node-id", "../n1", "--ip", "127.0.0.1"}, 2, "--node-id"},
		{[]string{"tls", "cert", "--out-dir", dir, "--node-id", "n1", "--ip", "127.0.0.1"}, 1, "ax tls ca"},
		{[]string{"tls", "ca", "--out-dir", dir, "--days", "0"}, 2, "--days"},
	} {
		_, stderr, code := runAx(t, c.args...)
		if code != c.code || !strings.Contains(stderr, c.want) {
			t.Errorf("ax %s: exit %d, %q; want exit %d naming %q", strings.Join(c.args, " "), code, stderr, c.code, c.want)
		}
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
