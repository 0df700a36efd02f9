package peerapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/axsched/ax/engine"
	"github.com/axsched/ax/internal/rawio"
	"github.com/axsched/ax/ipc"
	"github.com/axsched/ax/raftfsm"
)

// The codes the application API has too are spelled as there.
func TestCodesMatchTheApplicationAPI(t *testing.T) {
	for _, c := range []struct{ peer, app string }{
		{CodeQueueFull, ipc.ErrQueueFull.Code},
		{CodeStorageUnavailable, ipc.ErrStorageUnavailable.Code},
		{CodeNotFound, ipc.ErrNotFound.Code},
		{CodeBadRequest, ipc.ErrInvalid.Code},
		{CodeInternal, ipc.ErrInternal.Code},
	} {
		if c.peer != c.app {
			t.Errorf("peer code %q, application API %q", c.peer, c.app)
		}
	}
}

// fakeNode answers the peer API from fields.
type fakeNode struct {
	info     Info
	err      error // of Join, Propose, Remove, Members, Task
	results  []raftfsm.Result
	task     *raftfsm.Task
	members  map[string]MemberStatus
	reported []LoadReport
	deadline time.Duration // Propose's context's time left
	strong   bool          // Task's last strong
}

func (f *fakeNode) Info() Info                                { return f.info }
func (f *fakeNode) Join(context.Context, Info) error          { return f.err }
func (f *fakeNode) Remove(context.Context, string) error      { return f.err }
func (f *fakeNode) Members() (map[string]MemberStatus, error) { return f.members, f.err }
func (f *fakeNode) Report(r LoadReport) ReportReply {
	f.reported = append(f.reported, r)
	return ReportReply{CommitIndex: 9, Parked: map[string]int{"h": 2}}
}
func (f *fakeNode) Propose(ctx context.Context, cmds []raftfsm.Command) ([]raftfsm.Result, error) {
	d, _ := ctx.Deadline()
	f.deadline = time.Until(d)
	if f.err != nil {
		return nil, f.err
	}
	return f.results[:len(cmds)], nil
}
func (f *fakeNode) Task(_ context.Context, id string, strong bool) (*raftfsm.Task, uint64, error) {
	f.strong = strong
	if f.err != nil {
		return nil, 0, f.err
	}
	if f.task == nil || f.task.ID != id {
		return nil, 0, raftfsm.ErrNotFound
	}
	return f.task, 5, nil
}

func serve(t *testing.T, cfg ServerConfig) string {
	t.Helper()
	s := NewServer(cfg)
	if err := s.Listen("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s.Addr()
}

func TestClientServer(t *testing.T) {
	f := &fakeNode{info: Info{ID: "n1", RaftAddr: "r1:1", PeerAddr: "p1:2", LeaderID: "n1", InCluster: true, CommitIndex: 3},
		results: []raftfsm.Result{{Index: 4}, {Index: 4}},
		task:    &raftfsm.Task{ID: "t1"},
		members: map[string]MemberStatus{"n1": {Reachable: true, Status: "leader", Healthy: true}}}
	addr := serve(t, ServerConfig{Node: f})
	c := NewClient("", nil)
	ctx := context.Background()

	pi, err := c.Info(ctx, addr)
	if err != nil || pi != f.info {
		t.Fatalf("info: %+v %v", pi, err)
	}
	if c.Known("n1", "") != "p1:2" || c.Known("", "r1:1") != "p1:2" || c.Known("n2", "r2:1") != "" {
		t.Errorf("Info did not learn the addresses")
	}
	if pi, err := c.Join(ctx, addr, Info{ID: "n2", RaftAddr: "r2:1"}); err != nil || pi.ID != "n1" {
		t.Errorf("join: %+v %v", pi, err)
	}
	var bad *Error
	if _, err := c.Join(ctx, addr, Info{ID: "n2"}); !errors.As(err, &bad) || bad.Code != CodeBadRequest || bad.Status != 400 {
		t.Errorf("join without raft_addr: %v", err)
	}
	res, err := c.Propose(ctx, addr, []raftfsm.Command{{Type: raftfsm.CmdCancel}, {Type: raftfsm.CmdCancel}})
	if err != nil || len(res) != 2 || res[0].Index != 4 {
		t.Errorf("propose: %+v %v", res, err)
	}
	rr, err := c.Report(ctx, addr, LoadReport{ID: "n2", InFlight: 3, Executors: []ExecutorLoad{{Name: "x", Handlers: []string{"h.*"}}}})
	if err != nil || rr.CommitIndex != 9 || rr.Parked["h"] != 2 || len(f.reported) != 1 || f.reported[0].InFlight != 3 || !f.reported[0].Executors[0].Runs("h.a") {
		t.Errorf("report: %+v %v %+v", rr, err, f.reported)
	}
	if _, err := c.Report(ctx, addr, LoadReport{}); !errors.Is(err, ErrBadRequest) {
		t.Errorf("report without id: %v", err)
	}
	m, err := c.Members(ctx, addr)
	if err != nil || !m["n1"].Healthy || m["n1"].Status != "leader" {
		t.Errorf("members: %+v %v", m, err)
	}
	if err := c.Remove(ctx, addr, "n2"); err != nil {
		t.Errorf("remove: %v", err)
	}
	if tk, err := c.Task(ctx, addr, "t1"); err != nil || tk == nil || tk.ID != "t1" || f.strong {
		t.Errorf("task: %+v %v", tk, err)
	}
	if tk, applied, err := c.TaskAt(ctx, addr, "t1"); err != nil || tk == nil || tk.ID != "t1" || applied != 5 {
		t.Errorf("task with the applied index: %+v %d %v, want t1 at 5", tk, applied, err)
	}
	if tk, applied, err := c.TaskAt(ctx, addr, "nope"); err != nil || tk != nil || applied != 0 {
		t.Errorf("missing task with the applied index: %+v %d %v, want nil, 0, nil", tk, applied, err)
	}
	if tk, err := c.StrongTask(ctx, addr, "t1"); err != nil || tk == nil || !f.strong {
		t.Errorf("strong task: %+v %v", tk, err)
	}
	if tk, err := c.Task(ctx, addr, "nope"); err != nil || tk != nil {
		t.Errorf("missing task: %+v %v, want nil, nil", tk, err)
	}
	if st, _, err := c.Do(ctx, "GET", addr, "/peer/v1/nope", "", nil); err != nil || st != 404 {
		t.Errorf("unknown route: %d %v", st, err)
	}
}

// With hold functions, the server's accepted connections and the
// client's dialled ones read and write raw (rawio) and the calls work as
// over plain ones; the client's dial keeps the request's own time-out
// (fasthttp's DialTimeout hook, not Dial, which would ignore it), and a
// client without a hold function keeps fasthttp's default dial.
func TestClientServerOverRawConnections(t *testing.T) {
	var served, dialled atomic.Int64
	f := &fakeNode{info: Info{ID: "n1", RaftAddr: "r1:1", PeerAddr: "p1:2"}, results: []raftfsm.Result{{Index: 4}}}
	addr := serve(t, ServerConfig{Node: f, Hold: func() bool { served.Add(1); return true }})
	c := NewClient("", nil)
	if c.c.Dial != nil || c.c.DialTimeout != nil {
		t.Fatal("a client without a hold function does not use fasthttp's default dial")
	}
	c.SetHold(func() bool { dialled.Add(1); return true })
	if c.c.Dial != nil || c.c.DialTimeout == nil {
		t.Fatal("with a hold function the dial is not the time-out-taking hook")
	}
	conn, err := c.dialTCP(addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := conn.(*rawio.Conn); !ok {
		t.Fatalf("dialTCP returned %T, want *rawio.Conn", conn)
	}
	conn.Close()
	ctx := context.Background()
	for range 3 {
		if pi, err := c.Info(ctx, addr); err != nil || pi != f.info {
			t.Fatalf("info: %+v %v", pi, err)
		}
		if res, err := c.Propose(ctx, addr, []raftfsm.Command{{Type: raftfsm.CmdCancel}}); err != nil || len(res) != 1 || res[0].Index != 4 {
			t.Fatalf("propose: %+v %v", res, err)
		}
	}
	if served.Load() == 0 || dialled.Load() == 0 {
		t.Fatalf("hold asked %d times on the server's connections, %d on the client's; want both", served.Load(), dialled.Load())
	}
}

// Every error answer carries its code, and the client returns it as an
// *Error that errors.Is matches by code, with the detail of its code.
func TestErrorsCarryCodes(t *testing.T) {
	f := &fakeNode{}
	addr := serve(t, ServerConfig{Node: f})
	c := NewClient("", nil)
	ctx := context.Background()
	cmds := []raftfsm.Command{{Type: raftfsm.CmdCancel}}

	for _, tc := range []struct {
		err    error
		want   *Error
		status int
	}{
		{ErrNotLeader, ErrNotLeader, 421},
		{fmt.Errorf("propose: %w", &Error{Code: CodeQueueFull, Message: "full", Handler: "h", Depth: 7, Limit: 5}), ErrQueueFull, 429},
		{&Error{Code: CodeStorageUnavailable, Message: "disk full", Cause: "disk full", SinceMs: 1234}, ErrStorageUnavailable, 503},
		{errors.New("raft: leadership lost"), ErrUnavailable, 503},
	} {
		f.err = tc.err
		_, err := c.Propose(ctx, addr, cmds)
		var e *Error
		if !errors.Is(err, tc.want) || !errors.As(err, &e) || e.Status != tc.status || !strings.Contains(err.Error(), tc.err.Error()) {
			t.Errorf("%v: got %v, want code %s status %d", tc.err, err, tc.want.Code, tc.status)
			continue
		}
		switch e.Code {
		case CodeQueueFull:
			if e.Handler != "h" || e.Depth != 7 || e.Limit != 5 {
				t.Errorf("queue_full detail: %+v", e)
			}
		case CodeStorageUnavailable:
			if e.Cause != "disk full" || e.SinceMs != 1234 {
				t.Errorf("storage_unavailable detail: %+v", e)
			}
		}
	}
	f.err = fmt.Errorf("%w: %q", ErrNoSuchMember, "n9")
	if err := c.Remove(ctx, addr, "n9"); !errors.Is(err, ErrNoSuchMember) || !strings.Contains(err.Error(), "no such member") {
		t.Errorf("remove unknown: %v", err)
	}
	f.err = fmt.Errorf("%w: %q is the last voter", ErrLastVoter, "n1")
	if err := c.Remove(ctx, addr, "n1"); !errors.Is(err, ErrLastVoter) || !strings.Contains(err.Error(), "last voter") {
		t.Errorf("remove last voter: %v", err)
	}
	f.err = ErrNotLeader
	if _, err := c.Members(ctx, addr); !errors.Is(err, ErrNotLeader) {
		t.Errorf("members on a follower: %v", err)
	}
	f.err = errors.New("badger: closed")
	if _, err := c.Task(ctx, addr, "t"); !errors.Is(err, ErrInternal) {
		t.Errorf("task read failure: %v", err)
	}
}

// An older node answers errors as bare text with a status (and a 429
// with the backlog at the top level); the client still finds the code.
func TestClientReadsOlderNodesErrors(t *testing.T) {
	answers := map[string]struct {
		status int
		body   string
	}{
		PathPropose: {429, `{"handler":"h","depth":7,"limit":5}`},
		PathRemove:  {404, `{"error":"no such member: \"n9\""}`},
		PathMembers: {421, `{"error":"not the leader"}`},
		PathJoin:    {503, `{"error":"no leader"}`},
		PathTask:    {404, `{"error":"task not found"}`},
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a := answers[r.URL.Path]
		w.WriteHeader(a.status)
		w.Write([]byte(a.body))
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	c := NewClient("", nil)
	ctx := context.Background()
	var e *Error
	if _, err := c.Propose(ctx, addr, []raftfsm.Command{{Type: raftfsm.CmdCancel}}); !errors.As(err, &e) || e.Code != CodeQueueFull || e.Depth != 7 || e.Limit != 5 || e.Handler != "h" {
		t.Errorf("old 429: %v %+v", err, e)
	}
	if err := c.Remove(ctx, addr, "n9"); !errors.Is(err, ErrNoSuchMember) || !strings.Contains(err.Error(), "no such member") {
		t.Errorf("old 404 remove: %v", err)
	}
	if _, err := c.Members(ctx, addr); !errors.Is(err, ErrNotLeader) {
		t.Errorf("old 421: %v", err)
	}
	if _, err := c.Join(ctx, addr, Info{ID: "a", RaftAddr: "b"}); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "no leader") {
		t.Errorf("old 503: %v", err)
	}
	if tk, err := c.Task(ctx, addr, "t"); tk != nil || err != nil {
		t.Errorf("old 404 task: %v %v", tk, err)
	}
}

// With a cluster token, a request without it is refused 401; the
// client sends its own.
func TestClusterToken(t *testing.T) {
	addr := serve(t, ServerConfig{Node: &fakeNode{info: Info{ID: "n1"}}, Token: "s3cret"})
	if _, err := NewClient("", nil).Info(context.Background(), addr); !errors.Is(err, ErrUnauthorized) {
		t.Errorf("without token: %v", err)
	}
	if _, err := NewClient("wrong", nil).Info(context.Background(), addr); !errors.Is(err, ErrUnauthorized) {
		t.Errorf("wrong token: %v", err)
	}
	if pi, err := NewClient("s3cret", nil).Info(context.Background(), addr); err != nil || pi.ID != "n1" {
		t.Errorf("with token: %+v %v", pi, err)
	}
}

// The server bounds a proposal by nine tenths of the time the caller
// has left, and by Timeout.
func TestServerKeepsTheCallersDeadline(t *testing.T) {
	f := &fakeNode{results: []raftfsm.Result{{}}}
	clock := engine.NewFakeClock(time.Now())
	addr := serve(t, ServerConfig{Node: f})
	c := NewClient("", clock.Now)
	cmds := []raftfsm.Command{{Type: raftfsm.CmdCancel}}
	ctx, cancel := context.WithDeadline(context.Background(), clock.Now().Add(2*time.Second))
	defer cancel()
	if _, err := c.Propose(ctx, addr, cmds); err != nil {
		t.Fatal(err)
	}
	if f.deadline > 1800*time.Millisecond || f.deadline < 1000*time.Millisecond {
		t.Errorf("with 2s left the leader had %v, want at most 1.8s", f.deadline)
	}
	if _, err := c.Propose(context.Background(), addr, cmds); err != nil {
		t.Fatal(err)
	}
	if f.deadline > Timeout || f.deadline < Timeout-time.Second {
		t.Errorf("without a deadline the leader had %v, want Timeout", f.deadline)
	}
}

// The deadline header is the caller's time left in whole milliseconds.
func TestClientSendsItsDeadline(t *testing.T) {
	got := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Get(DeadlineHeader)
		w.WriteHeader(200)
		w.Write([]byte(`{}`))
	}))
	defer srv.Close()
	clock := engine.NewFakeClock(time.Now())
	ctx, cancel := context.WithDeadline(context.Background(), clock.Now().Add(1500*time.Millisecond))
	defer cancel()
	if _, err := NewClient("", clock.Now).Info(ctx, strings.TrimPrefix(srv.URL, "http://")); err != nil {
		t.Fatal(err)
	}
	if ms, err := strconv.Atoi(<-got); err != nil || ms != 1500 {
		t.Errorf("%s: %d %v, want 1500", DeadlineHeader, ms, err)
	}
}

// A peer call to a node that accepts but never answers ends when its
// context does.
func TestDoEndsWithContext(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, _, err := NewClient("", nil).Do(ctx, "POST", ln.Addr().String(), PathPropose, "application/msgpack", []byte{0x90})
		errc <- err
	}()
	c := <-accepted
	defer c.Close()
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("peer call ended with %v, want context.Canceled", err)
	}
}

// A queue_full answer keeps the backlog at the top level too, where a
// node from before the codes reads it (its BacklogError).
func TestQueueFullReadableByOlderNodes(t *testing.T) {
	f := &fakeNode{err: &Error{Code: CodeQueueFull, Message: "full", Handler: "h", Depth: 7, Limit: 5}}
	addr := serve(t, ServerConfig{Node: f})
	data, _ := raftfsm.EncodeEntry([]raftfsm.Command{{Type: raftfsm.CmdCancel}})
	status, body, err := NewClient("", nil).Do(context.Background(), "POST", addr, PathPropose, "application/octet-stream", data)
	var old struct {
		Handler      string
		Depth, Limit int
	}
	if err != nil || status != 429 || json.Unmarshal(body, &old) != nil || old.Handler != "h" || old.Depth != 7 || old.Limit != 5 {
		t.Errorf("%d %s %v", status, body, err)
	}
}

// A call to a port nobody listens on never reached the peer; one that
// timed out waiting for an answer may have.
func TestDialFailed(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, _, err = NewClient("", nil).Do(context.Background(), "GET", addr, PathInfo, "", nil)
	if err == nil || !DialFailed(err) {
		t.Errorf("closed port: %v, want a dial failure", err)
	}
	for _, err := range []error{context.DeadlineExceeded, errors.New("EOF"), ErrUnavailable} {
		if DialFailed(err) {
			t.Errorf("%v counted as never delivered", err)
		}
	}
}
