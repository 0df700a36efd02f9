package main

import (
	"runtime"
	"testing"

	"github.com/rs/zerolog"
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

// Off, startProcs leaves GOMAXPROCS alone.
func TestStartProcsOff(t *testing.T) {
	before := runtime.GOMAXPROCS(0)
	f := &nodeFlags{adaptiveProcs: false}
	stop := f.startProcs(zerolog.Nop())
	stop()
	if got := runtime.GOMAXPROCS(0); got != before {
		t.Fatalf("GOMAXPROCS %d after startProcs with the flag off, want %d", got, before)
	}
}
