package config

import (
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/hashicorp/raft"

	"github.com/axsched/ax/engine"
	"github.com/axsched/ax/internal/rawio"
	"github.com/axsched/ax/raftfsm"
	"github.com/axsched/ax/sidecar/cluster"
	"github.com/axsched/ax/sidecar/delivery"
	"github.com/axsched/ax/sidecar/delivery/callback"
	"github.com/axsched/ax/sidecar/otelexport"
	"github.com/axsched/ax/sidecar/raftstore"
	"github.com/axsched/ax/sidecar/scheduler"
)

// Defaults of Config fields. Each constant carries its unit in its value.
const (
	DataDirDefault         = "./ax-data"
	SocketDefault          = "./ax.sock"
	RaftAddrDefault        = "127.0.0.1:7420"
	PeerAddrDefault        = "127.0.0.1:7421"
	BootstrapExpectDefault = 1
	// HeartbeatTimeoutDefault and ElectionTimeoutDefault are tuned for a
	// loopback or LAN cluster: a follower that hears nothing from the leader
	// for this long starts an election (hashicorp/raft's own defaults are 1 s,
	// sized for WANs).
	HeartbeatTimeoutDefault = 500 * time.Millisecond
	ElectionTimeoutDefault  = 500 * time.Millisecond
	// LeaderLeaseTimeoutDefault: a leader that cannot reach a quorum for this
	// long steps down.
	LeaderLeaseTimeoutDefault = 250 * time.Millisecond
	// LeaseGraceDefault is added to an attempt's timeout to form its lease:
	// the leader counts a TIMEOUT only when it has heard nothing by then.
	LeaseGraceDefault = 5 * time.Second
	// FireLeadDefault is how long before a run's due time the leader
	// commits its Fire, so that the commit latency does not add to the
	// lateness; the delivering node waits for the due time.
	FireLeadDefault = 50 * time.Millisecond
	// GatherWaitDefault bounds how long the leader's next Raft entry waits
	// for the callers the entry before it answered (Config.GatherWait).
	GatherWaitDefault = 2 * time.Millisecond
	// LoadWindowDefault is how far ahead the leader keeps WAITING tasks
	// armed in memory (docs/DESIGN.md section 4, step 2): tasks due later stay in the
	// store until the window reaches them.
	LoadWindowDefault = 10 * time.Minute
	// DeliveryConcurrencyDefault is the most callbacks in flight per
	// executor: the adaptive limit's maximum (the burst benchmark, ax bench burst, needs 200).
	DeliveryConcurrencyDefault = 200
	// BacklogLimitDefault bounds each handler's backlog: due runs not yet
	// delivered (no executor, or executors saturated).
	BacklogLimitDefault = 100_000
	// SnapshotThresholdDefault is how many log entries trigger a snapshot.
	SnapshotThresholdDefault = 8192
	// TrailingLogsDefault is how many entries stay in the log after a snapshot.
	TrailingLogsDefault = 10240
	// SnapshotIntervalDefault is how often Raft checks whether to snapshot.
	SnapshotIntervalDefault = 30 * time.Second
	// VotersDefault is the number of voters autopilot keeps (Config.Voters).
	VotersDefault = 3
	// AutopilotStabilizationDefault is how long a non-voter must stay
	// healthy before autopilot promotes it (Consul's server_stabilization_time).
	AutopilotStabilizationDefault = 10 * time.Second
	// AutopilotReplaceAfterDefault is how long a voter may go unheard
	// before autopilot replaces it with a stable non-voter.
	AutopilotReplaceAfterDefault = 10 * time.Second
	// DeadMemberCleanupDefault is how long a member may go unheard before
	// autopilot removes it from the configuration (Consul's
	// CleanupDeadServers).
	DeadMemberCleanupDefault = time.Hour
	// StorageReserveDefault is the free space (bytes) the data dir must
	// keep: below it the node refuses writes (503 storage_unavailable)
	// and the FSM stops writing to badger. It covers what badger may
	// still write into files it sized in advance (memtable log: 2 x
	// 16 MiB) plus a memtable flush, so that badger never meets a full
	// disk: it writes through mmap, where a full disk kills the process
	// with SIGBUS instead of returning an error (see raftstore/storage.go).
	StorageReserveDefault = 64 << 20
	// TrailingLogsBytesDefault bounds the bytes of the Raft log entries
	// kept after a snapshot, and the log bytes written since the last
	// snapshot that trigger a new one (Config.TrailingLogsBytes).
	TrailingLogsBytesDefault = 64 << 20
	// StorageProbeIntervalDefault is how often the node checks its data
	// dir's free space; the probe file (write + fsync) is written every
	// storageWriteProbeEvery, or every interval while storage is
	// unavailable.
	StorageProbeIntervalDefault = 2 * time.Second
	// DrainTimeoutDefault is Config.DrainTimeout's default: below a pod's
	// default grace period (30 s) with room for the hand-over and the leave.
	DrainTimeoutDefault = 20 * time.Second
)

// Defaults and values of Config fields that belong to the node's parts.
const (
	// MaxBatchCommandsDefault bounds the commands group-committed in one
	// Raft entry (raftstore.MaxBatchCommandsDefault).
	MaxBatchCommandsDefault = raftstore.MaxBatchCommandsDefault
	// LimiterMinDefault is the lowest concurrency an executor's adaptive
	// limit goes down to, unless its registration says otherwise
	// (delivery.LimiterMinDefault).
	LimiterMinDefault = delivery.LimiterMinDefault
	// SocketModeDefault is the Unix socket's default permission bits
	// (cluster.SocketModeDefault).
	SocketModeDefault = cluster.SocketModeDefault
	// RetentionDefault, RetentionDeadDefault and PurgeIntervalDefault are
	// the defaults of Retention, RetentionDead and PurgeInterval
	// (package scheduler).
	RetentionDefault     = scheduler.RetentionDefault
	RetentionDeadDefault = scheduler.RetentionDeadDefault
	// HistoryRunsDefault is the default of HistoryRuns; HistoryRunsMax its
	// largest value.
	HistoryRunsDefault   = raftfsm.HistoryRunsDefault
	HistoryRunsMax       = 10000
	PurgeIntervalDefault = scheduler.PurgeIntervalDefault

	// The values of Routing (package scheduler).
	RoutingLeastLoaded = scheduler.RoutingLeastLoaded
	RoutingRoundRobin  = scheduler.RoutingRoundRobin
	RoutingHash        = scheduler.RoutingHash
)

// PeerRoute overrides the addresses this node dials to reach one other
// node (raftstore.PeerRoute).
type PeerRoute = raftstore.PeerRoute

// ParsePeerRoute parses a --peer-route value:
// NODE_ID=RAFT_HOST:PORT,PEER_HOST:PORT.
func ParsePeerRoute(s string) (PeerRoute, error) { return raftstore.ParsePeerRoute(s) }

// Resolver resolves a host name to its addresses (cluster.Resolver);
// *net.Resolver implements it.
type Resolver = cluster.Resolver

// Executor is an app endpoint on this node that runs the handlers matching
// Handler ("*" = every handler) at URL (unix:///abs/path.sock or
// http://127.0.0.1:PORT).
type Executor struct {
	Handler string
	URL     string
}

// ParseExecutor parses a --executor flag value, HANDLER=URL.
func ParseExecutor(s string) (Executor, error) {
	h, u, ok := strings.Cut(s, "=")
	if !ok || h == "" || u == "" {
		return Executor{}, fmt.Errorf("executor %q: want HANDLER=URL", s)
	}
	if _, _, err := callback.ParseExecutorURL(u); err != nil {
		return Executor{}, fmt.Errorf("executor %q: %w", s, err)
	}
	return Executor{Handler: h, URL: u}, nil
}

// OtelServiceNameDefault is the default of OtelServiceName.
const OtelServiceNameDefault = otelexport.ServiceNameDefault

// Config is the configuration of one node.
type Config struct {
	// NodeID is this node's id in the Raft group; it must stay the same
	// across restarts. Defaults to the host name.
	NodeID string
	// DataDir holds the Raft log (wal), snapshots and the badger state.
	// Defaults to DataDirDefault.
	DataDir string
	// Socket is the path of the application API's Unix socket. Defaults to
	// SocketDefault.
	Socket string
	// RaftAddr is the TCP address of the Raft transport. Defaults to
	// RaftAddrDefault.
	RaftAddr string
	// PeerAddr is the TCP address of the peer API (join, forwarding).
	// Defaults to PeerAddrDefault.
	PeerAddr string
	// BootstrapExpect is the number of nodes that form a new cluster
	// together. 1 bootstraps alone unless Join is set. Defaults to 1.
	BootstrapExpect int
	// Join lists peer addresses of other nodes: the nodes to bootstrap with,
	// or members of an existing cluster to join.
	Join []string
	// Executors are this node's app endpoints.
	Executors []Executor
	// HeartbeatTimeout, ElectionTimeout and LeaderLeaseTimeout tune Raft.
	// Default to HeartbeatTimeoutDefault, ElectionTimeoutDefault and
	// LeaderLeaseTimeoutDefault.
	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	// LeaseGrace is added to an attempt's timeout to form its lease.
	// Defaults to LeaseGraceDefault.
	LeaseGrace time.Duration
	// FireLead is how long before a run's due time the leader commits its
	// Fire (the delivering node holds the attempt until the due time).
	// -1 turns it off. Defaults to FireLeadDefault.
	FireLead time.Duration
	// GatherWait bounds how long the leader's next Raft entry waits for
	// the callers that submitted one task each into the entry before it
	// and were just answered (raftstore.ProposerConfig.GatherWait: the
	// wait ends sooner when they are back; any other command ends it at
	// once), so that callers who submit again at
	// once share entries instead of alternating between two. A node
	// started alone (--bootstrap-expect 1 without --join) keeps one entry
	// of submits in flight for it and pipelines the rest; -1 turns it
	// off there too, and then nothing is bounded. Defaults to
	// GatherWaitDefault.
	GatherWait time.Duration
	// LoadWindow is how far ahead of now the leader arms WAITING tasks;
	// every LoadWindow/2 it loads the next stretch from the due-time
	// index, so memory holds a window, not the whole store. Defaults to
	// LoadWindowDefault; at least 1s.
	LoadWindow time.Duration
	// DeliveryConcurrency is the most callbacks in flight per executor (the
	// adaptive limit's maximum), unless the executor's registration sets
	// max_concurrency. Defaults to DeliveryConcurrencyDefault.
	DeliveryConcurrency int
	// DeliveryMinConcurrency is the adaptive limit's minimum per executor,
	// unless the registration sets min_concurrency; set it equal to
	// DeliveryConcurrency for a fixed limit. Defaults to LimiterMinDefault.
	DeliveryMinConcurrency int
	// BacklogLimit bounds each handler's backlog of due runs not yet
	// delivered; a submit due within a second that would pass it gets 429
	// queue_full (and from 80 % of it, an Ax-Backlog-Warning header).
	// Tasks due later are not counted until they are due. -1 turns it off.
	// Defaults to BacklogLimitDefault.
	BacklogLimit int
	// ClusterToken, when set, must be sent by every peer API request (the
	// nodes' own join, forwarding and reports); others get 401. Without
	// TLS it also guards the Raft port: every Raft connection opens with a
	// token handshake (peertls.TokenAuth). Give every node the same.
	ClusterToken string
	// TLSCert, TLSKey and TLSCA are PEM files (all three or none): this
	// node's certificate, its private key, and the CA certificates a
	// peer's certificate must chain to. With them every Raft connection
	// and every peer API call is mutual TLS 1.3 (sidecar/peertls); the
	// files are re-read every TLSReloadInterval and a valid new set is
	// used from the next handshake on. TLSServerName, when set, is the
	// name checked in the certificate of every node this node dials,
	// instead of the host it dials.
	TLSCert, TLSKey, TLSCA string
	TLSServerName          string
	// TLSReloadInterval is how often the TLS files are checked for a
	// change (peertls.ReloadIntervalDefault when 0).
	TLSReloadInterval time.Duration
	// LeaveOnShutdown removes this node from the Raft configuration when it
	// shuts down gracefully (after handing leadership over), so that a
	// cluster scaled down keeps its quorum size right.
	LeaveOnShutdown bool
	// DrainTimeout bounds how long a graceful shutdown waits for the
	// callbacks in flight on this node to finish and their outcomes to be
	// reported (sidecar/drain.go). Defaults to DrainTimeoutDefault.
	DrainTimeout time.Duration
	// BreakerFailures is how many failed attempts in a row open a
	// handler's circuit: its due runs then wait (not fail) for
	// BreakerCoolDown, and a single probe decides. Default to 5 and 30s
	// (engine.BreakerFailuresDefault, engine.BreakerCoolDownDefault).
	// They configure the leader's breakers and each node's own, fed by
	// the callbacks it makes (sidecar/delivery/breaker.go).
	BreakerFailures int
	BreakerCoolDown time.Duration
	// Routing chooses among the nodes with an executor for a handler:
	// RoutingLeastLoaded (from the nodes' load reports), RoutingRoundRobin
	// or RoutingHash (on the handler name). A task with a route_key is
	// always routed by hash of its key. Defaults to RoutingLeastLoaded.
	Routing string
	// HandlerLimits caps, per handler, the attempts RUNNING at once across
	// the whole cluster (a per-handler concurrency limit); the leader's
	// setting applies, so give every node the same. Absent: no cap.
	HandlerLimits map[string]int
	// MaxBatchCommands bounds the commands the leader group-commits into
	// one Raft entry: every proposal that arrives while the previous entry
	// is built joins the next one. 1 turns group commit off (one entry per
	// request; for measurements). Defaults to MaxBatchCommandsDefault.
	MaxBatchCommands int
	// LogPayloads adds task payloads to the debug log lines of state
	// changes. Off by default: payloads may hold personal data.
	LogPayloads bool
	// SnapshotThreshold and TrailingLogs bound the Raft log. Default to
	// SnapshotThresholdDefault and TrailingLogsDefault.
	SnapshotThreshold uint64
	TrailingLogs      uint64
	// TrailingLogsBytes bounds the Raft log's bytes as well as its
	// entries (raftstore/snapgate.go): after a snapshot at most this many bytes of
	// entries are kept (fewer than TrailingLogs when entries are large),
	// and this many bytes written since the last snapshot trigger a new
	// one. TrailingLogsBytesDefault when 0; a negative value turns the
	// byte bound off.
	TrailingLogsBytes int64
	// SnapshotInterval is how often Raft checks SnapshotThreshold.
	// Defaults to SnapshotIntervalDefault.
	SnapshotInterval time.Duration
	// RaftLogSync is how the Raft log's writes and fsyncs, and the data
	// dir's statfs, block (--raft-log-sync): raftstore.LogSyncAuto (""
	// too) keeps the P through them while the adaptive controller has the
	// process on one P (OnOneP) and they are fast;
	// raftstore.LogSyncHandoff sends every one through the Go runtime,
	// which hands the P to another thread (raftstore/walsync.go).
	RaftLogSync raftstore.LogSync
	// SocketIO is how ax's connections read and write (--socket-io):
	// rawio.ModeAuto ("" too) with raw system calls while the adaptive
	// controller has the process on one P (OnOneP), rawio.ModeHandoff
	// through the Go runtime always (internal/rawio).
	SocketIO rawio.Mode
	// PeerRoutes override the addresses this node dials to reach other
	// nodes (Raft transport and peer API), one route per node; for tests
	// and network overlays (see PeerRoute). Empty: dial the advertised
	// addresses.
	PeerRoutes []PeerRoute
	// Voters is how many voters autopilot keeps in the Raft configuration
	// (odd, 1 to 9); the other members stay non-voters, ready to replace a
	// failed voter. The nodes of a --bootstrap-expect set beyond the first
	// Voters (by id) start as non-voters. Give every node the same.
	// Defaults to VotersDefault.
	Voters int
	// AutopilotStabilization is how long a non-voter must stay healthy
	// (heard from, caught up) before autopilot promotes it. Defaults to
	// AutopilotStabilizationDefault.
	AutopilotStabilization time.Duration
	// AutopilotReplaceAfter is how long a voter may go unheard before
	// autopilot promotes a stable non-voter in its place and demotes it.
	// Defaults to AutopilotReplaceAfterDefault.
	AutopilotReplaceAfter time.Duration
	// DeadMemberCleanup is how long a member may go unheard (no load
	// report reached the leader) before autopilot removes it from the
	// configuration: a voter only while the others alive keep a quorum.
	// Defaults to DeadMemberCleanupDefault; negative: never. At least
	// AutopilotReplaceAfter.
	DeadMemberCleanup time.Duration
	// StorageReserve is the free space, in bytes, the data dir must keep
	// for the node to accept writes (StorageReserveDefault when 0; a
	// negative value turns the free-space check off).
	StorageReserve int64
	// StorageProbeInterval is how often the data dir is probed: free
	// space every interval, a written probe file every 30 s or, while
	// storage is unavailable, every interval (StorageProbeIntervalDefault
	// when 0).
	StorageProbeInterval time.Duration
	// Retention is how long SUCCESS and CANCELLED tasks are kept after
	// they finished, RetentionDead DEAD and FAILED ones; a task's own
	// retention overrides both. RetentionDefault and RetentionDeadDefault
	// when 0; negative: kept forever. The leader's settings apply.
	Retention, RetentionDead time.Duration
	// PurgeInterval is how often the leader purges the tasks whose
	// retention ended (PurgeIntervalDefault when 0).
	PurgeInterval time.Duration
	// HistoryRuns is how many run records are kept per task (the newest;
	// docs/DESIGN.md section 12); negative keeps none. The leader's
	// setting travels in its Fire commands, so every replica keeps the
	// same runs. Defaults to HistoryRunsDefault; at most HistoryRunsMax.
	HistoryRuns int
	// OnDeadURL is the dead-run webhook's base URL (--on-dead-url):
	// unix:///abs/path.sock or http://LOOPBACK:PORT[/prefix], like an
	// executor's (callback.ParseAlertURL). While this node leads it POSTs
	// one alert per run that ends DEAD or FAILED to OnDeadURL +
	// /ax/v1/alert (sidecar/alert; docs/DESIGN.md section 12). The
	// leader's setting decides whether alerts are recorded at all: give
	// every node the same. "" (the default): no alerts, at no cost.
	OnDeadURL string
	// OtelEndpoint is the OTLP/HTTP URL of an OpenTelemetry collector
	// (http://127.0.0.1:4318; a URL without a path gets /v1/traces): each
	// run that ends is sent there as a trace (sidecar/otelexport,
	// docs/DESIGN.md section 12). Empty, the default: nothing is exported
	// and nothing is allocated for it.
	OtelEndpoint string
	// OtelServiceName is the service.name of the exported spans.
	// Defaults to OtelServiceNameDefault.
	OtelServiceName string
	// OtelBatchTimeout, for tests, is how long a span waits in the batch
	// span processor before it is sent. Defaults to
	// otelexport.BatchTimeoutDefault.
	OtelBatchTimeout time.Duration
	// RaftAdvertise and PeerAdvertise are the addresses other nodes dial
	// to reach this node's Raft transport and peer API, HOST:PORT: what
	// goes into the Raft configuration and the node record. Default to
	// RaftAddr and PeerAddr; required when those bind every interface
	// (0.0.0.0 or [::]). See cluster/discovery.go.
	RaftAdvertise, PeerAdvertise string
	// HealthAddr, when set, is a TCP HOST:PORT serving GET /healthz and
	// /readyz only (for kubelet probes). Empty: none.
	HealthAddr string
	// SocketMode is the permission bits of the Unix socket (default
	// SocketModeDefault); SocketGroup, when set, is the group (name or
	// numeric gid) the socket is given, so that an app container with
	// another uid but that group can use it.
	SocketMode  os.FileMode
	SocketGroup string
	// Resolver resolves the names of dns:NAME:PORT join entries. Nil:
	// net.DefaultResolver.
	Resolver Resolver

	// Hooks for tests (sidecar/sidecartest runs in-process clusters on
	// them). Production leaves them nil; there are no flags.
	//
	// Clock is the node's clock for all of ax's own timers and due times
	// (scheduler, delivery, leases, forwarding, membership); Raft's own
	// timeouts stay on real time. Nil: engine.RealClock().
	Clock engine.Clock
	// RetryClock, when set, times instead of Clock the waits on Raft and
	// the network, which Raft's real-time timeouts decide: the pauses
	// between tries of a forward or of an outcome report while there is no
	// leader, the give-up after NoLeaderWait, the wait for a forwarded
	// write to be applied here. A test on a fake Clock sets it to
	// engine.RealClock(), so that these retries go on while its clock
	// stands still. Nil: Clock.
	RetryClock engine.Clock
	// RaftTransport, when set, is the Raft transport instead of a TCP
	// transport on RaftAddr (e.g. a raft.InmemTransport); its LocalAddr
	// must equal RaftAdvertise. The node closes it on shutdown when it
	// implements io.Closer.
	RaftTransport raft.Transport
	// PeerDial, when set, dials the peer API of other nodes (addr is
	// HOST:PORT) instead of a plain TCP dial; a test refuses the dials of
	// a partitioned node with it.
	PeerDial func(addr string) (net.Conn, error)
	// BackgroundWork, when set, is called as each heavy background job
	// starts — writing a Raft snapshot (made here or received from the
	// leader), reading one (to restore it or send it to a follower),
	// compacting badger after purges — and returns the function
	// called when it ends. ax sidecar and ax dev set it to procs.Busy with
	// --adaptive-procs, so that such work never holds the one P that
	// timers and requests need. Nil: nothing is called.
	BackgroundWork func() (done func())
	// OnOneP, when set, reports whether the process runs on one P under
	// the adaptive controller (procs.OnOneP: ax sidecar and ax dev set it
	// with --adaptive-procs): only then do the Raft log's writes and
	// fsyncs (RaftLogSync auto) and the connections' reads and writes
	// (SocketIO auto) keep their P. Nil: never.
	OnOneP func() bool

	// defaulted is set by WithDefaults, so that a second call changes
	// nothing: a field given -1 ("off") is 0 after the first call, which a
	// second would take for "not set" and give the default (the CLI fills
	// the defaults, then Start does again: --storage-reserve -1 got the
	// 64 MiB reserve, --retention -1 a 24 h retention).
	defaulted bool
}

// WithDefaults returns a copy of c with every zero field set to its
// default, and -1 in the fields that take it ("off") set to 0. Called again
// on its result, it returns it unchanged.
func (c Config) WithDefaults() Config {
	if c.defaulted {
		return c
	}
	c.defaulted = true
	if c.NodeID == "" {
		c.NodeID, _ = os.Hostname()
	}
	def := func(s *string, d string) {
		if *s == "" {
			*s = d
		}
	}
	def(&c.DataDir, DataDirDefault)
	def(&c.Socket, SocketDefault)
	def(&c.RaftAddr, RaftAddrDefault)
	def(&c.PeerAddr, PeerAddrDefault)
	if c.BootstrapExpect == 0 {
		c.BootstrapExpect = BootstrapExpectDefault
	}
	dur := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	dur(&c.HeartbeatTimeout, HeartbeatTimeoutDefault)
	dur(&c.DrainTimeout, DrainTimeoutDefault)
	dur(&c.ElectionTimeout, ElectionTimeoutDefault)
	dur(&c.LeaderLeaseTimeout, LeaderLeaseTimeoutDefault)
	dur(&c.LeaseGrace, LeaseGraceDefault)
	dur(&c.LoadWindow, LoadWindowDefault)
	defaultOrOff(&c.FireLead, FireLeadDefault)
	defaultOrOff(&c.GatherWait, GatherWaitDefault)
	if c.DeliveryConcurrency == 0 {
		c.DeliveryConcurrency = DeliveryConcurrencyDefault
	}
	defaultOrOff(&c.BacklogLimit, BacklogLimitDefault)
	if c.MaxBatchCommands == 0 {
		c.MaxBatchCommands = MaxBatchCommandsDefault
	}
	if c.Routing == "" {
		c.Routing = RoutingLeastLoaded
	}
	if c.DeliveryMinConcurrency == 0 {
		c.DeliveryMinConcurrency = min(LimiterMinDefault, c.DeliveryConcurrency)
	}
	if c.SnapshotThreshold == 0 {
		c.SnapshotThreshold = SnapshotThresholdDefault
	}
	if c.TrailingLogs == 0 {
		c.TrailingLogs = TrailingLogsDefault
	}
	dur(&c.SnapshotInterval, SnapshotIntervalDefault)
	if c.Voters == 0 {
		c.Voters = VotersDefault
	}
	dur(&c.AutopilotStabilization, AutopilotStabilizationDefault)
	dur(&c.AutopilotReplaceAfter, AutopilotReplaceAfterDefault)
	dur(&c.DeadMemberCleanup, DeadMemberCleanupDefault)
	defaultOrOff(&c.StorageReserve, StorageReserveDefault)
	defaultOrOff(&c.TrailingLogsBytes, TrailingLogsBytesDefault)
	dur(&c.StorageProbeInterval, StorageProbeIntervalDefault)
	defaultOrOff(&c.Retention, RetentionDefault)
	defaultOrOff(&c.RetentionDead, RetentionDeadDefault)
	dur(&c.PurgeInterval, PurgeIntervalDefault)
	if c.HistoryRuns == 0 {
		c.HistoryRuns = HistoryRunsDefault
	}
	if c.OtelServiceName == "" {
		c.OtelServiceName = OtelServiceNameDefault
	}
	dur(&c.OtelBatchTimeout, otelexport.BatchTimeoutDefault)
	c = c.withDeployDefaults()
	return c
}

// Validate reports the first invalid field of a config filled by
// WithDefaults. The checks of this file name the Config field and its flag
// ("LoadWindow (--load-window) 500ms: at least 1s"); routing keeps its
// older wording, which the CLI's tests pin. It also refuses what raft.NewRaft would refuse (validateRaft), so
// that Start, which calls it first, fails before it creates the data dir or
// opens any store.
func (c Config) Validate() error {
	if c.NodeID == "" {
		return fmt.Errorf("NodeID (--node-id): must not be empty")
	}
	for _, a := range []struct{ name, v string }{{"RaftAddr (--raft-addr)", c.RaftAddr}, {"PeerAddr (--peer-addr)", c.PeerAddr}} {
		if _, port, err := net.SplitHostPort(a.v); err != nil || port == "" || port == "0" {
			return fmt.Errorf("%s %q: want HOST:PORT with a fixed port", a.name, a.v)
		}
	}
	if c.RaftAddr == c.PeerAddr {
		return fmt.Errorf("RaftAddr (--raft-addr) and PeerAddr (--peer-addr) must differ (both %q)", c.RaftAddr)
	}
	if err := c.validateDeploy(); err != nil {
		return err
	}
	if _, err := raftstore.ParseLogSync(string(c.RaftLogSync)); err != nil {
		return fmt.Errorf("RaftLogSync (--raft-log-sync): %w", err)
	}
	if _, err := rawio.ParseMode(string(c.SocketIO)); err != nil {
		return fmt.Errorf("SocketIO (--socket-io): %w", err)
	}
	if c.HistoryRuns > HistoryRunsMax {
		return fmt.Errorf("HistoryRuns (--history-runs) %d: at most %d", c.HistoryRuns, HistoryRunsMax)
	}
	if c.OtelEndpoint != "" {
		if _, err := otelexport.CheckEndpoint(c.OtelEndpoint); err != nil {
			return fmt.Errorf("OtelEndpoint (--otel-endpoint) %w", err)
		}
	}
	if c.BootstrapExpect < 1 {
		return fmt.Errorf("BootstrapExpect (--bootstrap-expect) %d: must be at least 1", c.BootstrapExpect)
	}
	if c.BootstrapExpect > 1 && len(c.Join) == 0 {
		return fmt.Errorf("BootstrapExpect (--bootstrap-expect) %d needs Join (--join) with the other nodes' peer addresses", c.BootstrapExpect)
	}
	if c.BreakerFailures < 0 || c.BreakerCoolDown < 0 {
		return fmt.Errorf("BreakerFailures (--breaker-failures) %d and BreakerCoolDown (--breaker-cooldown) %v must not be negative", c.BreakerFailures, c.BreakerCoolDown)
	}
	switch c.Routing {
	case RoutingLeastLoaded, RoutingRoundRobin, RoutingHash:
	default:
		return fmt.Errorf("routing %q: want least_loaded, round_robin or hash", c.Routing)
	}
	for h, n := range c.HandlerLimits {
		if h == "" || n < 1 {
			return fmt.Errorf("HandlerLimits (--handler-limit) %s=%d: want HANDLER=N with N >= 1", h, n)
		}
	}
	if c.GatherWait > time.Second {
		return fmt.Errorf("GatherWait (--gather-wait) %v: at most 1s", c.GatherWait)
	}
	if c.FireLead > 10*time.Second {
		return fmt.Errorf("FireLead (--fire-lead) %v: at most 10s", c.FireLead)
	}
	if c.PurgeInterval < 10*time.Millisecond {
		return fmt.Errorf("PurgeInterval (--purge-interval) %v: at least 10ms", c.PurgeInterval)
	}
	if c.LoadWindow < time.Second {
		return fmt.Errorf("LoadWindow (--load-window) %v: at least 1s", c.LoadWindow)
	}
	if c.DeliveryConcurrency < 1 || c.DeliveryConcurrency > 10000 {
		return fmt.Errorf("DeliveryConcurrency (--delivery-concurrency) %d: must be between 1 and 10000", c.DeliveryConcurrency)
	}
	if c.DeliveryMinConcurrency < 1 || c.DeliveryMinConcurrency > c.DeliveryConcurrency {
		return fmt.Errorf("DeliveryMinConcurrency (--delivery-min-concurrency) %d: must be between 1 and DeliveryConcurrency (--delivery-concurrency) %d", c.DeliveryMinConcurrency, c.DeliveryConcurrency)
	}
	if err := c.validateRaft(); err != nil {
		return err
	}
	if err := c.validateAutopilot(); err != nil {
		return err
	}
	if err := c.validateTLS(); err != nil {
		return err
	}
	if err := raftstore.ValidatePeerRoutes(c.NodeID, c.PeerRoutes); err != nil {
		return err
	}
	if c.OnDeadURL != "" {
		if err := callback.ParseAlertURL(c.OnDeadURL); err != nil {
			return fmt.Errorf("OnDeadURL (--on-dead-url): %w", err)
		}
	}
	for _, e := range c.Executors {
		if _, _, err := callback.ParseExecutorURL(e.URL); err != nil {
			return fmt.Errorf("Executors (--executor) %s=%s: %w", e.Handler, e.URL, err)
		}
	}
	return nil
}

// defaultOrOff sets *v to def when it is 0, and to 0 (off) when it is
// negative: the rule of the options whose zero value means "default" and
// whose negative value turns the feature off.
func defaultOrOff[T ~int | ~int64](v *T, def T) {
	switch {
	case *v == 0:
		*v = def
	case *v < 0:
		*v = 0
	}
}

// SocketHold is the hold function of the node's connections
// (rawio.Wrap): OnOneP under SocketIO auto, nil (never) under handoff or
// without OnOneP.
func (c Config) SocketHold() func() bool { return c.SocketIO.Hold(c.OnOneP) }
