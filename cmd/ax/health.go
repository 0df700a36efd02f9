package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
)

// healthTimeout bounds `ax health`: below kubelet's default probe timeout
// of 1 s would be too tight for a busy node, so probes set
// timeoutSeconds: 3.
const healthTimeout = 2 * time.Second

// quietError is a failure whose one line the command already printed: run
// prints nothing more and exits 1.
type quietError struct{ msg string }

func (e *quietError) Error() string { return e.msg }

func healthCmd() *cobra.Command {
	var socket string
	var ready bool
	cmd := &cobra.Command{
		Use:   "health",
		Short: "Check the local sidecar for an exec probe: exit 0 when alive (--ready: ready), 1 otherwise, one line on stdout",
		Long: `Check the sidecar on the socket, for a Kubernetes exec probe or a script.

Without --ready: GET /healthz, alive (the node runs). With --ready: GET
/readyz, ready (a leader is known and this node has caught up with it).
Prints one line on stdout ("ok", "ready", or "not ready: WHY") and exits
0 on success, 1 otherwise; it gives up after 2s.`,
		Example: `  ax health --socket /run/ax/ax.sock
  ax health --ready --socket /run/ax/ax.sock`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			path := "/healthz"
			if ready {
				path = "/readyz"
			}
			c := newCaller(socketPath(socket), healthTimeout)
			defer c.Close()
			body, _, err := c.Do(context.Background(), "GET", path, nil)
			line := ""
			if err == nil {
				var st struct {
					Status string `json:"status"`
				}
				if jerr := json.Unmarshal(body, &st); jerr != nil || st.Status == "" {
					err = fmt.Errorf("unexpected answer %q", oneLine(string(body)))
				} else {
					line = st.Status
				}
			}
			if err != nil {
				what := "not alive"
				if ready {
					what = "not ready"
				}
				line = what + ": " + errorLine(err)
			}
			fmt.Fprintln(cmd.OutOrStdout(), line)
			if err != nil {
				return &quietError{line}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&socket, "socket", "", "path of the sidecar's Unix socket (default: $AX_SOCKET, else ./ax.sock)")
	cmd.Flags().BoolVar(&ready, "ready", false, "check readiness (/readyz) instead of liveness (/healthz)")
	return cmd
}

// isQuiet reports whether err was already reported on stdout.
func isQuiet(err error) bool {
	var q *quietError
	return errors.As(err, &q)
}
