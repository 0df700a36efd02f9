package raftfsm

import (
	"fmt"
	"testing"

	"github.com/hashicorp/raft"
)

// BenchmarkApplyDeadRun measures Apply of one run of a new task that ends
// FAILED (a permanent error): submit, fire, complete, each its own entry,
// history on; as a leader without a dead-run webhook proposes it (no
// Complete.Alert: the cost of the alerts feature when it is off).
func BenchmarkApplyDeadRun(b *testing.B) { benchDeadRun(b, nil) }

// benchDeadRun applies b.N failed runs; alter, when set, changes the
// Complete and returns more commands for the entry after it.
func benchDeadRun(b *testing.B, alter func(c *Complete, run int) []Command) {
	e := newEnv(b)
	s := spec("order.timeout", "{}")
	idx := uint64(0)
	apply := func(c Command) Result {
		idx++
		rs, ok := e.f.Apply(&raft.Log{Index: idx, Type: raft.LogCommand, Data: mustEncode(b, c)}).([]Result)
		if !ok || rs[0].Code != CodeOK {
			b.Fatalf("entry %d: %+v", idx, rs)
		}
		return rs[0]
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		id := fmt.Sprintf("order|%012d", i)
		at := int64(1_700_000_000_000 + i)
		epoch := apply(submitCmd(id, s, at, at)).Task.Epoch
		apply(fireCmd(id, epoch, 1, "node-1", at, at+35_000))
		c := completeCmd(id, epoch, 1, OutcomePermanent, "http 400: bad input", 0, at+20)
		var more []Command
		if alter != nil {
			more = alter(c.Complete, i)
		}
		apply(c)
		for _, m := range more {
			apply(m)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "runs/s")
}
