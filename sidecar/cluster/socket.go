package cluster

import (
	"fmt"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"time"

	"github.com/axsched/ax/ipc"
)

// SocketModeDefault is the Unix socket's default permission bits: owner
// and group may connect.
const SocketModeDefault os.FileMode = 0o660

// LookupGID returns the gid of group, a name or a number. The error names
// the socket-group setting.
func LookupGID(group string) (int, error) {
	if gid, err := strconv.Atoi(group); err == nil {
		if gid < 0 {
			return 0, fmt.Errorf("socket-group %q: a gid is not negative", group)
		}
		return gid, nil
	}
	g, err := user.LookupGroup(group)
	if err != nil {
		return 0, fmt.Errorf("socket-group %q: %w (give a numeric gid where there is no /etc/group)", group, err)
	}
	return strconv.Atoi(g.Gid)
}

// SetSocketAccess gives the socket file at path its mode and, when group
// is set, that group (the process must be root or a member of it), so an
// app container with another uid can connect.
func SetSocketAccess(path string, mode os.FileMode, group string) error {
	if err := os.Chmod(path, mode); err != nil {
		return fmt.Errorf("socket %s: %w", path, err)
	}
	if group == "" {
		return nil
	}
	gid, err := LookupGID(group)
	if err != nil {
		return err
	}
	if err := os.Chown(path, -1, gid); err != nil {
		return fmt.Errorf("socket-group %s: %w", group, err)
	}
	return nil
}

// ListenUnix removes a stale socket file (one no process answers on) and
// listens on path. The socket appears at path already with mode and, when
// group is set, that group (SetSocketAccess): it is made under a
// temporary name in the same directory, given its access, then renamed
// into place, so no process can connect while it has the umask's mode. A
// socket another process serves is an error. Closing the listener leaves
// the file; the caller removes it.
func ListenUnix(path string, mode os.FileMode, group string) (net.Listener, error) {
	if fi, err := os.Stat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
		if c, err := net.DialTimeout("unix", path, 200*time.Millisecond); err == nil {
			c.Close()
			return nil, fmt.Errorf("socket %s is in use by another process", path)
		}
		os.Remove(path)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, err
	}
	return ipc.ListenUnix(path, func(tmp string) error { return SetSocketAccess(tmp, mode, group) })
}
