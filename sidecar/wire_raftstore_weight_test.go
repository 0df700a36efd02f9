package sidecar

import (
	"testing"

	"github.com/axsched/ax/raftfsm"
)

// A purge weighs one per task and flow it names, at least one.
func TestCmdWeightCountsPurgedFlows(t *testing.T) {
	three := make([]raftfsm.PurgeTask, 3)
	for _, tc := range []struct {
		cmds []raftfsm.Command
		want int
	}{
		{[]raftfsm.Command{{Type: raftfsm.CmdCancel}, {Type: raftfsm.CmdPurge, Purge: &raftfsm.Purge{}}}, 2},
		{[]raftfsm.Command{{Type: raftfsm.CmdPurge, Purge: &raftfsm.Purge{Tasks: three}}}, 3},
		{[]raftfsm.Command{{Type: raftfsm.CmdPurge, Purge: &raftfsm.Purge{Flows: three}}}, 3},
		{[]raftfsm.Command{{Type: raftfsm.CmdPurge, Purge: &raftfsm.Purge{Tasks: three, Flows: three}}}, 6},
	} {
		if got := cmdWeight(tc.cmds); got != tc.want {
			t.Errorf("cmdWeight(%+v) = %d, want %d", tc.cmds, got, tc.want)
		}
	}
}
