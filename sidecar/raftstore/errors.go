package raftstore

import (
	"errors"
	"fmt"
)

// ErrNotLeader is returned by Proposer.Propose when this node is not the
// Raft leader (sidecar/forward then sends the commands to the leader).
var ErrNotLeader = errors.New("not the leader")

// BacklogError is returned when a submit would grow a handler's backlog
// (due runs not yet delivered) past Config.BacklogLimit: the task is not
// stored, and the client should try again later (ipc.ErrQueueFull).
type BacklogError struct {
	Handler string `json:"handler"`
	Depth   int    `json:"depth"`
	Limit   int    `json:"limit"`
}

func (e *BacklogError) Error() string {
	return fmt.Sprintf("backlog of handler %q is full: %d due runs waiting for executors, the bound is %d", e.Handler, e.Depth, e.Limit)
}
