package raftstore

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/rs/zerolog"
	"go.etcd.io/bbolt"
)

// raft.db (bbolt) never gives space back to the file system: pages freed
// by log compaction are reused, so the file stays at its largest size
// (340 MiB after a burst of 1.4 MiB entries, issue 12). At start, before
// raft-boltdb opens it, compactRaftDB rewrites it with bbolt.Compact when
// most of it is free. raft-boltdb holds the file open while the node
// runs, so this cannot be done online: a restart compacts.

// raftCompactTxMax bounds the bytes bbolt.Compact copies per transaction.
const raftCompactTxMax = 16 << 20

// compactResult says what compactRaftDB did.
type compactResult struct {
	compacted     bool
	before, after int64  // file sizes, bytes
	freeBytes     int64  // free pages before, bytes
	skip          string // why it was not compacted ("" when it was)
}

// compactRaftDB compacts the bbolt file at path when it is at least
// minBytes and more than half of it is free pages, and free space (free)
// covers the live part plus reserve. It writes path+".compact", syncs it
// and renames it over path (a crash before the rename leaves raft.db as it
// was; the partial copy is removed at the next start). A missing file is
// not an error.
func compactRaftDB(path string, minBytes int64, free func() (DiskFree, error), reserve uint64) (compactResult, error) {
	var res compactResult
	tmp := path + ".compact"
	_ = os.Remove(tmp) // a copy a crash interrupted
	fi, err := os.Stat(path)
	if os.IsNotExist(err) {
		res.skip = "no raft.db"
		return res, nil
	}
	if err != nil {
		return res, err
	}
	res.before, res.after = fi.Size(), fi.Size()
	if fi.Size() < minBytes {
		res.skip = "small"
		return res, nil
	}
	// Read-write: bbolt loads the freelist (which tells the free pages)
	// only then. Nothing else has the file open yet.
	src, err := bbolt.Open(path, 0o600, &bbolt.Options{Timeout: time.Second})
	if err != nil {
		return res, fmt.Errorf("open %s: %w", path, err)
	}
	defer src.Close()
	st := src.Stats()
	res.freeBytes = int64(st.FreePageN+st.PendingPageN) * int64(src.Info().PageSize)
	if res.freeBytes*2 <= fi.Size() {
		res.skip = "mostly used"
		return res, nil
	}
	live := uint64(fi.Size() - res.freeBytes)
	if f, err := free(); err == nil && reserve > 0 && f.Bytes < live+reserve {
		res.skip = fmt.Sprintf("%s free does not cover its %s of live pages plus the reserve", mib(f.Bytes), mib(live))
		return res, nil
	}
	dst, err := bbolt.Open(tmp, 0o600, nil)
	if err != nil {
		return res, fmt.Errorf("create %s: %w", tmp, err)
	}
	if err := bbolt.Compact(dst, src, raftCompactTxMax); err != nil {
		dst.Close()
		os.Remove(tmp)
		return res, fmt.Errorf("compact %s: %w", path, err)
	}
	if err := dst.Sync(); err != nil {
		dst.Close()
		os.Remove(tmp)
		return res, err
	}
	if err := dst.Close(); err != nil {
		os.Remove(tmp)
		return res, err
	}
	src.Close()
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return res, err
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		_ = d.Sync()
		d.Close()
	}
	if fi, err := os.Stat(path); err == nil {
		res.after = fi.Size()
	}
	res.compacted = true
	return res, nil
}

// compactRaftLog runs compactRaftDB on the node's raft.db and logs the
// outcome; a failure leaves the file as it was and is only logged.
func (st *Store) compactRaftLog(path string) {
	g := st.Guard
	res, err := compactRaftDB(path, st.cfg.RaftCompactMinBytes, func() (DiskFree, error) { return g.freeSpace(st.cfg.DataDir) }, g.reserve.Load())
	logCompact(st.log, path, res, err)
}

func logCompact(log zerolog.Logger, path string, res compactResult, err error) {
	switch {
	case err != nil:
		log.Warn().Err(err).Str("path", path).Msg("raft.db compaction failed; using it as it is")
	case res.compacted:
		log.Info().Str("path", path).Int64("before_bytes", res.before).Int64("after_bytes", res.after).
			Int64("free_bytes_before", res.freeBytes).Msg("raft.db compacted")
	case res.freeBytes > 0 && res.skip != "mostly used":
		log.Warn().Str("path", path).Int64("bytes", res.before).Int64("free_bytes", res.freeBytes).Str("reason", res.skip).Msg("raft.db not compacted")
	}
}
