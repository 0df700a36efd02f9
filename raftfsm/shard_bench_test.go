package raftfsm

import (
	"strconv"
	"testing"
)

// BenchmarkShardsStart: the apply of the Complete that starts a run of n
// shards (n task records written); per op, one run.
func BenchmarkShardsStart(b *testing.B) {
	for _, n := range []int{8, 1024} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			e := &flowEnv{env: newEnv(b)}
			b.StopTimer()
			for i := 0; i < b.N; i++ {
				id := "p" + strconv.Itoa(i)
				e.next(submitCmd(id, shardSpec(Shards{Count: n}), 1000, 1000))
				t := e.task(id)
				e.next(fireCmd(id, t.Epoch, 1, "n1", 1000, 31000))
				c := completeCmd(id, t.Epoch, 1, OutcomeSuccess, "", 0, 2000)
				c.Complete.ShardCount = n
				b.StartTimer()
				e.next(c)
				b.StopTimer()
			}
		})
	}
}

// BenchmarkShardComplete: the fire and the Complete of one shard of a run
// of 1024 (the Complete also rewrites the parent's progress).
func BenchmarkShardComplete(b *testing.B) {
	e := &flowEnv{env: newEnv(b)}
	run := 0
	for i := 0; i < b.N; i++ {
		if i%1024 == 0 {
			b.StopTimer()
			run++
			e.startRun("p"+strconv.Itoa(run), shardSpec(Shards{Count: 1024}), 1024)
			b.StartTimer()
		}
		id := ShardID("p"+strconv.Itoa(run), 1, i%1024)
		t := e.task(id)
		e.next(fireCmd(id, t.Epoch, 1, "n1", 2000, 9000))
		e.next(completeCmd(id, t.Epoch, 1, OutcomeSuccess, "", 0, 3000))
	}
}
