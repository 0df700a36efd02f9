package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"

	ax "github.com/axsched/ax/clients/go"
	"github.com/axsched/ax/internal/axapi"
)

// Exit codes of the commands for people.
const (
	exitOK       = 0
	exitAPIError = 1 // the sidecar refused, or could not be reached
	exitUsage    = 2 // bad arguments or flags
)

// requestTimeout bounds each call a command for people makes.
const requestTimeout = 10 * time.Second

// usageError is an error in the command line: exit code 2.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

func usagef(format string, a ...any) error {
	return &usageError{fmt.Errorf(format, a...)}
}

// exactArgs is cobra.ExactArgs with a usage error and names for the
// arguments ("ID").
func exactArgs(names ...string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) == len(names) {
			return nil
		}
		if len(args) < len(names) {
			return usagef("%s: missing %s (usage: %s)", cmdName(cmd), strings.Join(names[len(args):], " "), cmd.UseLine())
		}
		return usagef("%s: too many arguments (usage: %s)", cmdName(cmd), cmd.UseLine())
	}
}

// noArgs is cobra.NoArgs with a usage error.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usagef("%s: unexpected argument %q (usage: %s)", cmdName(cmd), args[0], cmd.UseLine())
	}
	return nil
}

// cmdName is the command's path without the program name: "cluster status".
func cmdName(cmd *cobra.Command) string {
	return strings.TrimPrefix(cmd.CommandPath(), cmd.Root().Name()+" ")
}

// apiFlags are the flags every command that talks to a sidecar has.
type apiFlags struct {
	socket string
	json   bool
}

func (f *apiFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.socket, "socket", "", "path of the sidecar's Unix socket (default: $AX_SOCKET, else ./ax.sock)")
	cmd.Flags().BoolVar(&f.json, "json", false, "print the API's JSON instead of text, for scripts")
}

func (f *apiFlags) socketPath() string { return axapi.SocketPath(f.socket) }

// client returns a Go client for the sidecar.
func (f *apiFlags) client() *ax.Client {
	return ax.New(ax.Config{SocketPath: f.socketPath(), Timeout: requestTimeout})
}

// caller returns a raw caller for the calls the Go client lacks.
func (f *apiFlags) caller() *axapi.Caller { return axapi.New(f.socketPath(), requestTimeout) }

// ctx returns the context of one command.
func cmdContext(cmd *cobra.Command) (context.Context, context.CancelFunc) {
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	return context.WithTimeout(ctx, 4*requestTimeout)
}

// writeJSON prints v as indented JSON.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// exitCode maps an error of a command to the process exit code.
func exitCode(err error) int {
	var ue *usageError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ue):
		return exitUsage
	case isCobraUsage(err):
		return exitUsage
	}
	return exitAPIError
}

// isCobraUsage recognizes the command-line errors cobra makes itself.
func isCobraUsage(err error) bool {
	msg := err.Error()
	for _, p := range []string{"unknown command ", "unknown flag: ", "unknown shorthand flag: ", "flag needs an argument: ", "invalid argument ", "required flag(s) "} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// errorLine renders err as the one line printed on stderr, without the
// "ax: " prefix the caller adds.
func errorLine(err error) string {
	var apiErr *ax.APIError
	switch {
	case errors.As(err, &apiErr):
		msg := apiErr.Message
		if msg == "" {
			msg = strings.ToLower(http.StatusText(apiErr.Status))
		}
		msg = strings.ReplaceAll(msg, `": not found`, `" not found`)
		switch apiErr.Code {
		case ax.CodeQueueFull, ax.CodeNoLeader, ax.CodeNotReady:
			if apiErr.RetryAfter > 0 {
				msg += fmt.Sprintf(" (%s; retry after %s)", apiErr.Code, apiErr.RetryAfter)
			} else {
				msg += " (" + apiErr.Code + ")"
			}
		case "", ax.CodeNotFound, ax.CodeConflict, ax.CodeBadRequest, ax.CodeInvalidJSON:
		default:
			msg += " (" + apiErr.Code + ")"
		}
		return oneLine(msg)
	case errors.Is(err, ax.ErrUnavailable):
		return oneLine(strings.TrimPrefix(err.Error(), "ax: ") + " (is the sidecar running? see --socket or $AX_SOCKET)")
	}
	return oneLine(strings.TrimPrefix(err.Error(), "ax: "))
}

func oneLine(s string) string {
	s = strings.TrimSpace(s)
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", " ")), " ")
}

// notFoundTask rewrites a not-found answer about a task into the error
// line `task "x" not found`.
func notFoundTask(err error, id string) error {
	if errors.Is(err, ax.ErrNotFound) && !axapi.IsRouteMissing(err) {
		return fmt.Errorf("task %q not found", id)
	}
	return err
}

// fmtTime renders a time for tables: local date and time with seconds, and
// how far it is from now ("in 4s", "3m ago").
func fmtTime(t *time.Time, now time.Time) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	d := t.Sub(now)
	rel := ""
	switch {
	case d > time.Second:
		rel = "in " + roundDur(d)
	case d < -time.Second:
		rel = roundDur(-d) + " ago"
	default:
		rel = "now"
	}
	return t.Local().Format("2006-01-02 15:04:05") + " (" + rel + ")"
}

// roundDur prints a duration with at most two units: 4s, 3m10s, 5h3m, 2d4h.
func roundDur(d time.Duration) string {
	switch {
	case d < time.Minute:
		return d.Round(time.Second).String()
	case d < time.Hour:
		return strings.TrimSuffix(d.Round(time.Second).String(), "0s")
	case d < 48*time.Hour:
		return strings.TrimSuffix(d.Round(time.Minute).String(), "0s")
	}
	days := int(d / (24 * time.Hour))
	h := int((d % (24 * time.Hour)) / time.Hour)
	return fmt.Sprintf("%dd%dh", days, h)
}

// truncate shortens s to n runes, marking the cut with "…".
func truncate(s string, n int) string {
	s = oneLine(s)
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
