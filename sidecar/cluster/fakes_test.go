package cluster

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/axsched/ax/raftfsm"
	"github.com/axsched/ax/sidecar/peerapi"
)

// fakeRaft is a Raft whose configuration changes apply at once.
type fakeRaft struct {
	mu       sync.Mutex
	state    raft.RaftState
	leaderID string
	servers  []raft.Server
	index    uint64 // of the configuration
	commit   uint64
	term     uint64
	confErr  error
	changes  []string // "add-nonvoter n2", "add-voter n2", "demote n2", "remove n2", "bootstrap n1,n2"
}

type future struct {
	err   error
	index uint64
	conf  raft.Configuration
}

func (f future) Error() error                      { return f.err }
func (f future) Index() uint64                     { return f.index }
func (f future) Configuration() raft.Configuration { return f.conf }

func (r *fakeRaft) State() raft.RaftState {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.state
}

func (r *fakeRaft) LeaderWithID() (raft.ServerAddress, raft.ServerID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return raft.ServerAddress(r.leaderID + ":raft"), raft.ServerID(r.leaderID)
}

func (r *fakeRaft) GetConfiguration() raft.ConfigurationFuture {
	r.mu.Lock()
	defer r.mu.Unlock()
	return future{err: r.confErr, index: r.index, conf: raft.Configuration{Servers: append([]raft.Server(nil), r.servers...)}}
}

func (r *fakeRaft) CommitIndex() uint64 { r.mu.Lock(); defer r.mu.Unlock(); return r.commit }
func (r *fakeRaft) CurrentTerm() uint64 { r.mu.Lock(); defer r.mu.Unlock(); return r.term }

func (r *fakeRaft) BootstrapCluster(c raft.Configuration) raft.Future {
	r.mu.Lock()
	defer r.mu.Unlock()
	ids := ""
	for i, s := range c.Servers {
		if i > 0 {
			ids += ","
		}
		ids += string(s.ID) + "=" + s.Suffrage.String()
	}
	r.changes = append(r.changes, "bootstrap "+ids)
	r.servers, r.index = c.Servers, r.index+1
	return future{}
}

func (r *fakeRaft) set(id raft.ServerID, addr raft.ServerAddress, suffrage raft.ServerSuffrage, keepVoter bool) {
	for i := range r.servers {
		if r.servers[i].ID == id {
			if !(keepVoter && r.servers[i].Suffrage == raft.Voter) {
				r.servers[i].Suffrage = suffrage
			}
			if addr != "" {
				r.servers[i].Address = addr
			}
			return
		}
	}
	r.servers = append(r.servers, raft.Server{ID: id, Address: addr, Suffrage: suffrage})
}

func (r *fakeRaft) change(what string, prevIndex uint64, apply func()) raft.IndexFuture {
	r.mu.Lock()
	defer r.mu.Unlock()
	if prevIndex != 0 && prevIndex != r.index {
		return future{err: errors.New("configuration changed since")}
	}
	r.changes = append(r.changes, what)
	apply()
	r.index++
	return future{index: r.index}
}

func (r *fakeRaft) AddNonvoter(id raft.ServerID, addr raft.ServerAddress, prev uint64, _ time.Duration) raft.IndexFuture {
	return r.change("add-nonvoter "+string(id), prev, func() { r.set(id, addr, raft.Nonvoter, true) })
}

func (r *fakeRaft) AddVoter(id raft.ServerID, addr raft.ServerAddress, prev uint64, _ time.Duration) raft.IndexFuture {
	return r.change("add-voter "+string(id), prev, func() { r.set(id, addr, raft.Voter, false) })
}

func (r *fakeRaft) DemoteVoter(id raft.ServerID, prev uint64, _ time.Duration) raft.IndexFuture {
	return r.change("demote "+string(id), prev, func() { r.set(id, "", raft.Nonvoter, false) })
}

func (r *fakeRaft) RemoveServer(id raft.ServerID, prev uint64, _ time.Duration) raft.IndexFuture {
	return r.change("remove "+string(id), prev, func() {
		kept := r.servers[:0]
		for _, s := range r.servers {
			if s.ID != id {
				kept = append(kept, s)
			}
		}
		r.servers = kept
	})
}

func (r *fakeRaft) log() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.changes...)
}

// servers builds a configuration: "n1" a voter, "~n2" a non-voter.
func servers(ids ...string) []raft.Server {
	var out []raft.Server
	for _, id := range ids {
		s := raft.Server{Suffrage: raft.Voter}
		if id[0] == '~' {
			s.Suffrage, id = raft.Nonvoter, id[1:]
		}
		s.ID, s.Address = raft.ServerID(id), raft.ServerAddress(id+":raft")
		out = append(out, s)
	}
	return out
}

// fakePeers answers the peer calls from maps and records them.
type fakePeers struct {
	mu      sync.Mutex
	infos   map[string]peerapi.Info // by address
	members map[string]map[string]peerapi.MemberStatus
	reply   peerapi.ReportReply
	err     error // of Join, Report, Remove
	calls   []string
	learnt  map[string]string
	reports []peerapi.LoadReport
	joined  []peerapi.Info
}

func (p *fakePeers) record(s string) { p.mu.Lock(); p.calls = append(p.calls, s); p.mu.Unlock() }

func (p *fakePeers) Learn(id, _, peerAddr string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.learnt == nil {
		p.learnt = map[string]string{}
	}
	p.learnt[id] = peerAddr
}

func (p *fakePeers) Info(_ context.Context, addr string) (peerapi.Info, error) {
	p.record("info " + addr)
	if pi, ok := p.infos[addr]; ok {
		return pi, nil
	}
	return peerapi.Info{}, errors.New("connection refused")
}

func (p *fakePeers) Join(_ context.Context, addr string, req peerapi.Info) (peerapi.Info, error) {
	p.record("join " + addr + " " + req.ID)
	p.mu.Lock()
	p.joined = append(p.joined, req)
	p.mu.Unlock()
	return p.infos[addr], p.err
}

func (p *fakePeers) Report(_ context.Context, addr string, r peerapi.LoadReport) (peerapi.ReportReply, error) {
	p.record("report " + addr)
	p.mu.Lock()
	p.reports = append(p.reports, r)
	p.mu.Unlock()
	return p.reply, p.err
}

func (p *fakePeers) Members(_ context.Context, addr string) (map[string]peerapi.MemberStatus, error) {
	p.record("members " + addr)
	if m, ok := p.members[addr]; ok {
		return m, nil
	}
	return nil, peerapi.ErrNotLeader
}

func (p *fakePeers) Remove(_ context.Context, addr, id string) error {
	p.record("remove " + addr + " " + id)
	return p.err
}

func (p *fakePeers) log() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.calls...)
}

// fakeProposer commits what it is given unless errs says otherwise (one
// error per call, in order).
type fakeProposer struct {
	mu   sync.Mutex
	errs []error
	got  [][]raftfsm.Command
}

func (p *fakeProposer) Propose(_ context.Context, cmds []raftfsm.Command) ([]raftfsm.Result, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.got = append(p.got, cmds)
	if len(p.errs) > 0 {
		err := p.errs[0]
		p.errs = p.errs[1:]
		if err != nil {
			return nil, err
		}
	}
	return make([]raftfsm.Result, len(cmds)), nil
}

// fakeFSM is the FSM's reads.
type fakeFSM struct {
	applied uint64
	nodes   []raftfsm.Node
}

func (f *fakeFSM) AppliedIndex() uint64           { return f.applied }
func (f *fakeFSM) Nodes() ([]raftfsm.Node, error) { return f.nodes, nil }

// fakeRaftLog: the last skip entries are ones the FSM never applies.
type fakeRaftLog struct{ skip uint64 }

func (l *fakeRaftLog) StateIndex(upTo uint64) uint64 { return upTo - min(l.skip, upTo) }

// fakeRoutes: the leader's peer address, and routes by id.
type fakeRoutes struct {
	leader string
	routes map[string]string
}

func (r *fakeRoutes) LeaderPeerAddr() string { return r.leader }
func (r *fakeRoutes) RoutedPeerAddr(id, addr string) string {
	if a, ok := r.routes[id]; ok {
		return a
	}
	return addr
}

// fakeLoad records what the cluster did with the load.
type fakeLoad struct {
	mu       sync.Mutex
	own      peerapi.LoadReport
	recorded []peerapi.LoadReport
	shares   map[string]map[string]int
	commit   uint64
	parked   map[string]int
	parkedOK bool // SetParked was called
}

func (l *fakeLoad) Own() peerapi.LoadReport { return l.own }
func (l *fakeLoad) Record(r peerapi.LoadReport) {
	l.mu.Lock()
	l.recorded = append(l.recorded, r)
	l.mu.Unlock()
}
func (l *fakeLoad) ParkedShare(id string) map[string]int { return l.shares[id] }
func (l *fakeLoad) SetLeaderCommit(i uint64)             { l.commit = i }
func (l *fakeLoad) SetParked(p map[string]int)           { l.parked, l.parkedOK = p, true }

func (r *fakeRaft) LeadershipTransfer() raft.Future {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.changes = append(r.changes, "transfer")
	return future{}
}

func (r *fakeRaft) LeadershipTransferToServer(id raft.ServerID, _ raft.ServerAddress) raft.Future {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.changes = append(r.changes, "transfer "+string(id))
	return future{}
}
