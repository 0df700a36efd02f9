package raftfsm

// Disk pressure (issue 12): inside the sidecar's storage reserve the only
// writes still accepted are those that free space, so that a full node can
// be emptied through the API instead of by hand. The decision is made per
// Raft entry: an entry passes the low-space gate only when every command
// in it frees space (FreesSpace), and the proposer never mixes freeing and
// other commands in one entry while storage is low.

// FreesSpace reports whether c is a command the storage gate lets through
// inside the reserve: a cancel (of any task: a cancel of a waiting or
// running task rewrites one record of the same size and ends the task's
// future fires and retries, which would write more; a cancel of a finished
// task writes nothing), or a purge (CmdPurge: deletes finished tasks).
func (c *Command) FreesSpace() bool {
	switch c.Type {
	case CmdCancel:
		return true
	}
	return freesSpaceMore(c)
}

// EntryFreesSpace reports whether every command of an entry frees space
// (FreesSpace); false for an empty entry.
func EntryFreesSpace(cmds []Command) bool {
	if len(cmds) == 0 {
		return false
	}
	for i := range cmds {
		if !cmds[i].FreesSpace() {
			return false
		}
	}
	return true
}

// SetSpaceGate installs g, called before every badger commit of Apply and
// StoreConfiguration with whether the entry being applied frees space
// (EntryFreesSpace; a configuration entry, which writes only the applied
// index, counts as freeing so that it never holds the purges behind it);
// nil removes it. It replaces a gate set with SetWriteGate and follows the
// same rules: a non-nil error counts as a storage error, and the FSM
// retries the same entry with backoff, never skipping it.
func (f *FSM) SetSpaceGate(g func(freesSpace bool) error) {
	if g == nil {
		f.gate.Store(nil)
		return
	}
	f.gate.Store(&g)
}
