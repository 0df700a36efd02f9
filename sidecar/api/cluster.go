package api

import (
	"context"
	"strconv"
	"time"

	"github.com/hashicorp/raft"

	"github.com/axsched/ax/ipc"
	"github.com/axsched/ax/sidecar/peerapi"
)

// Cluster implements ipc.Backend.
func (b *Backend) Cluster(ctx context.Context) (ipc.ClusterInfo, error) {
	r := b.d.Raft
	leaderAddr, leaderID := r.LeaderWithID()
	stats := r.Stats()
	info := ipc.ClusterInfo{
		NodeID: b.cfg.NodeID, State: r.State().String(), Leader: string(leaderID),
		Term: parseUint(stats["term"]), AppliedIndex: b.d.Store.AppliedIndex(), CommitIndex: parseUint(stats["commit_index"]),
		Storage: b.d.Storage.Status(),
	}
	// The lag is counted to the last committed entry the state machine
	// applies: after an election the commit index ends on the new
	// leader's no-op and barrier, which the applied index never reaches.
	info.StateIndex = b.d.Membership.StateIndex(info.CommitIndex)
	f := r.GetConfiguration()
	if err := f.Error(); err != nil {
		return info, err
	}
	info.VotersTarget = b.cfg.Voters
	// The leader's view of the members (contact, health, autopilot
	// status): its own, or asked from it.
	var views map[string]peerapi.MemberStatus
	if b.isLeader() {
		views = b.d.Membership.MemberStatuses()
	} else if addr := b.d.Routes.LeaderPeerAddr(); addr != "" {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		views, _ = b.d.Peers.Members(rctx, addr)
		cancel()
	}
	voters, reachableVoters := 0, 0
	for _, s := range f.Configuration().Servers {
		m := ipc.Member{
			ID: string(s.ID), RaftAddr: string(s.Address),
			PeerAddr: b.d.Routes.PeerAddrOf(string(s.ID), string(s.Address)),
			Suffrage: s.Suffrage.String(), Leader: s.Address == leaderAddr && leaderID != "",
		}
		if views != nil {
			v, ok := views[m.ID]
			reach, last, healthy := v.Reachable, v.LastContactMs, v.Healthy
			if !ok {
				last = -1
			}
			m.Reachable, m.LastContactMs, m.AppliedIndex, m.Healthy = &reach, &last, v.AppliedIndex, &healthy
			m.Role, m.Status, m.StableSince = v.Role, v.Status, msTime(v.StableSinceMs)
			if s.Suffrage == raft.Voter && reach {
				reachableVoters++
			}
		}
		if s.Suffrage == raft.Voter {
			voters++
		}
		info.Members = append(info.Members, m)
	}
	if views != nil && voters > 0 {
		ft := max(reachableVoters-(voters/2+1), 0) // voters beyond a quorum
		info.FailureTolerance = &ft
	}
	return info, nil
}

// Ready implements ipc.Backend: a leader is known, this node's record is
// committed, and this node has applied everything the leader had committed
// at its last load report (a follower's own commit index may still be 0
// right after a restart, before the first append from the leader; rqlite's
// "Committed" does the same).
func (b *Backend) Ready(ctx context.Context) error {
	_, id := b.d.Raft.LeaderWithID()
	if id == "" && b.d.Membership.Removed() {
		return ipc.Errorf(ipc.ErrNotReady, "this node was removed from the cluster (ax cluster remove): to bring it back, stop it, delete its data dir and start it with --join")
	}
	if id == "" {
		return ipc.Errorf(ipc.ErrNotReady, "no leader known yet").WithRetryAfter(time.Second)
	}
	if !b.d.Membership.Registered() {
		return ipc.Errorf(ipc.ErrNotReady, "node not registered with the leader yet").WithRetryAfter(time.Second)
	}
	if b.isLeader() {
		if !b.d.Scheduler.Leading() {
			return ipc.Errorf(ipc.ErrNotReady, "leader is starting").WithRetryAfter(time.Second)
		}
		return nil
	}
	if !b.d.Membership.CaughtUp() {
		return ipc.Errorf(ipc.ErrNotReady, "catching up: applied %d of the leader's %d", b.d.Store.AppliedIndex(), b.d.Membership.LeaderCommit()).WithRetryAfter(time.Second)
	}
	return nil
}

// RemoveMember implements ipc.Backend (Membership.RemoveMember maps the
// errors).
func (b *Backend) RemoveMember(ctx context.Context, id string) error {
	return b.d.Membership.RemoveMember(ctx, id)
}

func parseUint(s string) uint64 {
	v, _ := strconv.ParseUint(s, 10, 64)
	return v
}
