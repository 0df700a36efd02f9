//go:build unix

package bench

import (
	"syscall"
	"time"
)

// selfCPU returns the CPU time (user + system) this process has used so
// far, its children (the nodes the bench starts) not included; ok is false
// when it cannot be read.
func selfCPU() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
