package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/axsched/ax/engine"
	"github.com/axsched/ax/internal/procs"
	"github.com/axsched/ax/internal/rawio"
	"github.com/axsched/ax/sidecar"
	"github.com/axsched/ax/sidecar/config"
	"github.com/axsched/ax/sidecar/raftstore"
)

// nodeFlags are the flags of `ax sidecar` (and `ax dev`). Their names are a
// contract: deployment tools call them.
type nodeFlags struct {
	nodeID, dataDir, socket, raftAddr, peerAddr string
	bootstrapExpect                             int
	join                                        []string
	executors                                   []string
	logFormat, logLevel                         string
	heartbeat, election, fireLead, loadWindow   time.Duration
	logPayloads                                 bool
	deliveryConcurrency, deliveryMinConcurrency int
	backlogLimit                                int
	routing                                     string
	clusterToken, clusterTokenFile              string
	leaveOnShutdown                             bool
	drainTimeout                                time.Duration
	breakerFailures                             int
	breakerCoolDown                             time.Duration
	snapshotThreshold, trailingLogs             uint64
	snapshotInterval                            time.Duration
	maxBatchCommands                            int
	gatherWait                                  time.Duration
	raftLogSync                                 string
	socketIO                                    string
	handlerLimits                               []string
	voters                                      int
	autopilotStabilization, autopilotReplace    time.Duration
	deadMemberCleanup                           time.Duration
	storageReserve                              int64
	trailingLogsBytes                           int64
	storageProbeInterval                        time.Duration
	retention, retentionDead, purgeInterval     time.Duration
	historyRuns                                 int
	onDeadURL                                   string
	otelEndpoint, otelServiceName               string
	peerRoutes                                  []string
	adaptiveProcs                               bool
	deploy                                      deployFlags // deployflags.go
	tls                                         tlsFlags    // tls.go
}

func (f *nodeFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.nodeID, "node-id", "", "this node's id in the cluster; keep it across restarts (default: the host name)")
	fl.StringVar(&f.dataDir, "data-dir", config.DataDirDefault, "directory for the Raft log, snapshots and task state")
	fl.StringVar(&f.socket, "socket", config.SocketDefault, "path of the application API's Unix socket")
	fl.StringVar(&f.raftAddr, "raft-addr", config.RaftAddrDefault, "HOST:PORT of the Raft transport")
	fl.StringVar(&f.peerAddr, "peer-addr", config.PeerAddrDefault, "HOST:PORT of the peer API (join, forwarding)")
	fl.IntVar(&f.bootstrapExpect, "bootstrap-expect", config.BootstrapExpectDefault, "number of nodes that form a new cluster together")
	fl.StringSliceVar(&f.join, "join", nil, "peer addresses of other nodes, ADDR[,ADDR...], each HOST:PORT or dns:NAME:PORT (every address NAME resolves to, at PORT, resolved again each round): the nodes to bootstrap with, or members of a cluster to join")
	fl.StringArrayVar(&f.executors, "executor", nil, "HANDLER=URL: this node's app runs HANDLER (* = every handler) at URL (unix:///abs/path.sock or http://127.0.0.1:PORT); repeatable")
	fl.StringVar(&f.logFormat, "log-format", "json", "log format: json or console")
	fl.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn, error (debug: one line per task state change)")
	fl.BoolVar(&f.logPayloads, "log-payloads", false, "include task payloads in debug log lines (off: payloads are never logged)")
	fl.DurationVar(&f.heartbeat, "raft-heartbeat-timeout", config.HeartbeatTimeoutDefault, "Raft heartbeat timeout")
	fl.DurationVar(&f.election, "raft-election-timeout", config.ElectionTimeoutDefault, "Raft election timeout")
	fl.DurationVar(&f.fireLead, "fire-lead", config.FireLeadDefault, "how long before a run's due time the leader commits its fire (the delivering node waits for the due time); -1ns turns it off")
	fl.BoolVar(&f.adaptiveProcs, "adaptive-procs", true, "run on one CPU (GOMAXPROCS=1) while this process's load fits in one and no task is due within 2s nor a callback in flight, and on all of them otherwise (within 20ms of a task coming due, 40ms to a few hundred after the load outgrows one CPU, at once for a snapshot or a compaction): requests cut their hand-offs between threads (one caller's submit p50 0.21 -> 0.15 ms on a 2-CPU VM) and timers still fire on all the CPUs; ignored when $GOMAXPROCS is set")
	fl.DurationVar(&f.loadWindow, "load-window", config.LoadWindowDefault, "how far ahead the leader keeps WAITING tasks armed in memory; later ones are loaded from the store as the window moves (every half window)")
	fl.IntVar(&f.deliveryConcurrency, "delivery-concurrency", config.DeliveryConcurrencyDefault, "most callbacks in flight at once per executor of this node: the adaptive limit's maximum")
	fl.StringVar(&f.clusterToken, "cluster-token", "", "shared secret every peer API request must carry (default: $AX_CLUSTER_TOKEN); give every node the same")
	fl.StringVar(&f.clusterTokenFile, "cluster-token-file", "", "file holding the cluster token (instead of --cluster-token)")
	fl.BoolVar(&f.leaveOnShutdown, "leave-on-shutdown", false, "remove this node from the cluster on a graceful shutdown (SIGTERM)")
	fl.DurationVar(&f.drainTimeout, "drain-timeout", config.DrainTimeoutDefault, "on SIGTERM, how long to wait for the callbacks in flight on this node to finish and be reported (keep it below the pod's grace period)")
	fl.IntVar(&f.breakerFailures, "breaker-failures", engine.BreakerFailuresDefault, "failed attempts in a row that open a handler's circuit (its due runs then wait for the cool-down, and one probe decides)")
	fl.DurationVar(&f.breakerCoolDown, "breaker-cooldown", engine.BreakerCoolDownDefault, "how long an open circuit holds a handler's runs before a probe")
	fl.Uint64Var(&f.snapshotThreshold, "snapshot-threshold", config.SnapshotThresholdDefault, "Raft log entries since the last snapshot that trigger a new one")
	fl.Uint64Var(&f.trailingLogs, "trailing-logs", config.TrailingLogsDefault, "Raft log entries kept after a snapshot (for followers that lag)")
	fl.Int64Var(&f.trailingLogsBytes, "trailing-logs-bytes", config.TrailingLogsBytesDefault, "bound on the bytes of the Raft log entries kept after a snapshot (fewer than --trailing-logs when entries are large); this many bytes written since the last snapshot also trigger one; -1 turns the byte bound off")
	fl.DurationVar(&f.snapshotInterval, "snapshot-interval", config.SnapshotIntervalDefault, "how often Raft checks --snapshot-threshold")
	fl.IntVar(&f.maxBatchCommands, "max-batch-commands", config.MaxBatchCommandsDefault, "most commands the leader group-commits into one Raft entry; 1 turns group commit off")
	_ = fl.MarkHidden("max-batch-commands")
	fl.StringVar(&f.raftLogSync, "raft-log-sync", string(raftstore.LogSyncAuto), "how the Raft log's writes and fsyncs (and the data dir's statfs) wait: auto keeps this thread's P through them while --adaptive-procs has the process on one P and they take under 10ms (no hand-off between threads: one node's 16 callers 18-61% faster, 17-42% less CPU a submit, on a 2-CPU VM); handoff always lets the Go runtime hand the P to another thread meanwhile")
	fl.StringVar(&f.socketIO, "socket-io", string(rawio.ModeAuto), "how the node's connections (its socket, the peer API, the Raft transport) read and write: auto with raw system calls while --adaptive-procs has the process on one P, which neither wake the Go runtime's sysmon thread nor hand the P to another thread (three nodes' 16 callers 22-28% less CPU a submit on a 2-CPU VM); handoff always through the Go runtime")
	fl.DurationVar(&f.gatherWait, "gather-wait", config.GatherWaitDefault, "how long the leader's next Raft entry may wait for the callers the last one answered, so that callers who submit again at once share an entry (it ends when they are back, or stop coming; a fire or any other command ends it at once); 0 is the default, -1ns turns it off")
	fl.StringArrayVar(&f.peerRoutes, "peer-route", nil, "NODE_ID=RAFT_HOST:PORT,PEER_HOST:PORT: dial node NODE_ID's Raft transport and peer API at these addresses instead of the ones it advertises (for tests / network overlays: a relay or fault-injecting proxy per link); repeatable")
	_ = fl.MarkHidden("peer-route")
	fl.StringVar(&f.routing, "routing", config.RoutingLeastLoaded, "how the leader picks among the nodes that run a handler: least_loaded, round_robin or hash (a task's route_key always hashes)")
	fl.StringArrayVar(&f.handlerLimits, "handler-limit", nil, "HANDLER=N: at most N attempts of HANDLER running at once across the cluster (give every node the same); repeatable")
	fl.IntVar(&f.backlogLimit, "backlog-limit", config.BacklogLimitDefault, "bound on each handler's backlog of due, undelivered runs: a submit due within 1s past it gets 429 queue_full; -1 turns it off")
	fl.IntVar(&f.deliveryMinConcurrency, "delivery-min-concurrency", config.LimiterMinDefault, "the adaptive concurrency limit's minimum per executor; equal to --delivery-concurrency for a fixed limit")
	fl.IntVar(&f.voters, "voters", config.VotersDefault, "voters autopilot keeps (odd: 3 or 5); other members stay non-voters, promoted when a voter fails (give every node the same)")
	fl.DurationVar(&f.autopilotStabilization, "autopilot-stabilization", config.AutopilotStabilizationDefault, "how long a non-voter must stay healthy (heard from, caught up) before autopilot promotes it")
	fl.DurationVar(&f.autopilotReplace, "autopilot-replace-after", config.AutopilotReplaceAfterDefault, "how long a voter may go unheard before autopilot promotes a stable non-voter in its place and demotes it")
	fl.DurationVar(&f.deadMemberCleanup, "dead-member-cleanup", config.DeadMemberCleanupDefault, "how long a member may go unheard before autopilot removes it from the cluster (a voter only while the rest keep a quorum); 0 turns it off")
	fl.Int64Var(&f.storageReserve, "storage-reserve", config.StorageReserveDefault, "free bytes the data dir must keep: below it the node stops writing badger and answers writes 503 storage_unavailable until space is freed; -1 turns the check off")
	fl.DurationVar(&f.storageProbeInterval, "storage-probe-interval", config.StorageProbeIntervalDefault, "how often the node checks its data dir's free space; it also writes, fsyncs and removes a probe file every 30s, and every interval while storage is unavailable")
	fl.DurationVar(&f.retention, "retention", config.RetentionDefault, "how long SUCCESS and CANCELLED tasks are kept after they finished, then purged (a task's own retention overrides it); -1ns keeps them forever")
	fl.IntVar(&f.historyRuns, "history-runs", config.HistoryRunsDefault, "run records kept per task, the newest (ax runs ID); -1 keeps none")
	fl.StringVar(&f.onDeadURL, "on-dead-url", "", "webhook base URL (unix:///abs/path.sock or http://127.0.0.1:PORT) the leader POSTs one JSON alert to, at /ax/v1/alert, per run that ends DEAD or FAILED; give every node the same; empty: no alerts")
	fl.StringVar(&f.otelEndpoint, "otel-endpoint", "", "OTLP/HTTP URL of an OpenTelemetry collector (http://127.0.0.1:4318; /v1/traces is added to a URL without a path): every run that ends is sent as a trace, a span per run with children for its commit, queue and attempts; empty (the default) sends nothing")
	fl.StringVar(&f.otelServiceName, "otel-service-name", config.OtelServiceNameDefault, "service.name of the spans --otel-endpoint sends")
	fl.DurationVar(&f.retentionDead, "retention-dead", config.RetentionDeadDefault, "how long DEAD and FAILED tasks are kept after they finished (a task's own retention overrides it); -1ns keeps them forever")
	fl.DurationVar(&f.purgeInterval, "purge-interval", config.PurgeIntervalDefault, "how often the leader purges the finished tasks whose retention ended")
	f.deploy.register(fl)
	f.tls.register(fl)
}

func (f *nodeFlags) config() (sidecar.Config, error) {
	if err := f.deploy.applyEnv(); err != nil {
		return sidecar.Config{}, err
	}
	cfg := sidecar.Config{
		NodeID: f.nodeID, DataDir: f.dataDir, Socket: f.socket, RaftAddr: f.raftAddr, PeerAddr: f.peerAddr,
		BootstrapExpect: f.bootstrapExpect, HeartbeatTimeout: f.heartbeat, ElectionTimeout: f.election, FireLead: f.fireLead, LoadWindow: f.loadWindow, LogPayloads: f.logPayloads,
	}
	cfg.DeliveryConcurrency = f.deliveryConcurrency
	if f.procsEnabled() {
		cfg.BackgroundWork = procs.Busy // snapshots and compactions run on all the CPUs
		cfg.OnOneP = procs.OnOneP       // disk and socket calls keep the one P (--raft-log-sync, --socket-io auto)
	}
	cfg.BacklogLimit = f.backlogLimit
	cfg.Routing = f.routing
	cfg.LeaveOnShutdown = f.leaveOnShutdown
	cfg.DrainTimeout = f.drainTimeout
	cfg.MaxBatchCommands = f.maxBatchCommands
	cfg.GatherWait = f.gatherWait
	cfg.RaftLogSync = raftstore.LogSync(f.raftLogSync)
	cfg.SocketIO = rawio.Mode(f.socketIO)
	cfg.SnapshotThreshold, cfg.TrailingLogs, cfg.SnapshotInterval = f.snapshotThreshold, f.trailingLogs, f.snapshotInterval
	cfg.BreakerFailures, cfg.BreakerCoolDown = f.breakerFailures, f.breakerCoolDown
	cfg.Voters, cfg.AutopilotStabilization, cfg.AutopilotReplaceAfter = f.voters, f.autopilotStabilization, f.autopilotReplace
	cfg.DeadMemberCleanup = f.deadMemberCleanup
	if cfg.DeadMemberCleanup == 0 {
		cfg.DeadMemberCleanup = -1 // the flag's 0 is off; Config's 0 is the default
	}
	cfg.StorageReserve, cfg.StorageProbeInterval = f.storageReserve, f.storageProbeInterval
	cfg.TrailingLogsBytes = f.trailingLogsBytes
	cfg.Retention, cfg.RetentionDead, cfg.PurgeInterval = f.retention, f.retentionDead, f.purgeInterval
	cfg.HistoryRuns = f.historyRuns
	cfg.OnDeadURL = f.onDeadURL
	cfg.OtelEndpoint, cfg.OtelServiceName = f.otelEndpoint, f.otelServiceName
	cfg.ClusterToken = f.clusterToken
	if cfg.ClusterToken == "" {
		cfg.ClusterToken = os.Getenv("AX_CLUSTER_TOKEN")
	}
	if f.clusterTokenFile != "" {
		if f.clusterToken != "" {
			return cfg, fmt.Errorf("--cluster-token and --cluster-token-file: give at most one")
		}
		b, err := os.ReadFile(f.clusterTokenFile)
		if err != nil {
			return cfg, fmt.Errorf("--cluster-token-file: %w", err)
		}
		cfg.ClusterToken = strings.TrimSpace(string(b))
		if cfg.ClusterToken == "" {
			return cfg, fmt.Errorf("--cluster-token-file %s is empty", f.clusterTokenFile)
		}
	}
	for _, hl := range f.handlerLimits {
		h, v, ok := strings.Cut(hl, "=")
		n, err := strconv.Atoi(v)
		if !ok || h == "" || err != nil || n < 1 {
			return cfg, fmt.Errorf("--handler-limit %q: want HANDLER=N with N >= 1", hl)
		}
		if cfg.HandlerLimits == nil {
			cfg.HandlerLimits = map[string]int{}
		}
		cfg.HandlerLimits[h] = n
	}
	cfg.DeliveryMinConcurrency = min(f.deliveryMinConcurrency, f.deliveryConcurrency)
	for _, j := range f.join {
		if j = strings.TrimSpace(j); j != "" {
			cfg.Join = append(cfg.Join, j)
		}
	}
	for _, r := range f.peerRoutes {
		pr, err := config.ParsePeerRoute(r)
		if err != nil {
			return cfg, fmt.Errorf("--peer-route: %w", err)
		}
		cfg.PeerRoutes = append(cfg.PeerRoutes, pr)
	}
	for _, e := range f.executors {
		ex, err := config.ParseExecutor(e)
		if err != nil {
			return cfg, err
		}
		cfg.Executors = append(cfg.Executors, ex)
	}
	if err := f.deploy.apply(&cfg); err != nil {
		return cfg, err
	}
	f.tls.apply(&cfg)
	cfg = cfg.WithDefaults()
	return cfg, cfg.Validate()
}

// colorOutput reports whether console logs written to f get colours: only
// when f is a terminal (a character device) and $NO_COLOR is unset
// (no-color.org), so that logs redirected to a file or a pipe have no
// escape sequences in them.
func colorOutput(f *os.File) bool {
	if os.Getenv("NO_COLOR") != "" {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func (f *nodeFlags) logger() (zerolog.Logger, error) {
	lvl, err := zerolog.ParseLevel(f.logLevel)
	if err != nil {
		return zerolog.Logger{}, fmt.Errorf("--log-level %q: want debug, info, warn or error", f.logLevel)
	}
	zerolog.TimeFieldFormat = time.RFC3339Nano
	var l zerolog.Logger
	switch f.logFormat {
	case "json":
		l = zerolog.New(os.Stderr)
	case "console":
		l = zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr, TimeFormat: "15:04:05.000", NoColor: !colorOutput(os.Stderr)})
	default:
		return l, fmt.Errorf("--log-format %q: want json or console", f.logFormat)
	}
	return l.Level(lvl).With().Timestamp().Logger(), nil
}

// configAndLogger checks the flags: a bad value is a usage error (exit 2).
func (f *nodeFlags) configAndLogger() (sidecar.Config, zerolog.Logger, error) {
	cfg, err := f.config()
	if err != nil {
		return cfg, zerolog.Logger{}, &usageError{err}
	}
	log, err := f.logger()
	if err != nil {
		return cfg, log, &usageError{err}
	}
	return cfg, log, nil
}

// runFlags are every flag of a command that runs a node: `ax sidecar` and
// `ax dev` both register them here, so that dev takes every sidecar flag
// (TestDevTakesEverySidecarFlag).
type runFlags struct {
	node      nodeFlags
	ui        uiFlags
	pprofAddr string
}

func (r *runFlags) register(cmd *cobra.Command) {
	r.node.register(cmd)
	r.ui.registerSidecar(cmd.Flags())
	registerPprofFlag(cmd, &r.pprofAddr)
}

func sidecarCmd() *cobra.Command {
	var rf runFlags
	f, uf := &rf.node, &rf.ui
	cmd := &cobra.Command{
		Use:   "sidecar",
		Short: "Run one ax node: the Unix-socket API, a Raft member, timers on the leader, callbacks to this node's executors",
		Example: `  # a three-node cluster on one machine (run each in its own terminal)
  ax sidecar --node-id n1 --data-dir /tmp/ax1 --socket /tmp/ax1.sock --raft-addr 127.0.0.1:7420 --peer-addr 127.0.0.1:7421 \
    --bootstrap-expect 3 --join 127.0.0.1:7431,127.0.0.1:7441 --executor '*=unix:///tmp/app1.sock'`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, log, err := f.configAndLogger()
			if err != nil {
				return err
			}
			logf := func(format string, args ...any) { log.Warn().Msgf(format, args...) }
			pln, err := listenPprof(rf.pprofAddr)
			if err != nil {
				return err
			}
			srv, ln, err := uf.listenUI(cfg.Socket, logf)
			if err != nil {
				closeListener(pln)
				return err
			}
			servePprof(pln, cmd.ErrOrStderr())
			n, err := sidecar.Start(cfg, log)
			if err != nil {
				closeListener(ln)
				closeListener(pln)
				return err
			}
			stopProcs := sync.OnceFunc(f.startProcs(log, n))
			defer stopProcs()
			stopUI := serveUI(srv, ln, logf)
			if srv != nil {
				log.Info().Str("ui_addr", ln.Addr().String()).Msg("dashboard serving")
			}
			defer stopUI()
			return waitForSignal(n, stopProcs)
		},
	}
	rf.register(cmd)
	return cmd
}

// waitForSignal blocks until SIGINT or SIGTERM, then calls beforeShutdown
// (it stops the adaptive GOMAXPROCS, whose readings query the store that
// Shutdown closes) and shuts the node down (handing leadership over first
// when it leads). Shutdown is bounded: a second signal, or
// shutdownTimeout, ends the process at once (Raft state is on disk; a
// restart recovers it).
func waitForSignal(n *sidecar.Node, beforeShutdown func()) error {
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sig)
	return shutdownOnSignal(n, sig, beforeShutdown)
}

// shutdowner is what shutdownOnSignal needs of a node (*sidecar.Node).
type shutdowner interface {
	Config() sidecar.Config
	Shutdown(ctx context.Context) error
}

// shutdownOnSignal is waitForSignal on the signals of sig.
func shutdownOnSignal(n shutdowner, sig <-chan os.Signal, beforeShutdown func()) error {
	<-sig
	beforeShutdown()
	bound := n.Config().DrainTimeout + shutdownTimeout
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- n.Shutdown(ctx) }()
	select {
	case err := <-done:
		return err
	case <-sig:
		return fmt.Errorf("second signal: stopped without a clean shutdown")
	case <-ctx.Done():
		return fmt.Errorf("shutdown took longer than %s: stopped without a clean shutdown", bound)
	}
}

// shutdownTimeout bounds a graceful shutdown beyond the drain timeout
// (leadership hand-over, leaving the configuration, closing the stores).
const shutdownTimeout = 10 * time.Second
