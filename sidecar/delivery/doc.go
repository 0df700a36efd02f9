// Package delivery runs on every node the attempts that committed Fire
// commands assign to it: it waits for the run's due time, takes a
// concurrency slot of the executor (an adaptive limit per executor,
// priorities among the attempts waiting), calls the executor through the
// callback client (package callback), and reports the outcome to the
// leader as a Complete command; it keeps the leases of waiting attempts
// alive, marks unreachable executors down until their next probe, keeps
// this node's own circuit breaker per handler (the attempts of a handler
// whose circuit is open here go back to the leader uncalled), and on a
// graceful stop hands back the attempts not started.
//
// Files, by step of an attempt's life: delivery.go (start, slot, callback,
// report, lease renewal), unavailable.go (an executor that did not take
// the callback: probes and backoff), breaker.go (the node's circuit
// breakers), load.go (this node's executors in the load report), drain.go
// (graceful stop). The callback's HTTP client and
// its contract with executors are in the sub-package callback.
//
// It imports engine (limiter, ready queue, clock), raftfsm (commands,
// tasks, node records), callback, prometheus and zerolog, and of ipc only
// CheckDuplicateKeys (for the shard-count answer). It must not
// import sidecar or the other parts of the node: what it needs from them
// it asks through the interfaces of deps.go (Proposer, Store, Pauses), given in
// Deps by the node (sidecar/wire_delivery.go). Time comes only from
// Deps.Clock (which the callbacks' deadlines follow too), except the
// pause between tries of an outcome report that no leader took, which is
// on Deps.RetryClock (elections run on Raft's real time).
//
// Delivery.mu is a leaf lock: no other lock of the node is taken while it
// is held, and it is never held while proposing or calling an executor (it
// covers one Store.Node read, of this node's record, when its cache was
// dropped). A slot's own locks (slot.mu, then slot.gmu) are taken inside
// it. The node breakers' lock (circuits.mu) is a leaf as well, never held
// with Delivery.mu nor while calling the breakers.
package delivery
