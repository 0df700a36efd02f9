package api

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/axsched/ax/engine"
	"github.com/axsched/ax/ipc"
	"github.com/axsched/ax/raftfsm"
	"github.com/axsched/ax/sidecar/peerapi"
)

var ctx = context.Background()

// A submit becomes one Submit command with the spec's fields, and its
// result the task's view, a conflict, or an error.
func TestSubmitCommandAndResults(t *testing.T) {
	e := newEnv(t)
	runAt := time.UnixMilli(1_700_000_000_000).Add(1500 * time.Microsecond)
	spec := ipc.TaskSpec{ID: "a", Handler: "h", Delay: time.Second, Priority: 2, Timeout: time.Minute, MaxAttempts: 4,
		RunAt: runAt, Until: runAt.Add(time.Hour), Every: time.Minute, Repeats: 3, RouteKey: "k", Retention: time.Hour,
		Backoff: &ipc.BackoffSpec{Initial: time.Second, Max: time.Minute, Multiplier: 2, Jitter: 0.1}}
	task := &raftfsm.Task{ID: "a", State: raftfsm.StateWaiting, Spec: raftfsm.Spec{Handler: "h"}}
	e.prop.res = []raftfsm.Result{{Code: raftfsm.CodeOK, Task: task, Created: true, Warning: "backlog"}}
	v, created, err := e.b.Submit(ctx, spec)
	if err != nil || !created || v.ID != "a" || v.BacklogWarning != "backlog" {
		t.Fatalf("submit: %+v %v %v", v, created, err)
	}
	s := e.prop.cmds[0][0].Submit
	if s.Spec.RunAtMs != 1_700_000_000_002 || s.Spec.UntilMs != runAt.Add(time.Hour).UnixMilli() || s.Spec.EveryNs != int64(time.Minute) ||
		s.Spec.Backoff == nil || s.Spec.Backoff.MaxNs != int64(time.Minute) || s.Spec.RetentionNs != int64(time.Hour) || s.Spec.RouteKey != "k" {
		t.Fatalf("submit command %+v", s.Spec)
	}
	e.prop.res = []raftfsm.Result{{Code: raftfsm.CodeConflict, Task: task}}
	if _, _, err := e.b.Submit(ctx, spec); codeOf(err) != "conflict" {
		t.Fatalf("conflict: %v", err)
	}
	e.prop.res = []raftfsm.Result{{Code: raftfsm.CodeStale}}
	if _, _, err := e.b.Submit(ctx, spec); err == nil || codeOf(err) == "conflict" {
		t.Fatalf("unexpected result: %v", err)
	}
	e.prop.err = ipc.Errorf(ipc.ErrNoLeader, "no leader")
	if _, _, err := e.b.Submit(ctx, spec); codeOf(err) != "no_leader" {
		t.Fatalf("proposer error: %v", err)
	}
	if _, err := e.b.SubmitBatch(ctx, []ipc.TaskSpec{spec}, false); codeOf(err) != "no_leader" {
		t.Fatalf("batch, proposer error: %v", err)
	}
}

// A batch is one proposal; each item carries its task or its error.
func TestSubmitBatchItems(t *testing.T) {
	e := newEnv(t)
	task := &raftfsm.Task{ID: "a", State: raftfsm.StateWaiting}
	e.prop.res = []raftfsm.Result{{Code: raftfsm.CodeOK, Task: task, Created: true}, {Code: raftfsm.CodeConflict, Task: task}, {Code: raftfsm.CodeStale}}
	items, err := e.b.SubmitBatch(ctx, []ipc.TaskSpec{{ID: "a"}, {ID: "b"}, {ID: "c"}}, false)
	if err != nil || len(e.prop.cmds) != 1 || len(e.prop.cmds[0]) != 3 {
		t.Fatalf("batch: %v, %d proposals", err, len(e.prop.cmds))
	}
	if items[0].Err != nil || !items[0].Created || codeOf(items[1].Err) != "conflict" || items[2].Err == nil {
		t.Fatalf("items %+v", items)
	}
	if items[0].Task.CreatedAt.IsZero() || items[0].Task.Timeout == "" {
		t.Fatalf("full view without its times: %+v", items[0].Task)
	}
}

// With minimal, a created or existing item's task carries its id, state
// and backlog warning only; errors are as without.
func TestSubmitBatchMinimal(t *testing.T) {
	e := newEnv(t)
	task := &raftfsm.Task{ID: "a", State: raftfsm.StateWaiting, Spec: raftfsm.Spec{Handler: "h", TimeoutNs: 1e9}, CreatedMs: 1000}
	e.prop.res = []raftfsm.Result{{Code: raftfsm.CodeOK, Task: task, Created: true, Warning: "80/100"}, {Code: raftfsm.CodeConflict, Task: task}}
	items, err := e.b.SubmitBatch(ctx, []ipc.TaskSpec{{ID: "a"}, {ID: "b"}}, true)
	if err != nil || len(items) != 2 {
		t.Fatalf("batch: %v, %d items", err, len(items))
	}
	want := ipc.Task{ID: "a", State: "WAITING", BacklogWarning: "80/100"}
	if !items[0].Created || !reflect.DeepEqual(items[0].Task, want) {
		t.Fatalf("minimal item %+v, want %+v created", items[0], want)
	}
	if codeOf(items[1].Err) != "conflict" {
		t.Fatalf("conflict item: %+v", items[1])
	}
}

// The writes about one task map the FSM's codes to the API's.
func TestOneTaskCodes(t *testing.T) {
	e := newEnv(t)
	running := &raftfsm.Task{ID: "a", State: raftfsm.StateRunning, Attempts: 2}
	for _, tc := range []struct {
		res  raftfsm.Result
		code string
		msg  string
	}{
		{raftfsm.Result{Code: raftfsm.CodeOK, Task: running}, "", ""},
		{raftfsm.Result{Code: raftfsm.CodeNotFound}, "not_found", "not found"},
		{raftfsm.Result{Code: raftfsm.CodeState, Task: running}, "conflict", "only DEAD or FAILED"},
		{raftfsm.Result{Code: raftfsm.CodeStale, Task: running}, "conflict", "running attempt 2"},
		{raftfsm.Result{Code: raftfsm.CodeStale, Task: &raftfsm.Task{State: raftfsm.StateWaiting}}, "conflict", "not running"},
		{raftfsm.Result{Code: raftfsm.CodeConflict}, "internal", "unexpected result"},
	} {
		e.prop.res = []raftfsm.Result{tc.res}
		for name, call := range map[string]func() (ipc.Task, error){
			"cancel":    func() (ipc.Task, error) { return e.b.Cancel(ctx, "a") },
			"retry":     func() (ipc.Task, error) { return e.b.Retry(ctx, "a") },
			"heartbeat": func() (ipc.Task, error) { return e.b.Heartbeat(ctx, "a", 2) },
			"result": func() (ipc.Task, error) {
				return e.b.ReportResult(ctx, "a", ipc.AttemptResult{Attempt: 2, Status: "success"})
			},
		} {
			v, err := call()
			if tc.code == "" {
				if err != nil || v.State != "RUNNING" {
					t.Fatalf("%s: %+v %v", name, v, err)
				}
				continue
			}
			if got := codeOf(err); got != tc.code || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("%s of %v: %v (%s), want %s %q", name, tc.res.Code, err, got, tc.code, tc.msg)
			}
		}
	}
	e.prop.res = nil
	e.prop.cmds = nil
	for status, want := range map[string]raftfsm.Outcome{"success": raftfsm.OutcomeSuccess, "failed": raftfsm.OutcomeRetryable, "permanent": raftfsm.OutcomePermanent} {
		e.prop.res = []raftfsm.Result{{Code: raftfsm.CodeOK, Task: running}}
		if _, err := e.b.ReportResult(ctx, "a", ipc.AttemptResult{Attempt: 2, Status: status}); err != nil {
			t.Fatal(err)
		}
		c := e.prop.cmds[len(e.prop.cmds)-1][0].Complete
		if c.Outcome != want || (status != "success" && c.Error == "") {
			t.Fatalf("%s: %+v", status, c)
		}
	}
	if _, err := e.b.ReportResult(ctx, "a", ipc.AttemptResult{Status: "maybe"}); codeOf(err) != "bad_request" {
		t.Fatalf("unknown status: %v", err)
	}
	e.prop.err = errors.New("disk")
	if _, err := e.b.Cancel(ctx, "a"); err == nil {
		t.Fatal("the proposer's error was lost")
	}
}

// List pages through the local store in id order, with a cursor; bad
// cursors and states are refused.
func TestListPages(t *testing.T) {
	e := newEnv(t)
	for _, id := range []string{"a", "b", "c"} {
		e.submit(id, "h")
	}
	page, err := e.b.List(ctx, ipc.ListQuery{Limit: 2})
	if err != nil || len(page.Tasks) != 2 || page.Tasks[0].ID != "a" || page.NextCursor == "" {
		t.Fatalf("first page %+v %v", page, err)
	}
	page, err = e.b.List(ctx, ipc.ListQuery{Limit: 2, Cursor: page.NextCursor, State: "WAITING"})
	if err != nil || len(page.Tasks) != 1 || page.Tasks[0].ID != "c" || page.NextCursor != "" {
		t.Fatalf("second page %+v %v", page, err)
	}
	if _, err := e.b.List(ctx, ipc.ListQuery{Cursor: "!!"}); codeOf(err) != "bad_request" {
		t.Fatalf("bad cursor: %v", err)
	}
	if _, err := e.b.List(ctx, ipc.ListQuery{State: "NAPPING"}); codeOf(err) != "bad_request" {
		t.Fatalf("bad state: %v", err)
	}
	if page, err := e.b.List(ctx, ipc.ListQuery{}); err != nil || len(page.Tasks) != 3 {
		t.Fatalf("default limit: %+v %v", page, err)
	}
}

// TestListCursorNotATaskID: a cursor is a task id in base64url, so one
// that is valid base64url but decodes to something no task id can be
// (bytes that are not UTF-8, control characters) did not come from a
// page: it is 400 bad_request. It was taken as the place to go on from,
// and "garbage" (bytes 0x81 0xaa ...: after every id) answered an empty
// last page, 200, as if the list had ended.
func TestListCursorNotATaskID(t *testing.T) {
	e := newEnv(t)
	for _, id := range []string{"a", "b", "ü/x"} {
		e.submit(id, "h")
	}
	for _, c := range []string{"garbage", "xyz", "____", "AAAA"} {
		page, err := e.b.List(ctx, ipc.ListQuery{Cursor: c})
		if codeOf(err) != "bad_request" {
			t.Errorf("cursor %q: %d tasks, next %q, err %v; want bad_request", c, len(page.Tasks), page.NextCursor, err)
		}
	}
	// Every cursor a page gives is taken.
	var ids []string
	q := ipc.ListQuery{Limit: 1}
	for {
		page, err := e.b.List(ctx, q)
		if err != nil {
			t.Fatalf("cursor %q: %v", q.Cursor, err)
		}
		for _, v := range page.Tasks {
			ids = append(ids, v.ID)
		}
		if page.NextCursor == "" {
			break
		}
		q.Cursor = page.NextCursor
	}
	if len(ids) != 3 || ids[2] != "ü/x" {
		t.Fatalf("pages gave %q", ids)
	}
	if page, err := e.b.List(ctx, ipc.ListQuery{}); err != nil || len(page.Tasks) != 3 {
		t.Fatalf("default limit: %+v %v", page, err)
	}
}

// A follower reads the leader's copy of a task it lacks or may have old;
// a strong read goes through the leader, which checks its leadership and
// waits to apply its commit index.
func TestTaskReads(t *testing.T) {
	e := newEnv(t)
	e.submit("a", "h")
	if v, err := e.b.Task(ctx, "a"); err != nil || v.ID != "a" || e.peers.calls != 0 {
		t.Fatalf("leader's local read: %+v %v (%d peer calls)", v, err, e.peers.calls)
	}
	if _, err := e.b.Task(ctx, "ghost"); codeOf(err) != "not_found" {
		t.Fatalf("missing task: %v", err)
	}
	// A lagging follower.
	e.raft.state, e.mem.caughtUp, e.route = raft.Follower, false, "leader:7001"
	e.peers.tasks = map[string]*raftfsm.Task{"a": {ID: "a", State: raftfsm.StateSuccess}}
	if v, err := e.b.Task(ctx, "a"); err != nil || v.State != "SUCCESS" {
		t.Fatalf("lagging follower's read: %+v %v", v, err)
	}
	if _, err := e.b.Task(ctx, "ghost"); codeOf(err) != "not_found" {
		t.Fatalf("missing on the leader: %v", err)
	}
	strong := ipc.WithStrongRead(ctx)
	if v, err := e.b.Task(strong, "a"); err != nil || v.State != "SUCCESS" {
		t.Fatalf("strong read through the leader: %+v %v", v, err)
	}
	if _, err := e.b.Task(strong, "ghost"); codeOf(err) != "not_found" {
		t.Fatalf("strong read of a missing task: %v", err)
	}
	e.peers.strong = errors.New("timeout")
	if _, err := e.b.Task(strong, "a"); codeOf(err) != "no_leader" {
		t.Fatalf("strong read, leader unreachable: %v", err)
	}
	e.route = ""
	if _, err := e.b.Task(strong, "a"); codeOf(err) != "no_leader" {
		t.Fatalf("strong read, no leader: %v", err)
	}
	// On the leader.
	e.raft.state = raft.Leader
	if v, err := e.b.Task(strong, "a"); err != nil || v.State != "WAITING" {
		t.Fatalf("leader's strong read: %+v %v", v, err)
	}
	if _, err := e.b.Task(strong, "ghost"); codeOf(err) != "not_found" {
		t.Fatalf("leader's strong read of a missing task: %v", err)
	}
	e.mem.slow = true
	if _, err := e.b.Task(strong, "a"); codeOf(err) != "not_ready" {
		t.Fatalf("applying too slow: %v", err)
	}
	e.raft.verifyErr = raft.ErrNotLeader
	if _, err := e.b.Task(strong, "a"); codeOf(err) != "no_leader" {
		t.Fatalf("deposed: %v", err)
	}
	e.sched.leading = false
	if _, err := e.b.LeaderRead(ctx, "a"); codeOf(err) != "no_leader" || !strings.Contains(err.Error(), "barrier") {
		t.Fatalf("before the barrier: %v", err)
	}
}

// Readiness says why a node is not ready, in order.
func TestReady(t *testing.T) {
	e := newEnv(t)
	if err := e.b.Ready(ctx); err != nil {
		t.Fatalf("leading leader: %v", err)
	}
	for _, tc := range []struct {
		set  func()
		want string
	}{
		{func() { e.sched.leading = false }, "leader is starting"},
		{func() { e.raft.state = raft.Follower; e.mem.caughtUp = false; e.mem.leaderCommit = 9 }, "catching up: applied 0 of the leader's 9"},
		{func() { e.mem.registered = false }, "not registered"},
		{func() { e.raft.id = "" }, "no leader known"},
		{func() { e.mem.removed = true }, "removed from the cluster"},
	} {
		tc.set()
		if err := e.b.Ready(ctx); codeOf(err) != "not_ready" || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%v, want not_ready %q", err, tc.want)
		}
	}
	e.raft.id, e.mem.removed, e.mem.registered, e.mem.caughtUp = "a", false, true, true
	if err := e.b.Ready(ctx); err != nil {
		t.Fatalf("caught-up follower: %v", err)
	}
}

// GET /v1/cluster: the members from Raft's configuration with the
// leader's view of them, and the failure tolerance.
func TestClusterInfo(t *testing.T) {
	e := newEnv(t)
	e.raft.addr = "a:7000"
	e.raft.servers = []raft.Server{{ID: "a", Address: "a:7000", Suffrage: raft.Voter}, {ID: "b", Address: "b:7000", Suffrage: raft.Voter},
		{ID: "c", Address: "c:7000", Suffrage: raft.Voter}, {ID: "d", Address: "d:7000", Suffrage: raft.Nonvoter}}
	e.mem.members = map[string]peerapi.MemberStatus{"a": {Reachable: true, Healthy: true}, "b": {Reachable: true, LastContactMs: 20, StableSinceMs: 1_700_000_000_000}}
	e.mem.noopTail = 2 // a new leader's no-op and barrier
	info, err := e.b.Cluster(ctx)
	if err != nil || info.Term != 4 || info.CommitIndex != 9 || info.VotersTarget != 3 || len(info.Members) != 4 {
		t.Fatalf("cluster %+v %v", info, err)
	}
	if info.StateIndex != 7 {
		t.Fatalf("state index %d, want 7: the commit index 9 less the two entries the FSM does not apply", info.StateIndex)
	}
	a, b, c := info.Members[0], info.Members[1], info.Members[2]
	if !a.Leader || b.Leader || a.PeerAddr != "a:7001" || *b.LastContactMs != 20 || *c.LastContactMs != -1 || *c.Reachable || b.StableSince == nil {
		t.Fatalf("members %+v", info.Members)
	}
	if info.FailureTolerance == nil || *info.FailureTolerance != 0 {
		t.Fatalf("failure tolerance %v, want 0 (2 of 3 voters reachable)", info.FailureTolerance)
	}
	// A follower asks the leader; without an answer, no views.
	e.raft.state, e.route = raft.Follower, "leader:7001"
	e.peers.members = map[string]peerapi.MemberStatus{"a": {Reachable: true}, "b": {Reachable: true}, "c": {Reachable: true}}
	if info, _ := e.b.Cluster(ctx); info.FailureTolerance == nil || *info.FailureTolerance != 1 {
		t.Fatalf("follower's failure tolerance %v, want 1", info.FailureTolerance)
	}
	e.route = ""
	if info, _ := e.b.Cluster(ctx); info.FailureTolerance != nil || info.Members[0].Reachable != nil {
		t.Fatalf("without the leader's view: %+v", info)
	}
}

// Executors: registration validates the timeout and waits for this
// node's record; the list is the node's record's.
func TestExecutors(t *testing.T) {
	e := newEnv(t)
	if _, _, err := e.b.RegisterExecutor(ctx, ipc.ExecutorSpec{Name: "x", Timeout: "soon"}); codeOf(err) != "bad_request" {
		t.Fatalf("bad timeout: %v", err)
	}
	x, created, err := e.b.RegisterExecutor(ctx, ipc.ExecutorSpec{Name: "x", Handlers: []string{"h"}, URL: "unix:///x.sock", Timeout: "30s"})
	if err != nil || !created || x.Timeout != "30s" {
		t.Fatalf("register: %+v %v %v", x, created, err)
	}
	if c := e.prop.cmds[0][0].Executor; c.Node != "a" || c.Executor.TimeoutNs != int64(30*time.Second) {
		t.Fatalf("command %+v", c)
	}
	e.prop.res = []raftfsm.Result{{Code: raftfsm.CodeStale}}
	if _, _, err := e.b.RegisterExecutor(ctx, ipc.ExecutorSpec{Name: "x"}); err == nil {
		t.Fatal("an unexpected result was taken for a registration")
	}
	e.prop.res = []raftfsm.Result{{Code: raftfsm.CodeNotFound}}
	if err := e.b.UnregisterExecutor(ctx, "x"); codeOf(err) != "not_found" {
		t.Fatalf("unregister unknown: %v", err)
	}
	e.prop.res = nil
	if err := e.b.UnregisterExecutor(ctx, "x"); err != nil {
		t.Fatal(err)
	}
	if list, err := e.b.Executors(ctx); err != nil || len(list) != 0 {
		t.Fatalf("no record yet: %+v %v", list, err)
	}
	e.apply(raftfsm.Command{Type: raftfsm.CmdNode, Node: &raftfsm.Node{ID: "a", Executors: []raftfsm.Executor{{Name: "x", Handlers: []string{"h"}, TimeoutNs: int64(time.Second)}}}})
	if list, err := e.b.Executors(ctx); err != nil || len(list) != 1 || list[0].Timeout != "1s" {
		t.Fatalf("executors %+v %v", list, err)
	}
	// Before this node's record is committed a registration waits, up
	// to the request's end.
	e.mem.registered = false
	c, cancel := context.WithCancel(ctx)
	cancel()
	if _, _, err := e.b.RegisterExecutor(c, ipc.ExecutorSpec{Name: "y"}); codeOf(err) != "not_ready" {
		t.Fatalf("unregistered node: %v", err)
	}
	e.prop.err = ipc.Errorf(ipc.ErrNoLeader, "no leader")
	if err := e.b.UnregisterExecutor(ctx, "x"); codeOf(err) != "no_leader" {
		t.Fatalf("proposer error: %v", err)
	}
	e.mem.removeErr = ipc.Errorf(ipc.ErrNotFound, "no member")
	if err := e.b.RemoveMember(ctx, "z"); codeOf(err) != "not_found" {
		t.Fatalf("remove: %v", err)
	}
}

// A follower's GET /v1/handlers is the leader's, over the peer route,
// with this node's own executor limits and the nodes' own circuits as the
// leader knows them; without the leader, its own.
func TestHandlersThroughTheLeader(t *testing.T) {
	leader, follower := newEnv(t), newEnv(t)
	leader.submit("a", "h")
	leader.apply(raftfsm.Command{Type: raftfsm.CmdNode, Node: &raftfsm.Node{ID: "a", Executors: []raftfsm.Executor{{Name: "x", Handlers: []string{"h", "w*"}}}}})
	leader.apply(raftfsm.Command{Type: raftfsm.CmdNode, Node: &raftfsm.Node{ID: "b", Executors: []raftfsm.Executor{{Name: "y", Handlers: []string{"h"}}}}})
	nodeUntil := time.UnixMilli(1_700_000_007_000)
	leader.sched.nodeOpen = map[string]map[string]time.Time{"b": {"h": nodeUntil}}
	leader.sched.depth, leader.sched.parked = 1, map[string]map[string]int{"h": {"paused": 1}}
	leader.sched.open = []engine.BreakerStatus{{Handler: "h", State: engine.BreakerOpen, OpenUntil: time.UnixMilli(1_700_000_005_000).Add(1234)}}
	follower.raft.state, follower.route = raft.Follower, "leader:7001"
	follower.peers.leader = leader.b
	list, err := follower.b.Handlers(ctx)
	if err != nil || len(list) != 1 || list[0].Name != "h" || list[0].Backlog == nil || *list[0].Backlog != 1 ||
		list[0].Parked["paused"] != 1 || list[0].Circuit != "open" || list[0].CircuitUntil == nil ||
		!list[0].CircuitUntil.Equal(time.UnixMilli(1_700_000_005_001)) {
		t.Fatalf("follower's handlers %+v %v", list, err)
	}
	if x := list[0].Executors; len(x) != 2 || x[0].Node != "a" || x[0].Limit != 7 || x[0].CircuitUntil != nil ||
		x[1].Node != "b" || x[1].CircuitUntil == nil || !x[1].CircuitUntil.Equal(nodeUntil) {
		t.Fatalf("executors %+v", x)
	}
	// The leader has lost its leadership: 421 not_leader, typed.
	leader.raft.state = raft.Follower
	status, body, _ := follower.peers.Do(ctx, "GET", "leader:7001", PeerPathHandlers, "", nil)
	if status != 421 || !strings.Contains(string(body), `"code":"not_leader"`) {
		t.Fatalf("not the leader: %d %s", status, body)
	}
	list, err = follower.b.Handlers(ctx)
	if err != nil || len(list) != 0 {
		t.Fatalf("follower's own view (empty store): %+v %v", list, err)
	}
	if _, err := follower.b.leaderHandlers(ctx, "leader:7001"); !errors.Is(err, peerapi.ErrNotLeader) {
		t.Fatalf("not the leader: %v", err)
	}
}

// Pause and resume map the FSM's codes to the API's.
func TestPauseCodes(t *testing.T) {
	e := newEnv(t)
	if p, err := e.b.PauseHandler(ctx, "h", true); err != nil || p.Name != "h" || !p.Paused {
		t.Fatalf("pause %+v %v", p, err)
	}
	e.prop.res = []raftfsm.Result{{Code: raftfsm.CodeNotFound}}
	if _, err := e.b.PauseHandler(ctx, "h", true); codeOf(err) != "handler_not_found" {
		t.Fatalf("unknown handler: %v", err)
	}
	if _, err := e.b.PauseTask(ctx, "a", true); codeOf(err) != "not_found" {
		t.Fatalf("unknown task: %v", err)
	}
	e.prop.res = []raftfsm.Result{{Code: raftfsm.CodeState, Task: &raftfsm.Task{State: raftfsm.StateSuccess}}}
	if _, err := e.b.PauseTask(ctx, "a", true); codeOf(err) != "task_finished" {
		t.Fatalf("finished task: %v", err)
	}
	e.prop.res = []raftfsm.Result{{Code: raftfsm.CodeOK, Task: &raftfsm.Task{ID: "a", State: raftfsm.StateWaiting, Paused: true}}}
	if v, err := e.b.PauseTask(ctx, "a", true); err != nil || !v.Paused {
		t.Fatalf("pause task %+v %v", v, err)
	}
	e.prop.res = []raftfsm.Result{{Code: raftfsm.CodeStale}}
	if _, err := e.b.PauseHandler(ctx, "h", true); err == nil {
		t.Fatal("unexpected result taken")
	}
	if _, err := e.b.PauseTask(ctx, "a", true); err == nil {
		t.Fatal("unexpected result taken")
	}
}

// A due WAITING task shows why the leader holds it: the leader's own
// view, or the leader's answer over the peer route on a follower.
func TestWaitingReasons(t *testing.T) {
	leader, follower := newEnv(t), newEnv(t)
	leader.submit("a", "h")
	follower.submit("a", "h")
	follower.submit("b", "h")
	w := WaitingView{Reason: "paused", SinceMs: 1_700_000_000_000}
	leader.sched.waiting = map[string]WaitingView{"a": w}
	if v, _ := leader.b.Task(ctx, "a"); v.WaitingReason != "paused" || v.WaitingSince == nil {
		t.Fatalf("leader's view %+v", v)
	}
	follower.raft.state, follower.route = raft.Follower, "leader:7001"
	follower.peers.leader = leader.b
	page, err := follower.b.List(ctx, ipc.ListQuery{})
	if err != nil || page.Tasks[0].WaitingReason != "paused" || page.Tasks[1].WaitingReason != "" {
		t.Fatalf("follower's page %+v %v", page.Tasks, err)
	}
	// A deposed leader answers 421 not_leader, a bad body 400 bad_request:
	// no reasons.
	leader.raft.state = raft.Follower
	if page, _ := follower.b.List(ctx, ipc.ListQuery{}); page.Tasks[0].WaitingReason != "" {
		t.Fatalf("reason from a node that does not lead: %+v", page.Tasks[0])
	}
	status, body, _ := follower.peers.Do(ctx, "POST", "leader:7001", PeerPathWaiting, "application/json", []byte("{"))
	var answer struct {
		Error peerapi.Error `json:"error"`
	}
	if json.Unmarshal(body, &answer); status != 400 || answer.Error.Code != peerapi.CodeBadRequest {
		t.Fatalf("bad body: %d %s", status, body)
	}
	leader.raft.state = raft.Leader
	leader.sched.waiting = nil
	status, body, _ = follower.peers.Do(ctx, "POST", "leader:7001", PeerPathWaiting, "application/json", []byte(`{"ids":["a"]}`))
	if status != 200 || string(body) != "{}" {
		t.Fatalf("nothing parked: %d %s", status, body)
	}
}

// PurgeTask purges a finished task, refuses a running one, and reads
// again when the task changed under it; PurgeTasks purges in entries of
// MaxBatchCommands.
func TestPurge(t *testing.T) {
	e := newEnv(t)
	e.submit("a", "h")
	e.apply(raftfsm.Command{Type: raftfsm.CmdCancel, Cancel: &raftfsm.Cancel{ID: "a", AtMs: e.clock.Now().UnixMilli()}})
	if k, err := e.b.PurgeTask(ctx, "a"); err != nil || k != 1 || len(e.purge.calls) != 1 || e.purge.calls[0][0].ID != "a" {
		t.Fatalf("purge: %d %v %+v", k, err, e.purge.calls)
	}
	e.submit("b", "h")
	if _, err := e.b.PurgeTask(ctx, "b"); codeOf(err) != "conflict" {
		t.Fatalf("purge of a waiting task: %v", err)
	}
	if _, err := e.b.PurgeTask(ctx, "ghost"); codeOf(err) != "not_found" {
		t.Fatalf("purge of a missing task: %v", err)
	}
	e.purge.calls, e.purge.purged = nil, []int{0, 0, 0}
	if _, err := e.b.PurgeTask(ctx, "a"); codeOf(err) != "conflict" || !strings.Contains(err.Error(), "kept changing") {
		t.Fatalf("purge of a task that keeps changing: %v (%d tries)", err, len(e.purge.calls))
	}

	for _, id := range []string{"c", "d", "f"} {
		e.submit(id, "h")
		e.apply(raftfsm.Command{Type: raftfsm.CmdCancel, Cancel: &raftfsm.Cancel{ID: id, AtMs: e.clock.Now().UnixMilli()}})
	}
	e.purge.calls, e.purge.purged = nil, nil
	res, err := e.b.PurgeTasks(ctx, ipc.PurgeQuery{Handler: "h", FinishedBefore: e.clock.Now().Add(time.Second), Limit: 10})
	if err != nil || res.Purged != 4 || res.More || len(e.purge.calls) != 2 || len(e.purge.calls[0]) != 2 {
		t.Fatalf("purge tasks: %+v %v, %d entries", res, err, len(e.purge.calls))
	}
	// The second entry fails after the first purged: say so, and more.
	e.purge.calls, e.purge.err = nil, ipc.Errorf(ipc.ErrNoLeader, "no leader")
	res, err = e.b.PurgeTasks(ctx, ipc.PurgeQuery{Handler: "h", FinishedBefore: e.clock.Now().Add(time.Second), Limit: 10})
	if err != nil || res.Purged != 2 || !res.More {
		t.Fatalf("partial purge: %+v %v", res, err)
	}
}

// The guard answers for the backend; without one, writes are allowed.
func TestWriteGuard(t *testing.T) {
	e := newEnv(t)
	if e.b.WriteAllowed() != nil || e.b.FreeingWriteAllowed() != nil {
		t.Fatal("no guard refused a write")
	}
	g := fakeGuard{ipc.Errorf(ipc.ErrStorageUnavailable, "disk full")}
	e.b.d.Guard = g
	if codeOf(e.b.WriteAllowed()) != "storage_unavailable" || codeOf(e.b.FreeingWriteAllowed()) != "storage_unavailable" {
		t.Fatal("the guard's refusal was lost")
	}
}

type fakeGuard struct{ err error }

func (g fakeGuard) WriteAllowed() error        { return g.err }
func (g fakeGuard) FreeingWriteAllowed() error { return g.err }

// A task that finished in the same millisecond as a purge's "finished
// before" time, but before it, is purged: finish times are stored to the
// millisecond, rounded down (a cancel answered just before a purge of
// CANCELLED tasks "finished before now" was left, a CI run saw it).
func TestPurgeTasksIncludesTheCurrentMillisecond(t *testing.T) {
	e := newEnv(t)
	e.submit("a", "h")
	e.apply(raftfsm.Command{Type: raftfsm.CmdCancel, Cancel: &raftfsm.Cancel{ID: "a", AtMs: e.clock.Now().UnixMilli()}})
	e.purge.calls, e.purge.purged = nil, nil
	res, err := e.b.PurgeTasks(ctx, ipc.PurgeQuery{Handler: "h", FinishedBefore: e.clock.Now().Add(300 * time.Microsecond), Limit: 10})
	if err != nil || res.Purged != 1 {
		t.Fatalf("purge of a task finished earlier in the same millisecond: %+v %v", res, err)
	}
	if got := ceilMilli(time.UnixMilli(5000)); got != 5000 {
		t.Fatalf("ceilMilli of a whole millisecond: %d", got)
	}
}

// A purge cursor goes on only with the handler and state filters of the
// request it came from: the finished index's classes are read in a fixed
// order, so one taken with other filters would pass over, silently, what
// these filters match behind it (a cursor of a handler-h1 purge, resumed
// with handler h2, answered 0 purged and no more while h2's task was
// left). Another filter's cursor is refused, and changes nothing.
func TestPurgeTasksCursorKeepsItsFilters(t *testing.T) {
	e := newEnv(t)
	now := e.clock.Now().UnixMilli()
	for i, c := range []struct{ id, handler string }{{"b1", "h2"}, {"a1", "h1"}, {"a2", "h1"}} {
		e.submit(c.id, c.handler)
		e.apply(raftfsm.Command{Type: raftfsm.CmdCancel, Cancel: &raftfsm.Cancel{ID: c.id, AtMs: now - 3 + int64(i)}})
	}
	before := e.clock.Now().Add(time.Second)
	e.purge.calls, e.purge.purged = nil, nil
	res, err := e.b.PurgeTasks(ctx, ipc.PurgeQuery{Handler: "h1", FinishedBefore: before, Limit: 1})
	if err != nil || res.Purged != 1 || !res.More || res.NextCursor == "" || e.purge.calls[0][0].ID != "a1" {
		t.Fatalf("first page: %+v %v %+v", res, err, e.purge.calls)
	}
	cur := res.NextCursor
	for _, q := range []ipc.PurgeQuery{
		{Handler: "h2", FinishedBefore: before, Limit: 10, Cursor: cur},
		{FinishedBefore: before, Limit: 10, Cursor: cur},
		{Handler: "h1", State: "SUCCESS", FinishedBefore: before, Limit: 10, Cursor: cur},
	} {
		e.purge.calls = nil
		res, err := e.b.PurgeTasks(ctx, q)
		if codeOf(err) != "bad_request" || !strings.Contains(err.Error(), "handler and state") || len(e.purge.calls) != 0 {
			t.Fatalf("cursor of handler h1 with %+v: %+v %v, purged %+v", q, res, err, e.purge.calls)
		}
	}
	e.purge.calls = nil
	res, err = e.b.PurgeTasks(ctx, ipc.PurgeQuery{Handler: "h1", FinishedBefore: before.Add(time.Hour), Limit: 10, Cursor: cur})
	if err != nil || res.Purged != 1 || res.More || e.purge.calls[0][0].ID != "a2" {
		t.Fatalf("same filters (a later finished_before): %+v %v %+v", res, err, e.purge.calls)
	}
}
