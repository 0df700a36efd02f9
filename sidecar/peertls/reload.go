package peertls

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
)

// ReloadIntervalDefault is how often a Reloader reads its files to look
// for a change: a cert-manager renewal or a Kubernetes Secret update is in
// use within this long.
const ReloadIntervalDefault = 5 * time.Second

// Reloader holds a node's current TLS identity (certificate, key, CA
// pool) and re-reads its Files when their contents change, without a
// restart: new handshakes use the new set, connections already open keep
// theirs. A new set that fails Load's checks (a half-written file, a key
// that does not match yet, a certificate the CA does not sign) keeps the
// old set and logs one error per distinct bad contents; the files are
// read again at the next poll.
type Reloader struct {
	files Files
	log   zerolog.Logger
	read  func(Files) (contents, error)

	cur atomic.Pointer[material]

	mu      sync.Mutex // serializes Reload
	lastBad [32]byte
}

// NewReloader loads f (Load's checks; its *FieldError) and returns a
// Reloader holding it. Call Run to poll the files.
func NewReloader(f Files, log zerolog.Logger) (*Reloader, error) {
	r := &Reloader{files: f, log: log, read: readFiles}
	m, err := load(f, r.read)
	if err != nil {
		return nil, err
	}
	r.cur.Store(m)
	return r, nil
}

// Files are the files r reads.
func (r *Reloader) Files() Files { return r.files }

// Certificate is the current certificate (its leaf).
func (r *Reloader) Certificate() *x509.Certificate { return r.cur.Load().leaf }

// Reload reads the files once. changed reports that a new, valid set is in
// use; err is why a changed set was refused (the old one stays). Unchanged
// contents, or the same bad contents as last time, return false, nil
// without parsing.
func (r *Reloader) Reload() (changed bool, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, err := r.read(r.files)
	if err != nil {
		return false, err
	}
	sum := c.sum()
	if sum == r.cur.Load().sum || sum == r.lastBad {
		return false, nil
	}
	m, err := parse(r.files, c)
	if err != nil {
		r.lastBad = sum
		return false, err
	}
	r.cur.Store(m)
	return true, nil
}

// Run calls Reload every interval (ReloadIntervalDefault when <= 0) until
// ctx ends, logging each new certificate (serial, expiry) at info and each
// refused set at error.
func (r *Reloader) Run(ctx context.Context, interval time.Duration) {
	if interval <= 0 {
		interval = ReloadIntervalDefault
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	var lastErr string
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		changed, err := r.Reload()
		switch {
		case err != nil:
			// A read error repeats every poll until the file is back:
			// log it when it changes.
			if err.Error() != lastErr {
				r.log.Error().Err(err).Msg("tls: new certificate files refused; keeping the current certificate")
			}
			lastErr = err.Error()
		case changed:
			lastErr = ""
			leaf := r.Certificate()
			r.log.Info().Str("serial", leaf.SerialNumber.Text(16)).Str("subject", leaf.Subject.CommonName).
				Time("not_after", leaf.NotAfter).Msg("tls: certificate files changed: new handshakes use the new certificate and CA")
		}
	}
}

// ServerConfig is the tls.Config of a server (the Raft listener, the peer
// API): TLS 1.3, a client certificate required and verified against the
// current CA pool, the current certificate served. It stays valid across
// reloads (GetConfigForClient picks the current set per handshake).
func (r *Reloader) ServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return r.cur.Load().server, nil
		},
	}
}

// ClientConfig is the tls.Config of one dial to host (the host of the
// address dialled, or Files.ServerName when set, is checked in the
// server's certificate): TLS 1.3, the current CA pool and certificate.
// Build one per dial, so that each dial uses the current set.
func (r *Reloader) ClientConfig(host string) *tls.Config {
	c := r.cur.Load().client.Clone()
	c.ServerName = host
	if r.files.ServerName != "" {
		c.ServerName = r.files.ServerName
	}
	return c
}
