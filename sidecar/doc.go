// Package sidecar assembles one ax node: configuration, Raft (raft-boltdb for
// the log and stable store, file snapshots, TCP transport), membership
// (bootstrap-expect, join), the leader's timers, delivery of this node's
// attempts to its executors, and the peer API that followers use to forward
// writes to the leader.
//
// # Flow
//
// A write (submit, cancel, an attempt's outcome) goes through Node.propose
// (forward.go): on the leader, the proposer group-commits it with whatever
// else is pending into one Raft entry; on a follower, it is sent to the
// leader's peer API. The FSM (package raftfsm) applies committed entries on
// every node and tells the node what changed (events.go). On the leader those
// changes keep the engine's timers in step (leader.go): a WAITING task has a
// timer at its due time, a RUNNING attempt one at its lease deadline. A fired
// due timer becomes a Fire command naming the node that will deliver (round
// robin among live nodes with an executor for the handler); a fired lease
// timer becomes a TIMEOUT outcome. When a Fire commits, the node it names
// calls its executor (delivery.go) and reports the outcome through propose.
//
// Only a committed Fire is ever delivered, so a deposed leader cannot cause
// a delivery; the FSM rejects a Fire or an outcome that names an attempt
// that is no longer current.
//
// # Failover
//
// A new leader calls Barrier, then arms a timer for every WAITING task and
// every RUNNING attempt's lease from badger. Tasks that came due while no
// node led fire at once (late, never lost); attempts that were running on a
// dead node are retried when their lease (timeout + LeaseGrace) expires.
//
// # Lock order
//
// leaderState.mu and delivery.mu are leaves: no other lock is taken while
// holding them, and neither is held while proposing or calling out
// (delivery.mu covers one badger read, of this node's record, when its
// cache was dropped).
package sidecar
