package forward

import (
	"context"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/axsched/ax/raftfsm"
)

// benchLeader answers every forward at once.
type benchLeader struct{ res []raftfsm.Result }

func (l benchLeader) Propose(context.Context, string, []raftfsm.Command) ([]raftfsm.Result, error) {
	return l.res, nil
}

// BenchmarkProposeAPIForwarded is a follower's forward of one write with a
// leader that answers at once: what the forwarder itself costs per
// forwarded request (its timer, the context that ends at a leader change),
// without the peer API's HTTP request.
func BenchmarkProposeAPIForwarded(b *testing.B) {
	leaders := &fakeLeaders{}
	leaders.change("leader:1")
	f := New(Config{Local: &fakeLocal{}, Leader: benchLeader{res: []raftfsm.Result{{Code: raftfsm.CodeOK, Index: 5}}},
		Leaders: leaders, Applied: &fakeApplied{watched: make(chan struct{})}, NoLeaderWait: 2 * time.Second, Log: zerolog.Nop()})
	cmds := []raftfsm.Command{{}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := f.ProposeAPI(ctx, cmds); err != nil {
				b.Fatal(err)
			}
		}
	})
}
