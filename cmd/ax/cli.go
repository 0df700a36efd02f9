package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	ax "github.com/axsched/ax/clients/go"
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

func (f *apiFlags) socketPath() string { return socketPath(f.socket) }

// caller returns a raw caller for the sidecar (api.go). The commands use
// the Go client's raw calls rather than its typed ones so that --json
// prints the API's JSON unchanged, with every field.
func (f *apiFlags) caller() *apiCaller { return newCaller(f.socketPath(), requestTimeout) }

// ctx returns the context of one command.
func cmdContext(cmd *cobra.Command) (context.Context, context.CancelFunc) {
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	return context.WithTimeout(ctx, 4*requestTimeout)
}

// writeJSON prints v as indented JSON. A json.RawMessage (an answer of the
// API) keeps its fields, their order and their values; only the white space
// changes.
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

// flagError turns a flag parsing error into a usage error. A bad value
// names the flag and what it wants (`--priority "abc": not a number`)
// instead of the parser's text.
func flagError(cmd *cobra.Command, err error) error {
	var bad interface{ GetValue() string }
	if errors.As(err, &bad) {
		if name := badFlagName(err.Error()); name != "" {
			return &usageError{fmt.Errorf("--%s %q: %s", name, bad.GetValue(), flagWant(cmd, name, errors.Unwrap(err)))}
		}
	}
	return &usageError{fmt.Errorf("%s: %w (see %s --help)", cmdName(cmd), err, cmd.CommandPath())}
}

// badFlagName extracts the flag's long name from pflag's message
// `invalid argument "abc" for "-p, --priority" flag: ...`.
func badFlagName(msg string) string {
	_, rest, ok := strings.Cut(msg, `" for "`)
	if !ok {
		return ""
	}
	name, _, ok := strings.Cut(rest, `" flag`)
	if !ok {
		return ""
	}
	if i := strings.LastIndex(name, "--"); i >= 0 {
		return name[i+2:]
	}
	return ""
}

// flagWant says what a flag of the given name takes, by its type.
func flagWant(cmd *cobra.Command, name string, cause error) string {
	typ := ""
	if fl := cmd.Flags().Lookup(name); fl != nil {
		typ = fl.Value.Type()
	}
	var ne *strconv.NumError
	outOfRange := errors.As(cause, &ne) && errors.Is(ne.Err, strconv.ErrRange)
	switch {
	case strings.HasPrefix(typ, "int") && outOfRange, strings.HasPrefix(typ, "uint") && outOfRange:
		return "out of range"
	case strings.HasPrefix(typ, "uint"):
		return "not a number (want a whole number, 0 or more)"
	case strings.HasPrefix(typ, "int"):
		return "not a number"
	case strings.HasPrefix(typ, "float"):
		return "not a number"
	case typ == "duration":
		return "not a duration (like 500ms, 90s, 30m, 2h)"
	case typ == "bool":
		return "want true or false"
	case cause != nil:
		return oneLine(cause.Error())
	}
	return "invalid value"
}

// groupCmd makes cmd, a command that only groups others, refuse to run: a
// missing or unknown subcommand is a usage error (cobra would print the help
// and exit 0).
func groupCmd(cmd *cobra.Command) *cobra.Command {
	cmd.Args = cobra.ArbitraryArgs
	// An unknown flag is reported as what it most likely is: a subcommand
	// that is missing or misspelled.
	cmd.FParseErrWhitelist.UnknownFlags = true
	cmd.SuggestionsMinimumDistance = 2
	// Its usage shows "ax cluster [command]", not also "ax cluster [flags]".
	cmd.SetUsageTemplate(strings.Replace(cmd.UsageTemplate(), "Usage:{{if .Runnable}}", "Usage:{{if and .Runnable (not .HasAvailableSubCommands)}}", 1))
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		var names []string
		for _, c := range cmd.Commands() {
			if c.IsAvailableCommand() {
				names = append(names, c.Name())
			}
		}
		if len(args) == 0 {
			return usagef("%s: missing command, one of: %s (see %s --help)", cmdName(cmd), strings.Join(names, ", "), cmd.CommandPath())
		}
		hint := ""
		if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
			hint = "; did you mean " + s[0] + "?"
		}
		return usagef("%s: unknown command %q%s (want one of: %s; see %s --help)", cmdName(cmd), args[0], hint, strings.Join(names, ", "), cmd.CommandPath())
	}
	return cmd
}

// stripAx removes the "ax: " prefixes of wrapped errors: the caller prints
// one, and `cluster remove n9: ax: cannot reach ...` doubles it.
func stripAx(s string) string {
	return strings.ReplaceAll(strings.TrimPrefix(s, "ax: "), ": ax: ", ": ")
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
		case ax.CodeQueueFull, ax.CodeNoLeader, ax.CodeNotReady, ax.CodeStorageUnavailable:
			if apiErr.RetryAfter > 0 {
				msg += fmt.Sprintf(" (%s; retry after %s)", apiErr.Code, apiErr.RetryAfter)
			} else {
				msg += " (" + apiErr.Code + ")"
			}
		case "", ax.CodeNotFound, ax.CodeConflict, ax.CodeBadRequest, ax.CodeInvalidJSON, ax.CodeInvalidTraceparent, ax.CodeInvalidTracestate:
		default:
			msg += " (" + apiErr.Code + ")"
		}
		return oneLine(msg)
	case errors.Is(err, ax.ErrUnavailable):
		return oneLine(stripAx(err.Error()) + " (is the sidecar running? see --socket or $AX_SOCKET)")
	}
	return oneLine(stripAx(err.Error()))
}

func oneLine(s string) string {
	s = strings.TrimSpace(s)
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", " ")), " ")
}

// notFoundTask rewrites a not-found answer about a task into the error
// line `task "x" not found`.
func notFoundTask(err error, id string) error {
	if errors.Is(err, ax.ErrNotFound) && !isRouteMissing(err) {
		return fmt.Errorf("task %q not found", id)
	}
	return err
}

// fmtTime renders a time for tables: date and time with seconds in UTC,
// marked Z, and how far it is from now: "2026-11-30 08:00:00Z (in 3s)".
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
	return fmtUTC(*t) + " (" + rel + ")"
}

// fmtUTC renders a time in UTC with an explicit zone: 2026-11-30 08:00:00Z.
func fmtUTC(t time.Time) string {
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

// roundDur prints a duration with at most two units: 4s, 3m10s, 5h3m, 2d4h.
func roundDur(d time.Duration) string {
	switch {
	case d < time.Minute:
		return d.Round(time.Second).String()
	case d < time.Hour:
		return trimZeroSeconds(d.Round(time.Second).String())
	case d < 48*time.Hour:
		return trimZeroSeconds(d.Round(time.Minute).String())
	}
	days := int(d / (24 * time.Hour))
	h := int((d % (24 * time.Hour)) / time.Hour)
	return fmt.Sprintf("%dd%dh", days, h)
}

// trimZeroSeconds drops the seconds of a duration string when they are
// zero ("5m0s" → "5m", "2h5m0s" → "2h5m"), never a digit of other seconds
// ("5m40s" stays).
func trimZeroSeconds(s string) string {
	if strings.HasSuffix(s, "m0s") {
		return s[:len(s)-2]
	}
	return s
}

// truncate puts s on one line and shortens it to n columns of a terminal,
// marking the cut with "…".
func truncate(s string, n int) string {
	return truncateWidth(oneLine(s), n)
}
