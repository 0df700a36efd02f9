package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/axsched/ax/engine"
	"github.com/axsched/ax/ipc"
	"github.com/axsched/ax/raftfsm"
	"github.com/axsched/ax/sidecar/peerapi"
)

// Pause and resume through the API, and GET /v1/handlers; what a pause
// does to due runs is the scheduler's (sidecar/scheduler/pause.go).

// PeerPathHandlers is the peer API's GET of the leader's handler view
// (JSON, []ipc.HandlerInfo); a node that does not lead answers 421
// not_leader.
const PeerPathHandlers = "/peer/v1/handlers"

// PauseHandler implements ipc.Backend: a replicated pause (or resume) of
// every run of handler name.
func (b *Backend) PauseHandler(ctx context.Context, name string, paused bool) (ipc.HandlerPause, error) {
	res, err := b.d.Proposer.Propose(ctx, []raftfsm.Command{{Type: raftfsm.CmdPause, Pause: &raftfsm.Pause{Handler: name, Paused: paused}}})
	if err != nil {
		return ipc.HandlerPause{}, err
	}
	switch res[0].Code {
	case raftfsm.CodeOK:
		return ipc.HandlerPause{Name: name, Paused: paused}, nil
	case raftfsm.CodeNotFound:
		return ipc.HandlerPause{}, ipc.Errorf(ipc.ErrHandlerNotFound, "handler %q: no task, no executor and no pause names it", name)
	}
	return ipc.HandlerPause{}, fmt.Errorf("pause handler %q: unexpected result %q", name, res[0].Code)
}

// PauseTask implements ipc.Backend: a replicated pause (or resume) of
// task id's runs.
func (b *Backend) PauseTask(ctx context.Context, id string, paused bool) (ipc.Task, error) {
	res, err := b.d.Proposer.Propose(ctx, []raftfsm.Command{{Type: raftfsm.CmdPause, Pause: &raftfsm.Pause{ID: id, Paused: paused}}})
	if err != nil {
		return ipc.Task{}, err
	}
	r := res[0]
	switch r.Code {
	case raftfsm.CodeOK:
		return taskView(r.Task), nil
	case raftfsm.CodeNotFound:
		return ipc.Task{}, ipc.Errorf(ipc.ErrNotFound, "task %q not found", id)
	case raftfsm.CodeState:
		return ipc.Task{}, ipc.Errorf(ipc.ErrTaskFinished, "pause: task %q is %s: a finished task has no run to pause", id, r.Task.State)
	}
	return ipc.Task{}, fmt.Errorf("pause task %q: unexpected result %q", id, r.Code)
}

// Handlers implements ipc.Backend. The leader answers from its own state;
// a follower asks the leader (whose backlog, parked runs and circuits
// only it knows), and answers from its own store, without those, when
// no leader answers.
func (b *Backend) Handlers(ctx context.Context) ([]ipc.HandlerInfo, error) {
	if b.isLeader() {
		b.readOwnWrites(ctx) // writes it forwarded before it led
		return b.HandlersView(true)
	}
	if addr := b.d.Routes.LeaderPeerAddr(); addr != "" {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		list, err := b.leaderHandlers(rctx, addr)
		cancel()
		if err == nil {
			// The leader knows the limits of its own executors; this node
			// those of its own.
			for i := range list {
				for j := range list[i].Executors {
					if x := &list[i].Executors[j]; x.Node == b.cfg.NodeID {
						x.Limit = b.d.Limits.LimitOf(&raftfsm.Executor{Name: x.Name, URL: x.URL})
					}
				}
			}
			return list, nil
		}
		b.d.Log.Debug().Err(err).Str("leader", addr).Msg("asking the leader for its handlers failed; answering from this node")
	}
	b.readOwnWrites(ctx) // the leader's answer has them; this node's store may not yet
	return b.HandlersView(false)
}

// HandlersView builds GET /v1/handlers from this node's store, with the
// leader's figures (backlog, parked runs by reason, circuit) when leading
// is set; sorted by handler name.
func (b *Backend) HandlersView(leading bool) ([]ipc.HandlerInfo, error) {
	counts := b.d.Store.HandlerCounts()
	paused, err := b.d.Store.PausedHandlers()
	if err != nil {
		return nil, err
	}
	nodes, err := b.d.Store.Nodes()
	if err != nil {
		return nil, err
	}
	names := map[string]bool{}
	for h := range counts {
		names[h] = true
	}
	for _, h := range paused {
		names[h] = true
	}
	for i := range nodes {
		for _, x := range nodes[i].Executors {
			for _, h := range x.Handlers {
				if !strings.Contains(h, "*") {
					names[h] = true
				}
			}
		}
	}
	var parked map[string]map[string]int
	var circuits map[string]engine.BreakerStatus
	if leading {
		parked = b.d.Scheduler.ParkedByReason()
		circuits = map[string]engine.BreakerStatus{}
		for _, s := range b.d.Scheduler.Circuits() {
			circuits[s.Handler] = s
		}
	}
	out := make([]ipc.HandlerInfo, 0, len(names))
	for h := range names {
		info := ipc.HandlerInfo{Name: h, Paused: pausedInStore(paused, h), Parked: map[string]int{}, Tasks: map[ipc.State]int{}}
		c := counts[h]
		for s := raftfsm.StateWaiting; s <= raftfsm.StateCancelled; s++ {
			if c[s] > 0 {
				info.Tasks[ipc.State(s.String())] = int(c[s])
			}
		}
		for i := range nodes {
			for j := range nodes[i].Executors {
				x := &nodes[i].Executors[j]
				if !x.Runs(h) {
					continue
				}
				e := ipc.HandlerExecutor{Node: nodes[i].ID, Name: x.Name, URL: x.URL, MaxConcurrency: x.MaxConcurrency}
				if nodes[i].ID == b.cfg.NodeID {
					e.Limit = b.d.Limits.LimitOf(x)
				}
				if leading {
					if until, open := b.d.Scheduler.NodeCircuit(nodes[i].ID, h); open {
						until = until.UTC()
						e.CircuitUntil = &until
					}
				}
				info.Executors = append(info.Executors, e)
			}
		}
		if leading {
			backlog := b.d.Scheduler.Depth(h)
			info.Backlog = &backlog
			for reason, k := range parked[h] {
				info.Parked[reason] = k
			}
			info.Circuit = engine.BreakerClosed.String()
			if s, ok := circuits[h]; ok {
				info.Circuit = s.State.String()
				if !s.OpenUntil.IsZero() {
					// To the millisecond (rounded up), as every time of the API.
					until := time.UnixMilli(raftfsm.CeilMs(s.OpenUntil)).UTC()
					info.CircuitUntil = &until
				}
			}
		}
		out = append(out, info)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func pausedInStore(paused []string, h string) bool {
	i := sort.SearchStrings(paused, h)
	return i < len(paused) && paused[i] == h
}

// ServeHandlers answers PeerPathHandlers on the leader.
func (b *Backend) ServeHandlers(ctx *fasthttp.RequestCtx) {
	if !b.isLeader() {
		peerapi.WriteError(ctx, peerapi.ErrNotLeader)
		return
	}
	list, err := b.HandlersView(true)
	if err != nil {
		peerapi.WriteError(ctx, peerapi.ErrorOf(err, peerapi.ErrInternal))
		return
	}
	peerapi.WriteJSON(ctx, 200, list)
}

// leaderHandlers asks the leader at addr for its handler view.
func (b *Backend) leaderHandlers(ctx context.Context, addr string) ([]ipc.HandlerInfo, error) {
	status, body, err := b.d.Peers.Do(ctx, "GET", addr, PeerPathHandlers, "", nil)
	if err != nil {
		return nil, err
	}
	if status == fasthttp.StatusMisdirectedRequest {
		return nil, peerapi.ErrNotLeader
	}
	if status != 200 {
		return nil, fmt.Errorf("peer %s: handlers: http %d: %s", addr, status, body)
	}
	var out []ipc.HandlerInfo
	if err := json.Unmarshal(body, &out); err != nil {
		return nil, errors.Join(fmt.Errorf("peer %s: handlers: bad answer", addr), err)
	}
	return out, nil
}
