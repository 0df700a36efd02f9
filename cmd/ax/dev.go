package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/axsched/ax/sidecar"
)

func devCmd() *cobra.Command {
	var rf runFlags
	f, uf := &rf.node, &rf.ui
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run a single-node ax with embedded defaults, for development",
		Long: `Run a single-node ax with embedded defaults: nothing else to set up.
It prints its socket path and a copy-paste example, then serves until Ctrl-C.
It takes the same flags as 'ax sidecar', with two other defaults: node id
"dev", and logs in console format at warn level (--log-format json and
--log-level info to change them).`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// The flags as given, before the environment fills others in.
			again := restartFlags(cmd.Flags())
			cfg, log, err := f.configAndLogger()
			if err != nil {
				return err
			}
			if cfg.BootstrapExpect != 1 || len(cfg.Join) > 0 {
				return usagef("ax dev runs one node; use 'ax sidecar' for a cluster")
			}
			logf := func(format string, args ...any) { log.Warn().Msgf(format, args...) }
			pln, err := listenPprof(rf.pprofAddr)
			if err != nil {
				return err
			}
			srv, ln, err := uf.listenUI(cfg.Socket, logf)
			if err != nil {
				closeListener(pln)
				return err
			}
			servePprof(pln, cmd.ErrOrStderr())
			n, err := sidecar.Start(cfg, log)
			if err != nil {
				closeListener(ln)
				closeListener(pln)
				return err
			}
			stopProcs := sync.OnceFunc(f.startProcs(log, n))
			defer stopProcs()
			defer serveUI(srv, ln, logf)()
			if srv != nil {
				fmt.Printf("Dashboard: http://%s/\n", ln.Addr())
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			for n.Ready(ctx) != nil && ctx.Err() == nil {
				time.Sleep(20 * time.Millisecond)
			}
			cancel()
			printDevBanner(os.Stdout, cfg, selfCommand(os.Args[0]), again)
			return waitForSignal(n, stopProcs)
		},
	}
	rf.register(cmd)
	// The dev defaults, set as the flags' defaults so --help shows them.
	for name, v := range map[string]string{"node-id": "dev", "log-format": "console", "log-level": "warn"} {
		fl := cmd.Flags().Lookup(name)
		_ = fl.Value.Set(v)
		fl.DefValue = v
		fl.Usage = strings.Replace(fl.Usage, " (default: the host name)", "", 1)
	}
	return cmd
}

// bannerExecutor is the executor of the banner's example.
const bannerExecutor = "*=unix:///tmp/app.sock"

// printDevBanner prints what ax dev says once ready: self is how to start
// ax again (selfCommand), again the flags it was started with that the
// example of a restart with an executor keeps (restartFlags).
func printDevBanner(w io.Writer, cfg sidecar.Config, self string, again []string) {
	sock, _ := filepath.Abs(cfg.Socket)
	data, _ := filepath.Abs(cfg.DataDir)
	restart := append([]string{self, "dev"}, withoutStarExecutors(again)...)
	restart = append(restart, "--executor", shellQuote(bannerExecutor))
	fmt.Fprintf(w, `ax dev is ready (one node, leader).
  socket:    %[1]s
  data dir:  %[2]s
  executors: %[3]s

Schedule a task in 5 seconds:
  curl -s --unix-socket %[1]s -X POST http://ax/v1/tasks \
    -d '{"id":"order|42","handler":"order.timeout","delay":"5s","payload":{"order_id":42}}'
Look at it:
  curl -s --unix-socket %[1]s http://ax/v1/tasks/order%%7C42
To receive callbacks, an executor registers itself (the Go and Python
clients do: POST /v1/executors), or start one and pass it at start-up:
stop this ax dev first (Ctrl-C; a second one on the same data dir fails
on its lock), then
  %[4]s echo-executor --listen unix:///tmp/app.sock &
  %[5]s
Stop with Ctrl-C.
`, sock, data, executorsText(cfg), self, strings.Join(restart, " "))
}

// withoutStarExecutors returns the restart flags (restartFlags) less
// every --executor for the handler pattern "*", the example's own among
// them: the example passes the echo executor it starts as "*", once, and
// an executor of the user's for "*" beside it would be a second one for
// every handler (the first up wins, so the echo executor would print
// nothing).
func withoutStarExecutors(again []string) []string {
	var out []string
	for i := 0; i < len(again); i++ {
		w := again[i]
		if w == "--executor" && i+1 < len(again) && strings.HasPrefix(unquoteShell(again[i+1]), "*=") {
			i++
			continue
		}
		if strings.HasPrefix(unquoteShell(w), "--executor=*=") {
			continue
		}
		out = append(out, w)
	}
	return out
}

// unquoteShell undoes shellQuote.
func unquoteShell(w string) string {
	if len(w) >= 2 && strings.HasPrefix(w, "'") && strings.HasSuffix(w, "'") {
		return strings.ReplaceAll(w[1:len(w)-1], `'\''`, "'")
	}
	return w
}

// restartEchoFlags are the flags of ax dev, other than numbers, durations
// and booleans (always repeated), that the banner's example of a restart
// repeats when they were given: paths, addresses, names, none of which
// can hold a secret. Any other flag is left out: those that can hold one
// (restartSecretFlags), and a flag added later until it is listed here
// (TestRestartFlags_EveryFlagIsListed fails until it is).
var restartEchoFlags = map[string]bool{
	"node-id": true, "data-dir": true, "socket": true, "raft-addr": true, "peer-addr": true,
	"raft-advertise": true, "peer-advertise": true, "join": true, "executor": true,
	"log-format": true, "log-level": true, "routing": true, "handler-limit": true,
	"health-addr": true, "socket-mode": true, "socket-group": true, "otel-service-name": true,
	"cluster-token-file": true, "ui-token-file": true, "ui-addr": true, "pprof-addr": true,
	"tls-cert": true, "tls-key": true, "tls-ca": true, "tls-server-name": true,
	"raft-log-sync": true, "socket-io": true,
}

// restartSecretFlags are the string flags the banner never repeats: a
// secret (the tokens), or a URL that can carry credentials in it (the
// alert webhook and the collector), and the hidden test-only ones.
var restartSecretFlags = map[string]bool{
	"cluster-token": true, "ui-token": true, "on-dead-url": true, "otel-endpoint": true,
	"peer-route": true, "dns-hosts-file": true,
}

// restartFlags returns the flags of fs given on the command line, for the
// banner's example of a restart, sorted by name, each "--name value"
// shell-quoted (a list flag once per value, a boolean as --name or
// --name=false): numbers, durations and booleans, and the others only if
// restartEchoFlags lists them.
func restartFlags(fs *pflag.FlagSet) []string {
	var out []string
	fs.Visit(func(f *pflag.Flag) {
		switch f.Value.Type() {
		case "bool":
			if f.Value.String() == "true" {
				out = append(out, "--"+f.Name)
			} else {
				out = append(out, "--"+f.Name+"=false")
			}
			return
		case "int", "int64", "uint64", "duration", "float64":
		default:
			if !restartEchoFlags[f.Name] {
				return // could hold a secret, or not known not to
			}
		}
		vals := []string{f.Value.String()}
		if sv, ok := f.Value.(pflag.SliceValue); ok {
			vals = sv.GetSlice()
		}
		for _, v := range vals {
			if strings.HasPrefix(v, "-") {
				out = append(out, shellQuote("--"+f.Name+"="+v)) // not read as a flag
			} else {
				out = append(out, "--"+f.Name, shellQuote(v))
			}
		}
	})
	return out
}

// selfCommand is how the banner's examples start ax again: "go run
// ./cmd/ax" when this process is a binary `go run` built (the README's
// first command), else "ax". Such a binary is either in a go-build<digits>
// directory under the temporary directory, removed when it exits (a fresh
// link), or, since Go 1.24, cached in the build cache as
// $GOCACHE/<2 hex>/<64 hex>-d/<name> (every later `go run` of the same
// build).
func selfCommand(arg0 string) string {
	dirs := strings.Split(filepath.ToSlash(filepath.Dir(arg0)), "/")
	for _, dir := range dirs {
		if n, ok := strings.CutPrefix(dir, "go-build"); ok && n != "" && strings.Trim(n, "0123456789") == "" {
			return "go run ./cmd/ax"
		}
	}
	if len(dirs) >= 2 {
		prefix, action := dirs[len(dirs)-2], dirs[len(dirs)-1]
		if id, ok := strings.CutSuffix(action, "-d"); ok && len(id) == 64 && len(prefix) == 2 &&
			strings.Trim(id, "0123456789abcdef") == "" && strings.HasPrefix(id, prefix) {
			return "go run ./cmd/ax"
		}
	}
	return "ax"
}

func executorsText(cfg sidecar.Config) string {
	if len(cfg.Executors) == 0 {
		return "none (tasks wait until an executor is registered)"
	}
	s := ""
	for i, e := range cfg.Executors {
		if i > 0 {
			s += ", "
		}
		s += e.Handler + "=" + e.URL
	}
	return s
}
