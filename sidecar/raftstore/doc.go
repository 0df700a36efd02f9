// Package raftstore is where a task is stored: a node's badger state and
// the FSM over it, its Raft log (raft-wal), its snapshots and its Raft
// instance, and the leader's group commit that turns proposals into Raft
// entries.
//
// # What it owns
//
//   - Setup (store.go): OpenState opens badger and the FSM; StartRaft
//     opens the Raft log (walstore.go: DataDir/wal, migrating an earlier
//     version's raft.db into it; logcache.go keeps its newest entries in
//     memory for raft's reads), the snapshot store and the transport,
//     and applies the applied-index rule at boot (no snapshot restore when
//     badger already holds it).
//   - The log's disk calls (walsync.go): on one P, a raw fsync and raw
//     pwrites of up to 16 KiB, and the storage guard's raw statfs, that
//     keep their P instead of the runtime's hand-off to another thread
//     and its wake-up of sysmon (Config.LogSync, --raft-log-sync), and
//     the fallback after a slow one.
//   - The storage guard (storage.go, diskpressure.go): whether this node's
//     disk takes writes, from a periodic probe, the FSM's write errors and
//     the Raft log's; the levels of free space against the reserve; the
//     FSM's write gate; the guarded log and stable stores.
//   - The snapshot gate (snapgate.go): snapshots start only when free
//     space covers them, a snapshot that nears the reserve is cancelled,
//     the trailing log is bounded in bytes, and badger compaction waits
//     for room (Compactor).
//   - Group commit (proposer.go): Proposer batches the leader's proposals
//     into entries, with at most MaxInflightEntries entries in flight so
//     that concurrent proposals gather (on a single node: those that
//     arrive while the Raft log is written, logwriting.go), admits submits against the
//     handler's backlog, holds proposals while storage is unavailable,
//     holds those whose Prepare reads the store until the node has caught
//     up with its term (ProposerConfig.CaughtUp), and waits for the
//     commit.
//   - Peer routing (peerroute.go): --peer-route overrides of the
//     addresses this node dials, for the Raft transport and the peer API;
//     the transport runs over Config.Stream's stream layer when set (the
//     node gives peertls's: mutual TLS or the token handshake), else over
//     plain TCP whose connections read and write through internal/rawio
//     when Config.SocketHold is set.
//   - Raft's logger (raftlog.go): hclog's JSON lines on stderr; the lines
//     raft repeats about a peer that is down or refuses it come once, then
//     once per 30 s with a count; once the node knows it was removed from
//     the cluster (Config.Removed), raft's election lines are demoted to
//     info (ax's debug).
//   - The transport guard (heartbeat.go, membership.go): heartbeats that
//     could change the node's term or state go through raft's main loop;
//     AppendEntries, InstallSnapshot and TimeoutNow from a node outside
//     the configuration are refused.
//   - The leadership watch (leaderwatch.go): LeaderWatch tells when the
//     leader changes; Broadcast wakes every waiter of a state change.
//
// # What it may import
//
// engine (the clock), raftfsm, ipc's wire types (the storage error's API
// answer and status), internal/rawio (the raw connections and their
// bound), hashicorp/raft, raft-wal, badger,
// prometheus and zerolog; golang.org/x/sys/unix for the raw fsync and
// pwrite (walsync.go); raft-boltdb only to migrate an earlier
// version's raft.db (walstore.go). It must not import sidecar or its other
// sub-packages. What it needs from the rest of the node it asks through
// its own small interfaces and config structs: Backlog (the leader's
// count of due runs, for admission), ProposerConfig.Prepare (the leader's
// decisions on a command), ProposerConfig.CaughtUp (the barrier after an
// election has returned), ProposerConfig.Weight; sidecar adapts them in
// sidecar/wire_raftstore.go.
//
// # Time
//
// Times of the state (since when storage is unavailable, when a skipped
// snapshot was last logged, commit latency, admission's due window) come
// from the injected engine.Clock. The periodic loops (probe, snapshot by
// bytes, compaction retry) and the stable store's retry backoff run on
// real tickers, like raft's own timeouts, and so does the raw fsync's
// timing (walsync.go: how long the system call took, monotonic).
package raftstore
