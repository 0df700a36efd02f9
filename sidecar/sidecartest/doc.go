// Package sidecartest runs in-process clusters of real sidecar Nodes for
// tests of scheduling and delivery rules, in milliseconds and without
// processes.
//
// A Cluster is N nodes started with sidecar.Start: Raft on
// raft.InmemTransport (no sockets), the peer API over HTTP on 127.0.0.1
// ports (internal/freeport), the application API on Unix sockets in
// t.TempDir(), and one engine.FakeClock shared by every node for ax's own
// timers (due times, fire lead, leases, backoff, circuit cool-downs, cron
// and every slots, retention, membership loops) and for the callbacks'
// deadlines (a callback times out when the test moves the clock past
// its timeout). Each node has an Executor, a real HTTP server on a Unix
// socket that records every callback (arrival and end, on the fake
// clock) and answers as the test says; NewExecutor starts one more, for a
// test to register through the API. Partition(i) cuts a node's Raft links
// both ways and refuses its peer API dials both ways; Heal(i) restores
// them. Everything is shut down by t.Cleanup.
//
// Tests move time with Advance, AdvanceTo and AdvanceUntil, and wait for
// the outcome with the bounded polls (Eventually, WaitTask, WaitState,
// WaitCalls): a poll that times out is a failure, never an assertion on
// how long something took. A poll never moves the clock.
//
// What stays on real time, and why: Raft's own timeouts (heartbeat,
// election, leader lease: hashicorp/raft has no clock to inject), and so
// the waits that elections decide, which the nodes time on real time
// (Config.RetryClock): the pauses between tries of a forward or of an
// outcome report while there is no leader, the give-up after
// NoLeaderWait, the wait for a forwarded write to apply. Also the peer
// API's request time-outs, the callback client's connection time-outs
// and the measured durations of callbacks (the adaptive limiter's round
// trips). A loaded machine can miss an election timeout and elect a new
// leader in a steady cluster; Submit and HTTP retry the API's no_leader
// answer as the Go client does.
//
// The application API is reached two ways: API(i), the ipc.Backend the
// socket serves (typed calls), and HTTP(i, ...), the socket itself (the
// exact JSON bodies, headers and status codes; Metrics scrapes
// /metrics).
//
// It imports sidecar and what sidecar's Config hooks need (engine, raft);
// nothing in sidecar imports it. The hooks it uses are Config.Clock,
// Config.RetryClock, Config.RaftTransport and Config.PeerDial, documented
// "for tests".
package sidecartest
