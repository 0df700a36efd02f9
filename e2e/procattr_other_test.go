//go:build !linux

package e2e

import "syscall"

// procAttr returns nil: only Linux has a parent-death signal; t.Cleanup
// still kills every process.
func procAttr() *syscall.SysProcAttr { return nil }
