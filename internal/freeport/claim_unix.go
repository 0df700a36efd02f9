//go:build unix

package freeport

import (
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
)

// claimDir is the directory of the ports' claim files, shared by every
// process of the machine that uses freeport; made once (claimDirMade).
var (
	claimDir     = filepath.Join(os.TempDir(), "ax-freeport")
	claimDirMade = sync.OnceValue(func() error { return os.MkdirAll(claimDir, 0o1777) })
)

// lockClaim takes an exclusive, non-blocking flock on port p's claim file
// through a descriptor of its own; syscall.EWOULDBLOCK when another
// descriptor (another process) holds it.
func lockClaim(p int) (*os.File, error) {
	if err := claimDirMade(); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(claimDir, strconv.Itoa(p)), os.O_RDWR|os.O_CREATE, 0o666)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// claim takes port p for this process until it exits (lockClaim, the
// descriptor kept open). It reports false when another process holds it;
// true also when the claim cannot be made at all (no directory, no file:
// the bind check remains).
func claim(p int) bool {
	f, err := lockClaim(p)
	if err != nil {
		return err != syscall.EWOULDBLOCK
	}
	claims = append(claims, f) // held open: the claim lasts as long as the process
	return true
}

// claims keeps the claim files open (mu is held when it grows).
var claims []*os.File
