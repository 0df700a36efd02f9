package config

import (
	"errors"
	"fmt"
	"time"

	"github.com/axsched/ax/sidecar/peertls"
)

// TLSFiles are the TLS fields of c as peertls.Files.
func (c Config) TLSFiles() peertls.Files {
	return peertls.Files{Cert: c.TLSCert, Key: c.TLSKey, CA: c.TLSCA, ServerName: c.TLSServerName}
}

// tlsFieldNames names the Config field and flag of each peertls field.
var tlsFieldNames = map[string]string{
	peertls.FieldCert: "TLSCert (--tls-cert)",
	peertls.FieldKey:  "TLSKey (--tls-key)",
	peertls.FieldCA:   "TLSCA (--tls-ca)",
}

// validateTLS checks the TLS fields: all three files or none, each
// readable, a key that matches the certificate, a certificate the CA
// verifies (peertls.Load); a server name or reload interval only with
// them.
func (c Config) validateTLS() error {
	f := c.TLSFiles()
	if !f.Enabled() {
		if c.TLSServerName != "" {
			return fmt.Errorf("TLSServerName (--tls-server-name) %q needs TLSCert (--tls-cert), TLSKey (--tls-key) and TLSCA (--tls-ca)", c.TLSServerName)
		}
		return nil
	}
	for _, x := range []struct{ field, v string }{{peertls.FieldCert, c.TLSCert}, {peertls.FieldKey, c.TLSKey}, {peertls.FieldCA, c.TLSCA}} {
		if x.v == "" {
			return fmt.Errorf("%s: missing: give TLSCert (--tls-cert), TLSKey (--tls-key) and TLSCA (--tls-ca) together, or none", tlsFieldNames[x.field])
		}
	}
	if c.TLSReloadInterval < 0 || (c.TLSReloadInterval > 0 && c.TLSReloadInterval < 100*time.Millisecond) {
		return fmt.Errorf("TLSReloadInterval (--tls-reload-interval) %v: at least 100ms", c.TLSReloadInterval)
	}
	if err := peertls.Load(f); err != nil {
		var fe *peertls.FieldError
		if errors.As(err, &fe) {
			return fmt.Errorf("%s %s: %w", tlsFieldNames[fe.Field], fe.Path, fe.Err)
		}
		return err
	}
	return nil
}

// UnauthenticatedWarning is the start-up warning of a node that expects
// peers (BootstrapExpect above 1, or Join) with neither TLS nor a cluster
// token; "" otherwise.
func (c Config) UnauthenticatedWarning() string {
	if c.BootstrapExpect <= 1 && len(c.Join) == 0 || c.TLSFiles().Enabled() || c.ClusterToken != "" {
		return ""
	}
	return "peer traffic is unauthenticated: anyone who reaches the Raft port (" + c.RaftAddr + ") or the peer API (" + c.PeerAddr +
		") can change this cluster's state; set --tls-cert, --tls-key and --tls-ca (see `ax tls`), or at least --cluster-token"
}
