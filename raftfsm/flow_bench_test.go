package raftfsm

import (
	"strconv"
	"testing"
)

// BenchmarkFlowStageComplete: the fire and the Complete of a stage in a
// chain of n stages (each completion creates the next stage, and rewrites
// the flow record, which holds every stage's spec: the cost grows with n).
func BenchmarkFlowStageComplete(b *testing.B) {
	for _, n := range []int{10, 1000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) { benchChain(b, n) })
	}
}

func benchChain(b *testing.B, n int) {
	e := &flowEnv{env: newEnv(b)}
	fs := FlowSpec{Stages: make([]FlowStage, n)}
	for i := range fs.Stages {
		fs.Stages[i] = stage("s" + strconv.Itoa(i))
		if i > 0 {
			fs.Stages[i].DependsOn = []string{"s" + strconv.Itoa(i-1)}
		}
	}
	e.next(flowCmd("f", fs, 1000, 1000))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%n == 0 && i > 0 { // the chain ended: a new flow
			b.StopTimer()
			e.next(flowCmd("f"+strconv.Itoa(i), fs, 1000, 1000))
			b.StartTimer()
		}
		id := FlowStageID("f", 1, "s"+strconv.Itoa(i%n))
		if i >= n {
			id = FlowStageID("f"+strconv.Itoa(i/n*n), 1, "s"+strconv.Itoa(i%n))
		}
		t := e.task(id)
		e.next(fireCmd(id, t.Epoch, 1, "n1", 2000, 9000))
		e.next(completeCmd(id, t.Epoch, 1, OutcomeSuccess, "", 0, 3000))
	}
}

// BenchmarkPlainComplete is the same fire and complete of a task that is
// not a stage, for comparison.
func BenchmarkPlainComplete(b *testing.B) {
	e := &flowEnv{env: newEnv(b)}
	b.StopTimer()
	for i := 0; i < b.N; i++ {
		id := "t" + strconv.Itoa(i)
		e.next(submitCmd(id, spec("h", `{"n":"x"}`), 1000, 1000))
		t := e.task(id)
		b.StartTimer()
		e.next(fireCmd(id, t.Epoch, 1, "n1", 2000, 9000))
		e.next(completeCmd(id, t.Epoch, 1, OutcomeSuccess, "", 0, 3000))
		b.StopTimer()
	}
}
