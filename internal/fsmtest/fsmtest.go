// Package fsmtest helps tests drive a real raftfsm.FSM without Raft: open
// one in a temporary directory and apply commands to it as log entries.
// Only tests import it.
package fsmtest

import (
	"testing"

	"github.com/hashicorp/raft"

	"github.com/axsched/ax/raftfsm"
)

// Open returns an empty FSM in a temporary directory, closed when the test
// ends.
func Open(t testing.TB) *raftfsm.FSM {
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

// Apply applies cmds to f as the Raft entry at index and returns their
// results (one per command); an entry the FSM refuses fails the test.
func Apply(t testing.TB, f *raftfsm.FSM, index uint64, cmds ...raftfsm.Command) []raftfsm.Result {
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
