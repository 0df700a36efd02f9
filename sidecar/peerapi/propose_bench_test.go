package peerapi

import (
	"context"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/axsched/ax/raftfsm"
)

// commitNode answers each proposal at the next "commit", every
// millisecond, as a leader's group commit does.
type commitNode struct {
	fakeNode
	mu   sync.Mutex
	next chan struct{}
}

func newCommitNode(b *testing.B) *commitNode {
	n := &commitNode{next: make(chan struct{})}
	stop := make(chan struct{})
	go func() {
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				n.mu.Lock()
				close(n.next)
				n.next = make(chan struct{})
				n.mu.Unlock()
			}
		}
	}()
	b.Cleanup(func() { close(stop) })
	return n
}

func (n *commitNode) Propose(_ context.Context, cmds []raftfsm.Command) ([]raftfsm.Result, error) {
	n.mu.Lock()
	ch := n.next
	n.mu.Unlock()
	<-ch
	res := make([]raftfsm.Result, len(cmds))
	for i := range res {
		res[i] = raftfsm.Result{Code: raftfsm.CodeOK, Index: 9}
	}
	return res, nil
}

// cpuTime is the process's CPU time so far (user and system).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkPeerPropose is the forward hop of one submit: a follower's
// Client.Propose to a leader's Server over loopback TCP, with 16 callers
// per GOMAXPROCS, against a leader that commits every millisecond.
// cpu-ns/op is the process's CPU (both ends) per forwarded proposal.
func BenchmarkPeerPropose(b *testing.B) {
	cmds := []raftfsm.Command{{Type: raftfsm.CmdSubmit, Submit: &raftfsm.Submit{ID: "task-000123", AtMs: 1, DueMs: 2,
		Spec: raftfsm.Spec{Handler: "ax-bench.throughput", DelayNs: int64(24 * time.Hour), TimeoutNs: int64(30 * time.Second), MaxAttempts: 4, Priority: 2}}}}
	s := NewServer(ServerConfig{Node: newCommitNode(b)})
	if err := s.Listen("127.0.0.1:0"); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(s.Close)
	c := NewClient("", nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b.SetParallelism(16)
	b.ReportAllocs()
	cpu0 := cpuTime()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := c.Propose(ctx, s.Addr(), cmds); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
}
