package raftstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// Raft RPCs that would make a node outside this node's configuration its
// leader are refused (rpcGuard.refuseNonMember).
//
// hashicorp/raft v1.8.0 refuses its vote to a candidate that is not in
// its latest configuration (raft.go requestVote), but takes an
// AppendEntries, an InstallSnapshot or a TimeoutNow from any node: a
// leader of a newer term (or of the same term, when this node leads)
// becomes its leader, and once that leader has walked its log back to
// where the two logs agree, or to its snapshot, its entries or snapshot
// replace this node's (raft.go appendEntries, installSnapshot). Where
// addresses are reused (a pod's IP handed to a pod of another
// application, a port of a stopped cluster taken by a new one), a
// cluster that still lists a gone member's address sends those RPCs to
// whatever node holds that address now. Unless a cluster token or TLS
// identities set the two clusters apart, that node, a member of another
// ax cluster, would step down, follow the stranger and take its state:
// its own cluster's tasks replaced by another's. The stranger's cluster
// suffers too: an answer of a newer term makes its leader step down.
//
// So, once this node has a configuration (it bootstrapped, joined, or
// restored one), the guard answers those three RPCs with an error
// (errNotAMember) when the sender's server id, from the RPC header, is
// not in that configuration, and logs it. The sender's raft counts a
// failed RPC and backs off (its log shows the error); nothing of this
// node changes. What is let through:
//
//   - while this node's configuration is empty (a new node waiting to be
//     added or to bootstrap), the RPCs of a leader vouched for (below):
//     a node's join addresses vouch for the leader they know, so the
//     node learns its cluster from its first leader, while a stranger
//     that sends to a reused address before the new node has formed or
//     joined its cluster finds nobody to vouch for it (a test harness
//     without vouching, Config.VouchEmpty false: every RPC);
//   - an RPC without a server id (raft protocol versions below 3, which
//     ax never runs);
//   - votes and pre-votes: raft checks their candidate itself.
//
// The id is compared, not the address: a member's address changes when
// its pod is recreated, and the configuration entry that records the new
// address comes from the leader at that address. This is the check etcd
// makes with the member and cluster ids every message of its carries
// (etcd's rafthttp refuses a message of another cluster or a removed
// member); raft's messages carry only the sender's id and address.
//
// A node that missed a membership change (down while a node it never
// heard of joined and came to lead) would refuse its own cluster's new
// leader and never catch up. So a refused sender is vouched for, aside
// (SetVouch; the node asks the peer APIs of the members it knows whether
// the sender is their leader): while that runs, the sender's RPCs are
// refused and raft sends them again; once a member says yes, they are
// let through for vouchFor, by when the node has the configuration that
// lists the sender. A node of another cluster finds no member of its own
// to vouch for the stranger (and a single node none at all).

// errNotAMember is the answer to a refused RPC; the sender's raft logs it.
var errNotAMember = errors.New("not a member of this node's cluster")

// refuseNonMember answers rpc with an error and returns true when it is
// an AppendEntries, InstallSnapshot or TimeoutNow from a node that is not
// in this node's (non-empty) latest configuration; it returns false, and
// leaves rpc alone, otherwise.
func (g *rpcGuard) refuseNonMember(rpc raft.RPC) bool {
	var h raft.RPCHeader
	var kind string
	switch c := rpc.Command.(type) {
	case *raft.AppendEntriesRequest:
		h, kind = c.RPCHeader, "AppendEntries"
	case *raft.InstallSnapshotRequest:
		h, kind = c.RPCHeader, "InstallSnapshot"
	case *raft.TimeoutNowRequest:
		h, kind = c.RPCHeader, "TimeoutNow"
	default:
		return false
	}
	if len(h.ID) == 0 {
		return false
	}
	p := g.raft.Load()
	if p == nil {
		if !g.vouchEmpty {
			return false
		}
		// raft.NewRaft serves RPCs before the node hands the guard its raft
		// (setRaft): a node starting empty has no configuration yet. Let
		// through, an AppendEntries of a stranger (another cluster's
		// leader at a reused address) gave raft its term, so a single
		// node's BootstrapCluster that followed failed (ErrCantBootstrap,
		// "existing state") and it never led ("no known peers, aborting
		// election"). Refused, the sender tries again a moment later.
		g.refusedN.Add(1)
		respondError(rpc, fmt.Errorf("ax node %q refuses %s from %q: %w (it is starting)", g.localID, kind, string(h.ID), errNotAMember))
		return true
	}
	conf := (*p).GetConfiguration().Configuration()
	if len(conf.Servers) == 0 && !g.vouchEmpty {
		return false
	}
	for _, s := range conf.Servers {
		if string(s.ID) == string(h.ID) {
			return false
		}
	}
	from, addr := string(h.ID), string(h.Addr)
	now := time.Now()
	if g.vouches.vouched(from, now) {
		return false
	}
	g.vouches.ask(from, now)
	g.refusedN.Add(1)
	if len(conf.Servers) == 0 && g.refused.shouldLog(from, now) {
		// A new node (no cluster yet) refuses its first leader until a
		// join address vouches for it, about a second: every node but the
		// one that bootstraps does so once as a cluster forms. Not the
		// warning below, which tells the operator to remove a member.
		g.log.Info().Str("rpc", kind).Str("from_id", from).Str("from_addr", addr).
			Msg("a new node refused a Raft RPC from a leader its join addresses have not vouched for yet; asking them (normal while a cluster forms; a stranger at a reused address finds nobody to vouch for it)")
	} else if g.refused.shouldLog(from, now) {
		members := make([]string, 0, len(conf.Servers))
		for _, s := range conf.Servers {
			members = append(members, string(s.ID))
		}
		g.log.Warn().Str("rpc", kind).Str("from_id", from).Str("from_addr", addr).
			Strs("members", members).
			Msg("refused a Raft RPC from a node that is not in this cluster's configuration: a cluster that lists this node's address as one of its members' (an address reused after that member went away) is sending to it; remove that member there (ax cluster remove), or set the clusters apart with --cluster-token")
	}
	respondError(rpc, fmt.Errorf("ax node %q refuses %s from %q: %w (it lists %d members; the address may now be another cluster's)", g.localID, kind, from, errNotAMember, len(conf.Servers)))
	return true
}

// refusedSenders rate-limits the refusal log: once per refusedLogEvery
// per sender id.
type refusedSenders struct {
	mu   sync.Mutex
	last map[string]time.Time
}

// refusedLogEvery is how often one sender's refusals are logged.
const refusedLogEvery = time.Minute

// shouldLog reports whether a refusal of id at now is logged, and notes
// it; the map is cleared past 1 024 senders.
func (r *refusedSenders) shouldLog(id string, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if t, ok := r.last[id]; ok && now.Sub(t) < refusedLogEvery {
		return false
	}
	if r.last == nil || len(r.last) >= 1024 {
		r.last = map[string]time.Time{}
	}
	r.last[id] = now
	return true
}

// Vouching for a sender outside the configuration (see above).
const (
	// vouchFor is how long a vouched sender's RPCs are let through.
	vouchFor = time.Minute
	// vouchEvery is how often one sender is asked about at most.
	vouchEvery = time.Second
	// vouchTimeout bounds one vouching.
	vouchTimeout = 3 * time.Second
)

// VouchFunc reports whether the cluster this node knows vouches for the
// node with server id as its leader; it may take up to ctx's deadline.
type VouchFunc func(ctx context.Context, id string) bool

// vouches runs VouchFuncs aside and keeps their yeses.
type vouches struct {
	f     atomic.Pointer[VouchFunc]
	mu    sync.Mutex
	until map[string]time.Time // id → let through until
	asked map[string]time.Time // id → last asked
}

// vouched reports whether id was vouched for and still is at now.
func (v *vouches) vouched(id string, now time.Time) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return now.Before(v.until[id])
}

// ask starts a vouching for id, unless there is no VouchFunc or id was
// asked about less than vouchEvery ago.
func (v *vouches) ask(id string, now time.Time) {
	fp := v.f.Load()
	if fp == nil {
		return
	}
	v.mu.Lock()
	if now.Sub(v.asked[id]) < vouchEvery {
		v.mu.Unlock()
		return
	}
	if v.asked == nil || len(v.asked) > 1024 {
		v.asked, v.until = map[string]time.Time{}, map[string]time.Time{}
	}
	v.asked[id] = now
	v.mu.Unlock()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), vouchTimeout)
		defer cancel()
		if (*fp)(ctx, id) {
			v.mu.Lock()
			v.until[id] = time.Now().Add(vouchFor)
			v.mu.Unlock()
		}
	}()
}
