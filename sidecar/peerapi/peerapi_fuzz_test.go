package peerapi

import (
	"context"
	"encoding/json"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/axsched/ax/raftfsm"
)

// fuzzNode is a Node that accepts everything: the fuzz targets check the
// server's decoding, not the node's answers.
type fuzzNode struct{}

func (fuzzNode) Info() Info                                { return Info{ID: "n1", RaftAddr: "127.0.0.1:1", PeerAddr: "127.0.0.1:2"} }
func (fuzzNode) Join(context.Context, Info) error          { return nil }
func (fuzzNode) Remove(context.Context, string) error      { return nil }
func (fuzzNode) Members() (map[string]MemberStatus, error) { return map[string]MemberStatus{}, nil }
func (fuzzNode) Report(LoadReport) ReportReply             { return ReportReply{CommitIndex: 1} }
func (fuzzNode) Propose(_ context.Context, cmds []raftfsm.Command) ([]raftfsm.Result, error) {
	return make([]raftfsm.Result, len(cmds)), nil
}
func (fuzzNode) Task(_ context.Context, id string, _ bool) (*raftfsm.Task, uint64, error) {
	if id == "x" {
		return &raftfsm.Task{ID: "x"}, 1, nil
	}
	return nil, 0, raftfsm.ErrNotFound
}

// FuzzPeerRequest sends any method, path, query, token, deadline header
// and body to the peer API's handler (in process, over a node that
// accepts everything). The property: no panic, no hang; a request without
// the right token is 401 whatever else it holds; no 5xx (the node does not
// fail); every 4xx has the peer API's error shape with a code. Seeds:
// testdata/fuzz/FuzzPeerRequest and the cases below.
func FuzzPeerRequest(f *testing.F) {
	entry, err := raftfsm.EncodeEntry([]raftfsm.Command{{Type: raftfsm.CmdCancel, Cancel: &raftfsm.Cancel{ID: "a", AtMs: 1}}})
	if err != nil {
		f.Fatal(err)
	}
	for _, c := range []struct{ method, uri, token, deadline, body string }{
		{"GET", PathInfo, "tok", "", ""},
		{"POST", PathJoin, "tok", "5000", `{"id":"n2","raft_addr":"127.0.0.1:7420","peer_addr":"127.0.0.1:7421"}`},
		{"POST", PathJoin, "tok", "-1", `{"id":""}`},
		{"POST", PathPropose, "tok", "9223372036854775807", string(entry)},
		{"POST", PathPropose, "tok", "1", "\x01\xdd\xff\xff\xff\xff"},
		{"POST", PathReport, "tok", "", `{"id":"n2","in_flight":3,"queued":{"h":1},"executors":[{"name":"e","limit":4}],"draining":true}`},
		{"GET", PathTask + "?id=x&consistency=strong", "tok", "", ""},
		{"GET", PathTask + "?id=%zz", "tok", "", ""},
		{"POST", PathRemove, "tok", "", `{"id":"n3"}`},
		{"POST", PathRemove, "tok", "", `[]`},
		{"GET", PathMembers, "tok", "", ""},
		{"GET", PathMembers, "", "", ""},
		{"GET", PathInfo, "TOK", "", ""},
		{"GET", "/peer/v2/nothing", "tok", "", ""},
	} {
		f.Add(c.method, c.uri, c.token, c.deadline, []byte(c.body))
	}
	s := NewServer(ServerConfig{Node: fuzzNode{}, Token: "tok"})
	f.Fuzz(func(t *testing.T, method, uri, token, deadline string, body []byte) {
		if method == "" || strings.ContainsAny(method, " \r\n") {
			return
		}
		var req fasthttp.Request
		req.Header.SetMethod(method)
		req.SetRequestURI(uri)
		req.Header.Set(TokenHeader, token)
		req.Header.Set(DeadlineHeader, deadline)
		req.SetBody(body)
		var ctx fasthttp.RequestCtx
		ctx.Init(&req, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}, nil)
		done := make(chan struct{})
		go func() { defer close(done); s.handle(&ctx) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s %s: no answer within 10 s", method, uri)
		}
		status, reply := ctx.Response.StatusCode(), ctx.Response.Body()
		// The header as the server reads it: fasthttp drops a value with
		// a newline, as a real request could not carry one either.
		if got := string(req.Header.Peek(TokenHeader)); got != "tok" && status != 401 {
			t.Fatalf("%s %s with token %q: %d, want 401", method, uri, got, status)
		}
		switch {
		case status >= 500:
			t.Fatalf("%s %s: %d %s", method, uri, status, reply)
		case status >= 400:
			var e struct {
				Error struct {
					Code    string `json:"code"`
					Message string `json:"message"`
				} `json:"error"`
			}
			if err := json.Unmarshal(reply, &e); err != nil || e.Error.Code == "" {
				t.Fatalf("%s %s: %d with body %q: not the error shape (%v)", method, uri, status, reply, err)
			}
		}
	})
}

// FuzzPeerReply decodes arbitrary answers the way the client does (a peer
// may be hostile or of another version): error bodies of any status,
// msgpack results (Propose, Task), and the JSON replies. The property: no
// panic; an error answer always decodes to an *Error with a code and a
// message. Seeds: testdata/fuzz/FuzzPeerReply and the cases below.
func FuzzPeerReply(f *testing.F) {
	res, err := raftfsm.EncodeResults([]raftfsm.Result{{Task: &raftfsm.Task{ID: "x"}, Index: 5}, {Code: "stale", Purged: []bool{true}, Warning: "9/10"}})
	if err != nil {
		f.Fatal(err)
	}
	for _, c := range []struct {
		status uint16
		body   string
	}{
		{200, string(res)},
		{421, `{"error":{"code":"not_leader","message":"not the leader"}}`},
		{429, `{"error":"queue full","handler":"h","depth":10,"limit":10}`},
		{503, `{"error":{"code":"storage_unavailable","message":"disk full","cause":"ENOSPC","since_ms":1}}`},
		{401, `{"error":"unauthorized"}`},
		{500, `not json`},
		{404, ``},
		{200, `{"id":"n1","raft_addr":"a:1","peer_addr":"a:2","leader_id":"n1","in_cluster":true,"commit_index":9}`},
		{200, `{"commit_index":9,"state_index":8,"parked":{"h":2}}`},
		{200, `{"n1":{"reachable":true,"last_contact_ms":0,"applied_index":3,"role":"leader","healthy":true}}`},
	} {
		f.Add(c.status, []byte(c.body))
	}
	f.Fuzz(func(t *testing.T, status uint16, body []byte) {
		e := decodeError(int(status), body, map[int]string{404: CodeNoSuchMember, 409: CodeLastVoter})
		if e == nil || e.Code == "" || e.Message == "" {
			t.Fatalf("decodeError(%d, %q) = %+v: want a code and a message", status, body, e)
		}
		_ = (&callError{addr: "a", path: "p", err: e}).Error()
		_, _ = raftfsm.DecodeResults(body)
		var info Info
		_ = json.Unmarshal(body, &info)
		var rr ReportReply
		_ = json.Unmarshal(body, &rr)
		var members map[string]MemberStatus
		_ = json.Unmarshal(body, &members)
	})
}
