package sidecar

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"github.com/rs/zerolog"

	"github.com/axsched/ax/engine"
	"github.com/axsched/ax/ipc"
	"github.com/axsched/ax/raftfsm"
)

// Node is one ax sidecar: a Raft member with its badger state, the
// application API on a Unix socket, the peer API, and — while it leads — the
// timers that fire tasks. Create it with Start; stop it with Shutdown.
type Node struct {
	cfg   Config
	log   zerolog.Logger
	clock engine.Clock

	db        *badger.DB
	fsm       *raftfsm.FSM
	raft      *raft.Raft
	logStore  *raftboltdb.BoltStore
	transport *raft.NetworkTransport

	api      *ipc.Server
	peer     *peerServer
	peers    *peerClient
	proposer *proposer
	events   *eventQueue
	leader   *leaderState
	// logStats counts the Raft log's writes (group commit figures).
	logStats logWriteStats
	// leaders signals leader changes (forwarded requests follow them).
	leaders  *leaderWatch
	delivery *delivery
	metrics  *metrics
	// storage says whether this node's disk takes writes (storage.go).
	storage *storageGuard
	// autopilot keeps the voters at Config.Voters (it acts on the leader).
	autopilot *autopilot

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	shutdownOnce sync.Once
	registered   atomic.Bool   // this node's record is committed
	removed      atomic.Bool   // the leader does not list this node (removal.go)
	leaderCommit atomic.Uint64 // the leader's commit index at the last load report
	orphans      []raftfsm.Complete
}

// Start opens the node's stores, starts Raft, the peer API and the
// application API, and begins bootstrapping or joining as cfg says. It
// returns once the node serves its socket; the cluster may still be forming
// (GET /readyz tells when it is ready).
func Start(cfg Config, log zerolog.Logger) (*Node, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.DataDir, 0o750); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	n := &Node{cfg: cfg, log: log.With().Str("node", cfg.NodeID).Logger(), clock: engine.RealClock(), ctx: ctx, cancel: cancel}
	if err := n.open(); err != nil {
		cancel()
		n.closeStores()
		return nil, err
	}
	return n, nil
}

func (n *Node) open() error {
	var err error
	n.db, err = raftfsm.OpenDB(filepath.Join(n.cfg.DataDir, "state"), badgerLogger{n.log})
	if err != nil {
		return fmt.Errorf("open badger: %w", err)
	}
	n.fsm, err = raftfsm.Open(n.db)
	if err != nil {
		return err
	}
	n.events = newEventQueue()
	n.fsm.SetObserver(n.events)
	n.storage = newStorageGuard(n.cfg.DataDir, n.cfg.StorageReserve, n.cfg.StorageProbeInterval, n.fsm, n.log)
	n.storage.attach()
	n.storage.probe()
	n.findOrphans()

	n.logStore, err = raftboltdb.NewBoltStore(filepath.Join(n.cfg.DataDir, "raft.db"))
	if err != nil {
		return fmt.Errorf("open raft log: %w", err)
	}
	hlog := hclog.New(&hclog.LoggerOptions{Name: "raft", Level: raftLogLevel(n.log.GetLevel()), Output: os.Stderr, JSONFormat: true})
	snaps, err := raft.NewFileSnapshotStoreWithLogger(n.cfg.DataDir, 2, hlog)
	if err != nil {
		return fmt.Errorf("open snapshots: %w", err)
	}
	adv, err := net.ResolveTCPAddr("tcp", n.cfg.RaftAddr)
	if err != nil {
		return fmt.Errorf("raft-addr: %w", err)
	}
	n.transport, err = n.newRaftTransport(adv, 3, 10*time.Second, hlog)
	if err != nil {
		return fmt.Errorf("raft transport on %s: %w", n.cfg.RaftAddr, err)
	}

	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(n.cfg.NodeID)
	rc.HeartbeatTimeout = n.cfg.HeartbeatTimeout
	rc.ElectionTimeout = n.cfg.ElectionTimeout
	rc.LeaderLeaseTimeout = n.cfg.LeaderLeaseTimeout
	rc.CommitTimeout = 5 * time.Millisecond
	rc.SnapshotThreshold = n.cfg.SnapshotThreshold
	rc.TrailingLogs = n.cfg.TrailingLogs
	rc.SnapshotInterval = n.cfg.SnapshotInterval
	rc.BatchApplyCh = true
	rc.Logger = hlog
	leaderCh := make(chan bool, 16)
	rc.NotifyCh = leaderCh

	hasState, err := raft.HasExistingState(n.logStore, n.logStore, snaps)
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
		if applied := n.fsm.AppliedIndex(); applied >= metas[0].Index {
			rc.NoSnapshotRestoreOnStart = true
			n.log.Info().Uint64("applied", applied).Uint64("snapshot", metas[0].Index).Msg("badger is at or past the newest snapshot: no restore at start")
		} else {
			n.log.Info().Uint64("applied", applied).Uint64("snapshot", metas[0].Index).Msg("badger is behind the newest snapshot: restoring it")
		}
	}
	n.raft, err = raft.NewRaft(rc, n.fsm, guardedLogStore{n.logStore, n.storage, &n.logStats}, guardedStableStore{n.logStore, n.storage}, snaps, n.transport)
	if err != nil {
		return fmt.Errorf("start raft: %w", err)
	}

	n.storage.setOnDown(n.storageDown)
	n.peers = newPeerClient(n.cfg.ClusterToken)
	n.leaders = newLeaderWatch()
	n.proposer = newProposer(n)
	n.leader = newLeaderState(n)
	n.delivery = newDelivery(n)
	n.autopilot = newAutopilot(n)

	n.metrics = newMetrics(n)
	n.metrics.reg.MustRegister(n.storage.collectors()...)
	n.peer = newPeerServer(n)
	if err := n.peer.listen(n.cfg.PeerAddr); err != nil {
		return err
	}
	n.api = ipc.NewServer(n, n.log, ipc.ServerOptions{Metrics: n.metrics.handler()})
	ln, err := listenUnix(n.cfg.Socket)
	if err != nil {
		return err
	}

	n.goRun(func() { n.proposer.run(n.ctx) })
	n.goRun(func() { n.dispatchEvents(n.ctx) })
	n.goRun(func() { n.watchLeadership(n.ctx, leaderCh) })
	n.goRun(func() { n.reportLoop(n.ctx) })
	n.goRun(func() { n.leaders.run(n.ctx, n.raft) })
	n.goRun(func() { n.watchRemoval(n.ctx) })
	n.goRun(func() { n.storage.run(n.ctx) })
	n.goRun(func() { n.autopilot.run(n.ctx) })
	n.goRun(func() { n.delivery.renewLeases(n.ctx) })
	n.goRun(func() { n.register(n.ctx) })
	n.goRun(func() {
		if err := n.api.Serve(ln); err != nil && n.ctx.Err() == nil {
			n.log.Error().Err(err).Msg("application API stopped")
		}
	})

	switch {
	case hasState:
		n.log.Info().Msg("existing raft state found: rejoining the cluster")
		if !n.inConfiguration() {
			n.log.Error().Msg("this node is not in the cluster's configuration (it was removed with 'ax cluster remove', or left): it serves reads of its old state but no writes, and never fires. To rejoin, stop it, delete its data dir and start it with --join")
		}
	case n.cfg.BootstrapExpect == 1 && len(n.cfg.Join) == 0:
		f := n.raft.BootstrapCluster(raft.Configuration{Servers: []raft.Server{{
			ID: raft.ServerID(n.cfg.NodeID), Address: raft.ServerAddress(n.cfg.RaftAddr), Suffrage: raft.Voter,
		}}})
		if err := f.Error(); err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
			return fmt.Errorf("bootstrap: %w", err)
		}
	default:
		n.goRun(func() { n.joinOrBootstrap(n.ctx) })
	}
	n.log.Info().Str("socket", n.cfg.Socket).Str("raft_addr", n.cfg.RaftAddr).Str("peer_addr", n.cfg.PeerAddr).Msg("ax node started")
	return nil
}

func (n *Node) goRun(fn func()) {
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		fn()
	}()
}

// listenUnix removes a stale socket file and listens on path with mode 0660.
func listenUnix(path string) (net.Listener, error) {
	if fi, err := os.Stat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
		if c, err := net.DialTimeout("unix", path, 200*time.Millisecond); err == nil {
			c.Close()
			return nil, fmt.Errorf("socket %s is in use by another process", path)
		}
		os.Remove(path)
	}
	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return nil, err
		}
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen on socket %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o660); err != nil {
		ln.Close()
		return nil, err
	}
	return ln, nil
}

// caughtUp reports whether this node has applied everything the leader
// had committed at the last load report (every reportInterval).
func (n *Node) caughtUp() bool {
	return n.leaderCommit.Load() != 0 && n.fsm.AppliedIndex() >= n.leaderCommit.Load()
}

// ID returns the node id.
func (n *Node) ID() string { return n.cfg.NodeID }

// Config returns the node's configuration with defaults filled in.
func (n *Node) Config() Config { return n.cfg }

// IsLeader reports whether this node is the Raft leader.
func (n *Node) IsLeader() bool { return n.raft.State() == raft.Leader }

// Shutdown stops the node: it stops serving, hands leadership to another
// voter if it leads, stops Raft and closes its stores.
func (n *Node) Shutdown(ctx context.Context) error {
	var err error
	n.shutdownOnce.Do(func() {
		if n.api != nil {
			n.api.Shutdown(ctx)
		}
		if n.raft != nil && n.raft.State() == raft.Leader && n.numServers() > 1 {
			if terr := n.raft.LeadershipTransfer().Error(); terr != nil {
				n.log.Warn().Err(terr).Msg("leadership transfer failed")
			}
		}
		if n.raft != nil && n.cfg.LeaveOnShutdown && n.numServers() > 1 {
			lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			if lerr := n.removeMember(lctx, n.cfg.NodeID); lerr != nil {
				n.log.Warn().Err(lerr).Msg("leaving the cluster failed")
			} else {
				n.log.Info().Msg("left the cluster")
			}
			cancel()
		}
		n.cancel()
		if n.peer != nil {
			n.peer.close()
		}
		n.delivery.stop()
		if n.fsm != nil {
			n.fsm.Abort() // a write being retried must not hold raft.Shutdown
		}
		if n.storage != nil {
			n.storage.stop()
		}
		if n.raft != nil {
			if serr := n.raft.Shutdown().Error(); serr != nil {
				err = serr
			}
		}
		n.wg.Wait()
		n.closeStores()
		os.Remove(n.cfg.Socket)
	})
	return err
}

func (n *Node) closeStores() {
	if n.transport != nil {
		n.transport.Close()
	}
	if n.logStore != nil {
		n.logStore.Close()
	}
	if n.db != nil {
		n.db.Close()
	}
}

func (n *Node) numServers() int {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return 0
	}
	return len(f.Configuration().Servers)
}

// watchLeadership starts the leader's work when this node wins an election
// and stops it when it loses leadership.
func (n *Node) watchLeadership(ctx context.Context, ch <-chan bool) {
	for {
		select {
		case <-ctx.Done():
			n.leader.stop()
			return
		case isLeader := <-ch:
			n.metrics.leaderChanges.Inc()
			if isLeader {
				n.log.Info().Uint64("term", n.term()).Msg("won leadership")
				n.leader.start(ctx)
			} else {
				n.log.Info().Msg("lost leadership")
				n.leader.stop()
			}
		}
	}
}

func (n *Node) term() uint64 {
	return n.raft.CurrentTerm()
}

// dispatchEvents hands every applied change to the leader's timers and to
// this node's delivery, in log order.
func (n *Node) dispatchEvents(ctx context.Context) {
	for {
		evs, ok := n.events.next(ctx)
		if !ok {
			return
		}
		debug := n.log.Debug().Enabled()
		for i := range evs {
			if debug {
				n.logEvent(&evs[i])
			}
			n.leader.onEvent(&evs[i])
			n.delivery.onEvent(&evs[i])
		}
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

var commandNames = map[raftfsm.CommandType]string{
	raftfsm.CmdSubmit: "submit", raftfsm.CmdCancel: "cancel", raftfsm.CmdFire: "fire", raftfsm.CmdComplete: "complete",
	raftfsm.CmdNode: "node", raftfsm.CmdExecutor: "executor", raftfsm.CmdRetry: "retry", raftfsm.CmdLease: "heartbeat",
}

// logEvent writes one debug line per applied change: every line about a
// task carries task_id, attempt, handler and node. Payloads only with
// Config.LogPayloads.
func (n *Node) logEvent(ev *raftfsm.Event) {
	if ev.Restored {
		n.log.Debug().Msg("state replaced by a snapshot")
		return
	}
	e := n.log.Debug().Str("command", commandNames[ev.Type])
	if t := ev.Task; t != nil {
		e = e.Str("task_id", t.ID).Int("attempt", t.Attempts).Str("handler", t.Spec.Handler).
			Str("state", t.State.String()).Str("attempt_node", t.Node)
		if ev.Prev != 0 {
			e = e.Str("prev_state", ev.Prev.String())
		}
		if ev.Outcome != 0 {
			e = e.Str("outcome", ev.Outcome.String())
		}
		if t.State == raftfsm.StateWaiting {
			e = e.Time("due", time.UnixMilli(t.DueMs).UTC())
		}
		if t.LastError != "" && ev.Type == raftfsm.CmdComplete {
			e = e.Str("last_error", t.LastError)
		}
		if n.cfg.LogPayloads {
			e = e.Bytes("payload", t.Spec.Payload)
		}
	} else if ev.Node != nil {
		e = e.Str("member", ev.Node.ID).Int("executors", len(ev.Node.Executors))
	}
	e.Msg("state change")
}

// badgerLogger routes badger's logs into zerolog, keeping only warnings and
// errors.
type badgerLogger struct{ l zerolog.Logger }

func (b badgerLogger) Errorf(f string, a ...interface{})   { b.l.Error().Msgf("badger: "+f, a...) }
func (b badgerLogger) Warningf(f string, a ...interface{}) { b.l.Warn().Msgf("badger: "+f, a...) }
func (b badgerLogger) Infof(string, ...interface{})        {}
func (b badgerLogger) Debugf(string, ...interface{})       {}
