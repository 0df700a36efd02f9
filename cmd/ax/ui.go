package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/axsched/ax/ui"
)

// uiFlags are the dashboard's flags: --ui-addr (`ax sidecar`, `ax dev`;
// `ax ui` calls it --listen), --ui-token and --ui-token-file.
type uiFlags struct {
	addr, token, tokenFile string
	sampleInterval         time.Duration
	addrFlag               string // "ui-addr" or "listen", for messages
}

func (f *uiFlags) registerToken(fl *pflag.FlagSet) {
	fl.DurationVar(&f.sampleInterval, "ui-sample-interval", ui.SampleIntervalDefault, "how often the dashboard reads the node's /metrics (for tests)")
	_ = fl.MarkHidden("ui-sample-interval")
	fl.StringVar(&f.token, "ui-token", "", "token the dashboard asks for (bearer header or its login form); required unless it listens on loopback (default: $AX_UI_TOKEN)")
	fl.StringVar(&f.tokenFile, "ui-token-file", "", "file holding the dashboard's token (instead of --ui-token)")
}

// registerSidecar adds the flags to `ax sidecar` and `ax dev`.
func (f *uiFlags) registerSidecar(fl *pflag.FlagSet) {
	f.addrFlag = "ui-addr"
	fl.StringVar(&f.addr, "ui-addr", "", "HOST:PORT to serve the dashboard on, e.g. "+ui.AddrDefault+" (default: no dashboard); a non-loopback address needs --ui-token")
	f.registerToken(fl)
}

// options turns the flags into ui.Options for the node's socket and
// checks them; a bad value is a usage error.
func (f *uiFlags) options(socket string) (ui.Options, error) {
	o := ui.Options{Addr: f.addr, Socket: socketPath(socket), Token: f.token, SampleInterval: f.sampleInterval}
	if o.Token == "" {
		o.Token = os.Getenv("AX_UI_TOKEN")
	}
	if f.tokenFile != "" {
		if f.token != "" {
			return o, usagef("--ui-token and --ui-token-file: give at most one")
		}
		b, err := os.ReadFile(f.tokenFile)
		if err != nil {
			return o, usagef("--ui-token-file: %v", err)
		}
		if o.Token = strings.TrimSpace(string(b)); o.Token == "" {
			return o, usagef("--ui-token-file %s is empty", f.tokenFile)
		}
	}
	o = o.WithDefaults()
	if err := o.Validate(); errors.Is(err, ui.ErrTokenRequired) {
		return o, usagef("--%s %s is not a loopback address: give --ui-token (or --ui-token-file, or $AX_UI_TOKEN), or listen on 127.0.0.1", f.addrFlag, o.Addr)
	} else if err != nil {
		return o, &usageError{err}
	}
	return o, nil
}

// listenUI checks the dashboard's flags and opens its listener before the
// node starts (so that a bad flag or a busy port starts nothing); nil
// when --ui-addr is not given.
func (f *uiFlags) listenUI(socket string, logf func(string, ...any)) (*ui.Server, net.Listener, error) {
	if f.addr == "" {
		if f.token != "" || f.tokenFile != "" {
			return nil, nil, usagef("--ui-token needs --ui-addr")
		}
		return nil, nil, nil
	}
	o, err := f.options(socket)
	if err != nil {
		return nil, nil, err
	}
	o.Logf = logf
	return ui.Listen(o)
}

// serveUI serves the dashboard until the returned stop is called.
func serveUI(srv *ui.Server, ln net.Listener, logf func(string, ...any)) (stop func()) {
	if srv == nil {
		return func() {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ctx, ln); err != nil {
			logf("ui: %v", err)
		}
	}()
	return func() { cancel(); <-done }
}

func uiCmd() *cobra.Command {
	var f uiFlags
	var socket string
	cmd := &cobra.Command{
		Use:   "ui",
		Short: "Serve the dashboard for a running node, through its socket",
		Long: `Serve ax's dashboard (cluster, handlers, tasks, dead letters) on --listen,
for the node whose socket is --socket. Every read and action goes through
that socket's API. On an address that is not loopback, --ui-token is
required: the dashboard then asks for it (a login form, or the header
Authorization: Bearer TOKEN). 'ax sidecar --ui-addr' serves the same
dashboard from the node itself.`,
		Example: `  ax ui --socket ./ax.sock --listen 127.0.0.1:7480`,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			logf := func(format string, args ...any) { fmt.Fprintf(cmd.ErrOrStderr(), format+"\n", args...) }
			srv, ln, err := f.listenUI(socket, logf)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "ax dashboard on http://%s/ (node socket %s)\n", ln.Addr(), socketPath(socket))
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return srv.Serve(ctx, ln)
		},
	}
	cmd.Flags().StringVar(&socket, "socket", "", "path of the node's Unix socket (default: $AX_SOCKET, else ./ax.sock)")
	f.addrFlag = "listen"
	cmd.Flags().StringVar(&f.addr, "listen", ui.AddrDefault, "HOST:PORT to serve the dashboard on; a non-loopback address needs --ui-token")
	f.registerToken(cmd.Flags())
	return cmd
}

func closeListener(ln net.Listener) {
	if ln != nil {
		_ = ln.Close()
	}
}
