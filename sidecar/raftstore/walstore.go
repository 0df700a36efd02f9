package raftstore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	wal "github.com/hashicorp/raft-wal"
	"github.com/rs/zerolog"
)

// The Raft log and raft's stable store (term, vote) live in DataDir/wal,
// a hashicorp/raft-wal write-ahead log: segment files the log is appended
// to, one fsync per append (raft's StoreLogs), and a small bolt file
// (wal-meta.db) for the segment list and the stable keys. Log compaction
// deletes whole segments, so the space of a truncated log goes back to
// the file system (raft.db, the bolt store of earlier versions, kept its
// high-water size and needed a compaction at start).
//
// A data dir of an earlier version has raft.db and no wal: openLogStore
// migrates it first (migrateBoltLog).
//
// Once the WAL is there, raft.db is a guard (boltGuard): a few bytes that
// bolt refuses, so that an earlier version of ax started on the dir (a
// downgrade) exits ("open raft log: invalid database") instead of
// creating an empty raft.db, which it would take for a new node's log: it
// would start a new Raft log at index 1 over a state applied far beyond,
// and skip every new entry up to that index as applied before.

// walSegmentSize is the size of a WAL segment file, bytes. raft-wal
// preallocates each new segment at this size (fallocate), so it is what
// a fresh node's log takes on disk, and a rotation needs this much free
// space: it is kept well below half the smallest storage reserve a node
// is run with (the e2e disk-pressure test's 32 MiB), so that the floor of
// the storage guard (½R) still leaves room for one. An append larger than
// what is left of a segment is written whole (the segment grows past its
// size) and seals it.
const walSegmentSize = 8 << 20

// The names in DataDir of the WAL, the bolt log of earlier versions and
// the WAL a migration builds before it renames it to walDirName.
const (
	walDirName     = "wal"
	boltLogName    = "raft.db"
	walMigrateName = "wal.migrating"
	// boltCompactName is the copy an earlier version's raft.db compaction
	// wrote before renaming it over raft.db; a crash could leave it.
	boltCompactName = "raft.db.compact"
	boltGuardTmp    = "raft.db.guard"
)

// boltGuard is what raft.db holds beside the WAL (see openLogStore): not a
// bolt file (bolt answers "invalid database"), and short, so that telling
// it from a real raft.db reads a few bytes.
const boltGuard = "ax: this data dir keeps its Raft log in wal/ (raft-wal). This file is not a bolt\n" +
	"database: it makes an earlier version of ax, which reads raft.db, refuse to start here.\n"

// migrateBatchBytes bounds the entry bytes a migration appends to the
// WAL at once (one append, one fsync each).
const migrateBatchBytes = 4 << 20

// raftStableUintKeys and raftStableKeys are the keys hashicorp/raft keeps
// in its stable store (raft.go: keyCurrentTerm, keyLastVoteTerm written
// with SetUint64, keyLastVoteCand with Set).
var (
	raftStableUintKeys = [][]byte{[]byte("CurrentTerm"), []byte("LastVoteTerm")}
	raftStableKeys     = [][]byte{[]byte("LastVoteCand")}
)

// openLogStore opens the node's Raft log and stable store, DataDir/wal,
// migrating DataDir/raft.db into it first when the dir holds only that
// (migrateBoltLog). The WAL's segment files write and fsync through policy (nil:
// os.File.Sync; see openWAL). Errors: the migration's, and raft-wal's
// when the WAL cannot be opened or recovered.
func openLogStore(dataDir string, log zerolog.Logger, hlog hclog.Logger, policy *syncPolicy) (*wal.WAL, error) {
	if err := migrateBoltLog(dataDir, log, hlog); err != nil {
		return nil, err
	}
	dir := filepath.Join(dataDir, walDirName)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("raft log dir: %w", err)
	}
	w, err := openWAL(dir, hlog, policy)
	if err != nil {
		return nil, fmt.Errorf("open raft log %s: %w", dir, err)
	}
	if err := writeBoltGuard(dataDir); err != nil {
		// The guard only protects against a downgrade: a node whose disk
		// is full still starts (and writes it at a later start).
		log.Warn().Err(err).Msg("raft.db guard not written: an earlier version of ax started on this data dir would not refuse it")
	}
	return w, nil
}

// isBoltGuard reports whether the file at path is boltGuard.
func isBoltGuard(path string) bool {
	fi, err := os.Stat(path)
	if err != nil || fi.Size() != int64(len(boltGuard)) {
		return false
	}
	b, err := os.ReadFile(path)
	return err == nil && string(b) == boltGuard
}

// writeBoltGuard makes dataDir/raft.db the guard, unless it is already:
// written beside, synced, renamed over raft.db (a stale bolt log left by
// an interrupted migration is replaced in the same step) and the dir
// synced.
func writeBoltGuard(dataDir string) error {
	path := filepath.Join(dataDir, boltLogName)
	if isBoltGuard(path) {
		return nil
	}
	tmp := filepath.Join(dataDir, boltGuardTmp)
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	_, err = f.WriteString(boltGuard)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return syncDir(dataDir)
}

// hasLogStore reports whether dataDir holds a Raft log: the WAL or the
// bolt log of an earlier version (not the guard alone).
func hasLogStore(dataDir string) bool {
	if _, err := os.Stat(filepath.Join(dataDir, walDirName)); err == nil {
		return true
	}
	path := filepath.Join(dataDir, boltLogName)
	_, err := os.Stat(path)
	return err == nil && !isBoltGuard(path)
}

// migrateBoltLog moves the Raft log and stable store of an earlier
// version, dataDir/raft.db (raft-boltdb), into a new WAL, dataDir/wal.
// It builds the WAL in dataDir/wal.migrating (raft's stable keys, then
// every entry first..last in order, each append synced), closes it, syncs
// the dir, renames it to wal and only then replaces raft.db with the
// guard (writeBoltGuard). A crash at any step leaves a dir that starts:
// raft.db alone (with or without a partial wal.migrating, which is
// removed) is migrated again; wal present is used, and a bolt raft.db
// left beside it is replaced by the guard. A dir with neither (or with
// the guard alone, which is removed) is left alone (a new node), and so
// is one with the WAL and the guard. A raft.db.compact an earlier
// version's compaction left is removed. Errors: reading raft.db, writing
// the WAL (the partial copy is removed, raft.db is kept).
func migrateBoltLog(dataDir string, log zerolog.Logger, hlog hclog.Logger) error {
	boltPath := filepath.Join(dataDir, boltLogName)
	walPath := filepath.Join(dataDir, walDirName)
	tmp := filepath.Join(dataDir, walMigrateName)
	if err := os.Remove(filepath.Join(dataDir, boltCompactName)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove an interrupted raft.db compaction: %w", err)
	}
	if _, err := os.Stat(walPath); err == nil {
		// Migrated already; a crash may have come before raft.db's
		// replacement by the guard.
		if _, err := os.Stat(boltPath); err == nil && !isBoltGuard(boltPath) {
			if err := replaceMigrated(dataDir, log); err != nil {
				return err
			}
			log.Info().Str("path", boltPath).Msg("replaced raft.db left by an interrupted migration to the WAL")
		}
		return os.RemoveAll(tmp)
	}
	if isBoltGuard(boltPath) {
		// The guard without its WAL: no Raft log (a new node).
		if err := os.Remove(boltPath); err != nil {
			return err
		}
		return os.RemoveAll(tmp)
	}
	if _, err := os.Stat(boltPath); errors.Is(err, os.ErrNotExist) {
		return os.RemoveAll(tmp)
	} else if err != nil {
		return err
	}
	start := time.Now()
	if err := os.RemoveAll(tmp); err != nil {
		return fmt.Errorf("remove a partial migration: %w", err)
	}
	if err := os.Mkdir(tmp, 0o750); err != nil {
		return fmt.Errorf("migrate raft.db: %w", err)
	}
	n, bytes, err := copyBoltToWAL(boltPath, tmp, hlog)
	if err != nil {
		os.RemoveAll(tmp)
		return fmt.Errorf("migrate %s to the WAL: %w", boltPath, err)
	}
	if err := syncDir(tmp); err != nil {
		os.RemoveAll(tmp)
		return fmt.Errorf("migrate raft.db: sync %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, walPath); err != nil {
		os.RemoveAll(tmp)
		return fmt.Errorf("migrate raft.db: %w", err)
	}
	if err := syncDir(dataDir); err != nil {
		return fmt.Errorf("migrate raft.db: sync %s: %w", dataDir, err)
	}
	if err := replaceMigrated(dataDir, log); err != nil {
		return err
	}
	log.Info().Uint64("entries", n).Uint64("bytes", bytes).Dur("took", time.Since(start)).
		Msg("Raft log migrated from raft.db (bolt) to the WAL")
	return nil
}

// replaceMigrated replaces dataDir/raft.db, migrated into the WAL, by the
// guard, or removes it when the guard cannot be written (a full disk).
func replaceMigrated(dataDir string, log zerolog.Logger) error {
	err := writeBoltGuard(dataDir)
	if err == nil {
		return nil
	}
	log.Warn().Err(err).Msg("raft.db guard not written: the migrated raft.db is removed instead")
	path := filepath.Join(dataDir, boltLogName)
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("remove the migrated %s: %w", path, err)
	}
	return syncDir(dataDir)
}

// copyBoltToWAL copies raft's stable keys and every log entry of the
// bolt store at boltPath into a new WAL in dir, closing both. It returns
// the entries and their data bytes copied.
func copyBoltToWAL(boltPath, dir string, hlog hclog.Logger) (n, bytes uint64, err error) {
	src, err := raftboltdb.New(raftboltdb.Options{Path: boltPath})
	if err != nil {
		return 0, 0, fmt.Errorf("open %s: %w", boltPath, err)
	}
	defer src.Close()
	dst, err := openWAL(dir, hlog, nil)
	if err != nil {
		return 0, 0, fmt.Errorf("create the WAL: %w", err)
	}
	defer func() {
		if cerr := dst.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	for _, k := range raftStableUintKeys {
		v, gerr := src.GetUint64(k)
		if errors.Is(gerr, raftboltdb.ErrKeyNotFound) {
			continue
		}
		if gerr != nil {
			return 0, 0, fmt.Errorf("read %s: %w", k, gerr)
		}
		if err := dst.SetUint64(k, v); err != nil {
			return 0, 0, fmt.Errorf("write %s: %w", k, err)
		}
	}
	for _, k := range raftStableKeys {
		v, gerr := src.Get(k)
		if errors.Is(gerr, raftboltdb.ErrKeyNotFound) {
			continue
		}
		if gerr != nil {
			return 0, 0, fmt.Errorf("read %s: %w", k, gerr)
		}
		if err := dst.Set(k, v); err != nil {
			return 0, 0, fmt.Errorf("write %s: %w", k, err)
		}
	}
	first, err := src.FirstIndex()
	if err != nil {
		return 0, 0, err
	}
	last, err := src.LastIndex()
	if err != nil {
		return 0, 0, err
	}
	if first == 0 || last < first {
		return 0, 0, nil // an empty log
	}
	var batch []*raft.Log
	var batchBytes int
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		if err := dst.StoreLogs(batch); err != nil {
			return fmt.Errorf("append entries %d..%d: %w", batch[0].Index, batch[len(batch)-1].Index, err)
		}
		batch, batchBytes = batch[:0], 0
		return nil
	}
	for idx := first; idx <= last; idx++ {
		l := new(raft.Log)
		if err := src.GetLog(idx, l); err != nil {
			return n, bytes, fmt.Errorf("read entry %d of %d..%d: %w", idx, first, last, err)
		}
		batch = append(batch, l)
		batchBytes += len(l.Data)
		n++
		bytes += uint64(len(l.Data))
		if batchBytes >= migrateBatchBytes {
			if err := flush(); err != nil {
				return n, bytes, err
			}
		}
	}
	return n, bytes, flush()
}

// syncDir fsyncs a directory, so that the names created, renamed or
// removed in it last.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
