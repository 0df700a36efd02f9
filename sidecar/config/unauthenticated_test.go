package config

import (
	"strings"
	"testing"
)

func TestUnauthenticatedWarning(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  Config
		warn bool
	}{
		{"one node", Config{BootstrapExpect: 1}, false},
		{"bootstrap 3, nothing", Config{BootstrapExpect: 3, Join: []string{"a:1"}}, true},
		{"joins, nothing", Config{BootstrapExpect: 1, Join: []string{"a:1"}}, true},
		{"token", Config{BootstrapExpect: 3, Join: []string{"a:1"}, ClusterToken: "t"}, false},
		{"tls", Config{BootstrapExpect: 3, Join: []string{"a:1"}, TLSCert: "c", TLSKey: "k", TLSCA: "ca"}, false},
	} {
		msg := c.cfg.UnauthenticatedWarning()
		if (msg != "") != c.warn || (c.warn && !strings.Contains(msg, "--tls-cert")) {
			t.Errorf("%s: %q, want a warning: %v", c.name, msg, c.warn)
		}
	}
}
