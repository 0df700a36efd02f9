//go:build !unix

package harness

import "os/exec"

// InOwnGroup does nothing where there are no process groups: cancelling the
// context kills only the process itself.
func InOwnGroup(cmd *exec.Cmd) {}
