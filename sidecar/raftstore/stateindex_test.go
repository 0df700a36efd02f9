package raftstore

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/raft"
)

// Entries the FSM never sees (a new leader's no-op, a barrier) at the end
// of the log are not waited for; a command or configuration is; an entry
// missing from the log is.
func TestStateIndexSkipsEntriesTheFSMNeverApplies(t *testing.T) {
	logs := raft.NewInmemStore()
	types := []raft.LogType{raft.LogConfiguration, raft.LogCommand, raft.LogCommand, raft.LogNoop, raft.LogBarrier, raft.LogCommand, raft.LogNoop}
	for i, typ := range types {
		if err := logs.StoreLog(&raft.Log{Index: uint64(i + 1), Type: typ}); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct{ applied, upTo, want uint64 }{
		{3, 5, 3}, // 4 no-op, 5 barrier: nothing to apply past 3
		{2, 5, 3}, // 3 is a command still to apply
		{3, 6, 6}, // 6 is a command
		{6, 7, 6}, // 7 is a no-op
		{6, 9, 9}, // 9 is not in the log yet
		{0, 1, 1}, // the bootstrap configuration
		{5, 3, 3}, // applied past upTo
	} {
		if got := stateIndex(logs, c.applied, c.upTo); got != c.want {
			t.Errorf("applied %d, up to %d: state index %d, want %d", c.applied, c.upTo, got, c.want)
		}
	}
}

// A data dir keeps its incarnation across restarts; a lost one (the file
// gone with it) gets a new one.
func TestIncarnationIsKeptUntilTheDataDirIsLost(t *testing.T) {
	dir := t.TempDir()
	a, err := loadIncarnation(dir)
	if err != nil || len(a) != 32 {
		t.Fatalf("first: %q %v", a, err)
	}
	if b, err := loadIncarnation(dir); err != nil || b != a {
		t.Fatalf("again: %q %v, want %q", b, err, a)
	}
	if err := os.Remove(filepath.Join(dir, incarnationFile)); err != nil {
		t.Fatal(err)
	}
	if c, err := loadIncarnation(dir); err != nil || c == a {
		t.Fatalf("after the loss: %q %v, want a new one", c, err)
	}
}
