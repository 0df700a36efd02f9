package raftfsm

import (
	"bytes"
	"fmt"
	"io"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// BenchmarkPersist measures a snapshot's Persist of a store of 100 000
// waiting tasks (256-byte payloads) into io.Discard: per op one whole
// snapshot, and per key.
func BenchmarkPersist(b *testing.B) {
	e := newEnv(b)
	payload := bytes.Repeat([]byte("p"), 256)
	const tasks, perEntry = 100_000, 1000
	for i := range tasks / perEntry {
		cmds := make([]Command, perEntry)
		for j := range cmds {
			s := Spec{Handler: "order.timeout", Payload: payload, Priority: 2, TimeoutNs: 30e9, MaxAttempts: 3}
			cmds[j] = submitCmd(fmt.Sprintf("%016x", i*perEntry+j), s, 1_700_000_000_000+int64(j), 1_700_000_000_000)
		}
		e.apply(uint64(i+1), cmds...)
	}
	keys := len(e.dump())
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		snap := e.snapshot()
		if _, err := snap.(*snapshot).write(io.Discard); err != nil {
			b.Fatal(err)
		}
		snap.Release()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*keys), "ns/key")
}

// BenchmarkPersistToFile measures a whole snapshot as raft takes one:
// Persist of 100 000 waiting tasks (small JSON payloads that differ, like
// an application's) into raft's FileSnapshotStore in a temp dir (its
// buffered file, CRC-64 and fsync). Besides the wall time per snapshot it
// reports the process's CPU (user + system: the write system calls count,
// the fsync's wait does not) per snapshot and per key, and the file's
// bytes.
func BenchmarkPersistToFile(b *testing.B) {
	e := newEnv(b)
	const tasks, perEntry = 100_000, 1000
	for i := range tasks / perEntry {
		cmds := make([]Command, perEntry)
		for j := range cmds {
			n := i*perEntry + j
			s := Spec{Handler: "order.timeout", Payload: []byte(fmt.Sprintf(`{"order":%d,"customer":"c-%06d","amount":%d.%02d}`, n, n%7919, n%1000, n%100)),
				Priority: 2, TimeoutNs: 30e9, MaxAttempts: 3}
			cmds[j] = submitCmd(fmt.Sprintf("order-%010d", n), s, 1_700_000_000_000+int64(n), 1_700_000_000_000)
		}
		e.apply(uint64(i+1), cmds...)
	}
	keys := len(e.dump())
	store, err := raft.NewFileSnapshotStore(b.TempDir(), 1, io.Discard)
	if err != nil {
		b.Fatal(err)
	}
	cpu := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			b.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	var size int64
	b.ResetTimer()
	c0 := cpu()
	for i := range b.N {
		snap := e.snapshot()
		sink, err := store.Create(raft.SnapshotVersionMax, uint64(100+i), 1, raft.Configuration{}, 1, nil)
		if err != nil {
			b.Fatal(err)
		}
		if err := snap.Persist(sink); err != nil {
			b.Fatal(err)
		}
		snap.Release()
		metas, err := store.List()
		if err != nil || len(metas) == 0 {
			b.Fatalf("snapshots %v: %v", metas, err)
		}
		size = metas[0].Size
	}
	used := cpu() - c0
	b.ReportMetric(float64(used.Nanoseconds())/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(used.Nanoseconds())/float64(b.N*keys), "cpu-ns/key")
	b.ReportMetric(float64(size), "file-bytes")
}
