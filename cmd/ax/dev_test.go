package main

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/axsched/ax/sidecar"
)

// devSkipsSidecarFlags are the `ax sidecar` flags `ax dev` does not take,
// each with the reason (its help text says it takes the same flags). None
// today: add a flag here only with a reason and a line in dev's help.
var devSkipsSidecarFlags = map[string]string{}

// TestDevTakesEverySidecarFlag walks every flag of `ax sidecar` (hidden
// ones too) and checks `ax dev` has it, of the same type, and parses it
// (given its sidecar default), unless devSkipsSidecarFlags says why not.
func TestDevTakesEverySidecarFlag(t *testing.T) {
	dev := devCmd()
	n := 0
	sidecarCmd().Flags().VisitAll(func(sf *pflag.Flag) {
		n++
		if why, ok := devSkipsSidecarFlags[sf.Name]; ok {
			if why == "" {
				t.Errorf("--%s: skipped for dev without a reason", sf.Name)
			}
			return
		}
		df := dev.Flags().Lookup(sf.Name)
		if df == nil {
			t.Errorf("ax dev has no --%s (ax sidecar has; dev's help says it takes the same flags)", sf.Name)
			return
		}
		if df.Value.Type() != sf.Value.Type() {
			t.Errorf("--%s: ax dev's is a %s, ax sidecar's a %s", sf.Name, df.Value.Type(), sf.Value.Type())
		}
		if err := dev.ParseFlags([]string{"--" + sf.Name + "=" + sf.DefValue}); err != nil {
			t.Errorf("ax dev --%s=%s: %v", sf.Name, sf.DefValue, err)
		}
	})
	if n < 40 {
		t.Fatalf("walked %d sidecar flags: the walk is broken", n)
	}
}

// The banner's examples start ax the way this process was started: under
// `go run` (the README's first command) there is no ax binary to run.
func TestSelfCommand(t *testing.T) {
	for arg0, want := range map[string]string{
		"/tmp/go-build1580126829/b001/exe/ax":     "go run ./cmd/ax",
		"/var/folders/x/T/go-build42/b001/exe/ax": "go run ./cmd/ax",
		// Go 1.24+: a later `go run` of the same build runs the cached executable.
		"/root/.cache/go-build/ff/ff33c579a2fac681c1d0c9632a10c0ae1975f60321bc481d7983e3b81489aa00-d/ax":    "go run ./cmd/ax",
		"/home/me/.cache/go-build/0a/0a33c579a2fac681c1d0c9632a10c0ae1975f60321bc481d7983e3b81489aa00-d/ax": "go run ./cmd/ax",
		"/srv/ab/0a33c579a2fac681c1d0c9632a10c0ae1975f60321bc481d7983e3b81489aa00-d/ax":                     "ax",
		"/srv/0a/0a33c579-d/ax":  "ax",
		"/usr/local/bin/ax":      "ax",
		"ax":                     "ax",
		"./ax":                   "ax",
		"/home/me/go-builder/ax": "ax",
	} {
		if got := selfCommand(arg0); got != want {
			t.Errorf("selfCommand(%q) = %q, want %q", arg0, got, want)
		}
	}
}

// The banner's example of a restart with an executor says to stop this ax
// dev first (two on one data dir fail on badger's lock) and keeps the flags
// it was started with, but none that can hold a secret.
func TestDevBanner_RestartExample(t *testing.T) {
	for _, tc := range []struct {
		name, self string
		args       []string
		want       string // the restart line
		notWant    []string
	}{
		{"no flags", "ax", nil, "  ax dev --executor '*=unix:///tmp/app.sock'\n", nil},
		{"go run", "go run ./cmd/ax", []string{"--data-dir", "/tmp/my data", "--socket", "/tmp/ax.sock"},
			"  go run ./cmd/ax dev --data-dir '/tmp/my data' --socket /tmp/ax.sock --executor '*=unix:///tmp/app.sock'\n", nil},
		{"secrets left out", "ax", []string{"--socket=/tmp/ax.sock", "--cluster-token", "s3cret-token", "--ui-token=ui-s3cret",
			"--on-dead-url", "http://127.0.0.1:9/hook", "--otel-endpoint", "http://127.0.0.1:4318", "--ui-token-file", "/run/ui.tok",
			"--retention", "-1ns", "--log-payloads", "--adaptive-procs=false", "--delivery-concurrency", "50", "--log-level", "info"},
			"  ax dev --adaptive-procs=false --delivery-concurrency 50 --log-level info --log-payloads --retention=-1ns --socket /tmp/ax.sock --ui-token-file /run/ui.tok --executor '*=unix:///tmp/app.sock'\n",
			[]string{"s3cret", "cluster-token ", "--ui-token ", "on-dead-url", "hook", "otel-endpoint", "4318"}},
		{"own executors kept, the example's once", "ax", []string{"--executor", "a=unix:///tmp/a.sock", "--executor", "*=unix:///tmp/app.sock"},
			"  ax dev --executor a=unix:///tmp/a.sock --executor '*=unix:///tmp/app.sock'\n", nil},
		// A "*" executor of the user's is replaced by the example's, not
		// kept beside it: two "*" executors, the first up wins, and the
		// echo executor the example starts got nothing.
		{"own * executor replaced by the example's", "ax", []string{"--executor", "*=unix:///tmp/mine.sock", "--executor", "b=unix:///tmp/b.sock", "--socket", "/tmp/ax.sock"},
			"  ax dev --executor b=unix:///tmp/b.sock --socket /tmp/ax.sock --executor '*=unix:///tmp/app.sock'\n", []string{"mine.sock'", "--executor '*=unix:///tmp/mine.sock'"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dev := devCmd()
			if err := dev.ParseFlags(tc.args); err != nil {
				t.Fatal(err)
			}
			var b strings.Builder
			printDevBanner(&b, sidecar.Config{Socket: "/tmp/ax.sock", DataDir: "/tmp/d"}, tc.self, restartFlags(dev.Flags()))
			out := b.String()
			for _, want := range []string{
				"stop this ax dev first (Ctrl-C; a second one on the same data dir fails\non its lock), then\n",
				"  " + tc.self + " echo-executor --listen unix:///tmp/app.sock &\n" + tc.want,
			} {
				if !strings.Contains(out, want) {
					t.Errorf("banner lacks %q:\n%s", want, out)
				}
			}
			for _, s := range tc.notWant {
				if strings.Contains(out, s) {
					t.Errorf("banner shows %q:\n%s", s, out)
				}
			}
		})
	}
}

// The restart example, read back by a shell, parses to the same flags.
func TestRestartFlags_RoundTrip(t *testing.T) {
	args := []string{"--data-dir", "/tmp/it's here", "--join", "a:1,b:2", "--executor", "x=unix:///tmp/x.sock",
		"--raft-addr", "127.0.0.1:36100", "--retention", "-1ns", "--history-runs", "-1", "--log-payloads"}
	first := devCmd()
	if err := first.ParseFlags(args); err != nil {
		t.Fatal(err)
	}
	words := restartFlags(first.Flags())
	var unquoted []string
	for _, w := range words {
		if strings.HasPrefix(w, "'") {
			w = strings.ReplaceAll(strings.TrimSuffix(strings.TrimPrefix(w, "'"), "'"), `'\''`, "'")
		}
		unquoted = append(unquoted, w)
	}
	again := devCmd()
	if err := again.ParseFlags(unquoted); err != nil {
		t.Fatalf("%q: %v", unquoted, err)
	}
	if got := restartFlags(again.Flags()); !slices.Equal(got, words) {
		t.Errorf("read back: %q, want %q", got, words)
	}
}

// Every flag of ax dev that is not a number, a duration or a boolean is
// either repeated by the restart example (restartEchoFlags) or known to be
// left out (restartSecretFlags): a new one must be looked at.
func TestRestartFlags_EveryFlagIsListed(t *testing.T) {
	seen := map[string]bool{}
	devCmd().Flags().VisitAll(func(f *pflag.Flag) {
		seen[f.Name] = true
		switch f.Value.Type() {
		case "bool", "int", "int64", "uint64", "duration", "float64":
			if restartEchoFlags[f.Name] || restartSecretFlags[f.Name] {
				t.Errorf("--%s (%s) is listed: only other types need to be", f.Name, f.Value.Type())
			}
			return
		}
		if restartEchoFlags[f.Name] == restartSecretFlags[f.Name] {
			t.Errorf("--%s (%s): list it in restartEchoFlags (no secret in it) or restartSecretFlags", f.Name, f.Value.Type())
		}
	})
	for _, m := range []map[string]bool{restartEchoFlags, restartSecretFlags} {
		for name := range m {
			if !seen[name] {
				t.Errorf("--%s is listed but ax dev has no such flag", name)
			}
		}
	}
}

// Console logs get colours only on a terminal: redirected to a file they
// had ANSI escapes in them (a review: `ax dev 2> dev.err`).
func TestColorOutputOnlyOnATerminal(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "log")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if colorOutput(f) {
		t.Error("a regular file gets colours")
	}
	tty, err := os.OpenFile("/dev/null", os.O_WRONLY, 0) // a character device, as a terminal is
	if err != nil {
		t.Skip(err)
	}
	defer tty.Close()
	t.Setenv("NO_COLOR", "")
	if !colorOutput(tty) {
		t.Error("a character device gets no colours")
	}
	t.Setenv("NO_COLOR", "1")
	if colorOutput(tty) {
		t.Error("NO_COLOR set, colours anyway")
	}
}
