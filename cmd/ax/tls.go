package main

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/axsched/ax/sidecar"
	"github.com/axsched/ax/sidecar/peertls"
)

// tlsFlags are the `ax sidecar` flags of mutual TLS between nodes.
type tlsFlags struct {
	cert, key, ca, serverName string
	reload                    time.Duration
}

func (t *tlsFlags) register(fl *pflag.FlagSet) {
	fl.StringVar(&t.cert, "tls-cert", "", "PEM file of this node's certificate: with --tls-key and --tls-ca, all Raft and peer API traffic is mutual TLS 1.3 (make one with `ax tls cert`)")
	fl.StringVar(&t.key, "tls-key", "", "PEM file of the private key of --tls-cert")
	fl.StringVar(&t.ca, "tls-ca", "", "PEM file of the CA certificates a peer's certificate must chain to (several while a CA is rotated)")
	fl.StringVar(&t.serverName, "tls-server-name", "", "name to check in the certificate of every node this node dials, instead of the host it dials")
	fl.DurationVar(&t.reload, "tls-reload-interval", peertls.ReloadIntervalDefault, "how often the TLS files are checked for a change; a valid new set is used from the next handshake on, a bad one is logged and ignored")
}

func (t *tlsFlags) apply(cfg *sidecar.Config) {
	cfg.TLSCert, cfg.TLSKey, cfg.TLSCA, cfg.TLSServerName = t.cert, t.key, t.ca, t.serverName
	cfg.TLSReloadInterval = t.reload
}

// Defaults of `ax tls`.
const (
	tlsCADaysDefault   = 3650
	tlsCertDaysDefault = 365
)

func tlsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tls",
		Short: "Make a development CA and node certificates for mutual TLS between sidecars",
		Long: `Make a development CA and node certificates (ECDSA P-256) for --tls-cert,
--tls-key and --tls-ca. Private keys are written with mode 0600; no file is
overwritten unless --force is given. For production, certificates from your
own PKI or cert-manager work the same: each node's certificate must carry
the addresses other nodes dial it at (IP or DNS subject alternative names)
and be valid for both server and client authentication.`,
		Example: `  ax tls ca --out-dir certs
  ax tls cert --out-dir certs --node-id ax-0 --ip 10.0.0.5 --dns ax-0.ax-peers.default.svc
  ax sidecar --tls-cert certs/ax-0.pem --tls-key certs/ax-0-key.pem --tls-ca certs/ca.pem ...`,
		Args: noArgs,
	}
	cmd.AddCommand(tlsCACmd(), tlsCertCmd())
	return cmd
}

func tlsCACmd() *cobra.Command {
	var dir, name string
	var days int
	var force bool
	cmd := &cobra.Command{
		Use:   "ca",
		Short: "Write a new development CA: ca.pem and ca-key.pem in --out-dir",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if days < 1 {
				return usagef("--days %d: at least 1", days)
			}
			ca, err := peertls.NewCA(name, time.Duration(days)*24*time.Hour)
			if err != nil {
				return err
			}
			return writePair(cmd, dir, "ca", ca, force)
		},
	}
	cmd.Flags().StringVar(&dir, "out-dir", ".", "directory to write ca.pem and ca-key.pem into")
	cmd.Flags().StringVar(&name, "name", "ax development CA", "the CA's common name")
	cmd.Flags().IntVar(&days, "days", tlsCADaysDefault, "validity in days")
	cmd.Flags().BoolVar(&force, "force", false, "overwrite existing files")
	return cmd
}

func tlsCertCmd() *cobra.Command {
	var dir, nodeID, caFile, caKey string
	var ips, dnsNames []string
	var days int
	var force bool
	cmd := &cobra.Command{
		Use:   "cert",
		Short: "Write a node certificate signed by the CA: NODE_ID.pem and NODE_ID-key.pem in --out-dir",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if nodeID == "" || strings.ContainsAny(nodeID, `/\`) || nodeID == "." || nodeID == ".." {
				return usagef("--node-id %q: want the node's id (it names the files)", nodeID)
			}
			if len(ips) == 0 && len(dnsNames) == 0 {
				return usagef("give at least one --ip or --dns: the addresses other nodes dial this node at")
			}
			if days < 1 {
				return usagef("--days %d: at least 1", days)
			}
			var addrs []net.IP
			for _, s := range ips {
				ip := net.ParseIP(strings.TrimSpace(s))
				if ip == nil {
					return usagef("--ip %q: not an IP address", s)
				}
				addrs = append(addrs, ip)
			}
			if caFile == "" {
				caFile = filepath.Join(dir, "ca.pem")
			}
			if caKey == "" {
				caKey = filepath.Join(dir, "ca-key.pem")
			}
			certPEM, err := os.ReadFile(caFile)
			if err != nil {
				return fmt.Errorf("--ca: %w (make one with `ax tls ca`)", err)
			}
			keyPEM, err := os.ReadFile(caKey)
			if err != nil {
				return fmt.Errorf("--ca-key: %w", err)
			}
			ca, err := peertls.ParseKeyPair(certPEM, keyPEM)
			if err != nil {
				return fmt.Errorf("--ca %s, --ca-key %s: %w", caFile, caKey, err)
			}
			kp, err := peertls.NewNodeCert(ca, nodeID, addrs, dnsNames, time.Duration(days)*24*time.Hour)
			if err != nil {
				return err
			}
			return writePair(cmd, dir, nodeID, kp, force)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&dir, "out-dir", ".", "directory to write the certificate and key into (and to read ca.pem and ca-key.pem from, unless --ca and --ca-key say)")
	fl.StringVar(&nodeID, "node-id", "", "the node's id: the certificate's common name and the files' names (required)")
	fl.StringSliceVar(&ips, "ip", nil, "IP address other nodes dial this node at; repeatable or comma-separated")
	fl.StringSliceVar(&dnsNames, "dns", nil, "DNS name other nodes dial this node at; repeatable or comma-separated")
	fl.StringVar(&caFile, "ca", "", "the CA's certificate (default: OUT_DIR/ca.pem)")
	fl.StringVar(&caKey, "ca-key", "", "the CA's private key (default: OUT_DIR/ca-key.pem)")
	fl.IntVar(&days, "days", tlsCertDaysDefault, "validity in days")
	fl.BoolVar(&force, "force", false, "overwrite existing files")
	return cmd
}

// writePair writes NAME.pem (0644) and NAME-key.pem (0600) into dir
// (created 0700 when missing) and prints their paths; an existing file is
// an error unless force.
func writePair(cmd *cobra.Command, dir, name string, kp *peertls.KeyPair, force bool) error {
	if err := os.MkdirAll(dir, 0o700); err != nil { // it holds private keys
		return err
	}
	certPath, keyPath := filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
	flags := os.O_WRONLY | os.O_CREATE | os.O_EXCL
	if force {
		flags = os.O_WRONLY | os.O_CREATE | os.O_TRUNC
	}
	if !force {
		for _, p := range []string{certPath, keyPath} {
			if _, err := os.Stat(p); err == nil {
				return fmt.Errorf("%s exists (give --force to overwrite it)", p)
			}
		}
	}
	for _, f := range []struct {
		path string
		mode fs.FileMode
		b    []byte
	}{{keyPath, 0o600, kp.KeyPEM}, {certPath, 0o644, kp.CertPEM}} {
		fh, err := os.OpenFile(f.path, flags, f.mode)
		if err != nil {
			if errors.Is(err, fs.ErrExist) {
				return fmt.Errorf("%s exists (give --force to overwrite it)", f.path)
			}
			return err
		}
		_, werr := fh.Write(f.b)
		cerr := fh.Close()
		if err := errors.Join(werr, cerr, os.Chmod(f.path, f.mode)); err != nil {
			return fmt.Errorf("write %s: %w", f.path, err)
		}
		fmt.Fprintln(cmd.OutOrStdout(), "wrote", f.path)
	}
	return nil
}
