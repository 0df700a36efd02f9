package raftfsm

import (
	"github.com/dgraph-io/badger/v4"
)

// OpenDB opens (or creates) the badger database in dir with settings sized
// for a sidecar: small memtables and caches, synchronous writes off (the
// Raft log is the durable record; badger is rebuilt from it and snapshots,
// and the applied index tells how far it got).
func OpenDB(dir string, logger badger.Logger) (*badger.DB, error) {
	opts := badger.DefaultOptions(dir).
		WithLogger(logger).
		WithMemTableSize(16 << 20).
		WithNumMemtables(2).
		WithBlockCacheSize(32 << 20).
		WithIndexCacheSize(16 << 20).
		WithValueLogFileSize(64 << 20).
		WithBaseTableSize(4 << 20).
		WithNumCompactors(2).
		WithSyncWrites(false)
	return badger.Open(opts)
}
