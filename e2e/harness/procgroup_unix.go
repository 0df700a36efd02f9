//go:build unix

package harness

import (
	"os/exec"
	"syscall"
)

// InOwnGroup starts cmd in a process group of its own (with ProcAttr's
// parent-death signal on Linux), and makes cancelling its context kill the
// whole group, so that the processes it starts (the Python tests start an
// ax sidecar) die with it.
func InOwnGroup(cmd *exec.Cmd) {
	attr := ProcAttr()
	if attr == nil {
		attr = &syscall.SysProcAttr{}
	}
	attr.Setpgid = true
	cmd.SysProcAttr = attr
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
}
