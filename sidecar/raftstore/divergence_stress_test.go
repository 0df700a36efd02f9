package raftstore

// An in-process stress harness for replica divergence: three hashicorp/raft
// nodes over raft.InmemTransport, each with the Raft log stack StartRaft
// builds (raft-wal behind guardedLogStore behind tailCache, the gated file
// snapshot store) or, as a control, raft's InmemStore. Clients propose on
// whichever node believes it leads; rounds "SIGSTOP" the leader (its
// traffic both ways, its log writes, its FSM and its proposers are held
// while another node is elected, then released: all at once, or in a
// chosen order, "staged"), now and then a follower, with snapshots and
// compaction on. The transport can hand heartbeats to raft's fast path on
// their own goroutine, as raft's NetworkTransport (ax's) does. Every
// applied entry is checked against what the other nodes applied at its
// index, and every entry written against what the others wrote at its
// index and term (raft's Log Matching property); a violation ends the run
// with the events that led to it.
//
// It runs only with AX_RAFT_STRESS=1 (about half a second a round); see
// stressEnv for the knobs.
//
//	AX_RAFT_STRESS=1 go test -run TestDivergenceStress -v ./sidecar/raftstore/

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/rs/zerolog"
)

// stressOpts is one run's scenario.
type stressOpts struct {
	seed   uint64
	rounds int
	// stack is "ax" (the Raft log stack of StartRaft) or "inmem" (raft's
	// InmemStore and FileSnapshotStore: the control).
	stack string
	// fastHeartbeats makes the transport hand heartbeats to raft's
	// heartbeat handler on the receiving transport's goroutine, as
	// raft.NetworkTransport (ax's transport) does; raft.InmemTransport
	// has no such fast path (every RPC goes through raft's main loop).
	fastHeartbeats bool
	// noGuard leaves out ax's heartbeat guard (heartbeat.go), which
	// StartRaft puts between raft and its transport.
	noGuard bool
	// modes are the ways a round stops a node (runStress); all when empty.
	modes  []string
	logDir string // raft's logs of each run go here when set
}

// stressEnv reads the scenario knobs: AX_RAFT_STRESS_SEEDS (count, 5),
// AX_RAFT_STRESS_SEED0 (first seed, 1), AX_RAFT_STRESS_ROUNDS (per seed,
// 40), AX_RAFT_STRESS_STACK (ax, inmem or both; both),
// AX_RAFT_STRESS_FASTHB (1: emulate NetworkTransport's heartbeat fast
// path; 0: none; 1), AX_RAFT_STRESS_GUARD (1: ax's heartbeat guard
// between raft and the transport, as StartRaft; 0: none; 1),
// AX_RAFT_STRESS_MODES (the stop modes a round picks
// from, comma-separated: stop, idle-stop, staged; all),
// AX_RAFT_STRESS_LOGS (a dir for raft's logs; none).
func stressEnv(t *testing.T) (seeds []uint64, rounds int, stacks []string, fastHB, guard bool, modes []string, logDir string) {
	num := func(k string, def int) int {
		if v := os.Getenv(k); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatalf("%s=%q: %v", k, v, err)
			}
			return n
		}
		return def
	}
	n, s0 := num("AX_RAFT_STRESS_SEEDS", 5), num("AX_RAFT_STRESS_SEED0", 1)
	for i := 0; i < n; i++ {
		seeds = append(seeds, uint64(s0+i))
	}
	rounds = num("AX_RAFT_STRESS_ROUNDS", 40)
	switch v := os.Getenv("AX_RAFT_STRESS_STACK"); v {
	case "", "both":
		stacks = []string{"ax", "inmem"}
	case "ax", "inmem":
		stacks = []string{v}
	default:
		t.Fatalf("AX_RAFT_STRESS_STACK=%q: ax, inmem or both", v)
	}
	if v := os.Getenv("AX_RAFT_STRESS_MODES"); v != "" {
		modes = strings.Split(v, ",")
	}
	return seeds, rounds, stacks, num("AX_RAFT_STRESS_FASTHB", 1) == 1, num("AX_RAFT_STRESS_GUARD", 1) == 1, modes, os.Getenv("AX_RAFT_STRESS_LOGS")
}

func TestDivergenceStress(t *testing.T) {
	if os.Getenv("AX_RAFT_STRESS") == "" {
		t.Skip("set AX_RAFT_STRESS=1 to run the Raft divergence stress harness")
	}
	seeds, rounds, stacks, fastHB, guard, modes, logDir := stressEnv(t)
	for _, stack := range stacks {
		for _, seed := range seeds {
			o := stressOpts{seed: seed, rounds: rounds, stack: stack, fastHeartbeats: fastHB, noGuard: !guard, modes: modes, logDir: logDir}
			t.Run(fmt.Sprintf("%s/seed%d", stack, seed), func(t *testing.T) { runStress(t, o) })
		}
	}
}

// gate holds whatever waits on it while it is paused: a stopped process.
type gate struct {
	mu     sync.Mutex
	paused bool
	ch     chan struct{} // closed at resume
}

func (g *gate) wait() {
	g.mu.Lock()
	if !g.paused {
		g.mu.Unlock()
		return
	}
	ch := g.ch
	g.mu.Unlock()
	<-ch
}

func (g *gate) pause() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.paused {
		g.paused, g.ch = true, make(chan struct{})
	}
}

func (g *gate) resume() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.paused {
		g.paused = false
		close(g.ch)
	}
}

// nodeGates are the parts of a node that a stop holds: main (raft's log
// writes, and its main loop when freezeMainLoop stopped it), outgoing
// heartbeats and other RPCs, incoming heartbeats (raft's fast path) and
// other RPCs, the FSM, and the node's proposers.
type nodeGates struct {
	main, outHB, out, inHB, in, fsm, prop gate
}

func (g *nodeGates) all() []*gate {
	return []*gate{&g.main, &g.outHB, &g.out, &g.inHB, &g.in, &g.fsm, &g.prop}
}

func (g *nodeGates) pauseAll(proposers bool) {
	for _, x := range g.all() {
		if x != &g.prop || proposers {
			x.pause()
		}
	}
}

func (g *nodeGates) resumeAll() {
	for _, x := range g.all() {
		x.resume()
	}
}

func (g *gate) isPaused() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.paused
}

// stressTransport is an InmemTransport whose node can be stopped (gate):
// its outgoing RPCs wait before they are sent and before their answers
// are returned, and the RPCs sent to it queue and are delivered at resume
// (their senders may have given up by then). Delivery runs on two lanes,
// as NetworkTransport's connections do: heartbeats (to raft's heartbeat
// handler, on the lane's goroutine, when fastHeartbeats) and the rest (to
// raft's main loop, through Consumer). Pipelining is off, as in ax
// (raftMaxRPCsInFlight).
type stressTransport struct {
	*raft.InmemTransport
	g               *nodeGates
	fastHeartbeats  bool
	out             chan raft.RPC
	hbLane, rpcLane chan raft.RPC
	hbMu            sync.Mutex
	hb              func(raft.RPC)
	stop            chan struct{}
}

func newStressTransport(addr raft.ServerAddress, g *nodeGates, fastHB bool, timeout time.Duration) *stressTransport {
	_, in := raft.NewInmemTransportWithTimeout(addr, timeout)
	s := &stressTransport{InmemTransport: in, g: g, fastHeartbeats: fastHB, out: make(chan raft.RPC),
		hbLane: make(chan raft.RPC, 1<<14), rpcLane: make(chan raft.RPC, 1<<14), stop: make(chan struct{})}
	go func() {
		for {
			select {
			case rpc := <-in.Consumer():
				if s.fastHeartbeats && isHeartbeat(rpc) {
					s.hbLane <- rpc
				} else {
					s.rpcLane <- rpc
				}
			case <-s.stop:
				return
			}
		}
	}()
	go func() {
		for {
			select {
			case rpc := <-s.hbLane:
				s.g.inHB.wait()
				s.hbMu.Lock()
				fn := s.hb
				s.hbMu.Unlock()
				if fn != nil {
					fn(rpc)
					continue
				}
				select {
				case s.out <- rpc:
				case <-s.stop:
					return
				}
			case <-s.stop:
				return
			}
		}
	}()
	go func() {
		for {
			select {
			case rpc := <-s.rpcLane:
				s.g.in.wait()
				select {
				case s.out <- rpc:
				case <-s.stop:
					return
				}
			case <-s.stop:
				return
			}
		}
	}()
	return s
}

// isHeartbeat is NetworkTransport's test (net_transport.go handleCommand).
func isHeartbeat(rpc raft.RPC) bool {
	a, ok := rpc.Command.(*raft.AppendEntriesRequest)
	return ok && isHeartbeatReq(a)
}

func isHeartbeatReq(a *raft.AppendEntriesRequest) bool {
	leader := a.Addr
	if len(leader) == 0 {
		leader = a.Leader
	}
	return a.Term != 0 && leader != nil && a.PrevLogEntry == 0 && a.PrevLogTerm == 0 &&
		len(a.Entries) == 0 && a.LeaderCommitIndex == 0
}

func (s *stressTransport) Consumer() <-chan raft.RPC { return s.out }

func (s *stressTransport) SetHeartbeatHandler(cb func(raft.RPC)) {
	s.hbMu.Lock()
	s.hb = cb
	s.hbMu.Unlock()
}

func (s *stressTransport) AppendEntriesPipeline(raft.ServerID, raft.ServerAddress) (raft.AppendPipeline, error) {
	return nil, raft.ErrPipelineReplicationNotSupported
}

func (s *stressTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, a *raft.AppendEntriesRequest, r *raft.AppendEntriesResponse) error {
	g := &s.g.out
	if isHeartbeatReq(a) {
		g = &s.g.outHB
	}
	g.wait()
	defer g.wait()
	return s.InmemTransport.AppendEntries(id, target, a, r)
}

func (s *stressTransport) RequestVote(id raft.ServerID, target raft.ServerAddress, a *raft.RequestVoteRequest, r *raft.RequestVoteResponse) error {
	s.g.out.wait()
	defer s.g.out.wait()
	return s.InmemTransport.RequestVote(id, target, a, r)
}

func (s *stressTransport) RequestPreVote(id raft.ServerID, target raft.ServerAddress, a *raft.RequestPreVoteRequest, r *raft.RequestPreVoteResponse) error {
	s.g.out.wait()
	defer s.g.out.wait()
	return s.InmemTransport.RequestPreVote(id, target, a, r)
}

func (s *stressTransport) InstallSnapshot(id raft.ServerID, target raft.ServerAddress, a *raft.InstallSnapshotRequest, r *raft.InstallSnapshotResponse, data io.Reader) error {
	s.g.out.wait()
	defer s.g.out.wait()
	return s.InmemTransport.InstallSnapshot(id, target, a, r, data)
}

func (s *stressTransport) TimeoutNow(id raft.ServerID, target raft.ServerAddress, a *raft.TimeoutNowRequest, r *raft.TimeoutNowResponse) error {
	s.g.out.wait()
	defer s.g.out.wait()
	return s.InmemTransport.TimeoutNow(id, target, a, r)
}

func (s *stressTransport) Close() error {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	return s.InmemTransport.Close()
}

// stressCluster is one run: three nodes and what they applied and wrote.
type stressCluster struct {
	t     *testing.T
	o     stressOpts
	nodes []*stressNode

	mu sync.Mutex
	// applied is the first entry applied at each index (by any node).
	applied map[uint64]appliedRec
	// written is the first entry written at each (index, term).
	written    map[[2]uint64]writtenRec
	violations []string
	events     []string
	bad        atomic.Bool
	// modes counts the rounds of each stop mode; suffixes the log
	// suffixes the nodes deleted (a deposed leader's own entries).
	modes    map[string]int
	suffixes atomic.Int64
}

type appliedRec struct {
	node string
	term uint64
	data string
	hash [32]byte
}

type writtenRec struct {
	node string
	typ  raft.LogType
	data string
}

type stressNode struct {
	id string
	c  *stressCluster
	g  *nodeGates
	tr *stressTransport
	// freezeArmed makes the next user snapshot restore's Create wait for
	// the gate (freezeMainLoop); frozen is signalled when it does.
	freezeArmed atomic.Bool
	frozen      chan struct{}
	raft        atomic.Pointer[raft.Raft]
	fsm         *recFSM
	close       []func()
	// proposals counts the commands this node proposed; applying is
	// how many wait for raft's answer.
	proposals atomic.Uint64
	applying  atomic.Int64
}

func (c *stressCluster) event(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.eventLocked(format, args...)
}

func (c *stressCluster) eventLocked(format string, args ...any) {
	c.events = append(c.events, time.Now().Format("15:04:05.000000")+" "+fmt.Sprintf(format, args...))
	if len(c.events) > 400 {
		c.events = c.events[len(c.events)-300:]
	}
}

func (c *stressCluster) violate(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	msg := fmt.Sprintf(format, args...)
	c.violations = append(c.violations, msg)
	c.eventLocked("VIOLATION %s", msg)
	c.bad.Store(true)
}

// recFSM records what its node applies: a hash chain over the commands
// (index and data), which its snapshots carry, checked at every index
// against the cluster's first application of it.
type recFSM struct {
	n *stressNode

	mu   sync.Mutex
	last uint64 // index of the last command applied
	hash [32]byte
	byIx map[uint64]appliedRec // what this node applied, by index
	// newest, when set, is the gated snapshot store's newest index
	// (snapshotFSM's rule).
	newest func() uint64
}

func (f *recFSM) Apply(l *raft.Log) interface{} { return f.ApplyBatch([]*raft.Log{l})[0] }

func (f *recFSM) ApplyBatch(ls []*raft.Log) []interface{} {
	f.n.g.fsm.wait()
	out := make([]interface{}, len(ls))
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.n.c
	for i, l := range ls {
		if l.Type != raft.LogCommand {
			continue
		}
		if l.Index <= f.last {
			c.violate("%s applied index %d after %d", f.n.id, l.Index, f.last)
		}
		var ib [8]byte
		binary.BigEndian.PutUint64(ib[:], l.Index)
		h := sha256.New()
		h.Write(f.hash[:])
		h.Write(ib[:])
		h.Write(l.Data)
		copy(f.hash[:], h.Sum(nil))
		f.last = l.Index
		rec := appliedRec{node: f.n.id, term: l.Term, data: string(l.Data), hash: f.hash}
		f.byIx[l.Index] = rec
		c.mu.Lock()
		prev, ok := c.applied[l.Index]
		if !ok {
			c.applied[l.Index] = rec
		}
		c.mu.Unlock()
		if ok && (prev.data != rec.data || prev.hash != rec.hash) {
			c.violate("index %d: %s applied term %d %q (state %x), %s applied term %d %q (state %x)",
				l.Index, f.n.id, l.Term, rec.data, rec.hash[:4], prev.node, prev.term, prev.data, prev.hash[:4])
		}
		out[i] = l.Index
	}
	return out
}

func (f *recFSM) Snapshot() (raft.FSMSnapshot, error) {
	f.n.g.fsm.wait()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.newest != nil {
		if n := f.newest(); n > 0 && f.last <= n {
			return nil, raft.ErrNothingNewToSnapshot
		}
	}
	return recSnap{last: f.last, hash: f.hash}, nil
}

func (f *recFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	f.n.g.fsm.wait()
	var b [40]byte
	if _, err := io.ReadFull(rc, b[:]); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.last = binary.BigEndian.Uint64(b[:8])
	copy(f.hash[:], b[8:])
	c := f.n.c
	c.mu.Lock()
	prev, ok := c.applied[f.last]
	c.eventLocked("%s restored a snapshot at %d", f.n.id, f.last)
	c.mu.Unlock()
	if ok && prev.hash != f.hash {
		c.violate("%s restored a snapshot at %d with state %x, %s had %x there", f.n.id, f.last, f.hash[:4], prev.node, prev.hash[:4])
	}
	return nil
}

func (f *recFSM) state() (uint64, [32]byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.last, f.hash
}

type recSnap struct {
	last uint64
	hash [32]byte
}

func (s recSnap) Persist(sink raft.SnapshotSink) error {
	var b [40]byte
	binary.BigEndian.PutUint64(b[:8], s.last)
	copy(b[8:], s.hash[:])
	if _, err := sink.Write(b[:]); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

func (recSnap) Release() {}

// checkedLogs is the log store raft is given: it waits on the node's gate
// before every write (a stopped process writes nothing), checks that no
// two nodes write different entries at one (index, term), and that no
// suffix deletion reaches an entry the node committed or applied.
type checkedLogs struct {
	raft.LogStore
	n *stressNode
}

func (s checkedLogs) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

func (s checkedLogs) StoreLogs(ls []*raft.Log) error {
	s.n.g.main.wait()
	c := s.n.c
	c.mu.Lock()
	for _, l := range ls {
		k := [2]uint64{l.Index, l.Term}
		w := writtenRec{node: s.n.id, typ: l.Type, data: string(l.Data)}
		prev, ok := c.written[k]
		if !ok {
			c.written[k] = w
			continue
		}
		if prev.typ != w.typ || prev.data != w.data {
			msg := fmt.Sprintf("log matching: %s wrote index %d term %d as %v %q, %s wrote %v %q", s.n.id, l.Index, l.Term, w.typ, w.data, prev.node, prev.typ, prev.data)
			c.violations = append(c.violations, msg)
			c.eventLocked("VIOLATION %s", msg)
			c.bad.Store(true)
		}
	}
	c.mu.Unlock()
	return s.LogStore.StoreLogs(ls)
}

func (s checkedLogs) DeleteRange(lo, hi uint64) error {
	s.n.g.main.wait()
	if first, err := s.LogStore.FirstIndex(); err == nil && lo > first {
		applied, _ := s.n.fsm.state()
		var commit uint64
		if r := s.n.raft.Load(); r != nil {
			commit = r.CommitIndex()
		}
		s.n.c.suffixes.Add(1)
		s.n.c.event("%s deletes its log suffix %d..%d (commit %d, applied %d)", s.n.id, lo, hi, commit, applied)
		if lo <= commit || lo <= applied {
			s.n.c.violate("%s deletes %d..%d at or below its commit index %d or applied command %d", s.n.id, lo, hi, commit, applied)
		}
	}
	return s.LogStore.DeleteRange(lo, hi)
}

func (s checkedLogs) IsMonotonic() bool {
	m, ok := s.LogStore.(raft.MonotonicLogStore)
	return ok && m.IsMonotonic()
}

// newNode opens node i's stores in dir and its transport.
func (c *stressCluster) newNode(i int, dir string) (*stressNode, raft.LogStore, raft.StableStore, raft.SnapshotStore, hclog.Logger) {
	t := c.t
	id := fmt.Sprintf("n%d", i)
	n := &stressNode{id: id, c: c, g: &nodeGates{}, frozen: make(chan struct{}, 1)}
	n.fsm = &recFSM{n: n, byIx: map[uint64]appliedRec{}}
	n.tr = newStressTransport(raft.ServerAddress(id), n.g, c.o.fastHeartbeats, 2*time.Second)

	hopts := &hclog.LoggerOptions{Name: "raft-" + id, Level: hclog.Off, Output: io.Discard}
	if c.o.logDir != "" {
		f, err := os.Create(filepath.Join(c.o.logDir, fmt.Sprintf("%s-seed%d-%s.log", c.o.stack, c.o.seed, id)))
		if err != nil {
			t.Fatal(err)
		}
		n.close = append(n.close, func() { f.Close() })
		hopts.Level, hopts.Output = hclog.Info, f
	}
	hlog := hclog.New(hopts)

	var logs raft.LogStore
	var stable raft.StableStore
	var snaps raft.SnapshotStore
	switch c.o.stack {
	case "ax":
		w, err := openLogStore(dir, zerolog.Nop(), hlog, nil)
		if err != nil {
			t.Fatal(err)
		}
		n.close = append(n.close, func() { w.Close() })
		g := newStorageGuard(dir, 0, time.Hour, nil, zerolog.Nop())
		logs = newTailCache(guardedLogStore{w, g, &LogWriteStats{}}, tailCacheEntries, tailCacheBytes)
		stable = guardedStableStore{w, g}
		fs, err := raft.NewFileSnapshotStoreWithLogger(dir, fileSnapshotsRetained, hlog)
		if err != nil {
			t.Fatal(err)
		}
		gs := &gatedSnapshotStore{
			SnapshotStore: fs, dir: filepath.Join(dir, "snapshots"), log: zerolog.Nop(), now: time.Now,
			freeSpace: func() (DiskFree, error) { return DiskFree{Bytes: 1 << 40, Inodes: -1}, nil },
			reserve:   func() uint64 { return 0 },
			tasks:     func() int64 { return 0 },
			diskSize:  func() uint64 { return 0 },
		}
		n.fsm.newest = gs.newestIndex
		snaps = gs
	case "inmem":
		s := raft.NewInmemStore()
		logs, stable = s, s
		fs, err := raft.NewFileSnapshotStoreWithLogger(dir, 1, hlog)
		if err != nil {
			t.Fatal(err)
		}
		snaps = fs
	}
	return n, checkedLogs{LogStore: logs, n: n}, stable, freezeSnaps{SnapshotStore: snaps, n: n}, hlog
}

// freezeSnaps is the snapshot store raft is given. When armed, the Create
// of a user restore (raft.Restore; its index is past the log's last) is
// where raft's main loop stops: it waits for the node's gate and fails,
// so that the restore does nothing.
type freezeSnaps struct {
	raft.SnapshotStore
	n *stressNode
}

func (s freezeSnaps) Create(version raft.SnapshotVersion, index, term uint64, cfg raft.Configuration, cfgIndex uint64, trans raft.Transport) (raft.SnapshotSink, error) {
	if r := s.n.raft.Load(); r != nil && index > r.LastIndex() && s.n.freezeArmed.CompareAndSwap(true, false) {
		s.n.frozen <- struct{}{}
		for !s.n.g.main.isPaused() {
			time.Sleep(100 * time.Microsecond)
		}
		s.n.g.main.wait()
		return nil, errors.New("stress: frozen main loop released")
	}
	return s.SnapshotStore.Create(version, index, term, cfg, cfgIndex, trans)
}

// freezeMainLoop stops l's main loop where it is idle: between two
// batches of applies, no entry of its own in flight. A SIGSTOP lands
// there as often as anywhere, but raft offers no hook there: a user
// restore (raft.Restore) makes the main loop call the snapshot store's
// Create first thing, and freezeSnaps holds it there until l's gate is
// paused and resumed (the restore then fails: nothing is restored, the
// pending applies are answered ErrAbortedByRestore but their entries stay
// in the log). It then waits until both followers hold l's whole log, so
// that the new leader will have every entry l wrote. It reports whether
// the main loop stopped.
func (c *stressCluster) freezeMainLoop(l *stressNode) bool {
	r := l.raft.Load()
	l.freezeArmed.Store(true)
	go r.Restore(&raft.SnapshotMeta{Version: raft.SnapshotVersionMax}, bytes.NewReader(nil), 0)
	select {
	case <-l.frozen:
	case <-time.After(time.Second):
		l.freezeArmed.Store(false)
		return false
	}
	last := r.LastIndex()
	deadline := time.Now().Add(time.Second)
	for _, n := range c.nodes {
		for n != l && n.raft.Load().LastIndex() < last && time.Now().Before(deadline) {
			time.Sleep(100 * time.Microsecond)
		}
	}
	return true
}

func runStress(t *testing.T, o stressOpts) {
	rng := rand.New(rand.NewPCG(o.seed, 0x5eed))
	c := &stressCluster{t: t, o: o, applied: map[uint64]appliedRec{}, written: map[[2]uint64]writtenRec{}, modes: map[string]int{}}
	// The scenario's parameters vary with the seed.
	maxAppend := []int{4, 8, 16, 64}[rng.IntN(4)]
	threshold := uint64(32 + rng.IntN(96))
	trailing := uint64(8 + rng.IntN(32))
	t.Logf("seed %d: MaxAppendEntries %d, SnapshotThreshold %d, TrailingLogs %d, fast heartbeats %v, heartbeat guard %v, modes %v",
		o.seed, maxAppend, threshold, trailing, o.fastHeartbeats, !o.noGuard, o.modes)

	var servers []raft.Server
	for i := 0; i < 3; i++ {
		id := fmt.Sprintf("n%d", i)
		servers = append(servers, raft.Server{ID: raft.ServerID(id), Address: raft.ServerAddress(id)})
	}
	type opened struct {
		logs   raft.LogStore
		stable raft.StableStore
		snaps  raft.SnapshotStore
		hlog   hclog.Logger
	}
	var ops []opened
	for i := 0; i < 3; i++ {
		n, logs, stable, snaps, hlog := c.newNode(i, t.TempDir())
		c.nodes = append(c.nodes, n)
		ops = append(ops, opened{logs, stable, snaps, hlog})
	}
	for _, a := range c.nodes {
		for _, b := range c.nodes {
			if a != b {
				a.tr.Connect(raft.ServerAddress(b.id), b.tr.InmemTransport)
			}
		}
	}
	var guards []*rpcGuard
	for i, n := range c.nodes {
		rc := raft.DefaultConfig()
		rc.LocalID = raft.ServerID(n.id)
		rc.HeartbeatTimeout = 50 * time.Millisecond
		rc.ElectionTimeout = 50 * time.Millisecond
		rc.LeaderLeaseTimeout = 50 * time.Millisecond
		rc.CommitTimeout = 5 * time.Millisecond
		rc.SnapshotThreshold = threshold
		rc.TrailingLogs = trailing
		rc.SnapshotInterval = 20 * time.Millisecond
		rc.MaxAppendEntries = maxAppend
		rc.BatchApplyCh = true
		rc.Logger = ops[i].hlog
		var tr raft.Transport = n.tr
		if !o.noGuard {
			tr = guardRPCs(n.tr, n.id, zerolog.Nop(), false)
		}
		if i == 0 {
			if err := raft.BootstrapCluster(rc, ops[i].logs, ops[i].stable, ops[i].snaps, tr, raft.Configuration{Servers: servers}); err != nil {
				t.Fatal(err)
			}
		}
		r, err := raft.NewRaft(rc, n.fsm, ops[i].logs, ops[i].stable, ops[i].snaps, tr)
		if err != nil {
			t.Fatal(err)
		}
		n.raft.Store(r)
		if g, ok := tr.(*rpcGuard); ok {
			g.setRaft(r)
			guards = append(guards, g)
		}
	}

	// Proposers: on every node, workers apply commands while the node
	// believes it leads (a stopped node's are held by its gate, and
	// resume with it, still believing it leads).
	stop := make(chan struct{})
	stopProposers := sync.OnceFunc(func() { close(stop) })
	var wg sync.WaitGroup
	for _, n := range c.nodes {
		for w := 0; w < 6; w++ {
			wg.Add(1)
			go func(stop <-chan struct{}) {
				defer wg.Done()
				r := n.raft.Load()
				for seq := 0; ; seq++ {
					select {
					case <-stop:
						return
					default:
					}
					// Like ax's Proposer: the state is read when a command
					// is accepted, and raft is given it later (a stopped
					// node's accepted commands reach raft when it resumes).
					if r.State() != raft.Leader {
						time.Sleep(time.Millisecond)
						continue
					}
					n.g.prop.wait()
					n.proposals.Add(1)
					n.applying.Add(1)
					r.Apply([]byte(fmt.Sprintf("%s/w%d/%d@%d", n.id, w, seq, time.Now().UnixMicro())), time.Second).Error()
					n.applying.Add(-1)
				}
			}(stop)
		}
	}

	defer func() {
		stopProposers()
		for _, n := range c.nodes {
			n.g.resumeAll()
		}
		wg.Wait()
		for _, n := range c.nodes {
			n.raft.Load().Shutdown().Error()
			n.tr.Close()
			for _, f := range n.close {
				f()
			}
		}
	}()

	leader := func(except *stressNode) *stressNode {
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			for _, n := range c.nodes {
				if n != except && !n.g.main.isPaused() && n.raft.Load().State() == raft.Leader {
					return n
				}
			}
			time.Sleep(2 * time.Millisecond)
		}
		return nil
	}
	sleep := func(lo, hi int) { time.Sleep(time.Duration(lo+rng.IntN(hi-lo+1)) * time.Millisecond) }

	for round := 0; round < o.rounds && !c.bad.Load(); round++ {
		l := leader(nil)
		if l == nil {
			t.Fatalf("round %d: no leader", round)
		}
		sleep(5, 120)
		victim := l
		if rng.IntN(8) == 0 {
			// Now and then a follower stops instead.
			for _, n := range c.nodes {
				if n != l {
					victim = n
					break
				}
			}
		}
		// The modes: "stop" holds the victim wherever it is (a leader's
		// main loop stops at its next log write, with that batch of its
		// own unreplicated); "idle-stop" stops a leader's main loop
		// between batches with its log replicated (freezeMainLoop), and
		// resumes every part at once; "staged" does the same stop and
		// resumes the parts in the order that lets a heartbeat of the new
		// leader, on raft's fast path, make the old leader a follower of
		// the new term while its main loop still runs the leader's loop:
		// its outgoing heartbeats (their rejections renew its lease), its
		// main loop, its incoming heartbeats, its proposers, the rest.
		mode := "stop"
		if victim == l {
			switch rng.IntN(10) {
			case 0, 1:
			case 2, 3, 4:
				mode = "idle-stop"
			default:
				mode = "staged"
			}
		}
		if len(o.modes) > 0 && !slices.Contains(o.modes, mode) {
			mode = o.modes[rng.IntN(len(o.modes))]
			if mode != "stop" {
				victim = l
			}
		}
		holdProposers := mode == "staged" || rng.IntN(2) == 0
		if holdProposers {
			victim.g.prop.pause()
			if mode != "stop" {
				// No apply of the victim's in raft's queue when it stops.
				deadline := time.Now().Add(2 * time.Second)
				for victim.applying.Load() > 0 && time.Now().Before(deadline) {
					time.Sleep(100 * time.Microsecond)
				}
			}
		}
		if mode != "stop" && !c.freezeMainLoop(l) {
			mode = "stop"
		}
		victim.g.pauseAll(holdProposers)
		c.mu.Lock()
		c.modes[mode]++
		c.mu.Unlock()
		c.event("round %d: %s stopped (%s, proposers held %v; leader %s, term %d, last %d)", round, victim.id, mode, holdProposers,
			l.id, l.raft.Load().CurrentTerm(), l.raft.Load().LastIndex())
		if victim == l {
			if leader(l) == nil {
				c.event("round %d: no new leader", round)
			}
		}
		sleep(0, 250)
		if mode == "staged" {
			r := victim.raft.Load()
			victim.g.outHB.resume()
			sleep(15, 25)
			victim.g.main.resume()
			sleep(2, 10)
			c.event("round %d: %s's main loop resumed: %v, term %d", round, victim.id, r.State(), r.CurrentTerm())
			victim.g.inHB.resume()
			sleep(1, 5)
			c.event("round %d: %s took heartbeats: %v, term %d", round, victim.id, r.State(), r.CurrentTerm())
			victim.g.prop.resume()
			sleep(1, 5)
		}
		victim.g.resumeAll()
		c.event("round %d: %s resumed", round, victim.id)
		sleep(20, 200)
	}

	// Let the cluster settle and check every node reached the same state.
	if !c.bad.Load() {
		stopProposers()
		wg.Wait()
		if l := leader(nil); l != nil {
			f := l.raft.Load().Apply([]byte("final"), 5*time.Second)
			if err := f.Error(); err != nil {
				t.Errorf("final apply: %v", err)
			} else {
				final := f.Index()
				deadline := time.Now().Add(10 * time.Second)
				for _, n := range c.nodes {
					for {
						last, _ := n.fsm.state()
						if last >= final || time.Now().After(deadline) {
							break
						}
						time.Sleep(5 * time.Millisecond)
					}
				}
				for _, n := range c.nodes {
					last, h := n.fsm.state()
					t.Logf("%s: last command %d state %x, proposed %d", n.id, last, h[:4], n.proposals.Load())
					if last != final {
						t.Errorf("%s: last applied command %d, want %d", n.id, last, final)
					}
				}
			}
		} else {
			t.Errorf("no leader at the end")
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var deferred uint64
	for _, g := range guards {
		deferred += g.deferredN.Load()
	}
	t.Logf("%d indexes applied, %d (index, term) written; rounds by mode %v; %d log suffixes deleted; %d heartbeats sent to the main loop by the guard",
		len(c.applied), len(c.written), c.modes, c.suffixes.Load(), deferred)
	if os.Getenv("AX_RAFT_STRESS_VERBOSE") != "" && len(c.violations) == 0 {
		t.Logf("events:\n%s", strings.Join(c.events, "\n"))
	}
	if len(c.violations) > 0 {
		t.Errorf("%d violations; first: %s", len(c.violations), c.violations[0])
		t.Logf("events:\n%s", strings.Join(c.events, "\n"))
		// What each node applied around the first divergent index.
		var ix uint64
		fmt.Sscanf(c.violations[0], "index %d", &ix)
		if ix > 0 {
			var b bytes.Buffer
			for i := ix - min(ix, 4); i <= ix+4; i++ {
				for _, n := range c.nodes {
					n.fsm.mu.Lock()
					r, ok := n.fsm.byIx[i]
					n.fsm.mu.Unlock()
					if ok {
						fmt.Fprintf(&b, "  %d %s term %d %q\n", i, n.id, r.term, r.data)
					}
				}
			}
			t.Logf("applied around index %d:\n%s", ix, b.String())
		}
	}
}

// TestStaleLeaderHeartbeat_NoDivergence runs the harness's staged stop of
// the leader (the interleaving of e2e TestSigstop_Leader's rare
// divergence: the new leader's heartbeat, on raft's fast path, makes the
// stopped leader a follower of the new term while its main loop still
// runs the leader's loop, and its next entries took the new term) a few
// times with ax's log stack and heartbeat guard. Without the guard
// (AX_RAFT_STRESS_GUARD=0) it fails at the first round. 2–6 s.
func TestStaleLeaderHeartbeat_NoDivergence(t *testing.T) {
	if testing.Short() {
		t.Skip("about 2 s of raft elections")
	}
	guard := os.Getenv("AX_RAFT_STRESS_GUARD") != "0"
	runStress(t, stressOpts{seed: 1, rounds: 3, stack: "ax", fastHeartbeats: true, noGuard: !guard, modes: []string{"staged"}})
}
