package sidecar

import (
	"testing"

	"github.com/hashicorp/raft"

	"github.com/axsched/ax/raftfsm"
)

// testFSM is an FSM over badger in a temporary directory.
func testFSM(t *testing.T) *raftfsm.FSM {
	t.Helper()
	db, err := raftfsm.OpenDB(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	f, err := raftfsm.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// applyEntry applies cmds to f as the Raft entry at index and returns
// their results; an entry the FSM refuses fails the test.
func applyEntry(t *testing.T, f *raftfsm.FSM, index uint64, cmds ...raftfsm.Command) []raftfsm.Result {
	t.Helper()
	data, err := raftfsm.EncodeEntry(cmds)
	if err != nil {
		t.Fatal(err)
	}
	r := f.Apply(&raft.Log{Index: index, Type: raft.LogCommand, Data: data})
	rs, ok := r.([]raftfsm.Result)
	if !ok || len(rs) != len(cmds) {
		t.Fatalf("apply entry %d: %v", index, r)
	}
	return rs
}
