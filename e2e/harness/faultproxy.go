package harness

import (
	"errors"
	"fmt"
	"net"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// FaultProxy is a TCP proxy for one direction of one link between two
// nodes (node A dialling node B's Raft transport, or its peer API). It
// listens on 127.0.0.1:0 and forwards every connection to its target until
// Cut, which makes the link a black hole; Heal restores it.
//
// Why a black hole and not a reset: a real partition (a pulled cable, a
// firewall that drops, a dead switch) loses packets silently. The nodes
// see no RST and no FIN; they find out only through their own timeouts
// (Raft's heartbeat and leader lease, the transport's I/O deadline, the
// peer API's request deadlines), and calls in flight hang until then. A
// proxy that closed connections and refused new ones would hand every
// caller an immediate error, which is the easy case and hides the hangs
// (a forwarded request stuck for its whole deadline, say). So while cut,
// live connections stay open and everything written to them, either way,
// is read and dropped; new connections are accepted and treated the same
// (they never reach the target). Heal closes the connections that lived
// through the cut — their streams lost bytes, as a TCP connection that
// timed out during a long partition would be gone — so callers redial.
type FaultProxy struct {
	Name   string // e.g. "n1->n2 raft"
	Addr   string // where the proxy listens
	target string

	ln net.Listener
	wg sync.WaitGroup

	mu     sync.Mutex
	cut    bool
	closed bool
	conns  map[*proxyConn]struct{}

	accepted atomic.Int64 // connections accepted
	dropped  atomic.Int64 // bytes read and thrown away while cut
}

// proxyConn is one client connection and its upstream (nil when it was
// accepted during a cut).
type proxyConn struct {
	poisoned atomic.Bool // lived through a cut: drop its bytes, close at Heal

	mu       sync.Mutex
	client   net.Conn
	upstream net.Conn
	closed   bool
}

// setUpstream attaches up; false (and up closed) when pc is closed.
func (pc *proxyConn) setUpstream(up net.Conn) bool {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if pc.closed {
		up.Close()
		return false
	}
	pc.upstream = up
	return true
}

func (pc *proxyConn) close() {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if pc.closed {
		return
	}
	pc.closed = true
	pc.client.Close()
	if pc.upstream != nil {
		pc.upstream.Close()
	}
}

// StartFaultProxy starts a proxy to target; t.Cleanup closes it.
func StartFaultProxy(t testing.TB, name, target string) *FaultProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("fault proxy %s: %v", name, err)
	}
	p := &FaultProxy{Name: name, Addr: ln.Addr().String(), target: target, ln: ln, conns: map[*proxyConn]struct{}{}}
	p.wg.Add(1)
	go p.acceptLoop()
	t.Cleanup(p.Close)
	return p
}

func (p *FaultProxy) acceptLoop() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		p.accepted.Add(1)
		p.wg.Add(1)
		go p.serve(c)
	}
}

func (p *FaultProxy) serve(c net.Conn) {
	defer p.wg.Done()
	pc := &proxyConn{client: c}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		c.Close()
		return
	}
	cut := p.cut
	p.conns[pc] = struct{}{}
	p.mu.Unlock()
	defer func() {
		pc.close()
		p.mu.Lock()
		delete(p.conns, pc)
		p.mu.Unlock()
	}()
	if cut {
		pc.poisoned.Store(true)
		p.pump(pc, c, nil) // a black hole: read and drop until Heal closes it
		return
	}
	up, err := net.DialTimeout("tcp", p.target, 2*time.Second)
	if err != nil {
		return // the target is down: the client sees its connection closed
	}
	if !pc.setUpstream(up) {
		return
	}
	p.mu.Lock()
	if p.cut { // cut while dialling
		pc.poisoned.Store(true)
	}
	p.mu.Unlock()
	done := make(chan struct{})
	go func() {
		p.pump(pc, up, c)
		pc.close()
		close(done)
	}()
	p.pump(pc, c, up)
	pc.close()
	<-done
}

// pump copies src to dst (when not nil) until src fails; while pc is
// poisoned, what it reads is dropped.
func (p *FaultProxy) pump(pc *proxyConn, src net.Conn, dst net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		k, err := src.Read(buf)
		if k > 0 {
			if dst == nil || pc.poisoned.Load() {
				p.dropped.Add(int64(k))
			} else if _, werr := dst.Write(buf[:k]); werr != nil {
				return
			}
		}
		if err != nil {
			return // EOF or closed: the caller closes both sides
		}
	}
}

// Cut makes the link a black hole: bytes on live connections, in both
// directions, are dropped from now on, and new connections are accepted
// but never reach the target.
func (p *FaultProxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for pc := range p.conns {
		pc.poisoned.Store(true)
	}
}

// Heal restores the link: the connections that lived through the cut are
// closed (their callers redial) and new ones are forwarded again.
func (p *FaultProxy) Heal() {
	p.mu.Lock()
	p.cut = false
	var poisoned []*proxyConn
	for pc := range p.conns {
		if pc.poisoned.Load() {
			poisoned = append(poisoned, pc)
		}
	}
	p.mu.Unlock()
	for _, pc := range poisoned {
		pc.close()
	}
}

// IsCut reports whether the link is cut.
func (p *FaultProxy) IsCut() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cut
}

// Close stops the proxy and closes every connection.
func (p *FaultProxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	var all []*proxyConn
	for pc := range p.conns {
		all = append(all, pc)
	}
	p.mu.Unlock()
	p.ln.Close()
	for _, pc := range all {
		pc.close()
	}
	p.wg.Wait()
}

// FaultNet is the set of proxies of a cluster started WithPeerProxies:
// for every ordered pair of nodes (from, to), one proxy for from's Raft
// transport dialling to, and one for from's peer API calls to to.
type FaultNet struct {
	links map[[2]string]*faultLink
}

type faultLink struct{ raft, peer *FaultProxy }

func newFaultNet() *FaultNet { return &FaultNet{links: map[[2]string]*faultLink{}} }

func (f *FaultNet) add(t testing.TB, from, to *Node) *faultLink {
	l := &faultLink{
		raft: StartFaultProxy(t, fmt.Sprintf("%s->%s raft", from.ID, to.ID), to.RaftAddr),
		peer: StartFaultProxy(t, fmt.Sprintf("%s->%s peer", from.ID, to.ID), to.PeerAddr),
	}
	f.links[[2]string{from.ID, to.ID}] = l
	return l
}

// CutLink cuts both proxies (Raft and peer API) of the direction from → to.
func (f *FaultNet) CutLink(from, to string) {
	if l := f.links[[2]string{from, to}]; l != nil {
		l.raft.Cut()
		l.peer.Cut()
	}
}

// Isolate cuts every link from and to node id, both ways.
func (f *FaultNet) Isolate(id string) {
	for k, l := range f.links {
		if k[0] == id || k[1] == id {
			l.raft.Cut()
			l.peer.Cut()
		}
	}
}

// HealAll heals every link.
func (f *FaultNet) HealAll() {
	for _, l := range f.links {
		l.raft.Heal()
		l.peer.Heal()
	}
}

// Stats describes each proxy that saw traffic: connections accepted and
// bytes dropped while cut.
func (f *FaultNet) Stats() string {
	var out []string
	for _, l := range f.links {
		for _, p := range []*FaultProxy{l.raft, l.peer} {
			if d := p.dropped.Load(); d > 0 {
				out = append(out, fmt.Sprintf("%s: %d conns, %d bytes dropped", p.Name, p.accepted.Load(), d))
			}
		}
	}
	sort.Strings(out)
	return fmt.Sprint(out)
}
