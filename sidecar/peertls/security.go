package peertls

import (
	"context"
	"crypto/tls"
	"net"
	"time"

	"github.com/hashicorp/raft"
	"github.com/rs/zerolog"
)

// SecurityConfig is what NewSecurity needs: the TLS files (none: no TLS),
// the cluster token ("" none) and how often the files are re-read.
type SecurityConfig struct {
	Files          Files
	Token          string
	ReloadInterval time.Duration
	Log            zerolog.Logger
	// Hold is the Raft stream layer's StreamConfig.Hold (nil: never).
	Hold func() bool
}

// Security is how a node authenticates its peer traffic: mutual TLS on the
// Raft port and the peer API when the TLS files are set; else, with a
// cluster token, the token handshake on the Raft port (the peer API checks
// the token header either way).
type Security struct {
	cfg SecurityConfig
	tls *Reloader // nil without TLS
}

// NewSecurity loads the TLS files, if any: the errors of NewReloader.
func NewSecurity(cfg SecurityConfig) (*Security, error) {
	s := &Security{cfg: cfg}
	if cfg.Files.Enabled() {
		r, err := NewReloader(cfg.Files, cfg.Log)
		if err != nil {
			return nil, err
		}
		s.tls = r
	}
	return s, nil
}

// RaftStream is the Raft transport's stream layer factory (bind address,
// advertised address): the authenticated stream layer, or nil (raft's
// plain TCP) with neither TLS nor a token.
func (s *Security) RaftStream() func(bind string, adv net.Addr) (raft.StreamLayer, error) {
	var auth Authenticator
	switch {
	case s.tls != nil:
		auth = TLSAuth{R: s.tls}
	case s.cfg.Token != "":
		auth = TokenAuth{Token: []byte(s.cfg.Token)}
	default:
		return nil
	}
	return func(bind string, adv net.Addr) (raft.StreamLayer, error) {
		return Listen(StreamConfig{Bind: bind, Advertise: adv, Auth: auth, Log: s.cfg.Log, Hold: s.cfg.Hold})
	}
}

// PeerListener wraps the peer API's listener: mutual TLS, each handshake
// done aside before the server reads a request (nil without TLS).
func (s *Security) PeerListener() func(net.Listener) net.Listener {
	if s.tls == nil {
		return nil
	}
	return func(ln net.Listener) net.Listener {
		return NewListener(ln, ListenerConfig{Auth: TLSAuth{R: s.tls}, Log: s.cfg.Log, Port: "peer API"})
	}
}

// SetClient makes a peer API client speak TLS (with TLS; nothing
// without).
func (s *Security) SetClient(c interface {
	SetTLS(config func(host string) *tls.Config)
}) {
	if s.tls != nil {
		c.SetTLS(s.tls.ClientConfig)
	}
}

// Run re-reads the TLS files every ReloadInterval until ctx ends (with
// TLS; it returns at once without).
func (s *Security) Run(ctx context.Context) {
	if s.tls != nil {
		s.tls.Run(ctx, s.cfg.ReloadInterval)
	}
}
