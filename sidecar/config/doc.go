// Package config is the configuration of one ax node: Config, the
// defaults of its fields (the …Default constants, each with its unit in
// its value), WithDefaults, and Validate, which refuses a bad field by
// its name and flag before the node creates its data dir or opens any
// store — including what raft.NewRaft would refuse (raft.go).
//
// # Files
//
//   - config.go: Config, its defaults, WithDefaults and Validate.
//   - raft.go: the Raft timeouts checked as hashicorp/raft checks them,
//     and the raft.Config they make.
//   - deploy.go: advertised addresses, join entries, health port, socket
//     access and autopilot's fields.
//   - tls.go: the TLS files (all three or none, peertls.Load's checks,
//     each error naming the field and flag).
//
// # Imports
//
// config imports the node's parts (raftstore, cluster, scheduler,
// delivery, peertls, otelexport, and internal/rawio's Mode) for the types of their fields (PeerRoute, Resolver), their
// defaults and their own checks (cluster.ValidateAutopilot,
// raftstore.ValidatePeerRoutes). None of them imports config: each part
// takes its own Config, which package sidecar fills from this one. config
// must not import package sidecar.
package config
