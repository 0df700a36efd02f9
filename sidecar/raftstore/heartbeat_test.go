package raftstore

import (
	"runtime"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/rs/zerolog"
)

// hbTransport is an InmemTransport with a heartbeat fast path: it keeps
// the handler raft (here the guard) installs, for the test to call.
type hbTransport struct {
	*raft.InmemTransport
	hb func(raft.RPC)
}

func (t *hbTransport) SetHeartbeatHandler(cb func(raft.RPC)) { t.hb = cb }

// hbRaft is the state, term and configuration the guard reads.
type hbRaft struct {
	state raft.RaftState
	term  uint64
	conf  raft.Configuration
}

func (f hbRaft) State() raft.RaftState { return f.state }
func (f hbRaft) CurrentTerm() uint64   { return f.term }
func (f hbRaft) GetConfiguration() raft.ConfigurationFuture {
	return confFuture{f.conf}
}

// confFuture is a configuration future that is already done.
type confFuture struct{ conf raft.Configuration }

func (f confFuture) Error() error                      { return nil }
func (f confFuture) Index() uint64                     { return 0 }
func (f confFuture) Configuration() raft.Configuration { return f.conf }

// TestHeartbeatGuard_FastPathOnlyAtCurrentTermFollower: a heartbeat goes
// to raft's fast path only when this node is a follower of the
// heartbeat's term; otherwise (a leader or candidate, an older term, raft
// not started) it reaches raft's main loop through Consumer, with the
// transport's other RPCs.
func TestHeartbeatGuard_FastPathOnlyAtCurrentTermFollower(t *testing.T) {
	_, in := raft.NewInmemTransport("a")
	tr := &hbTransport{InmemTransport: in}
	g := guardRPCs(tr, "a", zerolog.Nop(), false).(*rpcGuard)
	defer g.Close()
	fast := make(chan raft.RPC, 1)
	g.SetHeartbeatHandler(func(rpc raft.RPC) { fast <- rpc })

	heartbeat := func(term uint64) raft.RPC {
		return raft.RPC{Command: &raft.AppendEntriesRequest{Term: term, RPCHeader: raft.RPCHeader{Addr: []byte("b")}}, RespChan: make(chan raft.RPCResponse, 1)}
	}
	for _, c := range []struct {
		name   string
		raft   *hbRaft // nil: not set
		hbTerm uint64
		fast   bool
	}{
		{"raft not started", nil, 3, false},
		{"follower, same term", &hbRaft{state: raft.Follower, term: 3}, 3, true},
		{"follower, older term", &hbRaft{state: raft.Follower, term: 2}, 3, false},
		{"leader, older term (deposed)", &hbRaft{state: raft.Leader, term: 2}, 3, false},
		{"candidate, same term", &hbRaft{state: raft.Candidate, term: 3}, 3, false},
		{"follower, newer term (stale heartbeat)", &hbRaft{state: raft.Follower, term: 4}, 3, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.raft != nil {
				g.setRaft(*c.raft)
			}
			rpc := heartbeat(c.hbTerm)
			go tr.hb(rpc)
			select {
			case got := <-fast:
				if !c.fast {
					t.Fatalf("heartbeat of term %d took the fast path", c.hbTerm)
				}
				if got.Command != rpc.Command {
					t.Fatal("another RPC on the fast path")
				}
			case got := <-g.Consumer():
				if c.fast {
					t.Fatalf("heartbeat of term %d went to the main loop", c.hbTerm)
				}
				if got.Command != rpc.Command {
					t.Fatal("another RPC on the main loop's channel")
				}
			case <-time.After(5 * time.Second):
				t.Fatal("heartbeat delivered nowhere")
			}
		})
	}
}

// TestHeartbeatGuard_PassesRPCsAndCloses: the transport's RPCs reach
// Consumer, the guard keeps pre-vote and Close (raft looks for both), and
// Close answers a deferred heartbeat still waiting with
// raft.ErrTransportShutdown.
func TestHeartbeatGuard_PassesRPCsAndCloses(t *testing.T) {
	_, a := raft.NewInmemTransport("a")
	_, b := raft.NewInmemTransport("b")
	tr := &hbTransport{InmemTransport: a}
	gt := guardRPCs(tr, "a", zerolog.Nop(), false)
	g := gt.(*rpcGuard)
	if _, ok := gt.(raft.WithPreVote); !ok {
		t.Fatal("the guard hides the transport's pre-vote")
	}
	g.SetHeartbeatHandler(func(raft.RPC) { t.Error("fast path without raft") })

	b.Connect("a", a)
	errc := make(chan error, 1)
	go func() {
		var resp raft.RequestVoteResponse
		errc <- b.RequestVote("a", "a", &raft.RequestVoteRequest{Term: 5}, &resp)
	}()
	select {
	case rpc := <-g.Consumer():
		if _, ok := rpc.Command.(*raft.RequestVoteRequest); !ok {
			t.Fatalf("got %T", rpc.Command)
		}
		rpc.Respond(&raft.RequestVoteResponse{Term: 5}, nil)
	case <-time.After(5 * time.Second):
		t.Fatal("RPC not forwarded")
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}

	// A deferred heartbeat nobody reads, then Close.
	resp := make(chan raft.RPCResponse, 1)
	done := make(chan struct{})
	go func() {
		tr.hb(raft.RPC{Command: &raft.AppendEntriesRequest{Term: 1, RPCHeader: raft.RPCHeader{Addr: []byte("b")}}, RespChan: resp})
		close(done)
	}()
	// Close once the handler has sent it towards the main loop (deferredN
	// counts it first), not after a guessed sleep.
	for deadline := time.Now().Add(5 * time.Second); g.deferredN.Load() == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the heartbeat was never deferred")
		}
		runtime.Gosched()
	}
	if err := gt.(raft.WithClose).Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the heartbeat handler stayed blocked after Close")
	}
	// The forwarder may have taken it before Close: then it answers it.
	select {
	case r := <-resp:
		if r.Error != raft.ErrTransportShutdown {
			t.Fatalf("answer %v, want %v", r.Error, raft.ErrTransportShutdown)
		}
		// With a response of the command's type: raft's in-memory
		// pipeline panics on any other (respondShutdown).
		if _, ok := r.Response.(*raft.AppendEntriesResponse); !ok {
			t.Fatalf("answer's response is a %T, want *raft.AppendEntriesResponse", r.Response)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the deferred heartbeat was never answered")
	}
}
