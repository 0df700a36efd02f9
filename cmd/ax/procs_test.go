package main

import (
	"runtime"
	"testing"
)

// Both commands that run a node have --adaptive-procs, on by default
// (it keeps all the CPUs while timers are due: internal/procs, "Timers
// first").
func TestAdaptiveProcsFlag(t *testing.T) {
	for _, c := range []struct {
		name string
		def  string
	}{{"sidecar", sidecarCmd().Flags().Lookup("adaptive-procs").DefValue}, {"dev", devCmd().Flags().Lookup("adaptive-procs").DefValue}} {
		if c.def != "true" {
			t.Errorf("ax %s --adaptive-procs defaults to %q, want true", c.name, c.def)
		}
	}
}

// The controller runs only when not turned off, and never against a
// GOMAXPROCS the operator set. (Off, startProcs returns a no-op: a test
// of GOMAXPROCS after its stop could not tell, since stopping gives the
// process its default back.)
func TestProcsEnabled(t *testing.T) {
	if (&nodeFlags{adaptiveProcs: false}).procsEnabled() {
		t.Fatal("controller enabled with --adaptive-procs=false")
	}
	if runtime.GOMAXPROCS(0) >= 2 && !(&nodeFlags{adaptiveProcs: true}).procsEnabled() {
		t.Fatal("controller not enabled with --adaptive-procs on a multi-CPU host")
	}
	t.Setenv("GOMAXPROCS", "2")
	if (&nodeFlags{adaptiveProcs: true}).procsEnabled() {
		t.Fatal("controller enabled with GOMAXPROCS in the environment")
	}
}
