// Package cluster keeps a node in its cluster: it forms the cluster
// (bootstrap-expect) or joins one (join.go), registers the node's record
// and reports the attempts a restart lost (register.go), tells the leader
// its load (report.go), keeps the voters at their target (autopilot.go),
// removes members and notices its own removal (remove.go), and has what
// running in pods needs: DNS discovery of the peers and the advertised
// address (discovery.go), the health port (health.go) and the socket's
// access (socket.go).
//
// Membership is built from a Config and a Deps: Raft (the part of
// *raft.Raft it uses), the peer API client, the node's forwarding path
// (Proposer), the FSM's reads, the node's peer routes and its load
// (interfaces in membership.go, defined here for what this package needs).
// Time comes from the engine.Clock in Deps; Raft's own timeouts excepted.
//
// # Imports
//
// cluster imports engine, raftfsm, ipc (the error shape of the health
// port), hashicorp/raft and sidecar/peerapi (the wire of the peer API).
// It must not import sidecar or the node's other sub-packages (forwarding,
// scheduler, delivery): it reaches them only through the interfaces of
// Deps, which sidecar/wire_cluster.go adapts.
package cluster
