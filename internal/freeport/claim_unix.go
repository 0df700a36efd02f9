//go:build unix

package freeport

import (
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// claimDir is the directory of the ports' claim files, shared by every
// process of the machine that uses freeport.
var claimDir = filepath.Join(os.TempDir(), "ax-freeport")

// claim takes port p for this process until it exits: an exclusive,
// non-blocking flock on claimDir/p, whose descriptor stays open. It
// reports false when another process holds it; true also when the claim
// cannot be made at all (no directory, no file: the bind check remains).
func claim(p int) bool {
	if err := os.MkdirAll(claimDir, 0o1777); err != nil {
		return true
	}
	f, err := os.OpenFile(filepath.Join(claimDir, strconv.Itoa(p)), os.O_RDWR|os.O_CREATE, 0o666)
	if err != nil {
		return true
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return err != syscall.EWOULDBLOCK
	}
	claims = append(claims, f) // held open: the claim lasts as long as the process
	return true
}

// claims keeps the claim files open (mu is held when it grows).
var claims []*os.File
