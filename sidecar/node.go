package sidecar

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/axsched/ax/engine"
	"github.com/axsched/ax/internal/rawio"
	"github.com/axsched/ax/ipc"
	"github.com/axsched/ax/raftfsm"
	"github.com/axsched/ax/sidecar/alert"
	"github.com/axsched/ax/sidecar/api"
	"github.com/axsched/ax/sidecar/cluster"
	"github.com/axsched/ax/sidecar/delivery"
	"github.com/axsched/ax/sidecar/forward"
	"github.com/axsched/ax/sidecar/nodemetrics"
	"github.com/axsched/ax/sidecar/otelexport"
	"github.com/axsched/ax/sidecar/peertls"
	"github.com/axsched/ax/sidecar/raftstore"
	"github.com/axsched/ax/sidecar/scheduler"
)

// Node is one ax sidecar: a Raft member with its badger state, the
// application API on a Unix socket, the peer API, and — while it leads — the
// timers that fire tasks. Create it with Start; stop it with Shutdown.
type Node struct {
	cfg   Config
	log   zerolog.Logger
	clock engine.Clock
	// retryClock times the waits on Raft and the network (Config.RetryClock).
	retryClock engine.Clock

	// store holds badger, the Raft log, the snapshots and Raft (raftstore).
	store *raftstore.Store
	db    *badger.DB
	fsm   *raftfsm.FSM
	raft  *raft.Raft

	api *ipc.Server
	// backend answers the application API (sidecar/api, wire_api.go).
	backend *api.Backend
	peer    *peerServer
	peers   *peerClient
	// sec authenticates peer traffic: TLS or the token (peertls.Security).
	sec *peertls.Security
	// proposer group-commits this node's proposals while it leads; prep
	// fills in the leader's decisions on each command (scheduler/prepare.go).
	proposer *raftstore.Proposer
	prep     *scheduler.Preparer
	// forward proposes locally or sends to the leader (sidecar/forward).
	forward *forward.Forwarder
	events  *eventQueue
	leader  *scheduler.Scheduler
	// leaders signals leader changes (forwarded requests follow them).
	leaders  *raftstore.LeaderWatch
	delivery *nodeDelivery
	metrics  *nodemetrics.Metrics
	// storage says whether this node's disk takes writes (raftstore.Guard).
	storage *raftstore.Guard
	// cluster keeps this node in the cluster: join, registration, load
	// reports, autopilot (on the leader), removal (wire_cluster.go).
	cluster *cluster.Membership
	// retention purges finished tasks (leader) and reclaims disk space.
	retention *scheduler.Retention
	// alerts sends dead-run alerts to Config.OnDeadURL while this node
	// leads (wire_alert.go).
	alerts *alert.Sender
	// otel exports ended runs as traces; nil without --otel-endpoint
	// (wire_otel.go).
	otel *otelexport.Exporter
	// pauses holds the paused handlers (scheduler/pause.go).
	pauses scheduler.Pauses
	// healthAddr is the health port's address, "" without one (cluster/health.go).
	healthAddr string
	// drain says whether this node and others are stopping (drain.go).
	drain drainState

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	shutdownOnce sync.Once
	registered   atomic.Bool   // this node's record is committed
	removed      atomic.Bool   // the leader does not list this node (cluster/remove.go)
	leaderCommit atomic.Uint64 // the leader's commit index at the last load report
	// leaderCommitCh is closed (and replaced) when leaderCommit changes
	// (setLeaderCommit); under leaderCommitMu.
	leaderCommitMu sync.Mutex
	leaderCommitCh chan struct{}
	orphans        []raftfsm.Complete
	orphanRuns     []delivery.Orphan
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
	if cfg.Clock != nil {
		n.clock = cfg.Clock // for tests (Config.Clock)
	}
	n.retryClock = n.clock
	if cfg.RetryClock != nil {
		n.retryClock = cfg.RetryClock // for tests (Config.RetryClock)
	}
	if err := n.open(); err != nil {
		cancel()
		n.closeStores()
		return nil, err
	}
	return n, nil
}

func (n *Node) open() error {
	sec, err := peertls.NewSecurity(peertls.SecurityConfig{Files: n.cfg.TLSFiles(), Token: n.cfg.ClusterToken, ReloadInterval: n.cfg.TLSReloadInterval, Log: n.log, Hold: n.cfg.SocketHold()})
	if err != nil {
		return err
	}
	if msg := n.cfg.UnauthenticatedWarning(); msg != "" {
		n.log.Warn().Msg(msg)
	}
	n.sec = sec
	opened := time.Now()
	st, err := raftstore.OpenState(n.storeConfig())
	n.store = st
	if err != nil {
		return err
	}
	n.db, n.fsm, n.storage = st.DB, st.FSM, st.Guard
	n.log.Info().Dur("took", time.Since(opened)).Int64("tasks", n.fsm.TotalTasks()).Uint64("applied_index", n.fsm.AppliedIndex()).
		Bool("handler_counts_saved", n.fsm.HandlerCountsSaved()).Bool("recounted_after_split", n.fsm.RecountedAfterSplit()).Msg("state opened")
	n.events = newEventQueue(&n.pauses)
	n.fsm.SetObserver(n.events)
	if err := n.pauses.Load(n.fsm); err != nil {
		return fmt.Errorf("read paused handlers: %w", err)
	}
	n.orphans, n.orphanRuns = findOrphans(n.fsm, n.cfg.NodeID) // attempts the store says run here
	if err := st.StartRaft(func() (net.Addr, error) { return n.resolveAdvertise(cluster.AdvertiseResolveWait) }); err != nil {
		return err
	}
	n.raft = st.Raft
	hasState := st.HasState

	n.storage.SetOnDown(n.storageDown)
	n.peers = newPeerClient(n.cfg.ClusterToken, n.clock)
	n.peers.SetHold(n.cfg.SocketHold())
	if n.cfg.PeerDial != nil {
		n.peers.SetDial(n.cfg.PeerDial) // for tests (Config.PeerDial)
	}
	n.sec.SetClient(n.peers)
	n.leaders = raftstore.NewLeaderWatch()
	n.metrics = nodemetrics.New()
	n.prep = newPreparer(n) // wire_scheduler.go
	n.proposer = newGroupCommit(n)
	n.forward = newForwarder(n)
	n.delivery = newDelivery(n) // after n.metrics: it writes them
	n.leader = newScheduler(n)  // wire_scheduler.go
	n.cluster = newMembership(n)
	// A sender of Raft RPCs this node's configuration does not list is
	// let through once a member it knows names it as leader
	// (raftstore/membership.go).
	st.SetVouch(n.cluster.VouchLeader)
	// Badger's compaction after purges waits for room for a snapshot
	// (raftstore/snapgate.go).
	compactor := st.GateCompaction(func() error { return n.db.Flatten(1) })
	n.retention = newRetention(n, compactor) // wire_scheduler.go
	n.alerts = newAlerts(n)                  // wire_alert.go

	n.metrics.Watch(metricsSources(n)) // wire_nodemetrics.go
	n.metrics.Register(st.Collectors()...)
	n.metrics.Register(n.retention.Collectors()...)
	n.metrics.Register(n.alerts.Collectors()...)
	n.backend = newBackend(n) // wire_api.go
	n.peer = newPeerServer(n)
	if err := n.peer.listen(n.cfg.PeerAddr); err != nil {
		return err
	}
	n.api = ipc.NewServer(n.backend, n.log, ipc.ServerOptions{Metrics: n.metrics.Handler()})
	ln, err := cluster.ListenUnix(n.cfg.Socket, n.cfg.SocketMode, n.cfg.SocketGroup)
	if err != nil {
		return err
	}
	ln = rawio.WrapListener(ln, n.cfg.SocketHold())
	if err := n.serveHealth(n.ctx); err != nil {
		ln.Close()
		return err
	}
	if n.otel, err = newOtel(n); err != nil {
		ln.Close()
		return err
	}
	if n.otel != nil {
		n.metrics.Register(n.otel.Collectors()...)
		n.goRun(func() { n.otel.Run(n.ctx) })
	}

	n.goRun(func() { n.proposer.Run(n.ctx) })
	n.goRun(func() { n.sec.Run(n.ctx) })
	n.goRun(func() { n.dispatchEvents(n.ctx) })
	n.goRun(func() { n.watchLeadership(n.ctx, st.LeaderCh) })
	n.goRun(func() { n.cluster.ReportLoop(n.ctx) })
	n.goRun(func() { n.leaders.Run(n.ctx, n.raft) })
	n.goRun(func() { n.cluster.WatchRemoval(n.ctx) })
	n.goRun(func() { n.storage.Run(n.ctx) })
	n.goRun(func() { st.SnapshotByBytes(n.ctx) })
	n.goRun(func() { compactor.Run(n.ctx) })
	n.goRun(func() { n.cluster.RunAutopilot(n.ctx) })
	n.goRun(func() { n.retention.Run(n.ctx) })
	n.goRun(func() { n.delivery.RenewLeases(n.ctx) })
	n.goRun(func() { n.cluster.Register(n.ctx) })
	n.goRun(func() {
		if err := n.api.Serve(ln); err != nil && n.ctx.Err() == nil {
			n.log.Error().Err(err).Msg("application API stopped")
		}
	})

	switch {
	case hasState:
		n.log.Info().Msg("existing raft state found: rejoining the cluster")
		if !cluster.InConfiguration(n.raft, n.cfg.NodeID) {
			n.log.Error().Msg("this node is not in the cluster's configuration (it was removed with 'ax cluster remove', or left): it serves reads of its old state but no writes, and never fires. To rejoin, stop it, delete its data dir and start it with --join")
		}
	case n.cfg.BootstrapExpect == 1 && len(n.cfg.Join) == 0:
		f := n.raft.BootstrapCluster(raft.Configuration{Servers: []raft.Server{{
			ID: raft.ServerID(n.cfg.NodeID), Address: raft.ServerAddress(n.cfg.RaftAdvertise), Suffrage: raft.Voter,
		}}})
		if err := f.Error(); err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
			return fmt.Errorf("bootstrap: %w", err)
		}
	default:
		n.goRun(func() { n.cluster.JoinOrBootstrap(n.ctx) })
	}
	n.log.Info().Str("socket", n.cfg.Socket).Str("raft_addr", n.cfg.RaftAddr).Str("peer_addr", n.cfg.PeerAddr).Str("raft_advertise", n.cfg.RaftAdvertise).Str("peer_advertise", n.cfg.PeerAdvertise).Str("health_addr", n.healthAddr).Msg("ax node started")
	return nil
}

func (n *Node) goRun(fn func()) {
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		fn()
	}()
}

// caughtUp reports whether this node has applied everything the leader
// had committed at the last load report (every cluster.ReportInterval).
func (n *Node) caughtUp() bool {
	return n.leaderCommit.Load() != 0 && n.fsm.AppliedIndex() >= n.leaderCommit.Load()
}

// Backend returns the node's application API: what its Unix socket
// serves (for tests that call it in-process, sidecar/sidecartest).
func (n *Node) Backend() ipc.Backend { return n.backend }

// ID returns the node id.
func (n *Node) ID() string { return n.cfg.NodeID }

// Config returns the node's configuration with defaults filled in.
func (n *Node) Config() Config { return n.cfg }

// IsLeader reports whether this node is the Raft leader.
func (n *Node) IsLeader() bool { return n.raft.State() == raft.Leader }

// Shutdown stops the node gracefully, in this order (drain.go): it stops
// serving the application API; stops taking attempts (the leader routes
// new ones elsewhere) and hands those assigned here but not started back
// to the leader; waits, at most Config.DrainTimeout, for the callbacks in
// flight to finish and their outcomes to be reported (to whichever node
// leads by then); hands leadership to a voter that is not stopping if it
// leads; leaves the configuration with Config.LeaveOnShutdown (retried
// while the leader is busy, at most cluster.LeaveTimeout); then stops Raft and
// closes its stores. ctx bounds the whole; past it the remaining steps
// are cut short. It returns Raft's shutdown error.
func (n *Node) Shutdown(ctx context.Context) error {
	var err error
	n.shutdownOnce.Do(func() {
		if n.api != nil {
			n.api.Shutdown(ctx)
		}
		if n.raft != nil && n.delivery != nil {
			n.drainDelivery(ctx)
		}
		if n.raft != nil && n.cluster != nil {
			n.fireAheadOfHandOver(ctx)
			n.cluster.HandOver(drainVoters{n}) // cluster/leave.go
		}
		if n.raft != nil && n.cluster != nil && n.cfg.LeaveOnShutdown && n.numServers() > 1 {
			n.cluster.Leave(ctx, drainVoters{n})
		}
		n.cancel()
		if n.peer != nil {
			n.peer.close()
		}
		n.delivery.Stop()
		if n.fsm != nil {
			n.fsm.Abort() // a write being retried must not hold raft.Shutdown
		}
		if n.storage != nil {
			n.storage.Stop()
		}
		if n.raft != nil && n.store != nil {
			err = n.store.ShutdownRaft(ctx) // bounded by ctx (raftstore/store.go)
			if err == nil && n.fsm != nil {
				// Raft has stopped: no Apply runs any more. The next
				// start reads these instead of decoding every task.
				if serr := n.fsm.SaveHandlerCounts(); serr != nil {
					n.log.Warn().Err(serr).Msg("could not save the task counts per handler: the next start counts them from the store")
				}
			}
		}
		n.wg.Wait()
		n.stopOtel()
		n.closeStores()
		os.Remove(n.cfg.Socket)
	})
	return err
}

func (n *Node) closeStores() {
	if n.store != nil {
		n.store.Close()
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
			n.leader.Stop()
			n.alerts.Stop()
			return
		case isLeader := <-ch:
			n.metrics.LeaderChanges.Inc()
			if isLeader {
				n.log.Info().Uint64("term", n.term()).Msg("won leadership")
				n.leader.Start(ctx)
				n.alerts.Start(ctx)
			} else {
				n.log.Info().Msg("lost leadership")
				n.leader.Stop()
				n.alerts.Stop()
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
			n.leader.OnPauseEvent(&evs[i])
			n.leader.OnEvent(&evs[i])
			n.delivery.OnEvent(&evs[i])
			n.retention.OnEvent(&evs[i])
			n.alerts.OnEvent(&evs[i])
			if n.otel != nil {
				n.otel.OnEvent(&evs[i])
			}
		}
		n.pauses.Handled(evs)
	}
}

var commandNames = map[raftfsm.CommandType]string{
	raftfsm.CmdSubmit: "submit", raftfsm.CmdCancel: "cancel", raftfsm.CmdFire: "fire", raftfsm.CmdComplete: "complete",
	raftfsm.CmdNode: "node", raftfsm.CmdExecutor: "executor", raftfsm.CmdRetry: "retry", raftfsm.CmdLease: "heartbeat",
	raftfsm.CmdPurge:     "purge",
	raftfsm.CmdPause:     "pause",
	raftfsm.CmdFlow:      "flow",
	raftfsm.CmdAlertDone: "alert_done",
}

// logEvent writes one debug line per applied change, with the index and
// term of its entry: every line about a task carries task_id, attempt, handler,
// node and the record's updated_ms (what two nodes' logs are compared by
// when their states differ). Payloads only with
// Config.LogPayloads.
func (n *Node) logEvent(ev *raftfsm.Event) {
	if ev.Restored {
		n.log.Debug().Msg("state replaced by a snapshot")
		return
	}
	e := n.log.Debug().Str("command", commandNames[ev.Type]).Uint64("index", ev.Index).Uint64("term", ev.Term)
	if t := ev.Task; t != nil {
		e = e.Str("task_id", t.ID).Int("attempt", t.Attempts).Str("handler", t.Spec.Handler).
			Str("state", t.State.String()).Str("attempt_node", t.Node).Int64("updated_ms", t.UpdatedMs)
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

// NothingDueWithin reports whether, in this node's state, no task is
// RUNNING (no callback in flight anywhere in the cluster) and no WAITING
// task falls due within d of now. A follower's state lags the leader's by
// its apply lag. ax's adaptive GOMAXPROCS puts the process on one P only
// while it is true (cmd/ax/procs.go), so that timers set ahead fire and
// their callbacks run on all the CPUs, not on one P shared with
// background work; it asks every 20 ms, so the answer must stay cheap:
//   - the counts answer first (no WAITING task: true; a RUNNING one:
//     false);
//   - else it seeks the due-time index from dueLookBack before now, not
//     from its start: the head of the index holds the deleted keys of
//     every task fired since badger last compacted them, and walking
//     200 000 of them took 6–14 ms a call. A task still WAITING more than
//     dueLookBack after its due time is one that cannot fire (its handler
//     is paused) or waits for a delivery slot or an open circuit: it is
//     late already, and with a slot taken a callback is in flight.
//
// A read error reports false.
func (n *Node) NothingDueWithin(d time.Duration) bool {
	if n.fsm == nil {
		return false
	}
	counts := n.fsm.Counts()
	if counts[raftfsm.StateWaiting] == 0 {
		return counts[raftfsm.StateRunning] == 0
	}
	if counts[raftfsm.StateRunning] > 0 {
		return false
	}
	now := n.clock.Now()
	due := false
	err := n.fsm.DueBetween(now.Add(-dueLookBack).UnixMilli(), now.Add(d).UnixMilli(), func(string, int64) bool {
		due = true
		return false
	})
	return err == nil && !due
}

// dueLookBack is how far before now NothingDueWithin looks for WAITING
// tasks: a task submitted due at once is found for this long.
const dueLookBack = time.Second

// RegisterCollectors adds cs to the registry this node serves at
// /metrics; it panics, as prometheus.MustRegister does, on a duplicate
// (a programming error). The ax command adds its process's collectors
// (the adaptive GOMAXPROCS's changes) this way.
func (n *Node) RegisterCollectors(cs ...prometheus.Collector) { n.metrics.Register(cs...) }
