package raftstore

import "github.com/hashicorp/raft"

// StateIndex returns the index of the last entry at or below upTo that
// the state machine applies: a command or a configuration change. Raft
// also commits entries the FSM never sees, the no-op a new leader appends
// and barriers, so a wait for the FSM's applied index to reach a commit
// index that ends on one of them does not end until the next write
// (readiness and strong reads wait on this index instead).
//
// It reads the log backwards from upTo and stops at the first entry the
// FSM applies, or at the FSM's own applied index: usually one read. An
// entry it cannot read (not received yet, or compacted away) counts as
// one the FSM applies, so the answer is never below the true one.
func (s *Store) StateIndex(upTo uint64) uint64 {
	return stateIndex(s.logStore, s.FSM.AppliedIndex(), upTo)
}

func stateIndex(logs raft.LogStore, applied, upTo uint64) uint64 {
	var l raft.Log
	for i := upTo; i > applied; i-- {
		if err := logs.GetLog(i, &l); err != nil {
			return i
		}
		if l.Type == raft.LogCommand || l.Type == raft.LogConfiguration {
			return i
		}
	}
	return min(applied, upTo)
}
