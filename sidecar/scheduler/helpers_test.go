package scheduler

import (
	"errors"
	"testing"
	"time"

	"github.com/axsched/ax/internal/fsmtest"
	"github.com/axsched/ax/raftfsm"
)

// The node's defaults that the tests here rely on (sidecar.Config's).
const (
	maxBatchCommandsDefault    = 512
	deliveryConcurrencyDefault = 200
	nodeLiveness               = time.Second
)

// errNotLeader stands for the proposer's error when this node lost
// leadership.
var errNotLeader = errors.New("not the leader")

// testConfig fills what a node's configuration always has.
func testConfig(c Config) Config {
	if c.DeliveryConcurrency == 0 {
		c.DeliveryConcurrency = deliveryConcurrencyDefault
	}
	if c.Liveness == 0 {
		c.Liveness = nodeLiveness
	}
	return c
}

// testFSM is an FSM over badger in a temporary directory.
func testFSM(t *testing.T) *raftfsm.FSM { return fsmtest.Open(t) }

// applyEntry applies cmds to f as the Raft entry at index.
func applyEntry(t *testing.T, f *raftfsm.FSM, index uint64, cmds ...raftfsm.Command) []raftfsm.Result {
	t.Helper()
	return fsmtest.Apply(t, f, index, cmds...)
}
