package raftfsm

import (
	"fmt"
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

// BenchmarkPurgeBigFlows is one retention cycle over 10 cancelled flows of
// 1 000 stages each: reads of 512 with a cursor (Expired, which asks of
// every stage whether its flow still runs) and the purges' applies (which
// ask it again), timed apart as read-ms and apply-ms. A flow's record
// holds all its stages, so reading it once per stage made both grow with
// the square of a flow's size.
func BenchmarkPurgeBigFlows(b *testing.B) {
	b.StopTimer()
	for range b.N {
		e := &flowEnv{env: newEnv(b)}
		var st []FlowStage
		for i := range 1000 {
			st = append(st, stage(fmt.Sprintf("s-%d", i)))
		}
		for f := range 10 {
			id := fmt.Sprintf("f%d", f)
			e.next(flowCmd(id, FlowSpec{Stages: st}, 1000, 1000))
			e.next(Command{Type: CmdFlow, Flow: &FlowSubmit{ID: id, Cancel: true, AtMs: 2000}})
		}
		next := e.idx + 1
		read, apply, n := timedPurgeCycle(b, e.env, &next, &PurgeCursor{})
		e.idx = next - 1
		if n != 10*1000 {
			b.Fatalf("purged %d stage tasks, want 10 000", n)
		}
		b.ReportMetric(float64(read.Milliseconds()), "read-ms")
		b.ReportMetric(float64(apply.Milliseconds()), "apply-ms")
	}
}
