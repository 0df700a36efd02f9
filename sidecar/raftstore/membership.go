package raftstore

import (
	"errors"
	"fmt"
	"sync"
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
//   - every RPC while this node's configuration is empty: a new node
//     waiting to be added learns its cluster from its first leader;
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
// What it costs: a node that was down while every member of its
// configuration was replaced by members with other ids refuses the new
// leader and does not catch up. It logs the refusal; the way back is
// that of a node that missed its own removal (stop it, delete its data
// dir, start it with --join). Members with stable ids (a StatefulSet's
// pod names) never meet it.

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
		return false
	}
	conf := (*p).GetConfiguration().Configuration()
	if len(conf.Servers) == 0 {
		return false
	}
	for _, s := range conf.Servers {
		if string(s.ID) == string(h.ID) {
			return false
		}
	}
	g.refusedN.Add(1)
	from, addr := string(h.ID), string(h.Addr)
	if g.refused.shouldLog(from, time.Now()) {
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
