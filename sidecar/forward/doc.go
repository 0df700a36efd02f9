// Package forward gets a node's commands committed wherever the Raft
// leader is: it proposes them locally on the leader and sends them to the
// leader's peer API on a follower, retrying across elections and leader
// changes (the model is rqlite's proxy package). Forwarder is the one
// place that decides whether a failed try may be sent again: a node's own
// writes are (Propose), an application's write whose try may have been
// committed is not (ProposeAPI answers ErrOutcomeUnknown).
//
// # What it owns
//
//   - the retry loop and its give-up time (Config.NoLeaderWait);
//   - abandoning a forward when the leader changes under it;
//   - read-your-writes on a follower: the highest index it forwarded
//     (Forwarded), which the node's reads wait for (WaitForwarded); the
//     node's own writes (Propose) still wait until applied.
//
// # What it may import
//
// engine (the clock), raftfsm (commands and results), hashicorp/raft (its
// error values) and fasthttp (to tell a dial that failed from a request
// that may have been delivered). It must not import sidecar or its other
// sub-packages: what it needs of the node it asks through its own small
// interfaces (Local, Leader, Leaders, Applied), which sidecar adapts in
// sidecar/wire_forward.go.
package forward
