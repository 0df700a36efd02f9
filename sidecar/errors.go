package sidecar

import (
	"github.com/axsched/ax/sidecar/forward"
	"github.com/axsched/ax/sidecar/raftstore"
)

var (
	// ErrNotLeader is returned when a proposal reaches a node that is not
	// the leader; sidecar/forward turns it into a forward to the leader.
	ErrNotLeader = raftstore.ErrNotLeader
	// ErrNoLeader is returned when no leader is known before the request's
	// deadline (an election is running, or no quorum).
	ErrNoLeader = forward.ErrNoLeader
	// ErrOutcomeUnknown is returned for an application's write whose
	// proposal may have been committed although its result was lost
	// (forward.ErrOutcomeUnknown).
	ErrOutcomeUnknown = forward.ErrOutcomeUnknown
)

// BacklogError is returned when a submit would grow a handler's backlog
// past Config.BacklogLimit (raftstore.BacklogError).
type BacklogError = raftstore.BacklogError

// ErrShutdownTimeout is returned by Node.Shutdown when raft did not stop in
// time (raftstore.ErrShutdownTimeout).
var ErrShutdownTimeout = raftstore.ErrShutdownTimeout
