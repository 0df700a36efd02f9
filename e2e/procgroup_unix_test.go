//go:build unix

package e2e

import (
	"os/exec"
	"syscall"
)

// inOwnGroup starts cmd in a process group of its own (with procAttr's
// parent-death signal on Linux), and makes cancelling its context kill the
// whole group, so that the processes it starts (the Python tests start an
// ax sidecar) die with it.
func inOwnGroup(cmd *exec.Cmd) {
	attr := procAttr()
	if attr == nil {
		attr = &syscall.SysProcAttr{}
	}
	attr.Setpgid = true
	cmd.SysProcAttr = attr
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
}
