package cluster

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// ListenUnix takes over a stale socket file (its process is gone), refuses
// a socket another process serves, and creates the directory. The socket
// appears with its mode (it had the umask's until a chmod after listen),
// and a failure leaves no file behind.
func TestListenUnix(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "sub")
	path := filepath.Join(dir, "ax.sock")
	ln, err := ListenUnix(path, 0o600, "")
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket file %v %v, want mode 0600", fi, err)
	}
	if got := ln.Addr().String(); got != path {
		t.Errorf("listener address %q, want the socket's path %q (not its temporary name)", got, path)
	}
	if _, err := ListenUnix(path, 0o660, ""); err == nil || !strings.Contains(err.Error(), "in use by another process") {
		t.Fatalf("a served socket: %v", err)
	}
	ln.Close() // the file stays: stale
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("closing the listener removed the socket file: %v", err)
	}
	ln2, err := ListenUnix(path, 0o660, "")
	if err != nil {
		t.Fatalf("a stale socket: %v", err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o660 {
		t.Fatalf("socket file %v %v, want mode 0660", fi, err)
	}
	ln2.Close()
	os.Remove(path)

	if _, err := ListenUnix(path, 0o660, "no-such-group-ax"); err == nil || !strings.Contains(err.Error(), "socket-group") {
		t.Fatalf("an unknown group: %v, want a socket-group error", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("files left after a failed listen: %v", entries)
	}
}
