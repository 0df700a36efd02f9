package bench

import "syscall"

// procAttr makes the kernel kill a node the bench started when the bench
// dies (Ctrl-C twice, a crash), so no node outlives it.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
