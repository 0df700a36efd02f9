package raftstore

import (
	"errors"
	"fmt"
	"os"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// ErrNoState is returned by Recover for a data dir without Raft state.
var ErrNoState = errors.New("no raft state in the data dir")

// RecoverResult is what Recover did.
type RecoverResult struct {
	// Old is the configuration the log ended with; New the one written.
	Old, New raft.Configuration
	// AppliedIndex is the state machine's applied index after recovery.
	AppliedIndex uint64
}

// Recover rewrites the Raft configuration of a stopped node's data dir
// (cfg.DataDir) to one voter, cfg.NodeID, at address (empty: the address
// the old configuration gives cfg.NodeID). It is the operator's last
// resort when a quorum of voters is lost for good: raft's RecoverCluster
// restores the newest snapshot and every entry in the log into the state
// machine, takes a snapshot and writes the new configuration, so the node
// elects itself when started again and the others join it afresh. Entries
// that had reached only the lost voters are gone; entries in this node's
// log that were not committed yet are applied too (Raft cannot tell).
//
// A data dir of an earlier version (raft.db, no wal) is migrated to the
// WAL first (walstore.go), also with apply false.
//
// With apply false it only reads the old configuration and says what the
// new one would be (res.New), changing nothing.
//
// Errors: badger's lock error when the node is still running, ErrNoState,
// and an error when address is empty and the old configuration does not
// list cfg.NodeID.
func Recover(cfg Config, address string, apply bool) (RecoverResult, error) {
	var res RecoverResult
	if !hasLogStore(cfg.DataDir) {
		return res, fmt.Errorf("%w: %s: no %s nor %s", ErrNoState, cfg.DataDir, walDirName, boltLogName)
	}
	// badger first: its directory lock fails at once while the node runs
	// (the WAL's bolt meta file, or an earlier version's raft.db, would
	// wait for its file lock forever).
	st, err := OpenState(cfg)
	if err != nil {
		st.Close()
		return res, fmt.Errorf("open the state (is the node still running? stop it first): %w", err)
	}
	defer st.Close()
	hlog := hclog.New(&hclog.LoggerOptions{Name: "raft", Level: hclog.Warn, Output: os.Stderr, JSONFormat: true})
	st.logStore, err = openLogStore(cfg.DataDir, st.log, hlog, nil) // migrates an earlier version's raft.db
	if err != nil {
		return res, err
	}
	snaps, err := st.openSnapshots(hlog)
	if err != nil {
		return res, err
	}
	has, err := raft.HasExistingState(st.logStore, st.logStore, snaps)
	if err != nil {
		return res, err
	}
	if !has {
		return res, fmt.Errorf("%w: %s", ErrNoState, cfg.DataDir)
	}
	rc := st.raftConfig(hlog)
	_, trans := raft.NewInmemTransport("") // RecoverCluster encodes addresses with it; nothing is sent
	read := *rc
	read.NoSnapshotRestoreOnStart = true // only the configuration is read
	res.Old, err = raft.GetConfiguration(&read, st.FSM, st.logStore, st.logStore, snaps, trans)
	if err != nil {
		return res, fmt.Errorf("read the old configuration: %w", err)
	}
	if address == "" {
		for _, s := range res.Old.Servers {
			if string(s.ID) == cfg.NodeID {
				address = string(s.Address)
			}
		}
		if address == "" {
			return res, fmt.Errorf("node %q is not in the old configuration %v: give its Raft address", cfg.NodeID, res.Old.Servers)
		}
	}
	res.New = raft.Configuration{Servers: []raft.Server{{ID: raft.ServerID(cfg.NodeID), Address: raft.ServerAddress(address), Suffrage: raft.Voter}}}
	res.AppliedIndex = st.FSM.AppliedIndex()
	if !apply {
		return res, nil
	}
	if err := raft.RecoverCluster(rc, st.FSM, st.logStore, st.logStore, snaps, trans, res.New); err != nil {
		return res, fmt.Errorf("recover: %w", err)
	}
	res.AppliedIndex = st.FSM.AppliedIndex()
	return res, nil
}
