package raftfsm

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// benchSubmits returns n submits shaped like ax bench throughput's
// batches: ids of about 20 bytes, a handler, no payload, a delay.
func benchSubmits(n int) []Command {
	cmds := make([]Command, n)
	for i := range cmds {
		s := Spec{Handler: "axbench.throughput", DelayNs: 24 * 3600e9, Priority: 2, TimeoutNs: 30e9, MaxAttempts: 3}
		cmds[i] = submitCmd(fmt.Sprintf("axb1a2b3c4d-b3-%d-%d", i/100, i), s, 1_700_086_400_000+int64(i), 1_700_000_000_000)
	}
	return cmds
}

// benchTask is the record a submit of benchSubmits stores.
func benchTask() *Task {
	c := benchSubmits(1)[0].Submit
	return &Task{ID: c.ID, Spec: c.Spec, Epoch: 12345, State: StateWaiting, Run: 1, DueMs: c.DueMs,
		CreatedMs: c.AtMs, UpdatedMs: c.AtMs}
}

// BenchmarkEncodeEntrySubmits measures EncodeEntry of an entry of 1 000
// submits, per task.
func BenchmarkEncodeEntrySubmits(b *testing.B) {
	cmds := benchSubmits(1000)
	b.ReportAllocs()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	b.ResetTimer()
	for range b.N {
		if _, err := EncodeEntry(cmds); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	runtime.ReadMemStats(&m1)
	reportPerTask(b, b.N*len(cmds), &m0, &m1)
}

// BenchmarkDecodeEntrySubmits measures DecodeEntry of an entry of 1 000
// submits, per task.
func BenchmarkDecodeEntrySubmits(b *testing.B) {
	data := mustEncode(b, benchSubmits(1000)...)
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	b.ResetTimer()
	for range b.N {
		if _, err := DecodeEntry(data); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	runtime.ReadMemStats(&m1)
	reportPerTask(b, b.N*1000, &m0, &m1)
}

// BenchmarkEncodeTaskRecord measures the encoding of a WAITING task's
// record as a submit stores it.
func BenchmarkEncodeTaskRecord(b *testing.B) {
	t := benchTask()
	b.ReportAllocs()
	for range b.N {
		if _, err := encodeRecord(t); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeTaskRecord measures the decoding of that record, as a
// fire or complete reads it.
func BenchmarkDecodeTaskRecord(b *testing.B) {
	rec, err := encodeRecord(benchTask())
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for range b.N {
		var t Task
		if err := decodeRecord(rec, &t); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkResultsCodec encodes and decodes a forwarded submit's answer
// (one result with its task, as the peer API carries it): the fast codec
// against msgpack's reflection.
func BenchmarkResultsCodec(b *testing.B) {
	rs := []Result{{Code: CodeOK, Created: true, Task: benchTask(), Index: 123456}}
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			data, err := EncodeResults(rs)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := DecodeResults(data); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("reflection", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			data, err := msgpack.Marshal(rs)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := decodeArray[Result](data); err != nil {
				b.Fatal(err)
			}
		}
	})
}
