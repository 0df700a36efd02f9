package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

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
			printDevBanner(cfg)
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

func printDevBanner(cfg sidecar.Config) {
	sock, _ := filepath.Abs(cfg.Socket)
	data, _ := filepath.Abs(cfg.DataDir)
	fmt.Fprintf(os.Stdout, `ax dev is ready (one node, leader).
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
  %[4]s echo-executor --listen unix:///tmp/app.sock &
  %[4]s dev --executor '*=unix:///tmp/app.sock'
Stop with Ctrl-C.
`, sock, data, executorsText(cfg), selfCommand(os.Args[0]))
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
