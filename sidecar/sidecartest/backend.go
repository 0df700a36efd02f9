package sidecartest

import (
	"github.com/axsched/ax/ipc"
	"github.com/axsched/ax/sidecar"
)

// backendOf is node n's application API backend.
func backendOf(n *sidecar.Node) ipc.Backend { return n.Backend() }
