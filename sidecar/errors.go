package sidecar

import "errors"

var (
	// ErrNotLeader is returned when a proposal reaches a node that is not
	// the leader; forward.go turns it into a forward to the leader.
	ErrNotLeader = errors.New("not the leader")
	// ErrNoLeader is returned when no leader is known before the request's
	// deadline (an election is running, or no quorum).
	ErrNoLeader = errors.New("no leader")
)
