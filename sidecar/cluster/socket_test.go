package cluster

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// ListenUnix takes over a stale socket file (its process is gone), refuses
// a socket another process serves, and creates the directory.
func TestListenUnix(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "ax.sock")
	ln, err := ListenUnix(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o660 {
		t.Fatalf("socket file %v %v, want mode 0660", fi, err)
	}
	if _, err := ListenUnix(path); err == nil || !strings.Contains(err.Error(), "in use by another process") {
		t.Fatalf("a served socket: %v", err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close() // the file stays: stale
	ln2, err := ListenUnix(path)
	if err != nil {
		t.Fatalf("a stale socket: %v", err)
	}
	ln2.Close()
}
