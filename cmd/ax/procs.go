package main

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/axsched/ax/internal/procs"
	"github.com/axsched/ax/sidecar"
)

// procsDueWindow: the process goes to one P only while nothing is due
// within it (and no callback is in flight). It is far longer than the
// controller's Interval (20 ms), in which it notices a task due soon, and
// than the leader's fire lead (50 ms), so that a timer set more than an
// interval ahead fires, and its callback is sent, with all the CPUs. (A
// task submitted due at once may run its whole course before the next
// reading, on one P.)
const procsDueWindow = 2 * time.Second

// procsChanges returns the counter of the controller's changes, by
// reason (procs.Why*): the gauge go_sched_gomaxprocs_threads misses a
// change up and back down between two scrapes.
func procsChanges() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ax_gomaxprocs_changes_total",
		Help: "Changes of GOMAXPROCS by the adaptive controller (--adaptive-procs), by reason: start (to one P), fits (to one P), saturated (goroutines waited for the one P), full (the one P busy all the time), due (a task due within 2s or a callback in flight), busy (a snapshot or compaction began), stop.",
	}, []string{"why"})
}

// startProcs starts the adaptive GOMAXPROCS of this process
// (--adaptive-procs, internal/procs) for node n and returns the function
// that stops it and gives the process all its CPUs back; a no-op when the
// flag is off or the controller cannot run here.
func (f *nodeFlags) startProcs(log zerolog.Logger, n *sidecar.Node) func() {
	if !f.procsEnabled() {
		return func() {}
	}
	changes := procsChanges()
	n.RegisterCollectors(changes)
	c := procs.New(procs.Config{
		Quiet: func() bool { return n.NothingDueWithin(procsDueWindow) },
		OnChange: func(p int, why string, use, waited float64) {
			changes.WithLabelValues(why).Inc()
			log.Debug().Int("gomaxprocs", p).Str("why", why).Float64("cpu_use", use).Float64("sched_waited", waited).Msg("GOMAXPROCS changed")
		},
	})
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
