package cluster

import (
	"context"
	"errors"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// fakeVoters answers HandOver's questions from maps.
type fakeVoters struct {
	draining map[string]bool
	seen     map[string]time.Time
	applied  map[string]uint64
}

func (v fakeVoters) IsDraining(id string) bool { return v.draining[id] }
func (v fakeVoters) LastReport(id string) (time.Time, uint64, bool) {
	s, ok := v.seen[id]
	return s, v.applied[id], ok
}

// A stopping leader hands leadership to the most caught-up voter that is
// not draining and was heard lately; a non-voter never gets it; with no
// such voter and no live non-voter to promote (see below) raft picks one;
// a follower transfers nothing.
func TestHandOverPicksTheMostCaughtUpVoter(t *testing.T) {
	e := newEnv(t, Config{})
	e.lead("n1", "n2", "n3", "~n4")
	now := e.clock.Now()
	v := fakeVoters{
		draining: map[string]bool{},
		seen:     map[string]time.Time{"n2": now, "n3": now, "n4": now},
		applied:  map[string]uint64{"n2": 5, "n3": 9, "n4": 20},
	}
	e.m.HandOver(v)
	v.draining["n3"] = true
	e.m.HandOver(v)
	v.seen["n2"] = now.Add(-NodeLiveness) // unheard for the liveness window
	v.seen["n4"] = now.Add(-NodeLiveness)
	e.m.HandOver(v)
	e.raft.state = raft.Follower
	e.m.HandOver(v)
	if got, want := e.raft.log(), []string{"transfer n3", "transfer n2", "transfer"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("transfers %q, want %q", got, want)
	}
}

// Leave asks the leader to remove this node again, with backoff on the
// node's clock, while the leader refuses (a transfer in progress), and
// stops once it is removed.
func TestLeaveRetriesWhileTheLeaderRefuses(t *testing.T) {
	e := newEnv(t, Config{})
	e.lead("n1", "n2", "n3")
	e.raft.state, e.routes.leader = raft.Follower, "n2:peer"
	e.peers.mu.Lock()
	e.peers.err = errors.New("leadership transfer in progress")
	e.peers.mu.Unlock()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); e.m.Leave(context.Background(), fakeVoters{}) }()
	e.clock.BlockUntil(1) // refused once: waits 50 ms
	e.clock.Advance(50 * time.Millisecond)
	e.clock.BlockUntil(1) // refused twice: waits 100 ms
	e.peers.mu.Lock()
	e.peers.err = nil
	e.peers.mu.Unlock()
	e.clock.Advance(100 * time.Millisecond)
	wg.Wait()
	if got, want := e.peers.log(), []string{"remove n2:peer n1", "remove n2:peer n1", "remove n2:peer n1"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("calls %q, want three removals", got)
	}
}

// The last voter does not leave: it is not removed and Leave returns.
// (It still asks raft for a transfer first, which raft refuses for want
// of another voter.)
func TestLeaveKeepsTheLastVoter(t *testing.T) {
	e := newEnv(t, Config{})
	e.lead("n1", "~n2")
	e.m.Leave(context.Background(), fakeVoters{})
	for _, c := range e.raft.log() {
		if c == "remove n1" {
			t.Fatalf("changes %q: the last voter was removed", e.raft.log())
		}
	}
}

// The last voter stopping while live non-voters remain (a scale-down
// before autopilot promoted them) promotes the most caught-up one that is
// not draining, hands leadership to it and leaves: the cluster keeps a
// voter. (Without, it kept its place and the non-voters never elected a
// leader: TestPods_Scale3to5to1to3.)
func TestLeaveOfTheLastVoterPromotesALiveNonVoter(t *testing.T) {
	e := newEnv(t, Config{})
	e.lead("n1", "~n2", "~n3", "~n4")
	now := e.clock.Now()
	v := fakeVoters{
		draining: map[string]bool{"n3": true},
		seen:     map[string]time.Time{"n2": now, "n3": now, "n4": now.Add(-NodeLiveness)},
		applied:  map[string]uint64{"n2": 5, "n3": 9, "n4": 20},
	}
	e.m.Leave(context.Background(), v)
	if got, want := e.raft.log(), []string{"add-voter n2", "transfer n2", "remove n1"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("changes %q, want %q", got, want)
	}
}

// The same when the other voters are all stopping too (two pods of a
// scale-down stopped at once): a live non-voter is promoted and gets the
// leadership, instead of a draining voter that is about to leave as well.
// Not when the voters alive would not keep a quorum with it.
func TestLeaveWithEveryOtherVoterDrainingPromotesALiveNonVoter(t *testing.T) {
	e := newEnv(t, Config{})
	e.lead("n1", "n2", "~n3", "~n4")
	now := e.clock.Now()
	v := fakeVoters{
		draining: map[string]bool{"n2": true},
		seen:     map[string]time.Time{"n2": now, "n3": now, "n4": now},
		applied:  map[string]uint64{"n2": 30, "n3": 9, "n4": 20},
	}
	e.m.HandOver(v)
	if got, want := e.raft.log(), []string{"add-voter n4", "transfer n4"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("changes %q, want %q", got, want)
	}
	// Three voters, the two others unheard: a fourth would need three
	// alive; no promotion, a plain transfer.
	e = newEnv(t, Config{})
	e.lead("n1", "n2", "n5", "~n3")
	v = fakeVoters{seen: map[string]time.Time{"n3": now}, applied: map[string]uint64{"n3": 9}}
	e.m.HandOver(v)
	if got, want := e.raft.log(), []string{"transfer"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("changes %q, want %q", got, want)
	}
}

// A removal whose answer was lost (the leader lost its leadership before
// it committed) but that this node's configuration already shows ends the
// leave: a node no longer listed never hears of a leader again, so asking
// again would only wait out LeaveTimeout and log a failure.
// (TestPods_RollingUpdate on a loaded machine.)
func TestLeaveEndsWhenItsConfigurationNoLongerListsIt(t *testing.T) {
	e := newEnv(t, Config{})
	e.raft.servers = servers("n2", "n3")
	e.routes.leader = "n2:peer"
	e.peers.err = errors.New("leadership lost while committing log")
	done := make(chan struct{})
	go func() { defer close(done); e.m.Leave(context.Background(), fakeVoters{}) }()
	waits := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { waits <- e.clock.BlockUntilContext(ctx, 1) }()
	select {
	case <-done:
	case err := <-waits:
		if err == nil {
			t.Fatal("Leave waits to ask again for a removal its configuration already shows")
		}
	}
	if got := e.peers.log(); !reflect.DeepEqual(got, []string{"remove n2:peer n1"}) {
		t.Fatalf("calls %q, want one removal", got)
	}
}
