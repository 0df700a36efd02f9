package raftfsm

import (
	"bytes"
	"fmt"
	"io"
	"testing"
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
