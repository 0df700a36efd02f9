// Package api answers the application API (ipc.Backend) for one ax node:
// it turns each request into Raft commands or reads and maps their results
// to the API's views and error codes.
//
//	submit.go     POST /v1/tasks, /v1/tasks/batch: a task is accepted
//	read.go       GET /v1/tasks/{id}, /v1/tasks: local reads (after the node's own forwarded writes: readOwnWrites in backend.go), the leader's copy when this node lags, strong reads
//	change.go     cancel, retry, heartbeat, an attempt's result
//	executors.go  this node's executors (register, unregister, list)
//	handlers.go   GET /v1/handlers, pause and resume (and the peer route a follower asks the leader by)
//	waiting.go    why a due run waits (the leader's parked runs, asked over the peer API)
//	purge.go      purging finished tasks now
//	cluster.go    GET /v1/cluster, readiness, removing a member
//	views.go      stored task and executor -> the API's views
//
// # Imports
//
// api imports ipc (the API's types and errors), raftfsm (commands, results,
// stored tasks), engine (the clock, circuit states), raft (the node's Raft
// state) and sidecar/peerapi (the peer API's client calls, errors and
// member views). It must not import sidecar or its other sub-packages: what
// it needs of the node it asks through the small interfaces in backend.go
// (a proposer, the FSM's reads, the scheduler's views, the membership,
// the storage guard, delivery's limits, the read barrier of the node's
// own forwarded writes), which sidecar/wire_api.go satisfies.
package api
