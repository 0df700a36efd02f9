package raftstore

import (
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/axsched/ax/internal/rawio"
	"github.com/axsched/ax/raftfsm"
)

// PeerRoute overrides the addresses this node dials to reach one other
// node: its Raft transport and its peer API go to RaftAddr and PeerAddr
// instead of the addresses in the cluster configuration and the node
// records (which stay what the other node advertises). It is meant for
// tests (the e2e suite routes every link through a fault-injecting proxy,
// one per direction and pair of nodes, to cut links without root) and for
// network overlays where a node is reached through a local relay.
type PeerRoute struct {
	NodeID   string
	RaftAddr string
	PeerAddr string
}

// ParsePeerRoute parses a --peer-route value:
// NODE_ID=RAFT_HOST:PORT,PEER_HOST:PORT.
func ParsePeerRoute(s string) (PeerRoute, error) {
	id, addrs, ok := strings.Cut(s, "=")
	raftAddr, peerAddr, ok2 := strings.Cut(addrs, ",")
	r := PeerRoute{NodeID: strings.TrimSpace(id), RaftAddr: strings.TrimSpace(raftAddr), PeerAddr: strings.TrimSpace(peerAddr)}
	if !ok || !ok2 || r.NodeID == "" {
		return PeerRoute{}, fmt.Errorf("peer route %q: want NODE_ID=RAFT_HOST:PORT,PEER_HOST:PORT", s)
	}
	if err := r.validate(); err != nil {
		return PeerRoute{}, err
	}
	return r, nil
}

func (r PeerRoute) validate() error {
	for _, a := range []string{r.RaftAddr, r.PeerAddr} {
		if _, port, err := net.SplitHostPort(a); err != nil || port == "" || port == "0" {
			return fmt.Errorf("peer route for %q: address %q: want HOST:PORT with a fixed port", r.NodeID, a)
		}
	}
	return nil
}

// ValidatePeerRoutes checks Config.PeerRoutes of node self: valid
// addresses, at most one route per node, none for this node.
func ValidatePeerRoutes(self string, routes []PeerRoute) error {
	seen := map[string]bool{}
	for _, r := range routes {
		if r.NodeID == "" {
			return fmt.Errorf("peer route without a node id")
		}
		if r.NodeID == self {
			return fmt.Errorf("peer route for this node (%q): a node does not dial itself", self)
		}
		if seen[r.NodeID] {
			return fmt.Errorf("two peer routes for node %q", r.NodeID)
		}
		seen[r.NodeID] = true
		if err := r.validate(); err != nil {
			return err
		}
	}
	return nil
}

// RouteOf returns the route to node id, if routes has one.
func RouteOf(routes []PeerRoute, id string) (PeerRoute, bool) {
	for _, r := range routes {
		if r.NodeID == id {
			return r, true
		}
	}
	return PeerRoute{}, false
}

// RoutedPeerAddr returns the address to dial for the peer API of node id,
// whose advertised peer address is addr: the route's when routes has one.
func RoutedPeerAddr(routes []PeerRoute, id, addr string) string {
	if r, ok := RouteOf(routes, id); ok {
		return r.PeerAddr
	}
	return addr
}

// routeProvider is raft's ServerAddressProvider for Config.PeerRoutes:
// the route's Raft address for a routed node, the configured address for
// this node and (from the replicated node records) for the others.
type routeProvider struct {
	self, selfAddr string // this node's id and advertised Raft address
	routes         []PeerRoute
	fsm            *raftfsm.FSM
}

// ServerAddr implements raft.ServerAddressProvider. An error makes raft
// fall back to the address in its configuration (with a warning).
func (p routeProvider) ServerAddr(id raft.ServerID) (raft.ServerAddress, error) {
	if string(id) == p.self {
		return raft.ServerAddress(p.selfAddr), nil
	}
	if r, ok := RouteOf(p.routes, string(id)); ok {
		return raft.ServerAddress(r.RaftAddr), nil
	}
	if nd, err := p.fsm.Node(string(id)); err == nil && nd.RaftAddr != "" {
		return raft.ServerAddress(nd.RaftAddr), nil
	}
	return "", fmt.Errorf("no peer route and no node record for %q", id)
}

// newRaftTransport opens the Raft transport on cfg.RaftAddr: over
// cfg.Stream's stream layer when set, else plain TCP; with peer routes, it
// dials routed nodes at their route's address.
//
// Pipelined replication is off (MaxRPCsInFlight below raft's minimum for
// it): in hashicorp/raft v1.8.0 one AppendEntries that a follower refuses
// can deadlock the leader's pipeline to that follower for good (both of
// netPipeline's channels are unbuffered at the default of 2: the decoder
// exits on the refusal and the sender parks on a send nobody reads). The
// follower still gets heartbeats, so no election heals it, and it never
// gets another entry until the leader restarts (hashicorp/raft#612). ax
// met it on a follower whose disk filled: its StoreLogs failed once, and
// after the disk was freed it never applied another entry (the disk-full
// e2e test; stacks showed the leader's replicate goroutine parked in
// netPipeline.AppendEntries). In synchronous mode raft still ships every
// entry pending for a follower in one AppendEntries round trip; a follower
// handles them one at a time anyway, so pipelining would mostly send
// smaller batches, each one more log append and fsync on the follower
// (docs/perf/README.md, "Three nodes, single submits").
func newRaftTransport(cfg *Config, fsm *raftfsm.FSM, adv net.Addr, maxPool int, timeout time.Duration, log hclog.Logger) (*raft.NetworkTransport, error) {
	tc := &raft.NetworkTransportConfig{Logger: log, MaxPool: maxPool, Timeout: timeout, MaxRPCsInFlight: raftMaxRPCsInFlight}
	if len(cfg.PeerRoutes) > 0 {
		tc.ServerAddressProvider = routeProvider{self: cfg.NodeID, selfAddr: cfg.RaftAdvertise, routes: cfg.PeerRoutes, fsm: fsm}
	}
	if cfg.Stream != nil {
		sl, err := cfg.Stream(cfg.RaftAddr, adv)
		if err != nil {
			return nil, err
		}
		tc.Stream = sl
		return raft.NewNetworkTransportWithConfig(tc), nil
	}
	if cfg.SocketHold != nil {
		sl, err := listenRawStream(cfg.RaftAddr, adv, cfg.SocketHold)
		if err != nil {
			return nil, err
		}
		tc.Stream = sl
		return raft.NewNetworkTransportWithConfig(tc), nil
	}
	return raft.NewTCPTransportWithConfig(cfg.RaftAddr, adv, tc)
}

// rawStream is raft's plain TCP stream layer (raft.TCPStreamLayer, which
// raft.NewTCPTransportWithConfig makes) whose connections read and write
// through rawio while hold reports true.
type rawStream struct {
	net.Listener
	adv  net.Addr
	hold func() bool
}

// listenRawStream listens on bind (TCP HOST:PORT) and advertises adv
// (nil: the listener's address), which must be a TCP address with a
// specific IP, as raft.NewTCPTransportWithConfig requires.
func listenRawStream(bind string, adv net.Addr, hold func() bool) (*rawStream, error) {
	ln, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, err
	}
	if adv == nil {
		adv = ln.Addr()
	}
	if ta, ok := adv.(*net.TCPAddr); !ok || ta.IP == nil || ta.IP.IsUnspecified() {
		ln.Close()
		return nil, fmt.Errorf("raft advertise address %v: not a routable TCP address", adv)
	}
	return &rawStream{Listener: rawio.WrapListener(ln, hold), adv: adv, hold: hold}, nil
}

// Addr implements raft.StreamLayer: the advertised address.
func (s *rawStream) Addr() net.Addr { return s.adv }

// Dial implements raft.StreamLayer: a TCP dial within timeout.
func (s *rawStream) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", string(addr), timeout)
	if err != nil {
		return nil, err
	}
	return rawio.Wrap(c, s.hold), nil
}

// raftMaxRPCsInFlight is below raft's minimum for pipelining (2), which
// turns pipelined replication off (newRaftTransport says why).
const raftMaxRPCsInFlight = 1
