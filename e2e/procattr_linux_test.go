package e2e

import "syscall"

// procAttr makes the kernel kill an ax process when the test binary dies
// (a panic or a -timeout), so no node outlives the test run.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
