//go:build !linux

package engine

import "time"

// threadCPU is 0 where the thread's CPU clock is not read (cpu-ns/op then
// reads 0; ns/op stands).
func threadCPU() time.Duration { return 0 }
