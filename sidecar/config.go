package sidecar

import (
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/axsched/ax/ipc"
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
	// LoadWindowDefault is how far ahead the leader keeps WAITING tasks
	// armed in memory (DESIGN §4 step 2): tasks due later stay in the
	// store until the window reaches them.
	LoadWindowDefault = 10 * time.Minute
	// DeliveryConcurrencyDefault is the most callbacks in flight per
	// executor: the adaptive limit's maximum (seed 004's burst needs 200).
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
	// StorageReserveDefault is the free space (bytes) the data dir must
	// keep: below it the node refuses writes (503 storage_unavailable)
	// and the FSM stops writing to badger. It covers what badger may
	// still write into files it sized in advance (memtable log: 2 x
	// 16 MiB) plus a memtable flush, so that badger never meets a full
	// disk: it writes through mmap, where a full disk kills the process
	// with SIGBUS instead of returning an error (see storage.go).
	StorageReserveDefault = 64 << 20
	// StorageProbeIntervalDefault is how often the node checks its data
	// dir's free space; the probe file (write + fsync) is written every
	// storageWriteProbeEvery, or every interval while storage is
	// unavailable.
	StorageProbeIntervalDefault = 2 * time.Second
)

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
	if _, _, err := ipc.ParseExecutorURL(u); err != nil {
		return Executor{}, fmt.Errorf("executor %q: %w", s, err)
	}
	return Executor{Handler: h, URL: u}, nil
}

// Config is the configuration of one node.
type Config struct {
	// NodeID is this node's id in the Raft group; it must stay the same
	// across restarts. Defaults to the host name.
	NodeID string
	// DataDir holds the Raft log (raft.db), snapshots and the badger state.
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
	// nodes' own join, forwarding and reports); others get 401. Give every
	// node the same. Raft's own transport is not covered: keep it on a
	// private network.
	ClusterToken string
	// LeaveOnShutdown removes this node from the Raft configuration when it
	// shuts down gracefully (after handing leadership over), so that a
	// cluster scaled down keeps its quorum size right.
	LeaveOnShutdown bool
	// BreakerFailures is how many failed attempts in a row open a
	// handler's circuit: its due runs then wait (not fail) for
	// BreakerCoolDown, and a single probe decides. Default to 5 and 30s
	// (engine.BreakerFailuresDefault, engine.BreakerCoolDownDefault).
	BreakerFailures int
	BreakerCoolDown time.Duration
	// Routing chooses among the nodes with an executor for a handler:
	// RoutingLeastLoaded (from the nodes' load reports), RoutingRoundRobin
	// or RoutingHash (on the handler name). A task with a route_key is
	// always routed by hash of its key. Defaults to RoutingLeastLoaded.
	Routing string
	// HandlerLimits caps, per handler, the attempts RUNNING at once across
	// the whole cluster (seed 000's concurrency_limit); the leader's
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
	// SnapshotInterval is how often Raft checks SnapshotThreshold.
	// Defaults to SnapshotIntervalDefault.
	SnapshotInterval time.Duration
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
	// StorageReserve is the free space, in bytes, the data dir must keep
	// for the node to accept writes (StorageReserveDefault when 0; a
	// negative value turns the free-space check off).
	StorageReserve int64
	// StorageProbeInterval is how often the data dir is probed: free
	// space every interval, a written probe file every 30 s or, while
	// storage is unavailable, every interval (StorageProbeIntervalDefault
	// when 0).
	StorageProbeInterval time.Duration
}

// WithDefaults returns a copy of c with every zero field set to its default.
func (c Config) WithDefaults() Config {
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
	dur(&c.ElectionTimeout, ElectionTimeoutDefault)
	dur(&c.LeaderLeaseTimeout, LeaderLeaseTimeoutDefault)
	dur(&c.LeaseGrace, LeaseGraceDefault)
	dur(&c.LoadWindow, LoadWindowDefault)
	defaultOrOff(&c.FireLead, FireLeadDefault)
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
	defaultOrOff(&c.StorageReserve, StorageReserveDefault)
	dur(&c.StorageProbeInterval, StorageProbeIntervalDefault)
	return c
}

// Validate reports the first invalid field of a config filled by
// WithDefaults, naming the field.
func (c Config) Validate() error {
	if c.NodeID == "" {
		return fmt.Errorf("node id: must not be empty")
	}
	for _, a := range []struct{ name, v string }{{"raft-addr", c.RaftAddr}, {"peer-addr", c.PeerAddr}} {
		if _, port, err := net.SplitHostPort(a.v); err != nil || port == "" || port == "0" {
			return fmt.Errorf("%s %q: want HOST:PORT with a fixed port", a.name, a.v)
		}
	}
	if c.RaftAddr == c.PeerAddr {
		return fmt.Errorf("raft-addr and peer-addr must differ (both %q)", c.RaftAddr)
	}
	if c.BootstrapExpect < 1 {
		return fmt.Errorf("bootstrap-expect %d: must be at least 1", c.BootstrapExpect)
	}
	if c.BootstrapExpect > 1 && len(c.Join) == 0 {
		return fmt.Errorf("bootstrap-expect %d needs --join with the other nodes' peer addresses", c.BootstrapExpect)
	}
	if c.BreakerFailures < 0 || c.BreakerCoolDown < 0 {
		return fmt.Errorf("breaker failures %d and cool-down %v must not be negative", c.BreakerFailures, c.BreakerCoolDown)
	}
	switch c.Routing {
	case RoutingLeastLoaded, RoutingRoundRobin, RoutingHash:
	default:
		return fmt.Errorf("routing %q: want least_loaded, round_robin or hash", c.Routing)
	}
	for h, n := range c.HandlerLimits {
		if h == "" || n < 1 {
			return fmt.Errorf("handler limit %s=%d: want HANDLER=N with N >= 1", h, n)
		}
	}
	if c.FireLead > 10*time.Second {
		return fmt.Errorf("fire lead %v: at most 10s", c.FireLead)
	}
	if c.LoadWindow < time.Second {
		return fmt.Errorf("load window %v: at least 1s", c.LoadWindow)
	}
	if c.DeliveryConcurrency < 1 || c.DeliveryConcurrency > 10000 {
		return fmt.Errorf("delivery concurrency %d: must be between 1 and 10000", c.DeliveryConcurrency)
	}
	if c.DeliveryMinConcurrency < 1 || c.DeliveryMinConcurrency > c.DeliveryConcurrency {
		return fmt.Errorf("delivery min concurrency %d: must be between 1 and the delivery concurrency %d", c.DeliveryMinConcurrency, c.DeliveryConcurrency)
	}
	if c.HeartbeatTimeout < 5*time.Millisecond || c.ElectionTimeout < 5*time.Millisecond {
		return fmt.Errorf("heartbeat and election timeouts must be at least 5ms")
	}
	if err := c.validateAutopilot(); err != nil {
		return err
	}
	if err := validatePeerRoutes(c.NodeID, c.PeerRoutes); err != nil {
		return err
	}
	for _, e := range c.Executors {
		if _, _, err := ipc.ParseExecutorURL(e.URL); err != nil {
			return fmt.Errorf("executor %s=%s: %w", e.Handler, e.URL, err)
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
