package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/pprof"

	"github.com/spf13/cobra"
)

// registerPprofFlag adds the hidden --pprof-addr flag (for `ax bench`
// investigations: ax bench --node-arg=--pprof-addr=127.0.0.1:0).
func registerPprofFlag(cmd *cobra.Command, addr *string) {
	cmd.Flags().StringVar(addr, "pprof-addr", "", "serve Go's net/http/pprof on this TCP address (127.0.0.1:0 picks a port, printed on stderr); for profiling only")
	_ = cmd.Flags().MarkHidden("pprof-addr")
}

// startPprof serves /debug/pprof/ on addr, when set.
func startPprof(addr string, stderr io.Writer) error {
	if addr == "" {
		return nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--pprof-addr: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	fmt.Fprintf(stderr, "pprof: serving http://%s/debug/pprof/\n", ln.Addr())
	go http.Serve(ln, mux)
	return nil
}
