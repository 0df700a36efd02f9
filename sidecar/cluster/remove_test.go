package cluster

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/axsched/ax/sidecar/peerapi"
)

// A node learns it was removed only from the leader's member list: listed
// is not removed, left out is, and a peer that is not the leader (421) or
// does not answer proves nothing.
func TestRemovedByCluster(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		body   string
		want   bool
	}{
		{"listed", 200, `{"n1":{"reachable":true},"n3":{"reachable":false}}`, false},
		{"left out", 200, `{"n1":{"reachable":true},"n2":{"reachable":true}}`, true},
		{"not the leader", http.StatusMisdirectedRequest, `{"error":"not the leader"}`, false},
		{"not the leader, coded", http.StatusMisdirectedRequest, `{"error":{"code":"not_leader","message":"not the leader"}}`, false},
		{"empty list", 200, `{}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != peerapi.PathMembers {
					http.NotFound(w, r)
					return
				}
				w.WriteHeader(tc.status)
				w.Write([]byte(tc.body))
			}))
			defer srv.Close()
			addr := strings.TrimPrefix(srv.URL, "http://")
			m := New(Config{NodeID: "n3", PeerAddr: "127.0.0.1:1", Join: []string{"127.0.0.1:1", addr}},
				Deps{Peers: peerapi.NewClient("", nil), Log: zerolog.Nop()})
			if got := m.removedByCluster(context.Background()); got != tc.want {
				t.Fatalf("removedByCluster = %v, want %v", got, tc.want)
			}
		})
	}
}

// An operator's removal (RemoveNode) through a follower whose leader was
// just killed: the forward gets no answer, so it looks for a leader again
// (on the node's clock) instead of failing at once; when the next leader
// no longer finds the member (the unanswered request had removed it) that
// counts as done. With no leader that answers it gives up after
// removeLeaderWait with ErrNoLeader naming the last failure, instead of
// waiting until the caller gives up. By hand: right after the leader was
// killed, ax cluster remove answered "internal error" (the dial error,
// hidden as a 500); with no quorum it hung until the CLI's 10 s deadline.
func TestRemoveNodeLooksForALeaderThatAnswers(t *testing.T) {
	dialErr := errors.New("dial tcp 127.0.0.1:1: connect: connection refused")
	e := newEnv(t, Config{})
	e.raft.servers = servers("n1", "n2", "n3")
	e.routes.leader = "n2:peer"
	e.peers.err = dialErr
	done := make(chan error, 1)
	go func() { done <- e.m.RemoveNode(context.Background(), "n3") }()
	waits := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { waits <- e.clock.BlockUntilContext(ctx, 1) }()
	select { // not answered: it waits, then asks again
	case err := <-done:
		t.Fatalf("gave up on the first unanswered forward: %v", err)
	case <-waits:
	}
	e.peers.mu.Lock()
	e.peers.err = peerapi.Errorf(ErrNoSuchMember, "no such member")
	e.peers.mu.Unlock()
	e.clock.Advance(forwardRetryInterval)
	if err := <-done; err != nil {
		t.Fatalf("a removal whose answer was lost: %v, want done", err)
	}
	removes := 0
	for _, c := range e.peers.log() {
		if strings.HasPrefix(c, "remove ") {
			removes++
		}
	}
	if removes != 2 {
		t.Fatalf("calls %q, want two forwards", e.peers.log())
	}

	// No leader answers: ErrNoLeader after removeLeaderWait, naming why.
	e.peers.err = dialErr
	go func() { done <- e.m.RemoveNode(context.Background(), "n3") }()
	for waited := time.Duration(0); waited < removeLeaderWait; waited += forwardRetryInterval {
		e.clock.BlockUntil(1)
		e.clock.Advance(forwardRetryInterval)
	}
	if err := <-done; !errors.Is(err, ErrNoLeader) || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("no leader answers: %v, want ErrNoLeader with the dial error", err)
	}

	// The leader's own answer ends it at once; and RemoveMember (a leave,
	// the peer API) still gives up on the first unanswered forward.
	e.peers.err = peerapi.Errorf(ErrLastVoter, "last voter")
	if err := e.m.RemoveNode(context.Background(), "n3"); !errors.Is(err, ErrLastVoter) {
		t.Fatalf("the leader's answer: %v", err)
	}
	e.peers.err = dialErr
	if err := e.m.RemoveMember(context.Background(), "n3"); !errors.Is(err, dialErr) {
		t.Fatalf("RemoveMember: %v", err)
	}
}

// An operator's removal that would leave the remaining voters the leader
// hears from short of a quorum of them is refused (ErrWouldLoseQuorum),
// on the leader and on a follower (by the leader's member list) alike;
// removing the voter that is gone is fine. By hand: ax cluster remove of a
// live voter right after another voter was killed left the two remaining
// voters, one of them dead, unable to elect a leader.
func TestRemoveNodeKeepsAQuorumReachable(t *testing.T) {
	e := newEnv(t, Config{})
	e.lead("n1", "n2", "n3", "~n4")
	e.m.HandleReport(peerapi.LoadReport{ID: "n2"}) // n3 is not heard from
	ctx := context.Background()
	err := e.m.RemoveNode(ctx, "n2")
	if !errors.Is(err, ErrWouldLoseQuorum) || !strings.Contains(err.Error(), "n3") {
		t.Fatalf("removing a live voter beside a dead one: %v, want ErrWouldLoseQuorum naming n3", err)
	}
	if err := e.m.RemoveNode(ctx, "n4"); err != nil { // a non-voter: no voter goes
		t.Fatal(err)
	}
	if err := e.m.RemoveNode(ctx, "n3"); err != nil {
		t.Fatalf("removing the dead voter: %v", err)
	}
	if got := e.raft.log(); !reflect.DeepEqual(got, []string{"remove n4", "remove n3"}) {
		t.Fatalf("changes %q", got)
	}

	f := newEnv(t, Config{})
	f.raft.servers = servers("n1", "n2", "n3")
	f.routes.leader = "n2:peer"
	f.peers.members["n2:peer"] = map[string]peerapi.MemberStatus{"n1": {Reachable: true}, "n2": {Reachable: true}}
	if err := f.m.RemoveNode(ctx, "n1"); !errors.Is(err, ErrWouldLoseQuorum) {
		t.Fatalf("through a follower: %v, want ErrWouldLoseQuorum", err)
	}
	if got := f.peers.log(); !reflect.DeepEqual(got, []string{"members n2:peer"}) {
		t.Fatalf("calls %q, want no removal asked", got)
	}
	if err := f.m.RemoveNode(ctx, "n3"); err != nil {
		t.Fatalf("removing the dead voter through a follower: %v", err)
	}
}

// VouchLeader says yes when a node this node knows (a join address here)
// names the sender as its leader, and no when none does (a stranger), for
// this node's own id, or when nobody answers.
func TestVouchLeader(t *testing.T) {
	peers := &fakePeers{infos: map[string]peerapi.Info{
		"10.0.0.2:7421": {ID: "n2", LeaderID: "n4"},
	}}
	m := New(Config{NodeID: "n3", PeerAddr: "10.0.0.3:7421", Join: []string{"10.0.0.1:7421", "10.0.0.2:7421"}},
		Deps{Peers: peers, Log: zerolog.Nop()})
	ctx := context.Background()
	for id, want := range map[string]bool{"n4": true, "a1": false, "n3": false, "n2": false, "": false} { // n2 names n4, not itself
		if got := m.VouchLeader(ctx, id); got != want {
			t.Errorf("VouchLeader(%q) = %v, want %v", id, got, want)
		}
	}
	// The unreachable n1 is asked first, then n2.
	if got := strings.Join(peers.calls[:2], ","); got != "info 10.0.0.1:7421,info 10.0.0.2:7421" {
		t.Errorf("calls %v", peers.calls)
	}
	// A node that knows no other: no.
	alone := New(Config{NodeID: "b1", PeerAddr: "10.0.0.9:7421"}, Deps{Peers: &fakePeers{}, Log: zerolog.Nop()})
	if alone.VouchLeader(ctx, "a1") {
		t.Error("a single node vouched for a stranger")
	}
}
