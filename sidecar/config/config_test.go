package config

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/axsched/ax/internal/rawio"
	"github.com/axsched/ax/sidecar/raftstore"
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

// TestConfigValidate_Raft checks that Validate refuses what raft.NewRaft
// refuses, and only that, naming the field and the flag.
func TestConfigValidate_Raft(t *testing.T) {
	ms := time.Millisecond
	cases := []struct {
		name string
		set  func(*Config)
		want []string // substrings of the error; nil: valid
	}{
		{"defaults", func(*Config) {}, nil},
		{"all three equal", func(c *Config) { c.HeartbeatTimeout, c.ElectionTimeout, c.LeaderLeaseTimeout = 50*ms, 50*ms, 50*ms }, nil},
		{"floors", func(c *Config) {
			c.HeartbeatTimeout, c.ElectionTimeout, c.LeaderLeaseTimeout, c.SnapshotInterval = 5*ms, 5*ms, 5*ms, 5*ms
		}, nil},
		{"empty node id", func(c *Config) { c.NodeID = "" }, []string{"NodeID", "--node-id"}},
		{"heartbeat below 5ms", func(c *Config) { c.HeartbeatTimeout, c.LeaderLeaseTimeout = 4*ms, 4*ms },
			[]string{"HeartbeatTimeout", "--raft-heartbeat-timeout", "at least 5ms"}},
		{"election below 5ms", func(c *Config) { c.ElectionTimeout = 4 * ms },
			[]string{"ElectionTimeout", "--raft-election-timeout", "at least 5ms"}},
		{"lease below 5ms", func(c *Config) { c.LeaderLeaseTimeout = 4 * ms },
			[]string{"LeaderLeaseTimeout", "at least 5ms"}},
		{"snapshot interval below 5ms", func(c *Config) { c.SnapshotInterval = ms },
			[]string{"SnapshotInterval", "--snapshot-interval", "at least 5ms"}},
		{"heartbeat below the default lease", func(c *Config) { c.HeartbeatTimeout, c.ElectionTimeout = 100*ms, 100*ms },
			[]string{"LeaderLeaseTimeout", "HeartbeatTimeout", "--raft-heartbeat-timeout", "250ms"}},
		{"lease above heartbeat", func(c *Config) { c.LeaderLeaseTimeout = c.HeartbeatTimeout + ms },
			[]string{"LeaderLeaseTimeout", "must not exceed HeartbeatTimeout"}},
		{"election below heartbeat", func(c *Config) { c.ElectionTimeout = c.HeartbeatTimeout - ms },
			[]string{"ElectionTimeout", "--raft-election-timeout", "HeartbeatTimeout", "--raft-heartbeat-timeout"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := validRaftTestConfig(t)
			tc.set(&c)
			err := c.Validate()
			if tc.want == nil {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
			} else {
				if err == nil {
					t.Fatalf("Validate() = nil, want an error naming %q", tc.want)
				}
				for _, w := range tc.want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("Validate() = %q, want it to contain %q", err, w)
					}
				}
			}
			// Validate and raft agree: what Validate lets through, raft
			// accepts; what raft refuses, Validate refused.
			rerr := raft.ValidateConfig(c.raftConfig())
			if (rerr == nil) != (err == nil) {
				t.Errorf("raft.ValidateConfig = %v but Validate = %v", rerr, err)
			}
		})
	}
}

// TestConfigValidate_RaftLogSync: the log sync's two names and "" pass;
// another is refused, naming the field, the flag and the choices.
func TestConfigValidate_RaftLogSync(t *testing.T) {
	for _, v := range []raftstore.LogSync{"", raftstore.LogSyncAuto, raftstore.LogSyncHandoff} {
		c := validRaftTestConfig(t)
		c.RaftLogSync = v
		if err := c.Validate(); err != nil {
			t.Errorf("RaftLogSync %q: %v", v, err)
		}
	}
	c := validRaftTestConfig(t)
	c.RaftLogSync = "raw"
	err := c.Validate()
	if err == nil {
		t.Fatal(`RaftLogSync "raw": no error`)
	}
	for _, w := range []string{"RaftLogSync", "--raft-log-sync", `"raw"`, "auto", "handoff"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("Validate() = %q, want it to contain %q", err, w)
		}
	}
}

func TestConfigValidate_SocketIO(t *testing.T) {
	oneP := func() bool { return true }
	for _, v := range []rawio.Mode{"", rawio.ModeAuto, rawio.ModeHandoff} {
		c := validRaftTestConfig(t)
		c.SocketIO = v
		if err := c.Validate(); err != nil {
			t.Errorf("SocketIO %q: %v", v, err)
		}
		c.OnOneP = oneP
		if hold := c.SocketHold(); (hold != nil) != (v != rawio.ModeHandoff) {
			t.Errorf("SocketIO %q with OnOneP: hold set %v", v, hold != nil)
		}
		c.OnOneP = nil
		if c.SocketHold() != nil {
			t.Errorf("SocketIO %q without OnOneP: a hold function", v)
		}
	}
	c := validRaftTestConfig(t)
	c.SocketIO = "raw"
	err := c.Validate()
	if err == nil {
		t.Fatal(`SocketIO "raw": no error`)
	}
	for _, w := range []string{"SocketIO", "--socket-io", `"raw"`, "auto", "handoff"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("Validate() = %q, want it to contain %q", err, w)
		}
	}
}

// TestConfigValidate_RaftConfigMatchesNode pins raftConfig to the fields
// the node sets on raft.DefaultConfig, so that validating it validates
// what raft.NewRaft gets.
func TestConfigValidate_RaftConfigMatchesNode(t *testing.T) {
	c := validRaftTestConfig(t)
	rc := c.raftConfig()
	if rc.LocalID != raft.ServerID(c.NodeID) || rc.HeartbeatTimeout != c.HeartbeatTimeout ||
		rc.ElectionTimeout != c.ElectionTimeout || rc.LeaderLeaseTimeout != c.LeaderLeaseTimeout ||
		rc.SnapshotInterval != c.SnapshotInterval || rc.SnapshotThreshold != c.SnapshotThreshold ||
		rc.TrailingLogs != c.TrailingLogs || rc.CommitTimeout != 5*time.Millisecond || !rc.BatchApplyCh {
		t.Fatalf("raftConfig() = %+v for %+v", rc, c)
	}
}

// TestConfigValidate_NamesFieldAndFlag checks that each of config.go's
// checks refuses its bad value with the Config field and the flag named.
func TestConfigValidate_NamesFieldAndFlag(t *testing.T) {
	cases := []struct {
		name        string
		set         func(*Config)
		field, flag string
	}{
		{"raft addr without port", func(c *Config) { c.RaftAddr = "127.0.0.1" }, "RaftAddr", "--raft-addr"},
		{"peer addr port 0", func(c *Config) { c.PeerAddr = "127.0.0.1:0" }, "PeerAddr", "--peer-addr"},
		{"same addresses", func(c *Config) { c.PeerAddr = c.RaftAddr }, "PeerAddr", "--peer-addr"},
		{"bootstrap expect 0", func(c *Config) { c.BootstrapExpect = 0 }, "BootstrapExpect", "--bootstrap-expect"},
		{"bootstrap expect without join", func(c *Config) { c.BootstrapExpect = 3 }, "Join", "--join"},
		{"negative breaker", func(c *Config) { c.BreakerFailures = -1 }, "BreakerFailures", "--breaker-failures"},
		{"handler limit 0", func(c *Config) { c.HandlerLimits = map[string]int{"h": 0} }, "HandlerLimits", "--handler-limit"},
		{"fire lead 11s", func(c *Config) { c.FireLead = 11 * time.Second }, "FireLead", "--fire-lead"},
		{"gather wait 2s", func(c *Config) { c.GatherWait = 2 * time.Second }, "GatherWait", "--gather-wait"},
		{"purge interval 1ms", func(c *Config) { c.PurgeInterval = time.Millisecond }, "PurgeInterval", "--purge-interval"},
		{"load window 500ms", func(c *Config) { c.LoadWindow = 500 * time.Millisecond }, "LoadWindow", "--load-window"},
		{"delivery concurrency 0", func(c *Config) { c.DeliveryConcurrency = 0 }, "DeliveryConcurrency", "--delivery-concurrency"},
		{"min above max", func(c *Config) { c.DeliveryMinConcurrency = c.DeliveryConcurrency + 1 }, "DeliveryMinConcurrency", "--delivery-min-concurrency"},
		{"executor url", func(c *Config) { c.Executors = []Executor{{Handler: "h", URL: "ftp://x"}} }, "Executors", "--executor"},
		{"on-dead-url https", func(c *Config) { c.OnDeadURL = "https://hooks.example.com/ax" }, "OnDeadURL", "--on-dead-url"},
		{"on-dead-url relative socket", func(c *Config) { c.OnDeadURL = "unix://hook.sock" }, "OnDeadURL", "--on-dead-url"},
		{"routing", func(c *Config) { c.Routing = "foo" }, "routing", "routing"},
		{"otel endpoint without scheme", func(c *Config) { c.OtelEndpoint = "127.0.0.1:4318" }, "OtelEndpoint", "--otel-endpoint"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := validRaftTestConfig(t)
			tc.set(&c)
			err := c.Validate()
			if err == nil {
				t.Fatal("Validate() = nil, want an error")
			}
			for _, w := range []string{tc.field, tc.flag} {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate() = %q, want it to name %q", err, w)
				}
			}
		})
	}
}

// DeadMemberCleanup: 1 h by default, off when negative, and never shorter
// than AutopilotReplaceAfter (a failed voter is replaced before it is
// removed).
func TestConfigValidate_DeadMemberCleanup(t *testing.T) {
	c := validRaftTestConfig(t)
	if c.DeadMemberCleanup != DeadMemberCleanupDefault || c.Validate() != nil {
		t.Fatalf("default %v: %v", c.DeadMemberCleanup, c.Validate())
	}
	c.DeadMemberCleanup = -1
	if err := c.Validate(); err != nil {
		t.Fatalf("off: %v", err)
	}
	c.DeadMemberCleanup = c.AutopilotReplaceAfter - time.Second
	err := c.Validate()
	if err == nil || !strings.Contains(err.Error(), "--dead-member-cleanup") || !strings.Contains(err.Error(), "--autopilot-replace-after") {
		t.Fatalf("below replace-after: %v", err)
	}
}

// A field given -1 ("off") stays off when the defaults are filled twice,
// as the CLI does before sidecar.Start does again: the second pass took
// the first's 0 for "not set" (--storage-reserve -1 got the 64 MiB
// reserve, --retention -1 a 24 h retention that purged finished tasks).
func TestWithDefaultsTwiceKeepsOff(t *testing.T) {
	off := Config{NodeID: "n1", StorageReserve: -1, TrailingLogsBytes: -1, Retention: -1, RetentionDead: -1, FireLead: -1, BacklogLimit: -1, GatherWait: -1}
	once := off.WithDefaults()
	twice := once.WithDefaults()
	for _, c := range []Config{once, twice} {
		if c.StorageReserve != 0 || c.TrailingLogsBytes != 0 || c.Retention != 0 || c.RetentionDead != 0 || c.FireLead != 0 || c.BacklogLimit != 0 || c.GatherWait != 0 {
			t.Fatalf("off fields after the defaults: reserve %d, log bytes %d, retention %v, dead %v, fire lead %v, backlog %d, gather %v; want all 0 (off)",
				c.StorageReserve, c.TrailingLogsBytes, c.Retention, c.RetentionDead, c.FireLead, c.BacklogLimit, c.GatherWait)
		}
	}
	if d := (Config{NodeID: "n1"}).WithDefaults().WithDefaults(); d.StorageReserve != StorageReserveDefault || d.Retention != RetentionDefault || d.GatherWait != GatherWaitDefault {
		t.Fatalf("defaults twice: reserve %d, retention %v, gather %v", d.StorageReserve, d.Retention, d.GatherWait)
	}
}
