package sidecartest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/rs/zerolog"

	"github.com/axsched/ax/clients/go/axapi"
	"github.com/axsched/ax/engine"
	"github.com/axsched/ax/internal/freeport"
	"github.com/axsched/ax/ipc"
	"github.com/axsched/ax/sidecar"
)

// Options configure a Cluster.
type Options struct {
	// Nodes is the number of nodes; 0 means 1. With more than one, the
	// nodes bootstrap together (BootstrapExpect = Nodes).
	Nodes int
	// Handlers are the handlers every node's Executor serves; nil means
	// every handler ("*"). NoExecutor starts the nodes without one.
	Handlers   []string
	NoExecutor bool
	// Start is the fake clock's wall time at start; zero: the real time
	// now, to the millisecond (Raft's own timeouts stay on real time).
	Start time.Time
	// Config, when set, adjusts node i's configuration before it starts
	// (the kit has filled in ids, addresses, the executor and the hooks).
	Config func(i int, c *sidecar.Config)
	// LogLevel is the nodes' log level; zero value: warnings and up.
	LogLevel zerolog.Level
}

// Cluster is N real sidecar Nodes in one process: Raft on
// raft.InmemTransport, the peer API on 127.0.0.1 ports, the application
// API on Unix sockets in t.TempDir(), one shared engine.FakeClock for all
// of ax's own timers (due times, leases, backoff, retention), and one
// Executor per node. It is shut down by t.Cleanup.
type Cluster struct {
	t     testing.TB
	dir   string
	clock *engine.FakeClock
	nodes []*sidecar.Node
	execs []*Executor
	extra []*Executor // NewExecutor's
	trans []*raft.InmemTransport
	cfgs  []sidecar.Config

	mu          sync.Mutex
	partitioned map[int]bool
	peerOf      map[string]int           // peer API address -> node index
	conns       map[int]map[net.Conn]int // open peer API conns dialled by node -> target index
}

// Poll bounds the waits of the kit: conditions are polled every
// PollEvery for at most PollFor (a failure then, not an assertion on
// time).
var (
	PollEvery = 2 * time.Millisecond
	PollFor   = 20 * time.Second
)

// New starts the cluster and returns once every node is ready (it has a
// leader, its record is committed and it is caught up). While it waits
// it advances the fake clock in small steps (ax's join and report loops
// run on it); tests begin from the clock's time then.
func New(t testing.TB, o Options) *Cluster {
	t.Helper()
	if o.Nodes == 0 {
		o.Nodes = 1
	}
	start := o.Start
	if start.IsZero() {
		start = time.Now().UTC().Truncate(time.Millisecond)
	}
	c := &Cluster{t: t, clock: engine.NewFakeClock(start), partitioned: map[int]bool{},
		peerOf: map[string]int{}, conns: map[int]map[net.Conn]int{}}
	addrs, err := freeport.Addrs(2 * o.Nodes)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	c.dir = dir
	var join []string
	for i := range o.Nodes {
		join = append(join, addrs[2*i+1])
		c.peerOf[addrs[2*i+1]] = i
	}
	for i := range o.Nodes {
		// The Raft address is a name on the in-memory transport; no
		// listener is opened on it.
		_, tr := raft.NewInmemTransport(raft.ServerAddress(addrs[2*i]))
		c.trans = append(c.trans, tr)
	}
	for i, a := range c.trans {
		for j, b := range c.trans {
			if i != j {
				a.Connect(b.LocalAddr(), b)
			}
		}
	}
	for i := range o.Nodes {
		cfg := sidecar.Config{
			NodeID:          fmt.Sprintf("n%d", i),
			DataDir:         filepath.Join(dir, fmt.Sprintf("n%d", i)),
			Socket:          filepath.Join(dir, fmt.Sprintf("n%d.sock", i)),
			RaftAddr:        addrs[2*i],
			PeerAddr:        addrs[2*i+1],
			BootstrapExpect: o.Nodes,
			// Raft's timeouts are real time: the node's defaults (500ms),
			// so that a loaded machine under -race does not see elections
			// in a steady cluster (100ms did); an election after a
			// partition takes about a second.
			StorageReserve: -1,
			Clock:          c.clock,
			// The retries that wait on Raft (a forward or an outcome
			// report while there is no leader) pause on real time, as
			// Raft's elections run: the fake clock never has to move
			// for them.
			RetryClock:    engine.RealClock(),
			RaftTransport: c.trans[i],
			PeerDial:      c.dialer(i),
		}
		if o.Nodes > 1 {
			cfg.Join = join
		}
		if !o.NoExecutor {
			e := newExecutor(t, filepath.Join(dir, fmt.Sprintf("exec%d.sock", i)), cfg.NodeID, c.clock)
			c.execs = append(c.execs, e)
			hs := o.Handlers
			if hs == nil {
				hs = []string{"*"}
			}
			for _, h := range hs {
				cfg.Executors = append(cfg.Executors, sidecar.Executor{Handler: h, URL: e.URL()})
			}
		}
		if o.Config != nil {
			o.Config(i, &cfg)
		}
		c.cfgs = append(c.cfgs, cfg)
	}
	var wg sync.WaitGroup
	c.nodes = make([]*sidecar.Node, o.Nodes)
	errs := make([]error, o.Nodes)
	for i := range o.Nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			log := zerolog.New(zerolog.NewTestWriter(t)).Level(max(o.LogLevel, zerolog.WarnLevel))
			c.nodes[i], errs[i] = sidecar.Start(c.cfgs[i], log)
		}()
	}
	wg.Wait()
	t.Cleanup(c.shutdown)
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	var lastReady error
	defer func() {
		if t.Failed() {
			t.Logf("last readiness error: %v", lastReady)
		}
	}()
	c.AdvanceUntil("every node ready", 50*time.Millisecond, func() bool {
		for _, n := range c.nodes {
			if err := n.Ready(context.Background()); err != nil {
				lastReady = fmt.Errorf("%s: %w", n.ID(), err)
				return false
			}
		}
		return true
	})
	return c
}

func (c *Cluster) shutdown() {
	var wg sync.WaitGroup
	for _, n := range c.nodes {
		if n == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			// Shutdown's drain waits on the fake clock; keep it moving.
			stop := make(chan struct{})
			go func() {
				for {
					select {
					case <-stop:
						return
					case <-time.After(PollEvery):
						c.clock.Advance(100 * time.Millisecond)
					}
				}
			}()
			n.Shutdown(ctx)
			close(stop)
		}()
	}
	wg.Wait()
}

// Node returns node i.
func (c *Cluster) Node(i int) *sidecar.Node { return c.nodes[i] }

// API returns node i's application API (Submit, Task, Cancel, List,
// ...): what its Unix socket serves.
func (c *Cluster) API(i int) ipc.Backend { return backendOf(c.nodes[i]) }

// Nodes is the number of nodes.
func (c *Cluster) Nodes() int { return len(c.nodes) }

// Socket is the path of node i's application API socket.
func (c *Cluster) Socket(i int) string { return c.cfgs[i].Socket }

// Executor returns node i's executor (nil with Options.NoExecutor).
func (c *Cluster) Executor(i int) *Executor {
	if i >= len(c.execs) {
		return nil
	}
	return c.execs[i]
}

// Clock is the fake clock of every node's timers.
func (c *Cluster) Clock() *engine.FakeClock { return c.clock }

// Now is the fake clock's wall time.
func (c *Cluster) Now() time.Time { return c.clock.Now() }

// Advance moves the fake clock forward by d, at once. Both ends of a
// callback in flight are on this clock: a jump past its timeout cuts it
// (the node reports a timeout), and a jump past its lease (timeout +
// LeaseGrace) in one step can reach the leader's lease timer before the
// node's report does (the attempt is counted lost and retried): move in
// steps shorter than LeaseGrace where that matters.
func (c *Cluster) Advance(d time.Duration) { c.clock.Advance(d) }

// AdvanceTo moves the fake clock forward to wall time at; nothing when
// it is there already.
func (c *Cluster) AdvanceTo(at time.Time) {
	if d := at.Sub(c.clock.Now()); d > 0 {
		c.clock.Advance(d)
	}
}

// Leader returns the index of a node that is Raft leader and not
// partitioned, or -1.
func (c *Cluster) Leader() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, n := range c.nodes {
		if !c.partitioned[i] && n.IsLeader() {
			return i
		}
	}
	return -1
}

// WaitLeader waits until a node that is not partitioned leads and serves
// (Ready), and returns its index. The fake clock does not move.
func (c *Cluster) WaitLeader() int {
	c.t.Helper()
	l := -1
	c.Eventually("a leader", func() bool {
		l = c.Leader()
		return l >= 0 && c.nodes[l].Ready(context.Background()) == nil
	})
	return l
}

// Follower returns the index of a node that is neither the leader nor
// partitioned (WaitLeader first), or -1.
func (c *Cluster) Follower() int {
	l := c.WaitLeader()
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range c.nodes {
		if i != l && !c.partitioned[i] {
			return i
		}
	}
	return -1
}

// Eventually polls cond every PollEvery until it holds, and fails the
// test after PollFor. The fake clock does not move: what cond waits for
// must not need it to (move it first with Advance, or use AdvanceUntil).
// The waits of a node that Raft's real-time elections decide (a forward
// or an outcome report retried while there is no leader) pause on real
// time (Config.RetryClock), so no wait stalls on a clock that stands
// still.
func (c *Cluster) Eventually(what string, cond func() bool) {
	c.t.Helper()
	c.poll(func() string { return what }, cond)
}

func (c *Cluster) poll(what func() string, cond func() bool) {
	c.t.Helper()
	deadline := time.Now().Add(PollFor)
	for !cond() {
		if time.Now().After(deadline) {
			c.t.Fatalf("sidecartest: %s: not after %v", what(), PollFor)
		}
		time.Sleep(PollEvery)
	}
}

// AdvanceUntil advances the fake clock by step between polls until cond
// holds (failing after PollFor of real time). For conditions that need
// time to pass without a test caring how much (a join's retries).
func (c *Cluster) AdvanceUntil(what string, step time.Duration, cond func() bool) {
	c.t.Helper()
	deadline := time.Now().Add(PollFor)
	for !cond() {
		if time.Now().After(deadline) {
			c.t.Fatalf("sidecartest: %s: not after %v", what, PollFor)
		}
		c.clock.Advance(step)
		time.Sleep(PollEvery)
	}
}

// Task reads task id from node i (its local, possibly stale, view).
func (c *Cluster) Task(i int, id string) (ipc.Task, error) {
	return c.API(i).Task(context.Background(), id)
}

// WaitTask polls task id on node i until cond holds and returns it (a
// bounded poll like Eventually).
func (c *Cluster) WaitTask(i int, id string, what string, cond func(ipc.Task) bool) ipc.Task {
	c.t.Helper()
	var last ipc.Task
	var lastErr error
	c.poll(func() string {
		return fmt.Sprintf("task %s on n%d: %s (last %+v, %v)", id, i, what, last, lastErr)
	}, func() bool {
		last, lastErr = c.Task(i, id)
		return lastErr == nil && cond(last)
	})
	return last
}

// WaitState waits until task id is in state on node i.
func (c *Cluster) WaitState(i int, id, state string) ipc.Task {
	c.t.Helper()
	return c.WaitTask(i, id, "state "+state, func(t ipc.Task) bool { return t.State == state })
}

// Do runs f, a call of the application API (Submit, Cancel, ...), and
// waits for it to return as Eventually waits (failing after PollFor).
// f runs on another goroutine: it must not call t.Fatal.
func (c *Cluster) Do(f func()) {
	c.t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	c.Eventually("API call returned", func() bool {
		select {
		case <-done:
			return true
		default:
			return false
		}
	})
}

// Submit submits spec on node i (through Do) and fails the test on an
// error. A no_leader answer (an election: Raft's timeouts are real time,
// and a loaded machine can miss one) is retried until PollFor, as the Go
// client retries it: a submit is idempotent by id and spec.
func (c *Cluster) Submit(i int, spec ipc.TaskSpec) ipc.Task {
	c.t.Helper()
	var tk ipc.Task
	var err error
	deadline := time.Now().Add(PollFor)
	for {
		c.Do(func() { tk, _, err = c.API(i).Submit(context.Background(), spec) })
		if !isNoLeader(err) || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * PollEvery)
	}
	if err != nil {
		c.t.Fatalf("submit %s on n%d: %v", spec.ID, i, err)
	}
	return tk
}

// isNoLeader reports whether err is the API's no_leader (503): no leader
// took the write, or the leader changed while it was in flight.
func isNoLeader(err error) bool {
	if err == nil {
		return false
	}
	_, code, _, _ := ipc.MapError(err)
	return code == "no_leader"
}

// Partition cuts node i off: its Raft transport is disconnected from
// every other node's both ways, and peer API dials from it or to it are
// refused (its open peer connections are closed).
func (c *Cluster) Partition(i int) {
	c.mu.Lock()
	c.partitioned[i] = true
	var kill []net.Conn
	for from, m := range c.conns {
		for conn, to := range m {
			if from == i || to == i {
				kill = append(kill, conn)
			}
		}
	}
	c.mu.Unlock()
	for j, tr := range c.trans {
		if j != i {
			tr.Disconnect(c.trans[i].LocalAddr())
			c.trans[i].Disconnect(tr.LocalAddr())
		}
	}
	for _, conn := range kill {
		conn.Close()
	}
}

// PartitionRaft cuts only node i's Raft transport from every other node's,
// both ways: it stops receiving entries (it cannot apply what the others
// commit), while its peer API still works, so it still forwards writes to
// the leader. Heal undoes it. Cut for longer than an election timeout,
// the node starts elections it cannot win.
func (c *Cluster) PartitionRaft(i int) {
	for j, tr := range c.trans {
		if j != i {
			tr.Disconnect(c.trans[i].LocalAddr())
			c.trans[i].Disconnect(tr.LocalAddr())
		}
	}
}

// Heal reconnects node i (undoes Partition and PartitionRaft).
func (c *Cluster) Heal(i int) {
	c.mu.Lock()
	delete(c.partitioned, i)
	c.mu.Unlock()
	for j, tr := range c.trans {
		if j != i {
			tr.Connect(c.trans[i].LocalAddr(), c.trans[i])
			c.trans[i].Connect(tr.LocalAddr(), tr)
		}
	}
}

// dialer is node from's Config.PeerDial: refused while either end is
// partitioned.
func (c *Cluster) dialer(from int) func(addr string) (net.Conn, error) {
	return func(addr string) (net.Conn, error) {
		c.mu.Lock()
		to, known := c.peerOf[addr]
		cut := c.partitioned[from] || (known && c.partitioned[to])
		c.mu.Unlock()
		if cut {
			return nil, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
		}
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return nil, err
		}
		if !known {
			to = -1
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.conns[from] == nil {
			c.conns[from] = map[net.Conn]int{}
		}
		tc := &trackedConn{Conn: conn}
		tc.done = func() {
			c.mu.Lock()
			delete(c.conns[from], tc)
			c.mu.Unlock()
		}
		c.conns[from][tc] = to
		return tc, nil
	}
}

type trackedConn struct {
	net.Conn
	once sync.Once
	done func()
}

func (t *trackedConn) Close() error {
	t.once.Do(t.done)
	return t.Conn.Close()
}

// Spec is a submit request for task id on handler with the API's
// defaults filled in (priority 2, timeout 30s, 4 attempts), due now: the
// validated shape ipc.Backend.Submit takes.
func Spec(id, handler string) ipc.TaskSpec {
	return ipc.TaskSpec{ID: id, Handler: handler, Priority: axapi.PriorityDefault,
		Timeout: axapi.TimeoutDefault, MaxAttempts: axapi.MaxAttemptsDefault}
}
