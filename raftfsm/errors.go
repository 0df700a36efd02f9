package raftfsm

import "errors"

// Result codes carried in Result.Code: what an applied command did.
const (
	CodeOK       = ""          // the command took effect (or was an idempotent repeat)
	CodeNotFound = "not_found" // the command named a task that does not exist
	CodeConflict = "conflict"  // a submit named an existing id with a different spec
	CodeStale    = "stale"     // a fire, completion or lease named an attempt that is no longer current
	CodeState    = "state"     // the task's state does not allow the command (retry of a task that is not DEAD or FAILED)
	// CodeFlowStage: a retry named a stage task whose flow is stored: the
	// flow recorded the stage's end and would not see a retried one
	// (flow_apply.go, flowStageTaskRetry).
	CodeFlowStage = "flow_stage"
	// CodeShard: a retry named a shard task whose parent task is stored:
	// the parent's run counted the shard's end and would not see a
	// retried one (shard.go).
	CodeShard = "shard"
)

var (
	// ErrNotFound is returned by queries when no task has the given id.
	ErrNotFound = errors.New("task not found")
	// ErrUnknownCommand is returned (and stops the node) when an entry holds a
	// command type this version does not know: applying it wrongly or
	// skipping it would make this replica diverge.
	ErrUnknownCommand = errors.New("unknown command type")
	// ErrBadEntry is returned when a log entry cannot be decoded.
	ErrBadEntry = errors.New("malformed log entry")
)
