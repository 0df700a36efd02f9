package main

import (
	"context"

	"github.com/rs/zerolog"

	"github.com/axsched/ax/internal/procs"
)

// startProcs starts the adaptive GOMAXPROCS of this process
// (--adaptive-procs, internal/procs) and returns the function that stops
// it and gives the process all its CPUs back; a no-op when the flag is
// off or the controller cannot run here.
func (f *nodeFlags) startProcs(log zerolog.Logger) func() {
	if !f.procsEnabled() {
		return func() {}
	}
	c := procs.New(procs.Config{OnChange: func(n int, use, waited float64) {
		log.Debug().Int("gomaxprocs", n).Float64("cpu_use", use).Float64("sched_waited", waited).Msg("GOMAXPROCS changed")
	}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Run(ctx)
	}()
	return func() {
		cancel()
		<-done
	}
}

// procsEnabled reports whether this process runs the controller: asked
// for (--adaptive-procs) and able to (procs.Enabled: GOMAXPROCS not set in
// the environment, more than one CPU, the readings available).
func (f *nodeFlags) procsEnabled() bool { return f.adaptiveProcs && procs.Enabled() }
