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
// # Encoding
//
// A Raft log entry is one byte of format version (EntryVersion) followed by a
// msgpack-encoded []Command: several commands per entry is how the leader
// group-commits submits, fires and completions. Records in badger are
// msgpack too, each with a version byte. JSON is used only at the API edge.
//
// See DESIGN.md in this folder for the key layout.
package raftfsm
