package raftfsm

import (
	"github.com/dgraph-io/badger/v4"
)

// MaxValueBytes is the largest value badger stores (its ValueLogFileSize,
// which it checks every value against): a task record over it cannot be
// written.
const MaxValueBytes = 64 << 20

// OpenDB opens (or creates) the badger database in dir with settings sized
// for a sidecar: small memtables and caches, synchronous writes off (the
// Raft log is the durable record; badger is rebuilt from it and snapshots,
// and the applied index tells how far it got). Conflict detection is off:
// the FSM's apply is the one writer (Open's backfill and Restore run before
// or instead of it), so badger's bookkeeping of every read key for
// conflicts was pure cost; so are its expvar metrics, which nothing reads.
func OpenDB(dir string, logger badger.Logger) (*badger.DB, error) {
	opts := badger.DefaultOptions(dir).
		WithLogger(logger).
		WithMemTableSize(16 << 20).
		WithNumMemtables(2).
		WithBlockCacheSize(32 << 20).
		WithIndexCacheSize(16 << 20).
		WithValueLogFileSize(MaxValueBytes).
		WithBaseTableSize(4 << 20).
		WithNumCompactors(2).
		WithSyncWrites(false).
		WithDetectConflicts(false).
		WithMetricsEnabled(false)
	return badger.Open(opts)
}
