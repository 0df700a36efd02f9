package harness

import "syscall"

// ProcAttr makes the kernel kill an ax process when the test binary dies
// (a panic or a -timeout), so no node outlives the test run.
func ProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
