package raftstore

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/axsched/ax/internal/fsmtest"

	"github.com/rs/zerolog"

	"github.com/axsched/ax/raftfsm"
)

const testReserve = 64 << 20

// lowGuard is a storage guard over a fake free-space source.
func lowGuard(t testing.TB) (*Guard, *atomic.Uint64, *atomic.Int64) {
	g := newStorageGuard("/data", testReserve, time.Hour, fsmtest.Open(t), zerolog.New(zerolog.NewTestWriter(t)))
	var free atomic.Uint64
	var inodes atomic.Int64
	free.Store(1 << 30)
	inodes.Store(-1)
	g.freeSpace = func(string) (DiskFree, error) { return DiskFree{Bytes: free.Load(), Inodes: inodes.Load()}, nil }
	g.probeWrite = func(string) error { return nil }
	return g, &free, &inodes
}

// Which entries pass the FSM's write gate at which free space (reserve
// 64 MiB: low below 64, freeing only below 48, floor below 32), and
// whether the API accepts a freeing write there.
func TestSpaceGateLevels(t *testing.T) {
	g, free, inodes := lowGuard(t)
	const M = 1 << 20
	cases := []struct {
		free          uint64
		level         SpaceLevel
		other, frees  bool // the FSM applies an entry (of other commands / that frees space)
		apiOther, api bool // the API accepts a write (other / freeing)
	}{
		{1 << 30, SpaceOK, true, true, true, true},
		{64 * M, SpaceOK, true, true, true, true},
		{64*M - 1, SpaceLow, true, true, false, true},
		{48 * M, SpaceLow, true, true, false, true},
		{48*M - 1, SpaceFreeing, false, true, false, true},
		{32 * M, SpaceFreeing, false, true, false, true},
		{32*M - 1, SpaceFloor, false, false, false, false},
		{0, SpaceFloor, false, false, false, false},
	}
	for _, c := range cases {
		free.Store(c.free)
		g.Probe()
		if lvl := LevelOf(c.free, testReserve); lvl != c.level {
			t.Errorf("free %d: level %v, want %v", c.free, lvl, c.level)
		}
		if got := g.spaceGate(false) == nil; got != c.other {
			t.Errorf("free %d (%v): gate lets another entry through = %v, want %v", c.free, c.level, got, c.other)
		}
		if got := g.spaceGate(true) == nil; got != c.frees {
			t.Errorf("free %d (%v): gate lets a freeing entry through = %v, want %v", c.free, c.level, got, c.frees)
		}
		if got := g.Err() == nil; got != c.apiOther {
			t.Errorf("free %d (%v): writes accepted = %v, want %v", c.free, c.level, got, c.apiOther)
		}
		if got := g.FreeingErr() == nil; got != c.api {
			t.Errorf("free %d (%v): freeing writes accepted = %v, want %v", c.free, c.level, got, c.api)
		}
		cancel := []raftfsm.Command{{Type: raftfsm.CmdCancel, Cancel: &raftfsm.Cancel{ID: "a"}}}
		mixed := append(cancel, raftfsm.Command{Type: raftfsm.CmdSubmit, Submit: &raftfsm.Submit{ID: "b"}})
		if (g.writeErr(cancel) == nil) != c.api || (g.writeErr(mixed) == nil) != c.apiOther {
			t.Errorf("free %d (%v): writeErr cancel %v, mixed %v", c.free, c.level, g.writeErr(cancel), g.writeErr(mixed))
		}
	}
	if err := g.spaceGate(true); err == nil || !strings.Contains(err.Error(), "below the floor of 32.0 MiB") {
		t.Errorf("gate below the floor: %v", err)
	}

	// A cause other than free bytes refuses freeing writes too: out of
	// inodes, a failing probe write, a stuck FSM.
	free.Store(50 * M)
	inodes.Store(10)
	g.Probe()
	if g.FreeingErr() == nil || g.spaceGate(true) == nil {
		t.Error("out of inodes: freeing writes accepted")
	}
	inodes.Store(-1)
	free.Store(1 << 30)
	g.probeWrite = func(string) error { return errors.New("EIO") }
	g.Probe()
	if g.FreeingErr() == nil {
		t.Error("probe write failing: freeing writes accepted")
	}
	g.probeWrite = func(string) error { return nil }
	free.Store(50 * M)
	g.Probe()
	if g.FreeingErr() != nil {
		t.Errorf("low space only: %v", g.FreeingErr())
	}
	g.logWrite("log", errors.New("ENOSPC"))
	if g.FreeingErr() == nil {
		t.Error("raft log write failing: freeing writes accepted")
	}
}

// While storage is low, the proposer keeps freeing proposals and others
// in separate entries; while it is fine it mixes them.
func TestSameClass(t *testing.T) {
	cancel := &proposal{cmds: []raftfsm.Command{{Type: raftfsm.CmdCancel, Cancel: &raftfsm.Cancel{ID: "a"}}}}
	purge := &proposal{cmds: []raftfsm.Command{{Type: raftfsm.CmdPurge, Purge: &raftfsm.Purge{}}}}
	submit := &proposal{cmds: []raftfsm.Command{{Type: raftfsm.CmdSubmit, Submit: &raftfsm.Submit{ID: "b"}}}}
	if !sameClass(cancel, purge) || sameClass(cancel, submit) || !sameClass(submit, submit) {
		t.Fatal("sameClass")
	}
}

// Writes also leave room for the next Raft snapshot: below the reserve
// plus its expected size they are refused (freeing ones still pass), and
// a smaller expected snapshot (after a purge) lets them in again at once.
func TestSnapshotHeadroom(t *testing.T) {
	g, free, _ := lowGuard(t)
	const M = 1 << 20
	var snap atomic.Uint64
	snap.Store(100 * M)
	g.snapNeed = snap.Load
	free.Store(150 * M)
	g.Probe()
	if e := g.Err(); e == nil || !strings.Contains(e.Cause, "plus 100.0 MiB for the next Raft snapshot") {
		t.Fatalf("150 MiB free, 64 MiB reserve, 100 MiB snapshot: %v", e)
	}
	if g.FreeingErr() != nil || g.spaceGate(false) != nil {
		t.Fatalf("freeing writes refused (%v) or the FSM gated (%v) above the reserve", g.FreeingErr(), g.spaceGate(false))
	}
	snap.Store(20 * M) // a purge
	g.Probe()
	if e := g.Err(); e != nil {
		t.Fatalf("after the purge: %v", e)
	}
}
