package sidecar

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"github.com/valyala/fasthttp"

	"github.com/axsched/ax/raftfsm"
)

// The peer API (node to node, TCP on --peer-addr):
//
//	GET  /peer/v1/info     this node's id, addresses and the leader it knows (JSON)
//	POST /peer/v1/join     add the node in the JSON body to the cluster (the leader does it; others forward)
//	POST /peer/v1/propose  body: a raftfsm entry; the leader commits it and answers the msgpack results
//	POST /peer/v1/report   a node's load report to the leader (JSON); answers the leader's commit index
//	GET  /peer/v1/task?id= a task as this node has it (msgpack), for a follower that is catching up
//	POST /peer/v1/remove   remove the node in the JSON body {id} from the configuration (the leader does it)
//
// With a cluster token (Config.ClusterToken), every request must carry it in
// the Ax-Cluster-Token header; others get 401.
//
// A proposal that reaches a node that does not lead gets 421 (misdirected)
// and the caller looks the leader up again.
const (
	peerPathInfo    = "/peer/v1/info"
	peerPathJoin    = "/peer/v1/join"
	peerPathPropose = "/peer/v1/propose"
	peerPathReport  = "/peer/v1/report"
	peerPathTask    = "/peer/v1/task"
	peerPathRemove  = "/peer/v1/remove"
	peerPathMembers = "/peer/v1/members"
	// peerTokenHeader carries the cluster token (Config.ClusterToken).
	peerTokenHeader = "Ax-Cluster-Token"
	// peerTimeout bounds one peer request.
	peerTimeout = 10 * time.Second
)

// peerInfo is the reply of /peer/v1/info and the body of /peer/v1/join.
type peerInfo struct {
	ID       string `json:"id"`
	RaftAddr string `json:"raft_addr"`
	PeerAddr string `json:"peer_addr"`
	LeaderID string `json:"leader_id,omitempty"`
	// InCluster is true when the node has Raft state (it bootstrapped or
	// joined) — used by bootstrap-expect to tell new nodes from members.
	InCluster bool `json:"in_cluster"`
	// CommitIndex is the node's Raft commit index; on the leader, the
	// index a follower must apply before it is ready (readiness).
	CommitIndex uint64 `json:"commit_index"`
}

// reportReply is the leader's answer to a load report.
type reportReply struct {
	CommitIndex uint64 `json:"commit_index"`
}

// loadReport is what a node tells the leader about itself every
// reportInterval.
type loadReport struct {
	ID       string `json:"id"`
	InFlight int    `json:"in_flight"`
	Applied  uint64 `json:"applied"`
	// State is the node's Raft state, lower case: leader, follower,
	// candidate (GET /v1/cluster's members[].role).
	State string `json:"state,omitempty"`
	// Queued counts, per handler, the attempts waiting for an executor
	// slot on the node (part of the handler's backlog).
	Queued map[string]int `json:"queued,omitempty"`
}

type peerServer struct {
	n   *Node
	srv *fasthttp.Server
	ln  net.Listener
}

func newPeerServer(n *Node) *peerServer {
	p := &peerServer{n: n}
	p.srv = &fasthttp.Server{
		Handler:            p.handle,
		Name:               "ax-peer",
		MaxRequestBodySize: 64 << 20,
		ReadTimeout:        peerTimeout,
		WriteTimeout:       peerTimeout,
		NoDefaultDate:      true,
	}
	return p
}

func (p *peerServer) listen(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("peer API on %s: %w", addr, err)
	}
	p.ln = ln
	go p.srv.Serve(ln)
	return nil
}

func (p *peerServer) close() {
	if p.ln != nil {
		p.srv.Shutdown()
	}
}

func (p *peerServer) handle(ctx *fasthttp.RequestCtx) {
	n := p.n
	if tok := n.cfg.ClusterToken; tok != "" && subtle.ConstantTimeCompare(ctx.Request.Header.Peek(peerTokenHeader), []byte(tok)) != 1 {
		writeJSON(ctx, 401, map[string]string{"error": "missing or wrong cluster token (" + peerTokenHeader + ")"})
		return
	}
	switch string(ctx.Path()) {
	case peerPathMembers:
		if n.raft.State() != raft.Leader {
			writeJSON(ctx, fasthttp.StatusMisdirectedRequest, map[string]string{"error": "not the leader"})
			return
		}
		writeJSON(ctx, 200, n.memberStatuses())
	case peerPathRemove:
		var req struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal(ctx.PostBody(), &req); err != nil || req.ID == "" {
			writeJSON(ctx, 400, map[string]string{"error": "want JSON {id}"})
			return
		}
		c, cancel := context.WithTimeout(context.Background(), peerTimeout)
		defer cancel()
		err := n.removeMember(c, req.ID)
		switch {
		case errors.Is(err, errNoSuchMember):
			writeJSON(ctx, 404, map[string]string{"error": err.Error()})
		case errors.Is(err, errLastVoter):
			writeJSON(ctx, 409, map[string]string{"error": err.Error()})
		case err != nil:
			writeJSON(ctx, 503, map[string]string{"error": err.Error()})
		default:
			ctx.SetStatusCode(204)
		}
	case peerPathInfo:
		writeJSON(ctx, 200, n.info())
	case peerPathJoin:
		var req peerInfo
		if err := json.Unmarshal(ctx.PostBody(), &req); err != nil || req.ID == "" || req.RaftAddr == "" {
			writeJSON(ctx, 400, map[string]string{"error": "want JSON {id, raft_addr, peer_addr}"})
			return
		}
		c, cancel := context.WithTimeout(context.Background(), peerTimeout)
		defer cancel()
		if err := n.join(c, req); err != nil {
			writeJSON(ctx, 503, map[string]string{"error": err.Error()})
			return
		}
		writeJSON(ctx, 200, n.info())
	case peerPathPropose:
		cmds, err := raftfsm.DecodeEntry(ctx.PostBody())
		if err != nil {
			writeJSON(ctx, 400, map[string]string{"error": err.Error()})
			return
		}
		c, cancel := context.WithTimeout(context.Background(), peerTimeout)
		defer cancel()
		res, err := n.proposer.propose(c, cmds)
		var be *BacklogError
		if errors.As(err, &be) {
			writeJSON(ctx, 429, be)
			return
		}
		if errors.Is(err, ErrNotLeader) {
			writeJSON(ctx, fasthttp.StatusMisdirectedRequest, map[string]string{"error": "not the leader"})
			return
		}
		if err != nil {
			writeJSON(ctx, 503, map[string]string{"error": err.Error()})
			return
		}
		b, err := raftfsm.EncodeResults(res)
		if err != nil {
			writeJSON(ctx, 500, map[string]string{"error": err.Error()})
			return
		}
		ctx.SetContentType("application/msgpack")
		ctx.SetBody(b)
	case peerPathReport:
		var r loadReport
		if err := json.Unmarshal(ctx.PostBody(), &r); err != nil || r.ID == "" {
			writeJSON(ctx, 400, map[string]string{"error": "want JSON {id, in_flight}"})
			return
		}
		n.leader.report(r)
		n.autopilot.observe(r, n.raft.CommitIndex())
		// The answer tells the follower how far the leader has committed,
		// so it knows whether it has caught up (readiness, reads).
		writeJSON(ctx, 200, reportReply{CommitIndex: n.raft.CommitIndex()})
	case peerPathTask:
		id := string(ctx.QueryArgs().Peek("id"))
		var t *raftfsm.Task
		var err error
		if string(ctx.QueryArgs().Peek("consistency")) == "strong" {
			if n.raft.State() != raft.Leader {
				writeJSON(ctx, fasthttp.StatusMisdirectedRequest, map[string]string{"error": "not the leader"})
				return
			}
			c, cancel := context.WithTimeout(context.Background(), peerTimeout)
			t, err = n.leaderRead(c, id)
			cancel()
		} else {
			t, err = n.fsm.Task(id)
		}
		if errors.Is(err, raftfsm.ErrNotFound) {
			writeJSON(ctx, 404, map[string]string{"error": "task not found"})
			return
		}
		if err != nil {
			writeJSON(ctx, 500, map[string]string{"error": err.Error()})
			return
		}
		b, err := raftfsm.EncodeResults([]raftfsm.Result{{Task: t, Index: n.fsm.AppliedIndex()}})
		if err != nil {
			writeJSON(ctx, 500, map[string]string{"error": err.Error()})
			return
		}
		ctx.SetContentType("application/msgpack")
		ctx.SetBody(b)
	default:
		writeJSON(ctx, 404, map[string]string{"error": "no such peer route"})
	}
}

func writeJSON(ctx *fasthttp.RequestCtx, status int, v any) {
	b, _ := json.Marshal(v)
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.SetBody(b)
}

// info describes this node for the peer API.
func (n *Node) info() peerInfo {
	_, leader := n.raft.LeaderWithID()
	return peerInfo{
		ID: n.cfg.NodeID, RaftAddr: n.cfg.RaftAddr, PeerAddr: n.cfg.PeerAddr,
		LeaderID: string(leader), InCluster: n.inCluster(), CommitIndex: n.raft.CommitIndex(),
	}
}

// inConfiguration reports whether this node is a server of the latest
// Raft configuration it knows.
func (n *Node) inConfiguration() bool {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return false
	}
	for _, s := range f.Configuration().Servers {
		if string(s.ID) == n.cfg.NodeID {
			return true
		}
	}
	return false
}

func (n *Node) inCluster() bool {
	f := n.raft.GetConfiguration()
	return f.Error() == nil && len(f.Configuration().Servers) > 0
}

// join adds a node to the cluster as a non-voter (autopilot promotes it
// once it is stable and the cluster needs a voter): on the leader directly,
// else by forwarding to the leader. A node that is already a voter stays
// one (raft's AddNonvoter only updates its address).
func (n *Node) join(ctx context.Context, req peerInfo) error {
	n.peers.learn(req.ID, req.RaftAddr, req.PeerAddr)
	for {
		if n.raft.State() == raft.Leader {
			n.log.Info().Str("joining", req.ID).Str("raft_addr", req.RaftAddr).Msg("adding non-voter")
			return n.raft.AddNonvoter(raft.ServerID(req.ID), raft.ServerAddress(req.RaftAddr), 0, peerTimeout).Error()
		}
		if addr := n.leaderPeerAddr(); addr != "" && addr != n.cfg.PeerAddr {
			_, err := n.peers.join(ctx, addr, req)
			return err
		}
		select {
		case <-ctx.Done():
			return ErrNoLeader
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// peerClient calls other nodes' peer APIs and remembers their addresses.
type peerClient struct {
	c     *fasthttp.Client
	token string // Config.ClusterToken, sent with every request

	mu     sync.Mutex
	byID   map[string]string // node id → peer addr
	byRaft map[string]string // raft addr → peer addr
}

func newPeerClient(token string) *peerClient {
	return &peerClient{
		token: token,
		c: &fasthttp.Client{
			Name:                "ax-peer",
			MaxConnsPerHost:     64,
			MaxIdleConnDuration: time.Minute,
			ReadTimeout:         peerTimeout,
			WriteTimeout:        peerTimeout,
			MaxResponseBodySize: 64 << 20,
		},
		byID:   map[string]string{},
		byRaft: map[string]string{},
	}
}

func (p *peerClient) learn(id, raftAddr, peerAddr string) {
	if peerAddr == "" {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if id != "" {
		p.byID[id] = peerAddr
	}
	if raftAddr != "" {
		p.byRaft[raftAddr] = peerAddr
	}
}

func (p *peerClient) known(id, raftAddr string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if a := p.byID[id]; a != "" {
		return a
	}
	return p.byRaft[raftAddr]
}

// do sends one request and returns the status and a copy of the body.
func (p *peerClient) do(ctx context.Context, method, addr, path, ctype string, body []byte) (int, []byte, error) {
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	release := func() {
		fasthttp.ReleaseRequest(req)
		fasthttp.ReleaseResponse(resp)
	}
	req.SetRequestURI("http://" + addr + path)
	req.Header.SetMethod(method)
	if p.token != "" {
		req.Header.Set(peerTokenHeader, p.token)
	}
	if body != nil {
		req.Header.SetContentType(ctype)
		req.SetBody(body)
	}
	deadline := time.Now().Add(peerTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	answer := func(err error) (int, []byte, error) {
		defer release()
		if err != nil {
			return 0, nil, err
		}
		return resp.StatusCode(), append([]byte(nil), resp.Body()...), nil
	}
	if ctx.Done() == nil {
		return answer(p.c.DoDeadline(req, resp, deadline))
	}
	// fasthttp does not watch a context: run the call aside and give up
	// on it when ctx ends (a forward whose leader was replaced). The
	// abandoned call keeps req and resp until its own deadline.
	done := make(chan error, 1)
	go func() { done <- p.c.DoDeadline(req, resp, deadline) }()
	select {
	case err := <-done:
		return answer(err)
	case <-ctx.Done():
		go func() {
			<-done
			release()
		}()
		return 0, nil, context.Cause(ctx)
	}
}

func (p *peerClient) info(ctx context.Context, addr string) (peerInfo, error) {
	var pi peerInfo
	status, body, err := p.do(ctx, "GET", addr, peerPathInfo, "", nil)
	if err != nil {
		return pi, err
	}
	if status != 200 {
		return pi, fmt.Errorf("peer %s: info: http %d", addr, status)
	}
	if err := json.Unmarshal(body, &pi); err != nil {
		return pi, err
	}
	p.learn(pi.ID, pi.RaftAddr, pi.PeerAddr)
	return pi, nil
}

func (p *peerClient) join(ctx context.Context, addr string, req peerInfo) (peerInfo, error) {
	var pi peerInfo
	b, _ := json.Marshal(req)
	status, body, err := p.do(ctx, "POST", addr, peerPathJoin, "application/json", b)
	if err != nil {
		return pi, err
	}
	if status != 200 {
		return pi, fmt.Errorf("peer %s: join: http %d: %s", addr, status, body)
	}
	err = json.Unmarshal(body, &pi)
	return pi, err
}

func (p *peerClient) propose(ctx context.Context, addr string, cmds []raftfsm.Command) ([]raftfsm.Result, error) {
	data, err := raftfsm.EncodeEntry(cmds)
	if err != nil {
		return nil, err
	}
	status, body, err := p.do(ctx, "POST", addr, peerPathPropose, "application/octet-stream", data)
	if err != nil {
		return nil, err
	}
	switch status {
	case 200:
		res, err := raftfsm.DecodeResults(body)
		if err != nil {
			return nil, err
		}
		if len(res) != len(cmds) {
			return nil, fmt.Errorf("peer %s: %d results for %d commands", addr, len(res), len(cmds))
		}
		return res, nil
	case fasthttp.StatusMisdirectedRequest:
		return nil, ErrNotLeader
	case 429:
		var be BacklogError
		if err := json.Unmarshal(body, &be); err != nil {
			return nil, fmt.Errorf("peer %s: propose: http 429: %s", addr, body)
		}
		return nil, &be
	default:
		return nil, fmt.Errorf("peer %s: propose: http %d: %s", addr, status, body)
	}
}

// members asks the leader at addr for its view of every member.
func (p *peerClient) members(ctx context.Context, addr string) (map[string]memberStatus, error) {
	status, body, err := p.do(ctx, "GET", addr, peerPathMembers, "", nil)
	if err != nil {
		return nil, err
	}
	if status != 200 {
		return nil, fmt.Errorf("peer %s: members: http %d", addr, status)
	}
	var out map[string]memberStatus
	err = json.Unmarshal(body, &out)
	return out, err
}

// remove asks the node at addr (which forwards to the leader) to remove
// node id from the configuration.
func (p *peerClient) remove(ctx context.Context, addr, id string) error {
	b, _ := json.Marshal(map[string]string{"id": id})
	status, body, err := p.do(ctx, "POST", addr, peerPathRemove, "application/json", b)
	if err != nil {
		return err
	}
	switch status {
	case 204:
		return nil
	case 404:
		return fmt.Errorf("%w: %s", errNoSuchMember, body)
	case 409:
		return fmt.Errorf("%w: %s", errLastVoter, body)
	}
	return fmt.Errorf("peer %s: remove: http %d: %s", addr, status, body)
}

func (p *peerClient) report(ctx context.Context, addr string, r loadReport) (reportReply, error) {
	var rr reportReply
	b, _ := json.Marshal(r)
	status, body, err := p.do(ctx, "POST", addr, peerPathReport, "application/json", b)
	if err != nil {
		return rr, err
	}
	if status != 200 {
		return rr, fmt.Errorf("peer %s: report: http %d: %s", addr, status, body)
	}
	err = json.Unmarshal(body, &rr)
	return rr, err
}

// task reads a task from the node at addr; nil, nil when it has none.
func (p *peerClient) task(ctx context.Context, addr, id string) (*raftfsm.Task, error) {
	return p.readTask(ctx, addr, "?id="+url.QueryEscape(id))
}

// strongTask is a linearizable read of a task on the leader at addr.
func (p *peerClient) strongTask(ctx context.Context, addr, id string) (*raftfsm.Task, error) {
	return p.readTask(ctx, addr, "?consistency=strong&id="+url.QueryEscape(id))
}

func (p *peerClient) readTask(ctx context.Context, addr, query string) (*raftfsm.Task, error) {
	status, body, err := p.do(ctx, "GET", addr, peerPathTask+query, "", nil)
	if err != nil {
		return nil, err
	}
	switch status {
	case 200:
		rs, err := raftfsm.DecodeResults(body)
		if err != nil || len(rs) != 1 || rs[0].Task == nil {
			return nil, fmt.Errorf("peer %s: task: bad answer", addr)
		}
		return rs[0].Task, nil
	case 404:
		return nil, nil
	}
	return nil, fmt.Errorf("peer %s: task: http %d: %s", addr, status, body)
}
