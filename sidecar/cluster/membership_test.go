package cluster

import (
	"context"
	"errors"
	"net"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/rs/zerolog"

	"github.com/axsched/ax/engine"
	"github.com/axsched/ax/raftfsm"
	"github.com/axsched/ax/sidecar/peerapi"
)

// env is a Membership of node n1 over fakes.
type env struct {
	m      *Membership
	raft   *fakeRaft
	peers  *fakePeers
	prop   *fakeProposer
	fsm    *fakeFSM
	log    *fakeRaftLog
	routes *fakeRoutes
	load   *fakeLoad
	clock  *engine.FakeClock
}

func newEnv(t *testing.T, cfg Config) *env {
	t.Helper()
	if cfg.NodeID == "" {
		cfg.NodeID = "n1"
	}
	cfg.RaftAdvertise, cfg.PeerAdvertise = cfg.NodeID+":raft", cfg.NodeID+":peer"
	if cfg.Voters == 0 {
		cfg.Voters = 3
	}
	if cfg.AutopilotReplaceAfter == 0 {
		cfg.AutopilotStabilization, cfg.AutopilotReplaceAfter = 10*time.Second, 10*time.Second
	}
	e := &env{
		raft: &fakeRaft{state: raft.Follower, term: 1}, peers: &fakePeers{infos: map[string]peerapi.Info{}, members: map[string]map[string]peerapi.MemberStatus{}},
		prop: &fakeProposer{}, fsm: &fakeFSM{}, log: &fakeRaftLog{}, routes: &fakeRoutes{}, load: &fakeLoad{},
		clock: engine.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)),
	}
	e.m = New(cfg, Deps{Raft: e.raft, Peers: e.peers, Proposer: e.prop, FSM: e.fsm, RaftLog: e.log, Routes: e.routes, Load: e.load,
		Clock: e.clock, Log: zerolog.New(zerolog.NewTestWriter(t))})
	return e
}

func (e *env) lead(ids ...string) {
	e.raft.state, e.raft.leaderID, e.raft.servers = raft.Leader, "n1", servers(ids...)
}

func TestInfoAndConfiguration(t *testing.T) {
	e := newEnv(t, Config{})
	if pi := e.m.Info(); pi.InCluster || pi.LeaderID != "" || pi.ID != "n1" || pi.PeerAddr != "n1:peer" {
		t.Errorf("before the cluster: %+v", pi)
	}
	if InConfiguration(e.raft, "n1") || InCluster(e.raft) {
		t.Error("no configuration yet")
	}
	e.lead("n1", "~n2")
	e.raft.commit = 7
	if pi := e.m.Info(); !pi.InCluster || pi.LeaderID != "n1" || pi.CommitIndex != 7 || pi.RaftAddr != "n1:raft" {
		t.Errorf("leading: %+v", pi)
	}
	if !InConfiguration(e.raft, "n2") || InConfiguration(e.raft, "n3") || !InCluster(e.raft) {
		t.Error("configuration n1, n2")
	}
	got := Members(e.raft, []raftfsm.Node{{ID: "n1"}, {ID: "n3"}, {ID: "n2"}})
	if len(got) != 2 || got[0].ID != "n1" || got[1].ID != "n2" {
		t.Errorf("members: %+v, want n1 n2 (n3 was removed)", got)
	}
	e.raft.confErr = errors.New("shut down")
	if InConfiguration(e.raft, "n1") || InCluster(e.raft) || len(Members(e.raft, []raftfsm.Node{{ID: "n3"}})) != 1 {
		t.Error("an unreadable configuration: not in it, and keep every node")
	}
}

// A join on the leader adds a non-voter (a voter stays one); elsewhere it
// goes to the leader; without one it waits, until its context ends.
func TestJoin(t *testing.T) {
	e := newEnv(t, Config{})
	e.lead("n1", "n2")
	ctx := context.Background()
	if err := e.m.Join(ctx, peerapi.Info{ID: "n3", RaftAddr: "n3:raft", PeerAddr: "n3:peer"}); err != nil {
		t.Fatal(err)
	}
	if err := e.m.Join(ctx, peerapi.Info{ID: "n2", RaftAddr: "n2:raft2"}); err != nil {
		t.Fatal(err)
	}
	if got := e.raft.log(); !reflect.DeepEqual(got, []string{"add-nonvoter n3", "add-nonvoter n2"}) {
		t.Errorf("changes %q", got)
	}
	if s := e.raft.servers; s[1].Suffrage != raft.Voter || s[1].Address != "n2:raft2" || s[2].Suffrage != raft.Nonvoter {
		t.Errorf("configuration %+v", s)
	}
	if e.peers.learnt["n3"] != "n3:peer" {
		t.Error("the joiner's peer address was not learnt")
	}

	e.raft.state = raft.Follower
	e.routes.leader = "n2:peer"
	e.peers.err = errors.New("refused")
	if err := e.m.Join(ctx, peerapi.Info{ID: "n4", RaftAddr: "n4:raft"}); err == nil || e.peers.log()[0] != "join n2:peer n4" {
		t.Errorf("forward: %v %q", err, e.peers.log())
	}

	e.routes.leader = ""
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- e.m.Join(cctx, peerapi.Info{ID: "n5", RaftAddr: "n5:raft"}) }()
	e.clock.BlockUntil(1)
	e.clock.Advance(forwardRetryInterval) // looks again: still no leader
	e.clock.BlockUntil(1)
	cancel()
	if err := <-done; !errors.Is(err, ErrNoLeader) {
		t.Errorf("without a leader: %v", err)
	}
}

// bootstrap-expect: the node bootstraps once it sees enough new nodes, and
// joins through a node that knows a leader instead.
// A voter that comes back with no Raft state under its old id and a new
// incarnation (its data dir was lost) after it had registered is removed
// and added back as a non-voter, so it cannot count towards a quorum of
// entries it no longer has. A voter with state, one that never registered
// or registered with the same incarnation (a member of a bootstrap-expect
// set that got the log before its join request arrived: CI saw that race
// take the vote of a node in a forming cluster), and nodes of older
// versions keep their vote.
func TestJoinOfAVoterThatLostItsData(t *testing.T) {
	e := newEnv(t, Config{})
	e.lead("n1", "n2", "n3", "n4", "n5")
	e.fsm.nodes = []raftfsm.Node{{ID: "n1", Incarnation: "i1"}, {ID: "n2", Incarnation: "i2"}, {ID: "n4", Incarnation: "i4"}, {ID: "n5"}}
	ctx := context.Background()
	for _, req := range []peerapi.Info{
		{ID: "n3", RaftAddr: "n3:raft2", Incarnation: "i3"},                  // never registered
		{ID: "n2", RaftAddr: "n2:raft2", InCluster: true, Incarnation: "i9"}, // has state
		{ID: "n4", RaftAddr: "n4:raft2", Incarnation: "i4"},                  // registered before its join arrived
		{ID: "n5", RaftAddr: "n5:raft2", Incarnation: "i5"},                  // recorded by an older version
		{ID: "n2", RaftAddr: "n2:raft2"},                                     // sent by an older version
	} {
		if err := e.m.Join(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	if got := e.raft.log(); !reflect.DeepEqual(got, []string{"add-nonvoter n3", "add-nonvoter n2", "add-nonvoter n4", "add-nonvoter n5", "add-nonvoter n2"}) {
		t.Fatalf("changes %q, want address updates only", got)
	}
	if err := e.m.Join(ctx, peerapi.Info{ID: "n2", RaftAddr: "n2:raft3", Incarnation: "i2b"}); err != nil {
		t.Fatal(err)
	}
	if got := e.raft.log()[5:]; !reflect.DeepEqual(got, []string{"remove n2", "add-nonvoter n2"}) {
		t.Fatalf("changes %q, want n2 removed and added back", got)
	}
	for _, s := range e.raft.servers {
		if s.ID == "n2" && (s.Suffrage != raft.Nonvoter || s.Address != "n2:raft3") {
			t.Fatalf("n2 after rejoining empty: %+v", s)
		}
		if s.ID != "n2" && s.Suffrage != raft.Voter {
			t.Fatalf("%s lost its vote: %+v", s.ID, s)
		}
	}
}

func TestJoinOrBootstrap(t *testing.T) {
	e := newEnv(t, Config{BootstrapExpect: 3, Join: []string{"n1:peer", "n2:peer", "n3:peer"}})
	e.peers.infos["n2:peer"] = peerapi.Info{ID: "n2", RaftAddr: "n2:raft"}
	done := make(chan struct{})
	go func() { e.m.JoinOrBootstrap(context.Background()); close(done) }()
	e.clock.BlockUntil(1) // one round: n3 does not answer yet
	if got := e.raft.log(); len(got) != 0 {
		t.Fatalf("bootstrapped with two of three: %q", got)
	}
	e.peers.mu.Lock()
	e.peers.infos["n3:peer"] = peerapi.Info{ID: "n3", RaftAddr: "n3:raft"}
	e.peers.mu.Unlock()
	e.clock.Advance(JoinRetryInterval)
	<-done
	if got := e.raft.log(); !reflect.DeepEqual(got, []string{"bootstrap n1=Voter,n2=Voter,n3=Voter"}) {
		t.Errorf("changes %q", got)
	}
	for _, c := range e.peers.log() {
		if c == "info n1:peer" {
			t.Error("asked itself")
		}
	}

	e = newEnv(t, Config{NodeID: "n4", Join: []string{"n1:peer"}})
	e.peers.infos["n1:peer"] = peerapi.Info{ID: "n1", LeaderID: "n1", InCluster: true}
	e.m.JoinOrBootstrap(context.Background())
	if got := e.peers.log(); !reflect.DeepEqual(got, []string{"info n1:peer", "join n1:peer n4"}) || len(e.raft.log()) != 0 {
		t.Errorf("join through the leader: %q %q", got, e.raft.log())
	}

	// In a cluster already without having joined (the leader replicated
	// to this empty node first): one Join tells the leader it started
	// with no state, then it returns; with no leader, it gives up after
	// announceTimeout.
	e = newEnv(t, Config{NodeID: "n4"})
	e.raft.servers = servers("n1", "n4")
	e.routes.leader = "n1:peer"
	e.m.JoinOrBootstrap(context.Background())
	if got := e.peers.log(); !reflect.DeepEqual(got, []string{"join n1:peer n4"}) || e.peers.joined[0].InCluster {
		t.Errorf("an empty member brought in by replication asked %q (%+v)", got, e.peers.joined)
	}
	e = newEnv(t, Config{NodeID: "n4"})
	e.raft.servers = servers("n1", "n4")
	done = make(chan struct{})
	go func() { e.m.JoinOrBootstrap(context.Background()); close(done) }()
	e.clock.BlockUntil(2) // the announce bound and the wait for a leader
	e.clock.Advance(announceTimeout)
	<-done
}

func TestRemoveMember(t *testing.T) {
	e := newEnv(t, Config{})
	e.lead("n1", "~n2", "n3")
	ctx := context.Background()
	if err := e.m.RemoveMember(ctx, "n9"); !errors.Is(err, ErrNoSuchMember) || !strings.Contains(err.Error(), `"n9"`) {
		t.Errorf("unknown member: %v", err)
	}
	if err := e.m.RemoveMember(ctx, "n3"); err != nil {
		t.Fatal(err)
	}
	if err := e.m.RemoveMember(ctx, "n1"); !errors.Is(err, ErrLastVoter) {
		t.Errorf("last voter: %v", err)
	}
	if got := e.raft.log(); !reflect.DeepEqual(got, []string{"remove n3"}) {
		t.Errorf("changes %q", got)
	}

	e.raft.state, e.routes.leader = raft.Follower, "n2:peer"
	if err := e.m.RemoveMember(ctx, "n2"); err != nil || e.peers.log()[0] != "remove n2:peer n2" {
		t.Errorf("forward: %v %q", err, e.peers.log())
	}
	e.routes.leader = ""
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := e.m.RemoveMember(cctx, "n2"); !errors.Is(err, ErrNoLeader) {
		t.Errorf("no leader: %v", err)
	}
}

// A node registers its record (with its executors), then reports the
// attempts its restart lost, and only then counts as registered.
func TestRegister(t *testing.T) {
	orphans := []raftfsm.Complete{{ID: "t1", Epoch: 2, Attempt: 1, Outcome: raftfsm.OutcomeLost}}
	execs := []raftfsm.Executor{{Name: "flag:h", Handlers: []string{"h"}, URL: "http://x", FromFlag: true}}
	e := newEnv(t, Config{Executors: execs, Orphans: orphans})
	e.prop.errs = []error{errors.New("no leader")}
	done := make(chan struct{})
	go func() { e.m.Register(context.Background()); close(done) }()
	e.clock.BlockUntil(1) // the first try failed: waits JoinRetryInterval
	if e.m.d.Registered.Load() {
		t.Fatal("registered after a failed proposal")
	}
	e.clock.Advance(JoinRetryInterval)
	<-done
	if !e.m.d.Registered.Load() {
		t.Fatal("not registered")
	}
	if len(e.prop.got) != 3 {
		t.Fatalf("proposals %+v", e.prop.got)
	}
	rec := e.prop.got[1][0]
	if rec.Type != raftfsm.CmdNode || rec.Node.ID != "n1" || rec.Node.PeerAddr != "n1:peer" || !reflect.DeepEqual(rec.Node.Executors, execs) {
		t.Errorf("record %+v", rec.Node)
	}
	if c := e.prop.got[2]; len(c) != 1 || c[0].Type != raftfsm.CmdComplete || !reflect.DeepEqual(*c[0].Complete, orphans[0]) {
		t.Errorf("orphans reported as %+v", c)
	}
	if len(e.m.orphans) != 0 {
		t.Error("orphans kept after they were reported")
	}

	cctx, cancel := context.WithCancel(context.Background())
	cancel()
	e = newEnv(t, Config{})
	e.prop.errs = []error{errors.New("no leader")}
	e.m.Register(cctx) // gives up with its context
	if e.m.d.Registered.Load() {
		t.Error("registered without a commit")
	}
}

// A load report: the leader records its own; a follower sends it to the
// leader and takes the answer in; a failed report drops the parked share.
func TestReportOnce(t *testing.T) {
	e := newEnv(t, Config{})
	e.load.own = peerapi.LoadReport{InFlight: 2, Draining: true}
	e.load.shares = map[string]map[string]int{"n1": {"h": 1}}
	e.fsm.applied = 11
	e.lead("n1")
	e.raft.commit = 12
	e.log.skip = 1 // the no-op at 12
	e.m.ReportOnce(context.Background())
	if r := e.load.recorded; len(r) != 1 || r[0].ID != "n1" || r[0].Applied != 11 || r[0].State != "leader" || r[0].InFlight != 2 || !r[0].Draining {
		t.Errorf("leader's own report %+v", r)
	}
	if e.load.commit != 11 || e.load.parked["h"] != 1 {
		t.Errorf("leader: commit %d parked %v", e.load.commit, e.load.parked)
	}

	e = newEnv(t, Config{})
	e.peers.reply = peerapi.ReportReply{CommitIndex: 31, StateIndex: 30, Parked: map[string]int{"h": 4}}
	e.m.ReportOnce(context.Background()) // no leader known: nothing
	if len(e.peers.log()) != 0 || e.load.parkedOK {
		t.Errorf("without a leader: %q", e.peers.log())
	}
	e.routes.leader = "n2:peer"
	e.m.ReportOnce(context.Background())
	if r := e.peers.reports; len(r) != 1 || r[0].State != "follower" || r[0].ID != "n1" {
		t.Errorf("sent %+v", r)
	}
	if e.load.commit != 30 || e.load.parked["h"] != 4 {
		t.Errorf("follower: commit %d parked %v", e.load.commit, e.load.parked)
	}
	e.peers.err = errors.New("timeout")
	e.m.ReportOnce(context.Background())
	if e.load.commit != 30 || e.load.parked != nil {
		t.Errorf("failed report: commit %d parked %v, want 30 and nil", e.load.commit, e.load.parked)
	}
	e.peers.err, e.peers.reply = nil, peerapi.ReportReply{CommitIndex: 33} // an older leader
	e.m.ReportOnce(context.Background())
	if e.load.commit != 33 {
		t.Errorf("a reply without a state index: commit %d, want its commit index 33", e.load.commit)
	}
}

// The leader records a report for the scheduler and autopilot, and
// answers its commit index and the node's parked share.
func TestHandleReport(t *testing.T) {
	e := newEnv(t, Config{})
	e.lead("n1", "~n2")
	e.raft.commit = 40
	e.log.skip = 2 // a no-op and a barrier
	e.load.shares = map[string]map[string]int{"n2": {"h": 3}}
	rr := e.m.HandleReport(peerapi.LoadReport{ID: "n2", Applied: 38, State: "Follower"})
	if rr.CommitIndex != 40 || rr.StateIndex != 38 || rr.Parked["h"] != 3 || len(e.load.recorded) != 1 {
		t.Errorf("reply %+v, recorded %+v", rr, e.load.recorded)
	}
	e.clock.Advance(500 * time.Millisecond)
	st := e.m.MemberStatuses()
	if s := st["n2"]; !s.Reachable || s.LastContactMs != 500 || s.AppliedIndex != 38 || s.Role != "follower" {
		t.Errorf("n2 %+v", s)
	}
	if s := st["n1"]; !s.Reachable || s.Role != "leader" || s.Status != apStatusLeader || !s.Healthy {
		t.Errorf("n1 %+v", s)
	}
	e.raft.confErr = errors.New("shut down")
	if e.m.MemberStatuses() != nil {
		t.Error("statuses without a configuration")
	}
}

// Autopilot on the leader: a non-voter that reports healthily for the
// stabilization time is promoted while the cluster lacks voters, and the
// leader's state is forgotten when it steps down.
func TestAutopilotRound(t *testing.T) {
	e := newEnv(t, Config{Voters: 3})
	e.lead("n1", "n2", "~n3")
	e.raft.commit, e.fsm.applied = 10, 10
	report := func() {
		for _, id := range []string{"n2", "n3"} {
			e.m.HandleReport(peerapi.LoadReport{ID: id, Applied: 10, State: "follower"})
		}
	}
	ctx := context.Background()
	report()
	e.m.autopilot.round(ctx) // n3 starts its healthy streak
	if st := e.m.MemberStatuses()["n3"]; st.Status != apStatusStaging || !st.Healthy || st.StableSinceMs != e.clock.Now().UnixMilli() {
		t.Errorf("n3 %+v, want staging", st)
	}
	for range 9 {
		e.clock.Advance(time.Second)
		report()
		e.m.autopilot.round(ctx)
	}
	if got := e.raft.log(); len(got) != 0 {
		t.Fatalf("promoted before 10 s: %q", got)
	}
	e.clock.Advance(time.Second)
	report()
	e.m.autopilot.round(ctx)
	if got := e.raft.log(); !reflect.DeepEqual(got, []string{"add-voter n3"}) {
		t.Fatalf("changes %q", got)
	}
	if st := e.m.MemberStatuses()["n3"]; st.Status != apStatusVoter {
		t.Errorf("n3 %+v, want voter", st)
	}

	e.raft.state = raft.Follower
	e.m.autopilot.round(ctx)
	if !e.m.autopilot.since.IsZero() || len(e.m.autopilot.health) != 0 {
		t.Error("a follower kept the leader's autopilot state")
	}
}

// A node without a leader for removalCheckAfter asks for the leader's
// member list; left out, it says so, and forgets it once a leader is back.
func TestRemovalWatch(t *testing.T) {
	e := newEnv(t, Config{Join: []string{"n2:peer"}})
	e.raft.servers = servers("n1", "n2")
	e.fsm.nodes = []raftfsm.Node{{ID: "n1", PeerAddr: "n1:peer"}, {ID: "n3", PeerAddr: "n3:peer"}}
	e.routes.routes = map[string]string{"n3": "n3:routed"}
	e.peers.members["n3:routed"] = map[string]peerapi.MemberStatus{"n2": {}, "n3": {}}
	w := &removalWatch{m: e.m}
	ctx := context.Background()
	w.check(ctx)
	e.clock.Advance(removalCheckAfter - time.Second)
	w.check(ctx)
	if len(e.peers.log()) != 0 {
		t.Fatalf("asked before %v without a leader: %q", removalCheckAfter, e.peers.log())
	}
	e.clock.Advance(time.Second)
	w.check(ctx)
	if !e.m.d.Removed.Load() {
		t.Fatalf("not marked removed; asked %q", e.peers.log())
	}
	if got := e.peers.log(); !reflect.DeepEqual(got, []string{"members n2:peer", "members n3:routed"}) {
		t.Errorf("asked %q", got)
	}
	e.raft.leaderID = "n2"
	w.check(ctx)
	if e.m.d.Removed.Load() || !w.noLeaderSince.IsZero() {
		t.Error("still removed with a leader")
	}
}

// every calls its function once per period of the clock until its
// context ends.
func TestEvery(t *testing.T) {
	clock := engine.NewFakeClock(time.Now())
	ctx, cancel := context.WithCancel(context.Background())
	calls := make(chan struct{})
	done := make(chan struct{})
	go func() {
		every(ctx, clock, time.Second, func() { calls <- struct{}{} })
		close(done)
	}()
	for range 3 {
		clock.BlockUntil(1)
		clock.Advance(time.Second)
		<-calls
	}
	cancel()
	<-done
}

func TestValidateJoin(t *testing.T) {
	for j, want := range map[string]string{
		"10.0.0.6:7421": "", "dns:ax:7421": "", "[fd00::1]:7421": "",
		"dns:ax": "dns:NAME:PORT", "dns::7421": "dns:NAME:PORT", "10.0.0.6": "want HOST:PORT", "h:0": "want HOST:PORT",
	} {
		err := ValidateJoin(j)
		if (want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), want)) {
			t.Errorf("%q: %v, want %q", j, err, want)
		}
	}
}

func TestValidateAutopilot(t *testing.T) {
	for _, c := range []struct {
		voters        int
		stab, replace time.Duration
		ok            bool
	}{
		{3, 10 * time.Second, 10 * time.Second, true},
		{1, 0, 3 * time.Second, true},
		{2, 0, 10 * time.Second, false},
		{11, 0, 10 * time.Second, false},
		{3, -time.Second, 10 * time.Second, false},
		{3, 0, time.Second, false},
	} {
		if err := ValidateAutopilot(c.voters, c.stab, c.replace); (err == nil) != c.ok {
			t.Errorf("%+v: %v", c, err)
		}
	}
}

// The advertised name is looked up again until it resolves, and for no
// longer than the wait.
func TestResolveAdvertise(t *testing.T) {
	log := zerolog.New(zerolog.NewTestWriter(t))
	clock := engine.NewFakeClock(time.Now())
	ctx := context.Background()
	if a, err := ResolveAdvertise(ctx, nil, "10.1.2.3:7420", time.Minute, clock, log); err != nil || a.String() != "10.1.2.3:7420" {
		t.Errorf("an IP: %v %v", a, err)
	}
	if _, err := ResolveAdvertise(ctx, nil, "nope", time.Minute, clock, log); err == nil {
		t.Error("no port accepted")
	}
	r := &lateResolver{after: 2}
	a, err := resolveAside(clock, func() (*net.TCPAddr, error) {
		return ResolveAdvertise(ctx, r, "ax-0.test:7420", time.Minute, clock, log)
	}, 2)
	if err != nil || a.String() != "10.0.0.9:7420" {
		t.Errorf("late name: %v %v", a, err)
	}
	r = &lateResolver{after: 1 << 30}
	_, err = resolveAside(clock, func() (*net.TCPAddr, error) {
		return ResolveAdvertise(ctx, r, "never.test:7420", time.Second, clock, log)
	}, 3)
	if err == nil || !strings.Contains(err.Error(), "never.test:7420") {
		t.Errorf("never: %v", err)
	}
}

// resolveAside runs fn and advances clock by advertiseRetry each time it
// waits, at most n times.
func resolveAside(clock *engine.FakeClock, fn func() (*net.TCPAddr, error), n int) (*net.TCPAddr, error) {
	type res struct {
		a   *net.TCPAddr
		err error
	}
	ch := make(chan res, 1)
	go func() { a, err := fn(); ch <- res{a, err} }()
	for range n {
		clock.BlockUntil(1)
		clock.Advance(advertiseRetry)
	}
	r := <-ch
	return r.a, r.err
}

// lateResolver resolves every name to 10.0.0.9 from its after-th lookup.
type lateResolver struct {
	mu    sync.Mutex
	after int
	n     int
}

func (r *lateResolver) LookupHost(_ context.Context, host string) ([]string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n++; r.n <= r.after {
		return nil, &net.DNSError{Err: "not yet", Name: host, IsNotFound: true}
	}
	return []string{"10.0.0.9"}, nil
}

func TestServeHealth(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	goRun := func(fn func()) { wg.Add(1); go func() { defer wg.Done(); fn() }() }
	addr, err := ServeHealth(ctx, "127.0.0.1:0", func(context.Context) error { return nil }, zerolog.Nop(), goRun)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + addr + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("readyz %d", resp.StatusCode)
	}
	cancel()
	wg.Wait()
	if _, err := ServeHealth(ctx, "bad", nil, zerolog.Nop(), goRun); err == nil || !strings.Contains(err.Error(), "health-addr") {
		t.Errorf("bad address: %v", err)
	}
}

// ReportLoop reports every ReportInterval, and at once when the leader
// changes: a new leader gives attempts only to the nodes it has heard
// from (a follower waited up to ReportInterval for its first report).
func TestReportLoopReportsAtOnceToANewLeader(t *testing.T) {
	e := newEnv(t, Config{})
	var wmu sync.Mutex
	changed := make(chan struct{})
	e.m.d.LeaderChanged = func() <-chan struct{} {
		wmu.Lock()
		defer wmu.Unlock()
		return changed
	}
	notify := func() {
		wmu.Lock()
		close(changed)
		changed = make(chan struct{})
		wmu.Unlock()
	}
	e.routes.leader = "n2:peer"
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); e.m.ReportLoop(ctx) }()
	defer func() { cancel(); <-done }()
	reports := func() int {
		e.peers.mu.Lock()
		defer e.peers.mu.Unlock()
		return len(e.peers.reports)
	}
	waitReports := func(n int, what string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for reports() < n {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d reports, want %d", what, reports(), n)
			}
			time.Sleep(time.Millisecond)
		}
	}
	e.clock.BlockUntil(1) // the loop waits on its timer
	e.clock.Advance(ReportInterval)
	waitReports(1, "after one interval")
	e.clock.BlockUntil(1)
	e.routes.leader = "n3:peer"
	notify() // the clock does not move
	waitReports(2, "after a leader change")
	if got := e.peers.log(); got[len(got)-1] != "report n3:peer" {
		t.Errorf("calls %q, want the last report sent to the new leader n3", got)
	}
	if n := reports(); n != 2 {
		t.Errorf("%d reports, want 2", n)
	}
}

// A second node started with the id of a live member (a copied manifest, a
// typo) at another address is refused with ErrDuplicateID: raft's
// AddNonvoter would have moved the member's address in the configuration
// to the newcomer (the leader's own too: by hand, a duplicate of the
// leader's id left the leader's configured address pointing at an empty
// node), and a live voter's duplicate would have had its vote taken away
// (rejoinsEmpty). Nor does the node that took the request learn the
// newcomer's peer address under that id (a follower then forwarded every
// write to the duplicate, which had no leader: 503 no_leader). Once the
// member has gone quiet past AutopilotLastContact, its id may come back at
// a new address (a pod recreated with another IP).
func TestJoinRefusesTheIDOfALiveMember(t *testing.T) {
	e := newEnv(t, Config{})
	e.lead("n1", "n2", "n3")
	e.fsm.nodes = []raftfsm.Node{{ID: "n1", Incarnation: "i1"}, {ID: "n2", Incarnation: "i2"}, {ID: "n3", Incarnation: "i3"}}
	e.m.HandleReport(peerapi.LoadReport{ID: "n2"})
	ctx := context.Background()
	for _, id := range []string{"n1", "n2"} {
		err := e.m.Join(ctx, peerapi.Info{ID: id, RaftAddr: "dup:raft", PeerAddr: "dup:peer", Incarnation: "x"})
		if !errors.Is(err, ErrDuplicateID) || !strings.Contains(err.Error(), id+":raft") {
			t.Fatalf("join of a duplicate of %s: %v, want ErrDuplicateID naming the member's address", id, err)
		}
	}
	if got := e.raft.log(); len(got) != 0 {
		t.Fatalf("configuration changes %q for duplicates", got)
	}
	for _, s := range e.raft.servers {
		if s.Address != raft.ServerAddress(s.ID+":raft") || s.Suffrage != raft.Voter {
			t.Fatalf("configuration changed: %+v", e.raft.servers)
		}
	}
	if len(e.peers.learnt) != 0 {
		t.Fatalf("learnt peer addresses %v from refused joins", e.peers.learnt)
	}

	e.clock.Advance(AutopilotLastContact + time.Millisecond)
	if err := e.m.Join(ctx, peerapi.Info{ID: "n2", RaftAddr: "n2:raft2", PeerAddr: "n2:peer2", InCluster: true, Incarnation: "i2"}); err != nil {
		t.Fatalf("n2 back at a new address after going quiet: %v", err)
	}
	if got := e.raft.log(); !reflect.DeepEqual(got, []string{"add-nonvoter n2"}) || e.peers.learnt["n2"] != "n2:peer2" {
		t.Fatalf("changes %q, learnt %v", got, e.peers.learnt)
	}

	// A follower forwards the join; the leader refuses it: nothing learnt.
	e.raft.state = raft.Follower
	e.routes.leader = "n3:peer"
	e.peers.err = peerapi.Errorf(ErrDuplicateID, "taken")
	if err := e.m.Join(ctx, peerapi.Info{ID: "n3", RaftAddr: "dup:raft", PeerAddr: "dup:peer"}); !errors.Is(err, ErrDuplicateID) {
		t.Fatalf("forwarded duplicate: %v", err)
	}
	if a := e.peers.learnt["n3"]; a != "" {
		t.Fatalf("the follower learnt %s for n3 from a refused join", a)
	}
}

// Only the orphans still current once the node's record has applied are
// reported lost (Config.OrphanCurrent): a report of an attempt that ended
// in the replayed log would end the next run's attempt of that number.
func TestRegisterReportsOnlyCurrentOrphans(t *testing.T) {
	orphans := []raftfsm.Complete{{ID: "t1", Epoch: 2, Attempt: 1, Outcome: raftfsm.OutcomeLost}, {ID: "t2", Epoch: 3, Attempt: 1, Outcome: raftfsm.OutcomeLost}}
	var asked []string
	e := newEnv(t, Config{Orphans: orphans, OrphanCurrent: func(c raftfsm.Complete) bool {
		asked = append(asked, c.ID)
		return c.ID == "t1"
	}})
	e.m.Register(context.Background())
	if !e.m.d.Registered.Load() || len(e.prop.got) != 2 {
		t.Fatalf("registered %v, proposals %+v", e.m.d.Registered.Load(), e.prop.got)
	}
	if c := e.prop.got[1]; len(c) != 1 || c[0].Complete.ID != "t1" {
		t.Errorf("reported %+v, want t1 alone (t2's attempt ended)", c)
	}
	if len(asked) != 2 {
		t.Errorf("asked about %v, want both", asked)
	}

	// None current: nothing proposed, none kept.
	e = newEnv(t, Config{Orphans: orphans, OrphanCurrent: func(raftfsm.Complete) bool { return false }})
	e.m.Register(context.Background())
	if len(e.prop.got) != 1 || len(e.m.orphans) != 0 {
		t.Errorf("proposals %+v, orphans kept %+v", e.prop.got, e.m.orphans)
	}
}
