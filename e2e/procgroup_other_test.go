//go:build !unix

package e2e

import "os/exec"

// inOwnGroup does nothing where there are no process groups: cancelling the
// context kills only the process itself.
func inOwnGroup(cmd *exec.Cmd) {}
