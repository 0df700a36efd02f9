package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/pprof"

	"github.com/spf13/cobra"
)

// registerPprofFlag adds the --pprof-addr flag of `ax sidecar` and `ax dev`
// (off by default; for profiling, also through
// `ax bench --node-arg=--pprof-addr=127.0.0.1:6061`).
func registerPprofFlag(cmd *cobra.Command, addr *string) {
	cmd.Flags().StringVar(addr, "pprof-addr", "", "serve Go's net/http/pprof (/debug/pprof/) on this loopback address, e.g. 127.0.0.1:6061 (127.0.0.1:0 picks a port, printed on stderr); off by default, for profiling only")
}

// checkPprofAddr accepts only a loopback HOST:PORT (127.0.0.0/8, ::1 or
// localhost): the profiles show the process's memory and command line, and
// nothing authenticates them. It returns a usage error otherwise.
func checkPprofAddr(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return usagef("--pprof-addr %q: want HOST:PORT on a loopback address, like 127.0.0.1:6061", addr)
	}
	if !loopback(host) {
		return usagef("--pprof-addr %s is not a loopback address: the profiles are served without authentication, so only 127.0.0.1, ::1 or localhost are accepted", addr)
	}
	return nil
}

// loopback reports whether host is localhost or a loopback IP.
func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// listenPprof checks addr and opens its listener; nil when addr is empty.
func listenPprof(addr string) (net.Listener, error) {
	if addr == "" {
		return nil, nil
	}
	if err := checkPprofAddr(addr); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--pprof-addr: %w", err)
	}
	return ln, nil
}

// servePprof serves /debug/pprof/ on ln until ln is closed (nothing when
// ln is nil) and says where on stderr.
func servePprof(ln net.Listener, stderr io.Writer) {
	if ln == nil {
		return
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	fmt.Fprintf(stderr, "pprof: serving http://%s/debug/pprof/\n", ln.Addr())
	go http.Serve(ln, mux)
}
