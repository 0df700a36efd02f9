package sidecar

import "github.com/axsched/ax/sidecar/config"

// Config is the configuration of one node (package config: its fields,
// defaults, WithDefaults and Validate).
type Config = config.Config

// Executor is an app endpoint on this node (config.Executor).
type Executor = config.Executor
