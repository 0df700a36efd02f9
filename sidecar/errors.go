package sidecar

import (
	"errors"
	"fmt"
)

var (
	// ErrNotLeader is returned when a proposal reaches a node that is not
	// the leader; forward.go turns it into a forward to the leader.
	ErrNotLeader = errors.New("not the leader")
	// ErrNoLeader is returned when no leader is known before the request's
	// deadline (an election is running, or no quorum).
	ErrNoLeader = errors.New("no leader")
	// ErrOutcomeUnknown is returned for an application's write whose
	// proposal may have been committed although its result was lost (the
	// leader died or lost leadership with the write in flight). It is not
	// proposed again: a second copy would apply a second time, after other
	// writes, and undo them (a replace after a cancel) or answer what the
	// first copy did (200 "existing task" to the submit that created it).
	// The client hears 503 and may retry, submits being idempotent by id
	// (etcd answers ErrTimeoutDueToLeaderFail in the same case).
	ErrOutcomeUnknown = errors.New("the leader changed while the write was in flight: it may or may not have been applied")
)

// BacklogError is returned when a submit would grow a handler's backlog
// (due runs not yet delivered) past Config.BacklogLimit: the task is not
// stored, and the client should try again later (seed 004's ErrQueueFull).
type BacklogError struct {
	Handler string `json:"handler"`
	Depth   int    `json:"depth"`
	Limit   int    `json:"limit"`
}

func (e *BacklogError) Error() string {
	return fmt.Sprintf("backlog of handler %q is full: %d due runs waiting for executors, the bound is %d", e.Handler, e.Depth, e.Limit)
}
