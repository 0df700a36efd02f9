package main

import (
	"runtime"
	"testing"
)

// Both commands that run a node have --adaptive-procs, off by default
// (lateness first: internal/procs, "Why it is off by default").
func TestAdaptiveProcsFlag(t *testing.T) {
	for _, c := range []struct {
		name string
		def  string
	}{{"sidecar", sidecarCmd().Flags().Lookup("adaptive-procs").DefValue}, {"dev", devCmd().Flags().Lookup("adaptive-procs").DefValue}} {
		if c.def != "false" {
			t.Errorf("ax %s --adaptive-procs defaults to %q, want false", c.name, c.def)
		}
	}
}

// The controller runs only when asked for, and never against a
// GOMAXPROCS the operator set. (Off, startProcs returns a no-op: a test
// of GOMAXPROCS after its stop could not tell, since stopping gives the
// process its default back.)
func TestProcsEnabled(t *testing.T) {
	if (&nodeFlags{adaptiveProcs: false}).procsEnabled() {
		t.Fatal("controller enabled without --adaptive-procs")
	}
	if runtime.GOMAXPROCS(0) >= 2 && !(&nodeFlags{adaptiveProcs: true}).procsEnabled() {
		t.Fatal("controller not enabled with --adaptive-procs on a multi-CPU host")
	}
	t.Setenv("GOMAXPROCS", "2")
	if (&nodeFlags{adaptiveProcs: true}).procsEnabled() {
		t.Fatal("controller enabled with GOMAXPROCS in the environment")
	}
}
