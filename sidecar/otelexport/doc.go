// Package otelexport sends one OpenTelemetry trace per ended run of a
// task to an OTLP/HTTP collector (`ax sidecar --otel-endpoint`): a span
// for the run, from its due time to its end, with child spans for the
// time the leader held it back (parked), its Fire's commit, its wait for
// an executor slot (queue) and each attempt. See docs/DESIGN.md section
// 12 for what is exported, by which node, and what can be lost.
//
// It owns the choice of the exporting node for one run (OnEvent), the
// bounded queue of runs waiting to be exported, the spans' ids (trace id
// of the task, span ids derived from the task id, run and attempt, the
// attempt's being the parent id its callback carried) and the
// OpenTelemetry SDK's tracer provider, batch span processor and OTLP/HTTP
// exporter.
//
// # Imports
//
// otelexport imports raftfsm (Event, RunRecord), clients/go/axapi (the
// trace helpers), prometheus, zerolog and the OpenTelemetry SDK. It must
// not import package sidecar nor the node's other parts: it reads run
// records through its own Store interface, and asks whether the node
// leads through Config.Leader. Package sidecar wires it (wire_otel.go).
package otelexport
