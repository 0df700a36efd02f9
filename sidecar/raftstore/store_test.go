package raftstore

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/axsched/ax/engine"
	"github.com/axsched/ax/internal/freeport"
	"github.com/axsched/ax/ipc"
	"github.com/axsched/ax/raftfsm"
)

// testStoreConfig is a one-node store in dir on a free port.
func testStoreConfig(t *testing.T, dir string) Config {
	t.Helper()
	addrs, err := freeport.Addrs(1)
	if err != nil {
		t.Fatal(err)
	}
	return Config{
		NodeID: "s1", DataDir: dir, RaftAddr: addrs[0], RaftAdvertise: addrs[0],
		// A route to a node that does not exist: the transport dials
		// through the route provider.
		PeerRoutes:       []PeerRoute{{NodeID: "s9", RaftAddr: "127.0.0.1:1", PeerAddr: "127.0.0.1:2"}},
		HeartbeatTimeout: 50 * time.Millisecond, ElectionTimeout: 50 * time.Millisecond, LeaderLeaseTimeout: 50 * time.Millisecond,
		SnapshotThreshold: 1 << 20, SnapshotInterval: time.Hour, TrailingLogs: 10240, TrailingLogsBytes: 1 << 20,
		StorageReserve: 1 << 20, StorageProbeInterval: time.Hour,
		Log: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel), Clock: engine.RealClock(),
	}
}

func advertiseOf(addr string) func() (net.Addr, error) {
	return func() (net.Addr, error) { return net.ResolveTCPAddr("tcp", addr) }
}

// startTestStore opens the stores and Raft in dir and, on first start,
// bootstraps a one-node cluster; it returns once this node leads.
// beforeElection, when not nil, runs once Raft is started.
func startTestStore(t *testing.T, cfg Config, beforeElection func(*Store)) *Store {
	t.Helper()
	st := openTestStore(t, cfg)
	if beforeElection != nil {
		beforeElection(st)
	}
	if !st.HasState {
		f := st.Raft.BootstrapCluster(raft.Configuration{Servers: []raft.Server{{ID: raft.ServerID(cfg.NodeID), Address: raft.ServerAddress(cfg.RaftAdvertise)}}})
		if err := f.Error(); err != nil {
			t.Fatal(err)
		}
	}
	for isLeader := range st.LeaderCh {
		if isLeader {
			break
		}
	}
	return st
}

// openTestStore opens the stores and starts Raft in cfg.DataDir; it does
// not bootstrap.
func openTestStore(t *testing.T, cfg Config) *Store {
	t.Helper()
	st, err := OpenState(cfg)
	if err != nil {
		st.Close()
		t.Fatal(err)
	}
	if err := st.StartRaft(advertiseOf(cfg.RaftAdvertise)); err != nil {
		st.Close()
		t.Fatal(err)
	}
	return st
}

func stopTestStore(t *testing.T, st *Store) {
	t.Helper()
	st.Guard.Stop()
	if err := st.Raft.Shutdown().Error(); err != nil {
		t.Fatal(err)
	}
	st.Close()
}

// A store opens, elects itself, group-commits through the Proposer, snapshots
// (lowering the trailing log to its byte bound), and opens again with its
// state: no restore of a snapshot badger already holds.
func TestStoreLifecycle(t *testing.T) {
	dir := t.TempDir()
	cfg := testStoreConfig(t, dir)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The leader watch sees this node win the election.
	w := NewLeaderWatch()
	changed := w.Changed()
	st := startTestStore(t, cfg, func(st *Store) { go w.Observe(st.Raft)(ctx) })
	if st.HasState {
		t.Fatal("a new data dir has Raft state")
	}
	// The network transport raft runs over is behind the heartbeat guard
	// (heartbeat.go): guardRPCs passes a transport without pre-vote
	// or Close through unguarded.
	if _, ok := st.transport.(*rpcGuard); !ok {
		t.Fatalf("raft's transport is a %T, not behind the heartbeat guard", st.transport)
	}
	<-changed
	p := NewProposer(ProposerConfig{Raft: st.Raft, Guard: st.Guard, Clock: cfg.Clock})
	go p.Run(ctx)
	done := make(chan error, 20)
	for i := range 20 {
		go func() {
			_, err := p.Propose(ctx, []raftfsm.Command{nodeCmd(string(rune('a' + i)))})
			done <- err
		}()
	}
	for range 20 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if nodes, err := st.FSM.Nodes(); err != nil || len(nodes) != 20 {
		t.Fatalf("%d nodes stored (%v), want 20", len(nodes), err)
	}
	if st.LogStats.Writes.Load() == 0 || st.LogStats.Entries.Load() == 0 || st.LogStats.Bytes.Load() == 0 {
		t.Fatalf("log stats not counted: %d writes, %d entries", st.LogStats.Writes.Load(), st.LogStats.Entries.Load())
	}

	// The trailing log is sized by bytes before a snapshot: 20 small
	// entries fit the bound, so raft keeps them all (at most TrailingLogs).
	if err := st.Raft.Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	if got := st.Raft.ReloadableConfig().TrailingLogs; got == 0 || got > cfg.TrailingLogs {
		t.Fatalf("trailing logs %d after the snapshot", got)
	}
	if st.snaps.logBytesAtSnap.Load() != st.LogStats.Bytes.Load() {
		t.Fatal("snapshot did not record the log bytes it covers")
	}
	// The FSM told the state's size (before compression): more than the
	// file's.
	metas, err := st.snaps.List()
	if err != nil || len(metas) != 1 || st.snaps.lastState.Load() <= uint64(metas[0].Size) {
		t.Fatalf("state size recorded for the byte trigger: %d; snapshots %+v (%v)", st.snaps.lastState.Load(), metas, err)
	}
	stateAtSnap := st.snaps.lastState.Load()

	// The metrics of the guard and the snapshot gate register and read.
	reg := prometheus.NewRegistry()
	reg.MustRegister(st.Collectors()...)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, mf := range mfs {
		names[mf.GetName()] = true
	}
	for _, n := range []string{"ax_storage_unavailable", "ax_fsm_storage_retries_total", "ax_raft_snapshots_skipped_total", "ax_raft_snapshot_expected_bytes"} {
		if !names[n] {
			t.Errorf("metric %s missing", n)
		}
	}

	// Compaction runs when space allows.
	ran := 0
	c := st.GateCompaction(func() error { ran++; return nil })
	if err := c.Compact(); err != nil || ran != 1 {
		t.Fatalf("compaction: %v, ran %d", err, ran)
	}
	snapCtx, snapCancel := context.WithCancel(ctx)
	snapCancel()
	st.SnapshotByBytes(snapCtx) // returns once its context ended
	c.Run(snapCtx)

	stopTestStore(t, st)
	st = startTestStore(t, cfg, nil)
	defer stopTestStore(t, st)
	if !st.HasState {
		t.Fatal("reopened store has no Raft state")
	}
	if got := st.snaps.lastState.Load(); got != stateAtSnap {
		t.Fatalf("reopened store took %d bytes for the byte trigger, want the snapshot's state size %d", got, stateAtSnap)
	}
	if nodes, err := st.FSM.Nodes(); err != nil || len(nodes) != 20 {
		t.Fatalf("%d nodes after reopening (%v), want 20", len(nodes), err)
	}
}

// OpenState on a data dir badger cannot use fails with the open error.
func TestOpenStateFails(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "state"), []byte("not a dir"), 0o600); err != nil {
		t.Fatal(err)
	}
	st, err := OpenState(testStoreConfig(t, dir))
	if err == nil || !strings.Contains(err.Error(), "open badger") {
		t.Fatalf("OpenState over a file: %v", err)
	}
	st.Close()
}

// A gated compaction waits while free space does not cover the live data
// plus the reserve, and runs once it does.
func TestCompactorWaitsForSpace(t *testing.T) {
	g, free, _ := lowGuard(t)
	s, snapFree := testSnapStore(t)
	snapFree.Store(1 << 40)
	c := &Compactor{g: g, snaps: s, log: zerolog.New(zerolog.NewTestWriter(t))}
	ran := 0
	c.inner = func() error { ran++; return nil }
	free.Store(testReserve) // below the reserve plus the live data (10 MiB)
	if err := c.Compact(); err != nil || ran != 0 || !c.pending.Load() {
		t.Fatalf("compaction without room: %v, ran %d, pending %v", err, ran, c.pending.Load())
	}
	free.Store(1 << 30)
	b := &busyCount{t: t}
	c.busy = b.begin
	c.inner = func() error {
		ran++
		if b.jobs.Load() != 1 {
			t.Errorf("the compaction ran as %d background jobs, want 1", b.jobs.Load())
		}
		return nil
	}
	if err := c.Compact(); err != nil || ran != 1 || c.pending.Load() {
		t.Fatalf("compaction with room: %v, ran %d, pending %v", err, ran, c.pending.Load())
	}
	if b.jobs.Load() != 0 {
		t.Fatalf("jobs %d after the compaction", b.jobs.Load())
	}
}

// The storage error reads as its cause and answers 503 storage_unavailable.
func TestStorageUnavailableErrorAnswer(t *testing.T) {
	e := &StorageUnavailableError{Cause: "disk full", Since: time.Unix(1_700_000_000, 0)}
	if !strings.Contains(e.Error(), "disk full") || !strings.Contains(e.Error(), "2023-11-14T22:13:20Z") {
		t.Fatalf("Error() = %q", e.Error())
	}
	var ie *ipc.Error
	if err := e.APIError(); !errors.As(err, &ie) || ie.Code != ipc.ErrStorageUnavailable.Code || !strings.Contains(ie.Message, "disk full") {
		t.Fatalf("APIError() = %v", err)
	}
}

// The probe writes, syncs and removes its file, and fails in a directory
// that does not exist; statfs tells the data dir's free space.
func TestProbeFileAndFreeSpace(t *testing.T) {
	dir := t.TempDir()
	if err := writeProbeFile(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, probeFileName)); !os.IsNotExist(err) {
		t.Fatalf("probe file left behind: %v", err)
	}
	if err := writeProbeFile(filepath.Join(dir, "missing")); err == nil {
		t.Fatal("probe in a missing dir passed")
	}
	f, err := FreeSpace(dir)
	if err != nil || f.Bytes == 0 {
		t.Fatalf("FreeSpace: %+v %v", f, err)
	}
	if _, err := FreeSpace(filepath.Join(dir, "missing")); err == nil {
		t.Fatal("FreeSpace of a missing dir")
	}
	if err := os.WriteFile(filepath.Join(dir, "f"), make([]byte, 8192), 0o600); err != nil {
		t.Fatal(err)
	}
	if b := dirAllocatedBytes(dir); b < 8192 {
		t.Fatalf("dirAllocatedBytes %d, want at least 8192", b)
	}
	if b := DirSize(dir); b != 8192 {
		t.Fatalf("DirSize %d, want 8192", b)
	}
}

func TestRaftLogLevel(t *testing.T) {
	for l, want := range map[zerolog.Level]hclog.Level{zerolog.DebugLevel: hclog.Info, zerolog.InfoLevel: hclog.Warn, zerolog.WarnLevel: hclog.Error} {
		if got := raftLogLevel(l); got != want {
			t.Errorf("raftLogLevel(%v) = %v, want %v", l, got, want)
		}
	}
}

func TestSpaceLevelString(t *testing.T) {
	for l, want := range map[SpaceLevel]string{SpaceOK: "ok", SpaceLow: "low", SpaceFreeing: "freeing_only", SpaceFloor: "floor"} {
		if l.String() != want {
			t.Errorf("%d.String() = %q, want %q", l, l.String(), want)
		}
	}
}

// A snapshot at the index of the newest one stored is nothing new: raft
// is told so (and says nothing) instead of writing the same state again.
// A follower whose log raft emptied as it installed a leader's snapshot
// asked for one at every SnapshotInterval (snapshotFSM).
func TestSnapshotAtTheNewestIndexIsNothingNew(t *testing.T) {
	cfg := testStoreConfig(t, t.TempDir())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st := startTestStore(t, cfg, nil)
	defer stopTestStore(t, st)
	p := NewProposer(ProposerConfig{Raft: st.Raft, Guard: st.Guard, Clock: cfg.Clock})
	go p.Run(ctx)
	propose := func(id string) {
		t.Helper()
		if _, err := p.Propose(ctx, []raftfsm.Command{nodeCmd(id)}); err != nil {
			t.Fatal(err)
		}
	}
	ids := func() []string {
		t.Helper()
		metas, err := st.snaps.List()
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, m := range metas {
			out = append(out, m.ID)
		}
		return out
	}
	propose("a")
	if err := st.Raft.Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	first := ids()
	if len(first) != 1 {
		t.Fatalf("snapshots %v, want one", first)
	}
	if err := st.Raft.Snapshot().Error(); !errors.Is(err, raft.ErrNothingNewToSnapshot) {
		t.Fatalf("a second snapshot at the same applied index: %v, want raft.ErrNothingNewToSnapshot", err)
	}
	if got := ids(); len(got) != 1 || got[0] != first[0] {
		t.Fatalf("snapshots %v after a snapshot with nothing new, want %v", got, first)
	}
	propose("b")
	if err := st.Raft.Snapshot().Error(); err != nil {
		t.Fatalf("a snapshot after a new entry: %v", err)
	}
	if got := ids(); len(got) != 1 || got[0] == first[0] {
		t.Fatalf("snapshots %v after a new entry, want one other than %v", got, first)
	}
}

// snapshotFSM says "nothing new" only when neither the applied index nor
// the log's last index is past the newest snapshot: a follower whose log
// an install emptied (last index 0) is not snapshotted again, a log that
// grew by entries the FSM never sees (a new leader's no-op) still is.
func TestSnapshotFSMNothingNew(t *testing.T) {
	cfg := testStoreConfig(t, t.TempDir())
	st := startTestStore(t, cfg, nil)
	defer stopTestStore(t, st)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := NewProposer(ProposerConfig{Raft: st.Raft, Guard: st.Guard, Clock: cfg.Clock})
	go p.Run(ctx)
	if _, err := p.Propose(ctx, []raftfsm.Command{nodeCmd("a")}); err != nil {
		t.Fatal(err)
	}
	applied := st.FSM.AppliedIndex()
	if applied < 2 {
		t.Fatalf("applied index %d after a command", applied)
	}
	for _, c := range []struct {
		name            string
		newest, lastLog uint64
		nothingNew      bool
	}{
		{"no snapshot stored", 0, applied, false},
		{"log emptied by an install", applied, 0, true},
		{"at the newest snapshot", applied, applied, true},
		{"log past the snapshot", applied, applied + 2, false},
		{"state past the snapshot", applied - 1, applied, false},
	} {
		f := snapshotFSM{FSM: st.FSM, newest: func() uint64 { return c.newest }, lastLog: func() (uint64, error) { return c.lastLog, nil }}
		snap, err := f.Snapshot()
		if c.nothingNew {
			if !errors.Is(err, raft.ErrNothingNewToSnapshot) {
				t.Errorf("%s: Snapshot() = %v, want raft.ErrNothingNewToSnapshot", c.name, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: Snapshot(): %v", c.name, err)
			continue
		}
		snap.Release()
	}
}
