package config

import (
	"fmt"
	"time"

	"github.com/hashicorp/raft"
)

// raftTimeoutMin is the floor hashicorp/raft's ValidateConfig sets on
// HeartbeatTimeout, ElectionTimeout, LeaderLeaseTimeout and
// SnapshotInterval.
const raftTimeoutMin = 5 * time.Millisecond

// validateRaft checks, before any store is opened, what raft.NewRaft would
// refuse (raft.ValidateConfig of hashicorp/raft v1.8.0; Validate has
// already refused an empty NodeID, raft's LocalID): timeouts below 5ms, a leader lease longer than the heartbeat timeout, an
// election timeout shorter than the heartbeat timeout, a snapshot interval
// below 5ms. Each error names the Config field and its flag (the leader
// lease has no flag: it is LeaderLeaseTimeoutDefault unless set in code).
// Last it builds the raft.Config the node will start with (raftConfig) and
// runs raft.ValidateConfig on it, so that a rule added by a later raft
// version is still caught here, if with raft's own wording.
func (c Config) validateRaft() error {
	for _, d := range []struct {
		field, flag string
		v           time.Duration
	}{
		{"HeartbeatTimeout", "--raft-heartbeat-timeout", c.HeartbeatTimeout},
		{"ElectionTimeout", "--raft-election-timeout", c.ElectionTimeout},
		{"LeaderLeaseTimeout", "no flag", c.LeaderLeaseTimeout},
		{"SnapshotInterval", "--snapshot-interval", c.SnapshotInterval},
	} {
		if d.v < raftTimeoutMin {
			return fmt.Errorf("%s (%s) %v: must be at least %v", d.field, d.flag, d.v, raftTimeoutMin)
		}
	}
	if c.LeaderLeaseTimeout > c.HeartbeatTimeout {
		return fmt.Errorf("LeaderLeaseTimeout (no flag) %v must not exceed HeartbeatTimeout (--raft-heartbeat-timeout) %v: raise the heartbeat timeout to at least %v",
			c.LeaderLeaseTimeout, c.HeartbeatTimeout, c.LeaderLeaseTimeout)
	}
	if c.ElectionTimeout < c.HeartbeatTimeout {
		return fmt.Errorf("ElectionTimeout (--raft-election-timeout) %v must be at least HeartbeatTimeout (--raft-heartbeat-timeout) %v",
			c.ElectionTimeout, c.HeartbeatTimeout)
	}
	if err := raft.ValidateConfig(c.raftConfig()); err != nil {
		return fmt.Errorf("raft config: %w", err)
	}
	return nil
}

// raftCommitTimeout is raft's CommitTimeout: how long a follower may wait
// for an entry's commit index to reach it when no new entry comes.
const raftCommitTimeout = 5 * time.Millisecond

// raftConfig is the raft.Config of a node with config c, without the
// logger and the leadership channel (node.go adds those).
func (c Config) raftConfig() *raft.Config {
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(c.NodeID)
	rc.HeartbeatTimeout = c.HeartbeatTimeout
	rc.ElectionTimeout = c.ElectionTimeout
	rc.LeaderLeaseTimeout = c.LeaderLeaseTimeout
	rc.CommitTimeout = raftCommitTimeout
	rc.SnapshotThreshold = c.SnapshotThreshold
	rc.TrailingLogs = c.TrailingLogs
	rc.SnapshotInterval = c.SnapshotInterval
	rc.BatchApplyCh = true
	return rc
}
