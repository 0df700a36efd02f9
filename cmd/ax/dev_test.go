package main

import (
	"testing"

	"github.com/spf13/pflag"
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
