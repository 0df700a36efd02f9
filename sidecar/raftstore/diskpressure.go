package raftstore

import (
	"context"
	"fmt"

	"github.com/hashicorp/raft"

	"github.com/axsched/ax/raftfsm"
)

// Disk pressure (issue 12): the levels of free space in the data dir, R
// being Config.StorageReserve (64 MiB by default):
//
//	free ≥ R + S         every write is accepted (S: the expected size of
//	                     the next Raft snapshot, see snapHeadroom).
//	R ≤ free < R + S     the API refuses writes as below, except those that
//	                     free space; the FSM applies every entry.
//	¾R ≤ free < R        low: the API answers writes 503 storage_unavailable,
//	                     except those that free space (cancel, purge); the
//	                     leader holds its own proposals (fires); the FSM
//	                     still applies every entry, so that the entries that
//	                     were in flight when the node turned low do not
//	                     block the purges behind them.
//	½R ≤ free < ¾R       freeing only: the FSM applies only entries whose
//	                     every command frees space; any other entry waits
//	                     (retried, never skipped) until space comes back.
//	free < ½R            the floor: nothing is written to badger at all.
//
// Why these levels: the gate can stop the FSM's commits but not what
// badger writes by itself: a memtable flush (an SST of up to 16 MiB) and
// the first tables of a compaction. The half of R below the floor is kept
// for those, so badger (which writes through mmap, where a full disk is a
// SIGBUS crash) never meets a full disk. The quarter between ¾R and R is
// for the entries that were already in the log when the proposer began to
// refuse (a batch is at most 4 MiB of payload, written once to the Raft log and
// once to badger). Freeing entries write little (a purge of 10 000 tasks
// writes about 1 MiB of tombstones, a cancel one record), so they may use
// the quarter between ½R and ¾R. Snapshots are gated separately
// (snapgate.go): one starts only when free space covers its expected size
// plus R.
type SpaceLevel uint8

// The levels of free space against the reserve R.

const (
	SpaceOK      SpaceLevel = iota // free ≥ R
	SpaceLow                       // ¾R ≤ free < R
	SpaceFreeing                   // ½R ≤ free < ¾R
	SpaceFloor                     // free < ½R
)

func (l SpaceLevel) String() string {
	switch l {
	case SpaceOK:
		return "ok"
	case SpaceLow:
		return "low"
	case SpaceFreeing:
		return "freeing_only"
	default:
		return "floor"
	}
}

// LevelOf returns the level of free bytes against reserve (> 0).
func LevelOf(free, reserve uint64) SpaceLevel {
	switch {
	case free >= reserve:
		return SpaceOK
	case free >= reserve-reserve/4:
		return SpaceLow
	case free >= reserve/2:
		return SpaceFreeing
	default:
		return SpaceFloor
	}
}

// spaceGate is the FSM's write gate (raftfsm.FSM.SetSpaceGate), a live
// statfs per badger commit: an entry that frees space is refused only
// below the floor (½R), any other below ¾R; both below storageMinInodes
// free inodes.
func (g *Guard) spaceGate(frees bool) error {
	reserve := g.reserve.Load()
	if reserve == 0 {
		return nil
	}
	free, err := g.freeSpace(g.dir)
	if err != nil {
		return nil // cannot tell: let badger try (its own errors are retried)
	}
	if free.Inodes >= 0 && free.Inodes < storageMinInodes {
		return fmt.Errorf("data dir %s has %d free inodes, below %d: new files cannot be created", g.dir, free.Inodes, storageMinInodes)
	}
	switch lvl := LevelOf(free.Bytes, reserve); {
	case lvl == SpaceFloor:
		return fmt.Errorf("data dir %s has %s free, below the floor of %s (half of --storage-reserve): nothing is written",
			g.dir, mib(free.Bytes), mib(reserve/2))
	case lvl == SpaceFreeing && !frees:
		return fmt.Errorf("data dir %s has %s free, below %s (three quarters of --storage-reserve): only entries that free space (cancel, purge) are applied",
			g.dir, mib(free.Bytes), mib(reserve-reserve/4))
	}
	return nil
}

// FreeingErr returns nil when this node accepts a write that frees space
// (a cancel, a purge): always when it accepts writes, and inside the
// reserve while the only cause is free space still above the floor (½R;
// a live statfs). Otherwise it returns the state (err).
func (g *Guard) FreeingErr() *StorageUnavailableError {
	e, spaceOnly := g.spaceOnlyErr()
	if !spaceOnly {
		return e
	}
	reserve := g.reserve.Load()
	free, err := g.freeSpace(g.dir)
	if err != nil || reserve == 0 || LevelOf(free.Bytes, reserve) == SpaceFloor ||
		(free.Inodes >= 0 && free.Inodes < storageMinInodes) {
		return e
	}
	return nil
}

// applyErr returns nil while this node can still apply a committed entry
// (freeing: every command in it frees space), else the state (Err). The
// API refuses new writes well before the FSM's gate does (the reserve plus
// the next snapshot's headroom against ¾R and ½R of the reserve), so an
// entry already proposed when the API starts refusing is still applied
// here, and its callers must hear its outcome, not a 503 for a write that
// took effect.
func (g *Guard) applyErr(freeing bool) *StorageUnavailableError {
	e, spaceOnly := g.spaceOnlyErr()
	if !spaceOnly || g.spaceGate(freeing) != nil {
		return e
	}
	return nil
}

// spaceOnlyErr returns the state (Err) and whether free space inside the
// reserve is its only cause (no storage or Raft log write failed), in
// which case some writes may still pass (FreeingErr, applyErr).
func (g *Guard) spaceOnlyErr() (e *StorageUnavailableError, spaceOnly bool) {
	e = g.Err()
	if e == nil {
		return nil, false
	}
	return e, g.spaceOnly.Load() && g.fsm.StorageError() == nil && g.logFail.Load() == nil
}

// writeErr returns the state that decides a proposal of cmds: FreeingErr
// when every command frees space, err otherwise.
func (g *Guard) writeErr(cmds []raftfsm.Command) *StorageUnavailableError {
	if raftfsm.EntryFreesSpace(cmds) {
		return g.FreeingErr()
	}
	return g.LiveErr()
}

// waitFor is waitWritable for cmds: it waits until writeErr(cmds) is nil.
func (g *Guard) waitFor(ctx context.Context, cmds []raftfsm.Command, stop func() error) error {
	return g.waitUntil(ctx, func() *StorageUnavailableError { return g.writeErr(cmds) }, stop)
}

// sameClass reports whether two proposals may share a Raft entry while
// storage is low: both free space, or neither does.
func sameClass(a, b *proposal) bool {
	return raftfsm.EntryFreesSpace(a.cmds) == raftfsm.EntryFreesSpace(b.cmds)
}

// lowSpace reports whether the proposer must keep freeing and other
// commands in separate entries (storage is not writable).
func (p *Proposer) lowSpace() bool {
	return p.cfg.Guard != nil && p.cfg.Guard.Err() != nil
}

// notLeader is the stop function of the proposer's storage waits.
func (p *Proposer) notLeader() error {
	if p.cfg.Raft.State() != raft.Leader {
		return ErrNotLeader
	}
	return nil
}

// snapHeadroom is the free space writes must leave for the next Raft
// snapshot, on top of the reserve: its expected size. Without it a node
// whose state outgrew half its free space could never snapshot again (the
// snapshot gate refuses), so its Raft log, which only a snapshot
// truncates, would grow with every write until the disk is full; and a
// purge could not give space back (a smaller snapshot replaces the old one
// and truncates the log). With it, the node refuses writes while it can
// still snapshot, and a purge lowers the headroom at once (the estimate
// follows the task count). The check on it is the API's and the
// proposer's (SpaceLow); the FSM's levels are from the reserve alone.
func (g *Guard) snapHeadroom() uint64 {
	if g.snapNeed == nil {
		return 0
	}
	return g.snapNeed()
}
