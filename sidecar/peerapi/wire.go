package peerapi

import (
	"time"

	"github.com/axsched/ax/sidecar/load"
)

// The paths of the peer API.
const (
	PathInfo    = "/peer/v1/info"
	PathJoin    = "/peer/v1/join"
	PathPropose = "/peer/v1/propose"
	PathReport  = "/peer/v1/report"
	PathTask    = "/peer/v1/task"
	PathRemove  = "/peer/v1/remove"
	PathMembers = "/peer/v1/members"
)

const (
	// TokenHeader carries the cluster token (sidecar's Config.ClusterToken)
	// on every request when the cluster has one; a request without it is
	// answered 401 unauthorized.
	TokenHeader = "Ax-Cluster-Token"
	// DeadlineHeader carries the caller's remaining time for the request,
	// in whole milliseconds.
	DeadlineHeader = "Ax-Timeout-Ms"
	// Timeout bounds one peer request, on both sides.
	Timeout = 10 * time.Second
	// maxBody bounds a request or response body (bytes).
	maxBody = 64 << 20
)

// Info is the reply of /peer/v1/info and the body of /peer/v1/join.
type Info struct {
	ID       string `json:"id"`
	RaftAddr string `json:"raft_addr"`
	PeerAddr string `json:"peer_addr"`
	LeaderID string `json:"leader_id,omitempty"`
	// InCluster is true when the node has Raft state (it bootstrapped or
	// joined) — used by bootstrap-expect to tell new nodes from members.
	InCluster bool `json:"in_cluster"`
	// Incarnation is the random id of the node's data dir (a join
	// request's: the leader tells a node that lost its data from one
	// that did not).
	Incarnation string `json:"incarnation,omitempty"`
	// CommitIndex is the node's Raft commit index; on the leader, the
	// index a follower must apply before it is ready (readiness).
	CommitIndex uint64 `json:"commit_index"`
}

// ReportReply is the leader's answer to a load report.
type ReportReply struct {
	// CommitIndex is the leader's Raft commit index.
	CommitIndex uint64 `json:"commit_index"`
	// StateIndex is the index a node must have applied to have caught up:
	// the leader's last committed entry that the state machine applies
	// (raftstore.Store.StateIndex). 0 from a leader of an older version:
	// the node uses CommitIndex then.
	StateIndex uint64 `json:"state_index,omitempty"`
	// Parked is the node's share of the runs the leader holds back as
	// executor_busy, per handler: its limiters count them as backlog.
	Parked map[string]int `json:"parked,omitempty"`
}

// LoadReport is what a node tells the leader about itself every report
// interval (package cluster's ReportInterval).
type LoadReport struct {
	ID       string `json:"id"`
	InFlight int    `json:"in_flight"`
	Applied  uint64 `json:"applied"`
	// State is the node's Raft state, lower case: leader, follower,
	// candidate (GET /v1/cluster's members[].role).
	State string `json:"state,omitempty"`
	// Queued counts, per handler, the attempts waiting for an executor
	// slot on the node (part of the handler's backlog).
	Queued map[string]int `json:"queued,omitempty"`
	// Executors are the node's executors with their concurrency limit,
	// callbacks in flight and queued, and whether they are unavailable:
	// the leader assigns attempts only within them.
	Executors []ExecutorLoad `json:"executors,omitempty"`
	// Draining: the node is stopping; the leader gives it no new
	// attempts.
	Draining bool `json:"draining,omitempty"`
	// StorageUnavailable: the node cannot write its storage (disk full,
	// not writable), so it cannot apply the log; the leader gives it no
	// new attempts until it reports otherwise.
	StorageUnavailable bool `json:"storage_unavailable,omitempty"`
	// Circuits are the handlers whose circuit is open on the node (its
	// own breaker, sidecar/delivery), each with when the node takes its
	// attempts again: the leader routes them to other nodes until then.
	// Added after the other fields: a leader of an older version ignores
	// it (encoding/json skips unknown fields), and a report without it
	// (a node of an older version, or none open) means no circuit is
	// open there.
	Circuits []Circuit `json:"circuits,omitempty"`
}

// ExecutorLoad is one executor of a node in its load report (load.ExecutorLoad).
type ExecutorLoad = load.ExecutorLoad

// Circuit is one handler whose circuit is open on a node, in its load
// report (load.Circuit).
type Circuit = load.Circuit

// MemberStatus is the leader's view of one member: the reply of
// /peer/v1/members (by member id) and the source of GET /v1/cluster's
// per-member fields.
type MemberStatus struct {
	// Reachable: the leader heard from the member lately.
	Reachable bool `json:"reachable"`
	// LastContactMs is how long ago the leader last heard from it
	// (milliseconds; -1 never, 0 for the leader itself).
	LastContactMs int64 `json:"last_contact_ms"`
	// AppliedIndex is the member's applied index at its last report.
	AppliedIndex uint64 `json:"applied_index"`
	// Role is the member's Raft state at its last report: leader,
	// follower or candidate ("" when not heard from).
	Role string `json:"role,omitempty"`
	// Status is autopilot's: leader, voter, nonvoter or staging.
	Status string `json:"status,omitempty"`
	// Healthy: heard from recently and caught up (autopilot's rule).
	Healthy bool `json:"healthy"`
	// StableSinceMs is when the current healthy streak began (Unix ms; 0
	// when unhealthy).
	StableSinceMs int64 `json:"stable_since_ms,omitempty"`
}
