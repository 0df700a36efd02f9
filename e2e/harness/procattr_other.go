//go:build !linux

package harness

import "syscall"

// ProcAttr returns nil: only Linux has a parent-death signal; t.Cleanup
// still kills every process.
func ProcAttr() *syscall.SysProcAttr { return nil }
