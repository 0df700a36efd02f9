// Package load is the vocabulary of a node's load report: the shape of one
// executor's load as delivery measures it (sidecar/delivery), the peer API
// carries it to the leader (sidecar/peerapi) and the scheduler decides on it
// (sidecar/scheduler). It holds data only, so that those three packages share
// one type without importing each other.
//
// It imports raftfsm (handler patterns) and nothing else of ax.
package load
