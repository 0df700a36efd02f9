package sidecar

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// validRaftTestConfig is a config that passes Validate: fixed ports that
// nothing listens on (Validate never dials), a data dir that does not exist.
func validRaftTestConfig(t *testing.T) Config {
	t.Helper()
	dir := t.TempDir()
	return Config{
		NodeID:   "n1",
		DataDir:  filepath.Join(dir, "data"),
		Socket:   filepath.Join(dir, "ax.sock"),
		RaftAddr: "127.0.0.1:1",
		PeerAddr: "127.0.0.1:2",
	}.WithDefaults()
}

// TestStart_BadConfigCreatesNothing checks that Start validates before it
// touches the disk: a config raft would refuse leaves no data dir, no
// store file and no socket behind.
func TestStart_BadConfigCreatesNothing(t *testing.T) {
	for name, set := range map[string]func(*Config){
		"lease above heartbeat":    func(c *Config) { c.HeartbeatTimeout, c.ElectionTimeout = 100*time.Millisecond, 100*time.Millisecond },
		"election below heartbeat": func(c *Config) { c.ElectionTimeout = c.HeartbeatTimeout / 2 },
		"snapshot interval 1ms":    func(c *Config) { c.SnapshotInterval = time.Millisecond },
	} {
		t.Run(name, func(t *testing.T) {
			c := validRaftTestConfig(t)
			set(&c)
			n, err := Start(c, zerolog.Nop())
			if err == nil {
				_ = n.Shutdown(context.Background())
				t.Fatal("Start accepted a config raft refuses")
			}
			if _, serr := os.Stat(c.DataDir); !errors.Is(serr, os.ErrNotExist) {
				t.Errorf("data dir %s after a failed Start: %v, want it not to exist", c.DataDir, serr)
			}
			entries, rerr := os.ReadDir(filepath.Dir(c.DataDir))
			if rerr != nil || len(entries) != 0 {
				t.Errorf("parent of the data dir holds %v (%v), want nothing", entries, rerr)
			}
		})
	}
}
