package ui

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"time"
)

// AddrDefault is the dashboard's default listen address (loopback).
const AddrDefault = "127.0.0.1:7480"

// Defaults of Options.
const (
	// SampleIntervalDefault is how often the server reads the node's
	// /metrics for the lateness chart and attempt rates.
	SampleIntervalDefault = 5 * time.Second
	// SampleWindowDefault is how far back the chart goes.
	SampleWindowDefault = 10 * time.Minute
	// APITimeoutDefault bounds each request to the socket API.
	APITimeoutDefault = 10 * time.Second
)

// ErrTokenRequired is returned by Options.Validate when the address is not
// loopback and no token is set.
var ErrTokenRequired = errors.New("a token is required to serve the dashboard on a non-loopback address")

// Options configure a Server.
type Options struct {
	// Addr is the HOST:PORT the dashboard listens on. A host that is not
	// loopback (127.0.0.0/8, ::1, localhost), including an empty host (every
	// interface), needs Token. Defaults to AddrDefault.
	Addr string
	// Token, when set, is required of every request: as
	// "Authorization: Bearer TOKEN", or through the login form, which sets
	// a session cookie. Empty: no login (loopback only).
	Token string
	// Socket is the path of the node's API socket, which every read and
	// action goes through. Required.
	Socket string
	// SampleInterval is how often the node's /metrics are read; defaults
	// to SampleIntervalDefault. SampleWindow is how long samples are kept;
	// defaults to SampleWindowDefault.
	SampleInterval time.Duration
	SampleWindow   time.Duration
	// APITimeout bounds each socket request; defaults to APITimeoutDefault.
	APITimeout time.Duration
	// Logf, when set, receives one line per failed background sample and
	// per server error.
	Logf func(format string, args ...any)
}

// WithDefaults returns o with every zero field filled.
func (o Options) WithDefaults() Options {
	if o.Addr == "" {
		o.Addr = AddrDefault
	}
	if o.SampleInterval <= 0 {
		o.SampleInterval = SampleIntervalDefault
	}
	if o.SampleWindow <= 0 {
		o.SampleWindow = SampleWindowDefault
	}
	if o.APITimeout <= 0 {
		o.APITimeout = APITimeoutDefault
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	return o
}

// Validate checks o (after WithDefaults): a socket, a HOST:PORT address,
// and a token unless the host is loopback. Its errors name the field and
// the flag of `ax sidecar` / `ax ui`.
func (o Options) Validate() error {
	if o.Socket == "" {
		return fmt.Errorf("Socket (--socket): the node's API socket is required")
	}
	host, _, err := net.SplitHostPort(o.Addr)
	if err != nil {
		return fmt.Errorf("Addr (--ui-addr) %q: want HOST:PORT: %v", o.Addr, err)
	}
	if !IsLoopback(host) && o.Token == "" {
		return fmt.Errorf("Addr (--ui-addr) %q is not a loopback address: give Token (--ui-token), or bind 127.0.0.1: %w", o.Addr, ErrTokenRequired)
	}
	if strings.ContainsAny(o.Token, " \t\r\n") {
		return fmt.Errorf("Token (--ui-token): no white space allowed")
	}
	return nil
}

// IsLoopback reports whether host (without port) is a loopback name or
// address: localhost, 127.0.0.0/8 or ::1. An empty host (every interface)
// is not.
func IsLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}
