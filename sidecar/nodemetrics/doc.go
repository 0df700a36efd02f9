// Package nodemetrics is one ax node's Prometheus registry and its
// collectors: the counters and histograms the node's parts write
// (attempts, lateness, retries, dead tasks, group commit, leader changes,
// executors' limits) and the gauges that read the node's state at each
// scrape (tasks by state, Raft indexes, term and state, the leader's
// timers, parked runs, circuits and backlog, the Raft log's writes).
//
// # Imports
//
// nodemetrics imports engine, raftfsm, raft, prometheus and fasthttp. It
// must not import package sidecar nor the node's parts: what it reads of
// them it asks for through the small interfaces of Sources (Raft, Store,
// Leader, Delivery, LogStats), which sidecar/wire_nodemetrics.go adapts.
// The parts receive the collectors they write (a struct of them, such as
// delivery.Metrics), never the registry.
package nodemetrics
