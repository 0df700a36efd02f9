package sidecar

import (
	"context"
	"time"

	"github.com/axsched/ax/sidecar/otelexport"
)

// otelShutdownTimeout bounds the flush of the spans still held when the
// node stops (a collector that does not answer costs at most this).
const otelShutdownTimeout = 5 * time.Second

// newOtel returns the node's run exporter (sidecar/otelexport), nil when
// Config.OtelEndpoint is empty: then the event loop does nothing more.
// The FSM is its store of run records; the node exports the runs its own
// Complete ended and, while it leads, those the leader ended.
func newOtel(n *Node) (*otelexport.Exporter, error) {
	if n.cfg.OtelEndpoint == "" {
		return nil, nil
	}
	return otelexport.New(otelexport.Config{
		Endpoint: n.cfg.OtelEndpoint, ServiceName: n.cfg.OtelServiceName, Node: n.cfg.NodeID,
		Leader: n.IsLeader, Store: n.fsm, Log: n.log, BatchTimeout: n.cfg.OtelBatchTimeout,
	})
}

// stopOtel sends the spans still held, after the exporter's Run returned.
func (n *Node) stopOtel() {
	if n.otel == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), otelShutdownTimeout)
	defer cancel()
	if err := n.otel.Shutdown(ctx); err != nil {
		n.log.Warn().Err(err).Msg("otel export: spans not sent at stop")
	}
}
