package api

import (
	"context"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"

	"github.com/axsched/ax/engine"
	"github.com/axsched/ax/internal/fsmtest"
	"github.com/axsched/ax/ipc"
	"github.com/axsched/ax/raftfsm"
	"github.com/axsched/ax/sidecar/peerapi"
)

// env is a backend over fakes of the node's parts and a real FSM.
type env struct {
	t     *testing.T
	b     *Backend
	fsm   *raftfsm.FSM
	index uint64
	clock *engine.FakeClock
	prop  *fakeProposer
	raft  *fakeRaft
	sched *fakeScheduler
	mem   *fakeMembership
	peers *fakePeers
	purge *fakePurger
	route string
}

func newEnv(t *testing.T) *env {
	e := &env{t: t, fsm: fsmtest.Open(t), clock: engine.NewFakeClock(time.UnixMilli(1_700_000_000_000)),
		prop: &fakeProposer{}, raft: &fakeRaft{state: raft.Leader, id: "a"}, sched: &fakeScheduler{leading: true},
		mem: &fakeMembership{registered: true, caughtUp: true}, peers: &fakePeers{}, purge: &fakePurger{}}
	e.b = New(Config{NodeID: "a", Voters: 3, MaxBatchCommands: 2}, Deps{
		Proposer: e.prop, Store: e.fsm, Raft: e.raft, Scheduler: e.sched, Purger: e.purge, Membership: e.mem,
		Routes: fakeRoutes{e}, Peers: e.peers, Storage: fakeStorage{}, Limits: fakeLimits{}, Clock: e.clock, Log: zerolog.Nop(),
	})
	return e
}

// apply commits cmds to the FSM as the next entry.
func (e *env) apply(cmds ...raftfsm.Command) []raftfsm.Result {
	e.t.Helper()
	e.index++
	return fsmtest.Apply(e.t, e.fsm, e.index, cmds...)
}

// submit stores task id of handler h, due at once.
func (e *env) submit(id, h string) *raftfsm.Task {
	e.t.Helper()
	now := e.clock.Now().UnixMilli()
	r := e.apply(raftfsm.Command{Type: raftfsm.CmdSubmit, Submit: &raftfsm.Submit{ID: id, AtMs: now, DueMs: now,
		Spec: raftfsm.Spec{Handler: h, TimeoutNs: int64(time.Minute), MaxAttempts: 3}}})
	if r[0].Code != raftfsm.CodeOK {
		e.t.Fatalf("submit %s: %+v", id, r[0])
	}
	return r[0].Task
}

func codeOf(err error) string {
	_, c, _, _ := ipc.MapError(err)
	return c
}

type fakeProposer struct {
	cmds [][]raftfsm.Command
	res  []raftfsm.Result
	err  error
}

func (p *fakeProposer) Propose(_ context.Context, cmds []raftfsm.Command) ([]raftfsm.Result, error) {
	p.cmds = append(p.cmds, cmds)
	if p.err != nil {
		return nil, p.err
	}
	if p.res != nil {
		return p.res, nil
	}
	out := make([]raftfsm.Result, len(cmds))
	for i := range out {
		out[i] = raftfsm.Result{Code: raftfsm.CodeOK, Created: true}
	}
	return out, nil
}

func (p *fakeProposer) ProposeAPI(ctx context.Context, cmds []raftfsm.Command) ([]raftfsm.Result, error) {
	return p.Propose(ctx, cmds)
}

type fakeRaft struct {
	state     raft.RaftState
	id        raft.ServerID
	addr      raft.ServerAddress
	servers   []raft.Server
	verifyErr error
	commit    uint64
}

func (r *fakeRaft) State() raft.RaftState { return r.state }
func (r *fakeRaft) LeaderWithID() (raft.ServerAddress, raft.ServerID) {
	return r.addr, r.id
}
func (r *fakeRaft) Stats() map[string]string {
	return map[string]string{"term": "4", "commit_index": "9"}
}
func (r *fakeRaft) GetConfiguration() raft.ConfigurationFuture {
	return fakeConfig{raft.Configuration{Servers: r.servers}}
}
func (r *fakeRaft) VerifyLeader() raft.Future { return fakeFuture{r.verifyErr} }
func (r *fakeRaft) CommitIndex() uint64       { return r.commit }

type fakeFuture struct{ err error }

func (f fakeFuture) Error() error { return f.err }

type fakeConfig struct{ c raft.Configuration }

func (f fakeConfig) Error() error                      { return nil }
func (f fakeConfig) Index() uint64                     { return 0 }
func (f fakeConfig) Configuration() raft.Configuration { return f.c }

type fakeScheduler struct {
	leading bool
	waiting map[string]WaitingView
	parked  map[string]map[string]int
	open    []engine.BreakerStatus
	depth   int
	// nodeOpen: node → handler → until, the nodes' own circuits.
	nodeOpen map[string]map[string]time.Time
}

func (s *fakeScheduler) Leading() bool { return s.leading }
func (s *fakeScheduler) Waiting(ids []string) map[string]WaitingView {
	var out map[string]WaitingView
	for _, id := range ids {
		if w, ok := s.waiting[id]; ok {
			if out == nil {
				out = map[string]WaitingView{}
			}
			out[id] = w
		}
	}
	return out
}
func (s *fakeScheduler) ParkedByReason() map[string]map[string]int { return s.parked }
func (s *fakeScheduler) Circuits() []engine.BreakerStatus          { return s.open }
func (s *fakeScheduler) Depth(string) int                          { return s.depth }
func (s *fakeScheduler) NodeCircuit(node, handler string) (time.Time, bool) {
	u, ok := s.nodeOpen[node][handler]
	return u, ok
}

type fakePurger struct {
	calls [][]raftfsm.FinishedTask
	// purged is what each call returns (then len of the call).
	purged []int
	err    error
}

func (p *fakePurger) Purge(_ context.Context, fts []raftfsm.FinishedTask) (int, error) {
	p.calls = append(p.calls, fts)
	k := len(fts)
	if i := len(p.calls) - 1; i < len(p.purged) {
		k = p.purged[i]
	}
	if p.err != nil && len(p.calls) > 1 {
		return 0, p.err
	}
	return k, nil
}

type fakeMembership struct {
	registered, removed, caughtUp bool
	leaderCommit                  uint64
	members                       map[string]peerapi.MemberStatus
	slow                          bool // applying takes too long
	removeErr                     error
	noopTail                      uint64 // committed entries at the log's end the FSM does not apply
}

func (m *fakeMembership) Registered() bool     { return m.registered }
func (m *fakeMembership) Removed() bool        { return m.removed }
func (m *fakeMembership) CaughtUp() bool       { return m.caughtUp }
func (m *fakeMembership) LeaderCommit() uint64 { return m.leaderCommit }
func (m *fakeMembership) MemberStatuses() map[string]peerapi.MemberStatus {
	return m.members
}
func (m *fakeMembership) RemoveMember(context.Context, string) error { return m.removeErr }
func (m *fakeMembership) WaitApplied(context.Context, uint64, time.Duration) bool {
	return !m.slow
}
func (m *fakeMembership) StateIndex(upTo uint64) uint64 { return upTo - min(m.noopTail, upTo) }

type fakeRoutes struct{ e *env }

func (r fakeRoutes) LeaderPeerAddr() string { return r.e.route }
func (r fakeRoutes) PeerAddrOf(id, _ string) string {
	return id + ":7001"
}

// fakePeers answers the peer calls: task reads from tasks, members, and
// Do by serving the request with the leader backend's routes.
type fakePeers struct {
	tasks   map[string]*raftfsm.Task
	applied uint64 // TaskAt's applied index of the leader
	strong  error
	members map[string]peerapi.MemberStatus
	leader  *Backend
	calls   int
}

func (p *fakePeers) Task(_ context.Context, _, id string) (*raftfsm.Task, error) {
	p.calls++
	return p.tasks[id], nil
}
func (p *fakePeers) TaskAt(_ context.Context, _, id string) (*raftfsm.Task, uint64, error) {
	p.calls++
	if p.tasks[id] == nil {
		return nil, 0, nil
	}
	return p.tasks[id], p.applied, nil
}
func (p *fakePeers) StrongTask(_ context.Context, _, id string) (*raftfsm.Task, error) {
	p.calls++
	return p.tasks[id], p.strong
}
func (p *fakePeers) Members(context.Context, string) (map[string]peerapi.MemberStatus, error) {
	return p.members, nil
}
func (p *fakePeers) Do(_ context.Context, method, _, path, ctype string, body []byte) (int, []byte, error) {
	p.calls++
	var ctx fasthttp.RequestCtx
	ctx.Request.Header.SetMethod(method)
	ctx.Request.SetRequestURI(path)
	ctx.Request.Header.SetContentType(ctype)
	ctx.Request.SetBody(body)
	p.leader.PeerRoutes()[path](&ctx)
	return ctx.Response.StatusCode(), append([]byte(nil), ctx.Response.Body()...), nil
}

type fakeStorage struct{}

func (fakeStorage) Status() *ipc.StorageStatus { return nil }

type fakeLimits struct{}

func (fakeLimits) LimitOf(*raftfsm.Executor) int { return 7 }
