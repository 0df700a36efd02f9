package peerapi

import (
	"context"
	"os"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/axsched/ax/raftfsm"
)

// commitNode answers each proposal at the next "commit" (every millisecond), as
// a leader's group commit does.
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

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkForward16 is 16 callers forwarding one submit each, one at a
// time, to a leader that commits every millisecond: one request per proposal
// (Propose) against waiting proposals grouped (ProposeGrouped). cpu-ns/op
// is the process's CPU (client and server) per forwarded proposal.
func BenchmarkForward16(b *testing.B) {
	cmds := []raftfsm.Command{{Type: raftfsm.CmdSubmit, Submit: &raftfsm.Submit{ID: "task-000123", AtMs: 1, DueMs: 2,
		Spec: raftfsm.Spec{Handler: "ax-bench.throughput", DelayNs: int64(24 * time.Hour), TimeoutNs: int64(30 * time.Second), MaxAttempts: 4, Priority: 2}}}}
	callers, _ := strconv.Atoi(os.Getenv("AX_BENCH_CALLERS"))
	callers = max(callers, 16)
	for _, mode := range []string{"single", "grouped1", "grouped2", "grouped4"} {
		b.Run(mode, func(b *testing.B) {
			if mode != "single" {
				defer func(old int) { GroupInflight = old }(GroupInflight)
				GroupInflight = int(mode[len(mode)-1] - '0')
			}
			s := NewServer(ServerConfig{Node: newCommitNode(b)})
			if err := s.Listen("127.0.0.1:0"); err != nil {
				b.Fatal(err)
			}
			b.Cleanup(s.Close)
			c := NewClient("", nil)
			propose := c.Propose
			if mode != "single" {
				propose = c.ProposeGrouped
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			b.SetParallelism(callers)
			b.ReportAllocs()
			cpu0 := cpuTime()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := propose(ctx, s.Addr(), cmds); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}
