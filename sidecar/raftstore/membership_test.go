package raftstore

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/rs/zerolog"
)

// TestRPCGuard_RefusesNonMembers: once this node has a configuration, an
// AppendEntries (on the main loop's path or the heartbeat fast path), an
// InstallSnapshot or a TimeoutNow from a server id outside it is answered
// with errNotAMember and never reaches raft; a member's, a vote, an RPC
// without an id, and anything while the configuration is empty reach raft.
func TestRPCGuard_RefusesNonMembers(t *testing.T) {
	_, a := raft.NewInmemTransport("a")
	_, b := raft.NewInmemTransport("b")
	tr := &hbTransport{InmemTransport: a}
	var logged strings.Builder
	g := guardRPCs(tr, "a", zerolog.New(&logged)).(*rpcGuard)
	defer g.Close()
	g.SetHeartbeatHandler(func(raft.RPC) { t.Error("a heartbeat took the fast path") })
	b.Connect("a", a)

	members := raft.Configuration{Servers: []raft.Server{{ID: "a", Address: "a"}, {ID: "m", Address: "m"}}}
	hdr := func(id string) raft.RPCHeader { return raft.RPCHeader{ID: []byte(id), Addr: []byte("b")} }
	send := map[string]func(id string) error{
		"AppendEntries": func(id string) error {
			var resp raft.AppendEntriesResponse
			return b.AppendEntries("a", "a", &raft.AppendEntriesRequest{RPCHeader: hdr(id), Term: 9, PrevLogEntry: 4, Entries: []*raft.Log{{Index: 5, Term: 9}}}, &resp)
		},
		"InstallSnapshot": func(id string) error {
			var resp raft.InstallSnapshotResponse
			return b.InstallSnapshot("a", "a", &raft.InstallSnapshotRequest{RPCHeader: hdr(id), Term: 9, SnapshotVersion: 1, Size: 3}, &resp, strings.NewReader("abc"))
		},
		"TimeoutNow": func(id string) error {
			var resp raft.TimeoutNowResponse
			return b.TimeoutNow("a", "a", &raft.TimeoutNowRequest{RPCHeader: hdr(id)}, &resp)
		},
		"RequestVote": func(id string) error {
			var resp raft.RequestVoteResponse
			return b.RequestVote("a", "a", &raft.RequestVoteRequest{RPCHeader: hdr(id), Term: 9}, &resp)
		},
	}
	// reaches sends one RPC and reports whether it reached raft (which
	// answers it) rather than being refused.
	reaches := func(t *testing.T, kind, id string) bool {
		t.Helper()
		errc := make(chan error, 1)
		go func() { errc <- send[kind](id) }()
		select {
		case rpc := <-g.Consumer():
			respondError(rpc, nil)
			if err := <-errc; err != nil {
				t.Fatalf("%s from %q reached raft, but the answer failed: %v", kind, id, err)
			}
			return true
		case err := <-errc:
			if err == nil || !strings.Contains(err.Error(), errNotAMember.Error()) {
				t.Fatalf("%s from %q: answered %v without reaching raft, want %v", kind, id, err, errNotAMember)
			}
			return false
		case <-time.After(5 * time.Second):
			t.Fatalf("%s from %q: neither reached raft nor answered", kind, id)
		}
		return false
	}

	for _, c := range []struct {
		name    string
		conf    *raft.Configuration // nil: raft not started
		kind    string
		from    string
		reaches bool
	}{
		{"raft not started", nil, "AppendEntries", "x", true},
		{"empty configuration (a node waiting to be added)", &raft.Configuration{}, "AppendEntries", "x", true},
		{"member", &members, "AppendEntries", "m", true},
		{"non-member AppendEntries", &members, "AppendEntries", "x", false},
		{"non-member InstallSnapshot", &members, "InstallSnapshot", "x", false},
		{"non-member TimeoutNow", &members, "TimeoutNow", "x", false},
		{"non-member vote (raft checks it)", &members, "RequestVote", "x", true},
		{"no server id (protocol < 3)", &members, "AppendEntries", "", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.conf != nil {
				g.setRaft(hbRaft{state: raft.Follower, term: 9, conf: *c.conf})
			}
			if got := reaches(t, c.kind, c.from); got != c.reaches {
				t.Fatalf("%s from %q reached raft: %v, want %v", c.kind, c.from, got, c.reaches)
			}
		})
	}

	// The heartbeat fast path: a non-member's heartbeat is answered there.
	g.setRaft(hbRaft{state: raft.Follower, term: 9, conf: members})
	resp := make(chan raft.RPCResponse, 1)
	tr.hb(raft.RPC{Command: &raft.AppendEntriesRequest{RPCHeader: hdr("x"), Term: 9}, RespChan: resp})
	select {
	case r := <-resp:
		if !errors.Is(r.Error, errNotAMember) {
			t.Fatalf("heartbeat answered %v, want %v", r.Error, errNotAMember)
		}
		if _, ok := r.Response.(*raft.AppendEntriesResponse); !ok {
			t.Fatalf("heartbeat's response is a %T", r.Response)
		}
	default:
		t.Fatal("a non-member's heartbeat was not answered at once")
	}
	if n := g.refusedN.Load(); n != 4 {
		t.Fatalf("refused %d RPCs, want 4", n)
	}
	// One log line for sender x within the minute, naming it.
	if n := strings.Count(logged.String(), `"from_id":"x"`); n != 1 {
		t.Fatalf("logged %d refusals of x, want 1:\n%s", n, logged.String())
	}
}

// TestStrangerLeaderIsRefused: two clusters on real Raft transports. A
// (a1, a2) still lists a gone third member a9 at the address that is now
// b1's, the one node of cluster B. A's leader sends its AppendEntries
// there; b1 refuses them and stays B's leader with B's log. Without the
// guard's refusal b1 steps down to follow A's leader (the same term is
// enough when it leads) and would then take A's log or snapshot.
func TestStrangerLeaderIsRefused(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three Raft nodes")
	}
	cfgB := testStoreConfig(t, t.TempDir())
	cfgB.NodeID = "b1"
	b1 := startTestStore(t, cfgB, nil)
	defer stopTestStore(t, b1)
	bTerm := b1.Raft.CurrentTerm()

	var as []*Store
	var servers []raft.Server
	for _, id := range []string{"a1", "a2"} {
		cfg := testStoreConfig(t, t.TempDir())
		cfg.NodeID = id
		st, err := OpenState(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.StartRaft(advertiseOf(cfg.RaftAdvertise)); err != nil {
			st.Close()
			t.Fatal(err)
		}
		defer stopTestStore(t, st)
		as = append(as, st)
		servers = append(servers, raft.Server{ID: raft.ServerID(id), Address: raft.ServerAddress(cfg.RaftAdvertise)})
	}
	servers = append(servers, raft.Server{ID: "a9", Address: raft.ServerAddress(cfgB.RaftAdvertise)})
	if err := as[0].Raft.BootstrapCluster(raft.Configuration{Servers: servers}).Error(); err != nil {
		t.Fatal(err)
	}

	g := b1.transport.(*rpcGuard)
	deadline := time.Now().Add(20 * time.Second)
	for g.refusedN.Load() < 20 {
		if time.Now().After(deadline) {
			t.Fatalf("b1 refused %d RPCs of cluster A in 20 s (A's leader: %q)", g.refusedN.Load(), as[0].Raft.Leader())
		}
		if b1.Raft.State() != raft.Leader {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, id := b1.Raft.LeaderWithID(); b1.Raft.State() != raft.Leader || id != "b1" {
		t.Fatalf("b1 is %v, its leader %q: cluster A's leader took it over", b1.Raft.State(), id)
	}
	if err := b1.Raft.Barrier(5 * time.Second).Error(); err != nil {
		t.Fatalf("b1 cannot commit in its own cluster: %v", err)
	}
	if got := b1.Raft.CurrentTerm(); got != bTerm {
		t.Fatalf("b1's term went from %d to %d: cluster A's terms reached it", bTerm, got)
	}
	if l := as[0].Raft.Leader(); l == "" {
		t.Fatal("cluster A has no leader")
	}
}
