package api

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/axsched/ax/ipc"
	"github.com/axsched/ax/sidecar/peerapi"
)

// PeerPathWaiting is the peer call a follower makes to show waiting
// reasons: POST {"ids": [...]} to the leader, which answers
// {"<id>": {reason, since_ms, until_ms}} (WaitingView) for the runs it
// holds parked; another node answers 421 not_leader.
const PeerPathWaiting = "/peer/v1/waiting"

// waitingTimeout bounds the follower's call: the reasons are best
// effort, a read never waits long for them.
const waitingTimeout = 300 * time.Millisecond

// waitingMaxIDs bounds the ids of one call (a list page is at most
// ipc.ListLimitMax).
const waitingMaxIDs = 10_000

// addWaiting sets the waiting reason of the due WAITING tasks among vs,
// from the leader's parked runs: this node's own when it leads, else one
// peer call to the leader (best effort: on error or time-out, no reasons).
func (b *Backend) addWaiting(ctx context.Context, vs []ipc.Task) {
	soon := b.d.Clock.Now().Add(b.cfg.FireLead + time.Second)
	var ids []string
	for i := range vs {
		if v := &vs[i]; v.State == "WAITING" && v.NextRunAt != nil && !v.NextRunAt.After(soon) {
			ids = append(ids, v.ID)
		}
	}
	if len(ids) == 0 {
		return
	}
	var got map[string]WaitingView
	if b.d.Raft == nil || b.isLeader() {
		got = b.d.Scheduler.Waiting(ids)
	} else if addr := b.d.Routes.LeaderPeerAddr(); addr != "" {
		rctx, cancel := context.WithTimeout(ctx, waitingTimeout)
		var err error
		got, err = b.leaderWaiting(rctx, addr, ids)
		cancel()
		if err != nil {
			b.d.Log.Debug().Err(err).Msg("asking the leader for waiting reasons failed")
		}
	}
	for i := range vs {
		w, ok := got[vs[i].ID]
		if !ok {
			continue
		}
		vs[i].WaitingReason = w.Reason
		vs[i].WaitingSince = msTime(w.SinceMs)
		vs[i].WaitingUntil = msTime(w.UntilMs)
	}
}

// ServeWaiting answers PeerPathWaiting on the leader.
func (b *Backend) ServeWaiting(ctx *fasthttp.RequestCtx) {
	var req struct {
		IDs []string `json:"ids"`
	}
	if err := json.Unmarshal(ctx.PostBody(), &req); err != nil || len(req.IDs) > waitingMaxIDs {
		peerapi.WriteError(ctx, peerapi.Errorf(peerapi.ErrBadRequest, "want JSON {ids: [at most %d task ids]}", waitingMaxIDs))
		return
	}
	if !b.isLeader() {
		peerapi.WriteError(ctx, peerapi.ErrNotLeader)
		return
	}
	out := b.d.Scheduler.Waiting(req.IDs)
	if out == nil {
		out = map[string]WaitingView{}
	}
	peerapi.WriteJSON(ctx, 200, out)
}

// leaderWaiting asks the leader at addr why ids wait.
func (b *Backend) leaderWaiting(ctx context.Context, addr string, ids []string) (map[string]WaitingView, error) {
	body, _ := json.Marshal(map[string][]string{"ids": ids})
	status, answer, err := b.d.Peers.Do(ctx, "POST", addr, PeerPathWaiting, "application/json", body)
	if err != nil {
		return nil, err
	}
	if status != 200 {
		return nil, fmt.Errorf("peer %s: waiting: http %d: %s", addr, status, answer)
	}
	var out map[string]WaitingView
	err = json.Unmarshal(answer, &out)
	return out, err
}

// PeerRoutes are the peer API routes the backend serves (for
// peerapi.ServerConfig.Routes).
func (b *Backend) PeerRoutes() map[string]fasthttp.RequestHandler {
	return map[string]fasthttp.RequestHandler{
		PeerPathHandlers: b.ServeHandlers,
		PeerPathWaiting:  b.ServeWaiting,
	}
}
