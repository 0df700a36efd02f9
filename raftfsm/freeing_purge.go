package raftfsm

// freesSpaceMore classifies the freeing commands other than CmdCancel: a
// purge deletes finished tasks.
func freesSpaceMore(c *Command) bool { return c.Type == CmdPurge }
