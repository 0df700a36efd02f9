package cluster

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/axsched/ax/engine"
)

// Running in pods: addresses that bind every interface but advertise the
// pod's own, and discovery of the peers by DNS (a headless Service).

// JoinDNSPrefix marks a join entry resolved by DNS: dns:NAME:PORT stands
// for every A and AAAA record of NAME, each at PORT (rqlite's and Consul's
// way; a Kubernetes headless Service with publishNotReadyAddresses gives
// one record per pod).
const JoinDNSPrefix = "dns:"

// dnsLookupTimeout bounds each resolution of a dns: join entry.
const dnsLookupTimeout = 2 * time.Second

// Resolver resolves a host name to its addresses (IPv4 and IPv6, as
// strings). *net.Resolver implements it.
type Resolver interface {
	LookupHost(ctx context.Context, host string) (addrs []string, err error)
}

// ValidateJoin checks one join entry: HOST:PORT or dns:NAME:PORT. The
// error names the entry and the form wanted.
func ValidateJoin(j string) error {
	name, isDNS := strings.CutPrefix(j, JoinDNSPrefix)
	host, port, err := net.SplitHostPort(name)
	if err == nil {
		_, err = strconv.ParseUint(port, 10, 16)
	}
	switch {
	case isDNS && (err != nil || host == "" || port == "0"):
		return fmt.Errorf("join %q: want dns:NAME:PORT (NAME resolves to the peers' addresses, PORT is their peer API port)", j)
	case err != nil || host == "" || port == "0":
		return fmt.Errorf("join %q: want HOST:PORT (a peer API address) or dns:NAME:PORT", j)
	}
	return nil
}

// JoinAddrs returns the peer API addresses of Config.Join for one join
// round: static entries as given, each dns:NAME:PORT entry as every
// address NAME resolves to now, at PORT. Duplicates are dropped; a name
// that does not resolve (yet) adds nothing.
func (m *Membership) JoinAddrs(ctx context.Context) []string {
	addrs, errs := expandJoin(ctx, resolver(m.cfg.Resolver), m.cfg.Join)
	for _, err := range errs {
		m.log.Debug().Err(err).Msg("join: DNS name not resolved")
	}
	return addrs
}

func resolver(r Resolver) Resolver {
	if r == nil {
		return net.DefaultResolver
	}
	return r
}

// expandJoin resolves the dns: entries of join with r. It returns the
// addresses in order without duplicates, and the resolution errors.
func expandJoin(ctx context.Context, r Resolver, join []string) ([]string, []error) {
	var addrs []string
	var errs []error
	seen := map[string]bool{}
	add := func(a string) {
		if !seen[a] {
			seen[a] = true
			addrs = append(addrs, a)
		}
	}
	for _, j := range join {
		hostPort, isDNS := strings.CutPrefix(j, JoinDNSPrefix)
		if !isDNS {
			add(j)
			continue
		}
		name, port, err := net.SplitHostPort(hostPort)
		if err != nil {
			errs = append(errs, fmt.Errorf("join %q: %w", j, err))
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, dnsLookupTimeout)
		ips, err := r.LookupHost(rctx, name)
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("join %q: %w", j, err))
			continue
		}
		for _, ip := range ips {
			add(net.JoinHostPort(ip, port))
		}
	}
	return addrs, errs
}

// HostsFile is a Resolver that reads a hosts(5) file ("ADDRESS NAME
// [ALIAS...]" lines, # comments) at every lookup: for tests, which must
// not edit /etc/hosts. A name it does not list is a not-found error.
type HostsFile string

// LookupHost implements Resolver.
func (h HostsFile) LookupHost(_ context.Context, host string) ([]string, error) {
	f, err := os.Open(string(h))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var addrs []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		fields := strings.Fields(line)
		if len(fields) < 2 || net.ParseIP(fields[0]) == nil {
			continue
		}
		for _, name := range fields[1:] {
			if strings.EqualFold(name, host) {
				addrs = append(addrs, fields[0])
				break
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(addrs) == 0 {
		return nil, &net.DNSError{Err: "no such host in " + string(h), Name: host, IsNotFound: true}
	}
	return addrs, nil
}

// AdvertiseResolveWait bounds how long a node starting with a host name
// as its Raft advertise address waits for the name to resolve: a
// StatefulSet pod's own DNS name appears a moment after the pod starts.
const AdvertiseResolveWait = 60 * time.Second

// advertiseRetry is how often ResolveAdvertise looks the name up again.
const advertiseRetry = 500 * time.Millisecond

// ResolveAdvertise resolves addr, the Raft advertise address, for the
// Raft transport (which wants an IP address; the Raft configuration keeps
// the name) with r (net.DefaultResolver when nil). A host name that does
// not resolve yet is retried every 500ms on clock for up to wait, or until
// ctx ends; the error names the address.
func ResolveAdvertise(ctx context.Context, r Resolver, addr string, wait time.Duration, clock engine.Clock, log zerolog.Logger) (*net.TCPAddr, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("raft-advertise %q: %w", addr, err)
	}
	if net.ParseIP(host) != nil {
		return net.ResolveTCPAddr("tcp", addr)
	}
	r = resolver(r)
	deadline := clock.Now().Add(wait)
	for warned := false; ; {
		lctx, cancel := context.WithTimeout(ctx, dnsLookupTimeout)
		ips, err := r.LookupHost(lctx, host)
		cancel()
		if err == nil && len(ips) > 0 {
			return net.ResolveTCPAddr("tcp", net.JoinHostPort(ips[0], port))
		}
		if err == nil {
			err = fmt.Errorf("no addresses for %s", host)
		}
		if clock.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("raft-advertise %s: %w (waited %s for the name to resolve)", addr, err, wait)
		}
		if !warned {
			log.Warn().Err(err).Str("raft_advertise", addr).Msg("the advertised name does not resolve yet; retrying")
			warned = true
		}
		sleep(ctx, clock, advertiseRetry)
	}
}
