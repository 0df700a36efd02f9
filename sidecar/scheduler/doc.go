// Package scheduler is the leader's decisions about runs: it arms a timer
// for every WAITING task due inside the load window and for every RUNNING
// attempt's lease, fires due runs (parks those that cannot start, routes
// the others to a node and proposes their Fire), ends expired leases
// (Complete LOST), keeps the per-handler circuit breakers, answers why a
// due run waits, honours pauses, and purges the finished tasks whose
// retention ended.
//
// # Files, in the order of a run's life
//
//   - scheduler.go: the Scheduler, its Config and Deps, start and stop of
//     a term.
//   - arm.go: the load window and the timers kept in step with the FSM's
//     events.
//   - fire.go: expired timers become parked runs and LOST outcomes;
//     FireAhead fires the runs due soon before a leadership hand-over.
//   - park.go: the parked runs per handler and the drain that starts them.
//   - capacity.go: which node has room for an attempt (executor capacity
//     from load reports).
//   - route.go: among the nodes with room, which one (least loaded, round
//     robin, rendezvous hash).
//   - report.go: the nodes' load reports.
//   - probe.go: the circuit breaker's attempts.
//   - waiting.go: the waiting reasons the API shows.
//   - pause.go: paused handlers and tasks.
//   - retention.go: the purge loop and disk reclaim.
//   - manual.go: driving the timers by hand (tests of a whole node).
//   - prepare.go: the leader's decisions written into each command as it
//     is proposed (times, due times, backoff, next runs): the inputs of
//     raftfsm.Prepare, which raftstore's group commit calls.
//
// # Imports
//
// scheduler imports engine, raftfsm, badger (the disk reclaim),
// prometheus and zerolog. It must not import package sidecar nor the
// node's other parts (delivery, cluster, raft storage): what it needs from
// them it asks for through the small interfaces in Deps, which
// sidecar/wire_scheduler.go adapts. Admission, backoff and the next run's time are raftfsm's rules;
// the Preparer (prepare.go) gathers their inputs for each proposed command.
//
// # Clocks
//
// Due times, leases and timers use Deps.Clock. Load reports and an
// executor's unavailability are stamped by the nodes with their wall
// clocks, so liveness is judged with Deps.Wall (the real clock on a node).
//
// # Lock order
//
// Scheduler.mu is a leaf: no other lock is taken while it is held, and it
// is not held while proposing or calling out (the pause hook excepted,
// which must not call back).
package scheduler
