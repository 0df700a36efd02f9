package sidecar

import (
	"testing"

	"github.com/axsched/ax/internal/fsmtest"
	"github.com/axsched/ax/raftfsm"
)

// testFSM is an FSM over badger in a temporary directory.
func testFSM(t *testing.T) *raftfsm.FSM { return fsmtest.Open(t) }

// applyEntry applies cmds to f as the Raft entry at index and returns
// their results; an entry the FSM refuses fails the test.
func applyEntry(t *testing.T, f *raftfsm.FSM, index uint64, cmds ...raftfsm.Command) []raftfsm.Result {
	t.Helper()
	return fsmtest.Apply(t, f, index, cmds...)
}
