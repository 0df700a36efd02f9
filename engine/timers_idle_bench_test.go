//go:build unix

package engine

import (
	"context"
	"syscall"
	"testing"
	"time"
)

// BenchmarkTimersIdle measures what an idle timer set costs: 1M timers
// armed 1 to 2 hours ahead on the real clock, Run sleeping, nothing due,
// for 5 s per iteration. It reports the process's CPU time (user + system,
// from getrusage) as a percentage of one core, and Run's wake-ups, for the
// default (tickless) and for MaxSleep = 1 s.
func BenchmarkTimersIdle(b *testing.B) {
	for _, c := range []struct {
		name string
		opts TimersOptions
	}{{"tickless", TimersOptions{}}, {"maxsleep=1s", TimersOptions{MaxSleep: MaxSleep}}} {
		b.Run(c.name, func(b *testing.B) {
			tm := NewTimers(RealClock(), c.opts)
			now := time.Now()
			for i, k := range benchKeys("idle", benchArmed) {
				tm.Arm(k, now.Add(time.Hour+time.Duration(i)*3600*time.Microsecond))
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { defer close(done); tm.Run(ctx, func([]Expired) { b.Error("fired") }) }()
			time.Sleep(100 * time.Millisecond) // Run has planned its sleep
			w0 := tm.Stats().Wakeups
			cpu0 := cpuTime()
			t0 := time.Now()
			for range b.N {
				time.Sleep(5 * time.Second)
			}
			el := time.Since(t0)
			cpu := cpuTime() - cpu0
			w := tm.Stats().Wakeups - w0
			cancel()
			<-done
			b.ReportMetric(100*float64(cpu)/float64(el), "cpu-%")
			b.ReportMetric(float64(w)/el.Seconds(), "wakeups/s")
		})
	}
}

// cpuTime returns the CPU time (user + system) the process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
