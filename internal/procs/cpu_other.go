//go:build !unix

package procs

import "time"

// processCPU cannot read the CPU time here: the controller stays off.
func processCPU() (time.Duration, bool) { return 0, false }
