package raftstore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"
	walfs "github.com/hashicorp/raft-wal/fs"
	"github.com/hashicorp/raft-wal/metadb"
	"github.com/hashicorp/raft-wal/segment"
)

// A WAL whose tail segment was sealed but not rotated.
//
// raft-wal (v0.4.1) seals a segment when an append fills it (it writes the
// segment's index frame) and then rotates in the background: it records
// the seal in its metadata (wal-meta.db) and creates the next segment. A
// process killed between the two leaves a tail whose file is sealed while
// the metadata says it is open. Open then recovers that tail as the
// segment to append to, and does not rotate, so every append fails with
// "segment is sealed" for good: the node wins an election, cannot write
// its log, steps down, again and again, restarts included (seen twice in
// about ten SIGKILLs of a node under a load of large batches).
//
// openWAL finds that state before raft-wal opens the dir (walTailSealed:
// the tail of the metadata, recovered through raft-wal's own segment
// package, reports sealed) and completes the rotation with raft-wal's tail
// truncation, which seals the tail in the metadata and starts the next
// segment: it deletes the last entry and appends it again, read back
// first, so the log holds the same entries. A crash between the two loses
// that one entry from this node's log, as a crash during an append would;
// raft sends it again if it was committed.

// walTailSealed reports whether the WAL in dir has a tail segment whose
// file is sealed while the metadata says it is not. A dir without
// metadata (a new WAL) is not.
func walTailSealed(dir string) (bool, error) {
	if _, err := os.Stat(filepath.Join(dir, metadb.FileName)); errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	var meta metadb.BoltMetaDB
	ps, err := meta.Load(dir)
	if err != nil {
		return false, err
	}
	defer meta.Close()
	if len(ps.Segments) == 0 {
		return false, nil
	}
	tail := ps.Segments[len(ps.Segments)-1]
	if !tail.SealTime.IsZero() {
		return false, nil
	}
	sw, err := segment.NewFiler(dir, walfs.New()).RecoverTail(tail)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil // raft-wal creates it
	}
	if err != nil {
		return false, err
	}
	defer sw.Close()
	sealed, _, err := sw.Sealed()
	return sealed, err
}

// rotateSealedTail completes the rotation of w's sealed tail (see above):
// it deletes the last entry and appends it again. A log of one entry
// cannot be rotated so: an error.
func rotateSealedTail(w *wal.WAL) (uint64, error) {
	first, err := w.FirstIndex()
	if err != nil {
		return 0, err
	}
	last, err := w.LastIndex()
	if err != nil {
		return 0, err
	}
	if last <= first {
		return last, fmt.Errorf("the log's tail segment is sealed and holds entries %d to %d: too few to rotate it", first, last)
	}
	var e raft.Log
	if err := w.GetLog(last, &e); err != nil {
		return last, fmt.Errorf("read entry %d: %w", last, err)
	}
	if err := w.DeleteRange(last, last); err != nil {
		return last, fmt.Errorf("seal the tail (delete entry %d): %w", last, err)
	}
	if err := w.StoreLogs([]*raft.Log{&e}); err != nil {
		return last, fmt.Errorf("append entry %d again: %w", last, err)
	}
	return last, nil
}

// openWAL opens (or creates) the WAL in dir, which must exist, first
// completing the rotation of a tail segment sealed by a process that was
// killed before it rotated (see above). Its segment files write and fsync
// through policy (walsync.go); nil: raft-wal's own files (os.File.Sync), as for a
// migration's WAL and the tests'.
//
// raft-wal must be v0.4.1 or later: v0.4.0 marked a segment sealed in its
// meta store when raft truncated the log's tail ("clearing log suffix",
// after an election) without writing the segment's index, so the next
// start failed on every entry of it ("sealed segment has no index
// block", raft-wal#31: a node killed in the chaos e2e could not start
// again); and its Close left the meta store's bolt file open, whose lock
// blocked the next open in the same process for ever.
func openWAL(dir string, hlog hclog.Logger, policy *syncPolicy) (*wal.WAL, error) {
	sealed, err := walTailSealed(dir)
	if err != nil {
		return nil, fmt.Errorf("check the log's tail segment: %w", err)
	}
	// raft-wal's default segment filer, but for the files' fsync
	// (walsync.go) when policy is set.
	filer := segment.NewFiler(dir, walfs.New())
	if policy != nil {
		filer = segment.NewFiler(dir, syncFS{FS: walfs.New(), policy: policy})
	}
	w, err := wal.Open(dir, wal.WithSegmentSize(walSegmentSize), wal.WithLogger(hlog.Named("wal")), wal.WithSegmentFiler(filer))
	if err != nil || !sealed {
		return w, err
	}
	last, err := rotateSealedTail(w)
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("complete the rotation of a sealed tail segment: %w", err)
	}
	hlog.Warn("the raft log's tail segment was sealed but not rotated (the process stopped in between): rotated it now", "dir", dir, "last_index", last)
	return w, nil
}
