// Package sidecar assembles one ax node from its parts and serves the
// application API (ipc.Backend, package api) over them. It owns only the
// wiring (node.go, wire_*.go; wire_config.go aliases config.Config), the
// graceful stop (drain.go) and the dispatch of the FSM's events to the
// parts (events.go).
//
// The parts, each a sub-package that owns one step of a task's life (see
// docs/DESIGN.md section 3 and the walk in section 18):
//
//	api         the application API's backend (ipc.Backend): requests to commands and reads, results to views
//	raftstore   badger, raft-wal, snapshots, Raft, the storage guard, group commit
//	forward     try locally, else send to the leader
//	peerapi     the node-to-node API (wire, typed errors, client, server)
//	cluster     join, bootstrap, registration, load reports, autopilot, removal
//	scheduler   the leader's decisions: prepare, arm, fire, park, route, pause, purge
//	delivery    this node's attempts: slots, executors, leases, the callback client
//	alert       the leader's dead-run webhook sender (--on-dead-url)
//	load        the shape of a node's load report (data only)
//	config      the node's Config, its defaults and Validate
//	nodemetrics the node's Prometheus registry and collectors
//	otelexport  ended runs as OpenTelemetry traces to an OTLP/HTTP collector (off by default)
//
// The parts import engine, raftfsm, ipc's types, raft and badger, never
// sidecar and never each other (load excepted, being data only). What a
// part needs of another it declares as a small interface in its own
// package; the adapters that satisfy those interfaces with the other parts
// are here, one file per part (wire_api.go, wire_cluster.go,
// wire_delivery.go, wire_alert.go, wire_forward.go, wire_nodemetrics.go, wire_otel.go,
// wire_raftstore.go, wire_scheduler.go). config imports the parts (for
// their field types, defaults and checks); no part imports config. The
// clock (engine.Clock) is injected into every part.
//
// # Failover
//
// Only a committed Fire is ever delivered, so a deposed leader cannot cause
// a delivery; the FSM rejects a Fire or an outcome that names an attempt
// that is no longer current. A new leader calls Barrier, then arms a timer
// for every WAITING task and every RUNNING attempt's lease from badger
// (scheduler.Scheduler.Start). Tasks that came due while no node led fire at
// once (late, never lost); attempts that were running on a dead node are
// retried when their lease (timeout + LeaseGrace) expires and the leader
// completes them LOST.
//
// # Lock order
//
// scheduler.Scheduler's and delivery.Delivery's mutexes are leaves: no
// other lock is taken while holding them, and neither is held while
// proposing or calling out (see sidecar/delivery/doc.go).
package sidecar
