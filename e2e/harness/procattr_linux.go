package harness

import "syscall"

// ProcAttr makes the kernel kill an ax process when the test binary dies
// (a panic or a -timeout), so no node outlives the test run, and starts it
// in a process group of its own. Without its own group, a node stopped
// with SIGSTOP (the SIGSTOP tests) shares the test binary's group, and
// the kernel sends SIGHUP and SIGCONT to every process of a group that
// becomes orphaned while one of them is stopped (POSIX _exit; Linux
// kill_orphaned_pgrp): a shell that started the tests in the background
// and exited resumed the node early, and TestSigstop_Leader failed with
// callbacks from a node it believed stopped. A group of one whose parent
// (the test binary) is in another group of the same session is not
// orphaned while the test runs.
func ProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
}
