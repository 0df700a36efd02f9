package raftstore

import (
	"context"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/axsched/ax/raftfsm"
)

// answeringRaft is a leader whose entries are answered by another
// goroutine, as raft's FSM goroutine answers a committed entry's future:
// the wake-up of the proposal's waiter is part of what is measured.
type answeringRaft struct {
	entries chan *answerFuture
}

func (r *answeringRaft) State() raft.RaftState { return raft.Leader }

func (r *answeringRaft) Apply(data []byte, _ time.Duration) raft.ApplyFuture {
	f := &answerFuture{done: make(chan struct{})}
	f.resp = []raftfsm.Result{{Code: raftfsm.CodeOK, Index: 7}}
	r.entries <- f
	return f
}

func (r *answeringRaft) run(ctx context.Context) {
	for {
		select {
		case f := <-r.entries:
			close(f.done)
		case <-ctx.Done():
			return
		}
	}
}

type answerFuture struct {
	done chan struct{}
	resp any
}

func (f *answerFuture) Error() error     { <-f.done; return nil }
func (f *answerFuture) Index() uint64    { return 7 }
func (f *answerFuture) Response() any    { return f.resp }
func (f *answerFuture) Opaque() any      { return nil }
func (f *answerFuture) Result() any      { return f.resp }
func (f *answerFuture) OpaqueData() any  { return nil }
func (f *answerFuture) Unwrap() any      { return nil }
func (f *answerFuture) Term() uint64     { return 1 }
func (f *answerFuture) Timestamp() int64 { return 0 }

// BenchmarkProposeAlone measures one caller's proposals on an idle
// proposer (the direct path) with a storage guard, as a node's API
// handler makes them (a request context with a deadline), from Propose to
// its results: the proposer's own work and hand-offs per proposal, raft
// replaced by a goroutine that answers each entry.
func BenchmarkProposeAlone(b *testing.B) {
	g, _, _ := lowGuard(b)
	g.Probe()
	r := &answeringRaft{entries: make(chan *answerFuture, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go r.run(ctx)
	p := NewProposer(ProposerConfig{Raft: r, Guard: g})
	go p.Run(ctx)
	cmds := []raftfsm.Command{cancelCmd("x")}
	b.ReportAllocs()
	for b.Loop() {
		rctx, rcancel := context.WithTimeout(ctx, time.Minute)
		res, err := p.Propose(rctx, cmds)
		rcancel()
		if err != nil || len(res) != 1 {
			b.Fatalf("%v %v", res, err)
		}
	}
}
