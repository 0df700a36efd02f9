package raftstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/axsched/ax/engine"
	"github.com/axsched/ax/raftfsm"
)

// Config is what the stores and Raft are opened with: the node's
// configuration fields of the same names (sidecar.Config documents each).
type Config struct {
	NodeID  string
	DataDir string
	// RaftAddr is the address the Raft transport listens on; RaftAdvertise
	// the one other nodes dial (in the Raft configuration).
	RaftAddr      string
	RaftAdvertise string
	PeerRoutes    []PeerRoute

	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	SnapshotThreshold  uint64
	SnapshotInterval   time.Duration
	TrailingLogs       uint64
	// LogSync is how the Raft log's segment files are written and
	// fsynced, and the data dir's statfs made (walsync.go); "": LogSyncAuto. OneP reports whether the adaptive
	// GOMAXPROCS controller has the process on one P (procs.OnOneP), the
	// only time LogSyncAuto keeps the P; nil: never.
	LogSync LogSync
	OneP    func() bool
	// SocketHold, when set, makes the Raft transport's connections read
	// and write with raw system calls while it reports true (rawio.Wrap),
	// when Stream is nil; a Stream wraps its own connections.
	SocketHold func() bool
	// TrailingLogsBytes bounds the log bytes kept after a snapshot and
	// triggers one (SnapshotByBytes); 0: no bound.
	TrailingLogsBytes int64

	// StorageReserve (bytes) and StorageProbeInterval configure the Guard.
	StorageReserve       int64
	StorageProbeInterval time.Duration
	Log                  zerolog.Logger
	// Clock is given to the guard and the snapshot gate; nil: real time.
	Clock engine.Clock
	// Stream, when set, makes the Raft transport's stream layer: it
	// listens on bind (RaftAddr) and advertises adv, and authenticates
	// every connection (peertls.Listen: mutual TLS or the token
	// handshake). Nil: raft's plain TCP stream layer.
	Stream func(bind string, adv net.Addr) (raft.StreamLayer, error)
	// BackgroundWork, when set, is called as a snapshot starts to be
	// written (made here or received from the leader) or read (restored,
	// or sent to a follower) and returns the function called when it is
	// closed or cancelled: the node's hint that heavy work runs
	// (config.Config.BackgroundWork). Nil: none.
	BackgroundWork func() (done func())
	// Removed, when set, reports whether this node knows it was removed
	// from the cluster: raft's election lines are then demoted to info
	// (raftlog.go). Nil: never.
	Removed func() bool
	// VouchEmpty makes a node whose configuration is still empty refuse
	// AppendEntries, InstallSnapshot and TimeoutNow from a leader nobody
	// vouched for (SetVouch; membership.go), also before SetVouch is
	// called. False: it takes them from anyone (tests).
	VouchEmpty bool
	// Transport, for tests, replaces the TCP transport on RaftAddr (e.g.
	// a raft.InmemTransport); Close closes it when it is an io.Closer.
	Transport raft.Transport
}

// Store is a node's stores and its Raft instance: badger and the FSM over
// it, the storage guard, the Raft log (DataDir/wal, raft-wal) behind the
// guard, the
// snapshot store behind the disk-pressure gate, and the Raft transport.
// Open it in two steps, OpenState then StartRaft, so that the node can
// read its state (and set the FSM's observer) before Raft replays the log.
type Store struct {
	cfg   Config
	log   zerolog.Logger
	clock engine.Clock

	DB    *badger.DB
	FSM   *raftfsm.FSM
	Guard *Guard
	Raft  *raft.Raft
	// LeaderCh receives true when this node wins leadership and false when
	// it loses it (raft's NotifyCh; buffered).
	LeaderCh <-chan bool
	// HasState reports whether Raft found state of an earlier run (so the
	// node rejoins instead of bootstrapping or joining).
	HasState bool
	// Incarnation is the random id of the data dir, made the first time
	// the node used it (the file DataDir/incarnation).
	Incarnation string
	// LogStats counts the Raft log's writes.
	LogStats LogWriteStats
	// LogWriting tells whether the Raft log is being written.
	LogWriting LogWriting

	logStore *wal.WAL
	syncs    *syncPolicy // how logStore fsyncs (walsync.go); nil before StartRaft
	sizes    entrySizes  // of the entries written to logStore (trailingForBytes)
	// appliedReplaced counts the log suffixes raft deleted from at or
	// below the applied index (checkSuffixDeleted).
	appliedReplaced atomic.Uint64
	transport       raft.Transport
	snaps           *gatedSnapshotStore
}

// OpenState opens badger in DataDir/state, the FSM over it and the
// storage guard (attached to the FSM and probed once). On an error the
// returned Store holds what was opened: Close it.
func OpenState(cfg Config) (*Store, error) {
	if cfg.Clock == nil {
		cfg.Clock = engine.RealClock()
	}
	st := &Store{cfg: cfg, log: cfg.Log, clock: cfg.Clock}
	var err error
	if err := os.MkdirAll(cfg.DataDir, 0o750); err != nil {
		return st, fmt.Errorf("data dir: %w", err)
	}
	if st.Incarnation, err = loadIncarnation(cfg.DataDir); err != nil {
		return st, err
	}
	st.DB, err = raftfsm.OpenDB(filepath.Join(cfg.DataDir, "state"), badgerLogger{cfg.Log})
	if err != nil {
		return st, fmt.Errorf("open badger: %w", err)
	}
	st.FSM, err = raftfsm.Open(st.DB)
	if err != nil {
		return st, err
	}
	st.Guard = NewGuard(GuardConfig{Dir: cfg.DataDir, Reserve: cfg.StorageReserve, Interval: cfg.StorageProbeInterval, FSM: st.FSM, Log: cfg.Log, Clock: cfg.Clock})
	st.Guard.Attach()
	st.Guard.Probe()
	return st, nil
}

// StartRaft opens the Raft log (DataDir/wal, migrating an earlier
// version's raft.db into it first: walstore.go), the snapshot store and
// the Raft transport (on the address advertise resolves), and starts Raft
// over the FSM. It does not bootstrap.
func (st *Store) StartRaft(advertise func() (net.Addr, error)) error {
	cfg := &st.cfg
	hlog := newRaftLogger(hclog.New(&hclog.LoggerOptions{Name: "raft", Level: raftLogLevel(st.log.GetLevel()), Output: os.Stderr, JSONFormat: true}), cfg.Removed)
	mode, err := ParseLogSync(string(cfg.LogSync))
	if err != nil {
		return err
	}
	st.syncs = newSyncPolicy(mode, cfg.OneP, st.log)
	st.Guard.statfsPolicy.Store(st.syncs)
	st.logStore, err = openLogStore(cfg.DataDir, st.log, hlog, st.syncs)
	if err != nil {
		return err
	}
	snaps, err := st.openSnapshots(hlog)
	if err != nil {
		return err
	}
	st.snaps = snaps
	adv, err := advertise()
	if err != nil {
		return err
	}
	if cfg.Transport != nil {
		st.transport = cfg.Transport
	} else {
		tr, err := newRaftTransport(cfg, st.FSM, adv, 3, 10*time.Second, hlog)
		if err != nil {
			return fmt.Errorf("raft transport on %s: %w", cfg.RaftAddr, err)
		}
		st.transport = tr
	}

	rc := st.raftConfig(hlog)
	leaderCh := make(chan bool, 16)
	rc.NotifyCh = leaderCh
	st.LeaderCh = leaderCh

	st.HasState, err = raft.HasExistingState(st.logStore, st.logStore, snaps)
	if err != nil {
		return err
	}
	// The applied-index rule at boot: raft would restore its newest
	// snapshot into the FSM (wipe badger, load the stream) and replay the
	// log after it. When badger already holds that snapshot's index or
	// more, the restore is pure waste: skip it, and let the FSM skip the
	// replayed entries it holds. When badger is behind the snapshot (or the
	// snapshot cannot be read), restore as usual — never adopt a snapshot
	// index the store does not hold.
	if metas, lerr := snaps.List(); lerr == nil && len(metas) > 0 {
		if applied := st.FSM.AppliedIndex(); applied >= metas[0].Index {
			rc.NoSnapshotRestoreOnStart = true
			st.log.Info().Uint64("applied", applied).Uint64("snapshot", metas[0].Index).Msg("badger is at or past the newest snapshot: no restore at start")
		} else {
			st.log.Info().Uint64("applied", applied).Uint64("snapshot", metas[0].Index).Msg("badger is behind the newest snapshot: restoring it")
		}
	}
	logs := newTailCache(guardedLogStore{st.logStore, st.Guard, &st.LogStats}, tailCacheEntries, tailCacheBytes)
	logs.writing = &st.LogWriting
	logs.sizes = &st.sizes
	logs.suffixDeleted = st.checkSuffixDeleted
	fsm := snapshotFSM{FSM: st.FSM, newest: snaps.newestIndex, lastLog: logs.LastIndex}
	// Raft's heartbeat fast path must not change the node's term or state
	// behind its main loop (heartbeat.go), and a node outside this node's
	// configuration must not become its leader (membership.go); the guard
	// is closed with the transport.
	st.transport = guardRPCs(st.transport, st.cfg.NodeID, st.log, cfg.VouchEmpty)
	st.Raft, err = raft.NewRaft(rc, fsm, logs, guardedStableStore{st.logStore, st.Guard}, snaps, st.transport)
	if err != nil {
		return fmt.Errorf("start raft: %w", err)
	}
	if g, ok := st.transport.(*rpcGuard); ok {
		g.setRaft(st.Raft)
	}
	return nil
}

// raftConfig is the Raft configuration of cfg (without NotifyCh).
func (st *Store) raftConfig(hlog hclog.Logger) *raft.Config {
	cfg := &st.cfg
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.NodeID)
	rc.HeartbeatTimeout = cfg.HeartbeatTimeout
	rc.ElectionTimeout = cfg.ElectionTimeout
	rc.LeaderLeaseTimeout = cfg.LeaderLeaseTimeout
	rc.CommitTimeout = 5 * time.Millisecond
	rc.SnapshotThreshold = cfg.SnapshotThreshold
	rc.TrailingLogs = cfg.TrailingLogs
	rc.SnapshotInterval = cfg.SnapshotInterval
	rc.BatchApplyCh = true
	rc.Logger = hlog
	return rc
}

// Collectors are the metrics of the guard and, after StartRaft, of the
// snapshot gate (registered by the node).
func (st *Store) Collectors() []prometheus.Collector {
	cs := st.Guard.Collectors()
	cs = append(cs, prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "ax_raft_applied_entries_replaced_total",
		Help: "Times raft deleted log entries this node had already applied (a leader replaced them): always 0 unless a bug made this node apply an uncommitted entry."},
		func() float64 { return float64(st.appliedReplaced.Load()) }))
	if st.snaps != nil {
		cs = append(cs, st.snaps.Collectors()...)
	}
	if g, ok := st.transport.(*rpcGuard); ok {
		cs = append(cs, prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "ax_raft_rpcs_refused_total",
			Help: "Raft AppendEntries, InstallSnapshot and TimeoutNow refused because their sender is not in this node's configuration (another cluster lists this node's address as a gone member's; the log names it)."},
			func() float64 { return float64(g.refusedN.Load()) }))
	}
	return cs
}

// SetVouch gives the transport guard the way to vouch for a sender
// outside this node's configuration (membership.go): f asks the members
// this node knows whether that sender is their leader. Without it, such
// senders are refused.
func (st *Store) SetVouch(f VouchFunc) {
	if g, ok := st.transport.(*rpcGuard); ok {
		g.vouches.f.Store(&f)
	}
}

// Close closes the transport, the Raft log and badger (those that are open).
// Raft must be shut down first.
func (st *Store) Close() {
	st.CloseTransport()
	if st.logStore != nil {
		st.logStore.Close()
	}
	if st.DB != nil {
		st.DB.Close()
	}
}

// raftShutdownGrace is how long ShutdownRaft still waits for raft once
// ctx has ended and the transport is closed.
const raftShutdownGrace = 5 * time.Second

// ErrShutdownTimeout is returned by ShutdownRaft when raft had not stopped
// when its context ended, nor raftShutdownGrace after its transport was
// closed.
var ErrShutdownTimeout = errors.New("raft did not stop in time")

// ShutdownRaft stops raft and waits for it until ctx ends. Past ctx it
// closes the Raft transport (a replication goroutine blocked on a peer
// connection was once seen to hold raft.Shutdown for minutes) and waits
// raftShutdownGrace more, then gives up. It returns raft's error or
// ErrShutdownTimeout; the stores are the caller's to close either way.
func (st *Store) ShutdownRaft(ctx context.Context) error {
	done := make(chan error, 1)
	go func() { done <- st.Raft.Shutdown().Error() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	st.log.Warn().Msg("raft did not stop within the shutdown's time: closing its transport")
	st.CloseTransport()
	t := time.NewTimer(raftShutdownGrace)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		st.log.Error().Dur("waited", raftShutdownGrace).Msg("raft still not stopped: closing the stores anyway")
		return ErrShutdownTimeout
	}
}

// CloseTransport closes the Raft transport (again: it is idempotent), which
// ends every connection to and from the other nodes. Node.Shutdown calls it
// when raft.Shutdown has not returned in time, so that a replication
// goroutine blocked on a peer connection returns.
func (st *Store) CloseTransport() {
	if c, ok := st.transport.(io.Closer); ok {
		c.Close()
	}
}

// raftLogLevel maps the node's log level to raft's: raft's info lines are
// debug for ax, and its warnings (elections, unreachable peers) show at info.
func raftLogLevel(l zerolog.Level) hclog.Level {
	switch {
	case l <= zerolog.DebugLevel:
		return hclog.Info
	case l <= zerolog.InfoLevel:
		return hclog.Warn
	default:
		return hclog.Error
	}
}

// badgerLogger routes badger's logs into zerolog, keeping only warnings and
// errors.
type badgerLogger struct{ l zerolog.Logger }

func (b badgerLogger) Errorf(f string, a ...interface{})   { b.l.Error().Msgf("badger: "+f, a...) }
func (b badgerLogger) Warningf(f string, a ...interface{}) { b.l.Warn().Msgf("badger: "+f, a...) }
func (b badgerLogger) Infof(string, ...interface{})        {}
func (b badgerLogger) Debugf(string, ...interface{})       {}

// checkSuffixDeleted is told when raft deletes the log from index lo on (a
// follower whose entries from lo conflict with its new leader's). Raft
// never replaces a committed entry, so lo is always above the applied
// index; an entry at or below it that is replaced means this node applied
// an entry the cluster did not commit, and its state now differs from the
// others'. That is logged as an error (once per deletion) with the
// figures, and counted in ax_raft_applied_entries_replaced_total: it is a
// bug, and the log line is where its cause can be found.
func (st *Store) checkSuffixDeleted(lo, hi uint64) {
	applied := st.FSM.AppliedIndex()
	if lo > applied {
		st.log.Debug().Uint64("from", lo).Uint64("to", hi).Uint64("applied", applied).Msg("raft log suffix deleted")
		return
	}
	st.appliedReplaced.Add(1)
	st.log.Error().Uint64("from", lo).Uint64("to", hi).Uint64("applied", applied).
		Msg("raft deleted log entries this node had applied: its state may differ from the other nodes'")
}
