// Package raftfsm is the replicated state machine of ax: the command types
// and their encoding, the raft.FSM implementation over badger, snapshot and
// restore, the key layout and indexes, and the read queries the sidecar uses.
//
// # Contract
//
// The FSM is deterministic: it never reads the clock or random numbers. Every
// time (due times, lease deadlines, finish times) and every choice (which node
// runs an attempt, when a retry is due) is decided by the leader and carried
// in the command. Applying the same log on any node gives the same badger
// state.
//
// The FSM is persistent: badger holds the state on disk, and the last applied
// Raft index is written in the same badger transaction as each entry's
// effects. On restart raft replays the entries after its last snapshot; the
// FSM skips every entry at or below the stored applied index, so replay never
// applies an entry twice (etcd's "consistent index").
//
// # Lifecycle
//
// The rules that move a task from state to state (submit, fire, complete
// with each Outcome, cancel, retry, lease, pause) and the decisions the
// leader writes into a command before proposing it (due times, backoff,
// the next run of a recurring task: Prepare) are pure functions in
// lifecycle.go, whose opening comment is the transition table. Outcome
// (outcome.go) is the one type for how an attempt ended. Flows
// (flow.go, flow_apply.go) and shards (shard.go) are tasks too, created
// and moved by the apply of the commands that end other tasks.
//
// # Failure
//
// Apply fails closed: an entry it cannot decode, an unknown command type or
// a stored record it cannot decode panics, stopping the node, because
// skipping an entry would make this replica diverge. A storage error (a
// badger read or commit that fails: disk full, permission, I/O, or the
// write gate refusing) is not skipped either, but neither does it panic: a
// restart would replay the entry and fail again, a crash loop. The FSM
// becomes degraded (StorageError), retries the same entry's write with
// capped backoff until it succeeds, and recovers by itself. See
// SetWriteGate, SetStorageHook, Abort and DESIGN.md.
//
// # Encoding
//
// A Raft log entry is one byte of format version (EntryVersion) followed by a
// msgpack-encoded []Command: several commands per entry is how the leader
// group-commits submits, fires and completions. Records in badger are
// msgpack too, each with a version byte. The task record and the submit
// command, written and read once per task, are encoded without reflection
// (codec.go), into the same bytes msgpack.Marshal writes. JSON is used
// only at the API edge.
//
// See DESIGN.md in this folder for the key layout.
package raftfsm
