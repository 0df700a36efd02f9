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

// BenchmarkEntryFireComplete measures EncodeEntry then DecodeEntry of a
// task's Fire and its Complete (as the delivering node reports a success),
// one entry of 100 of each: per task processed.
func BenchmarkEntryFireComplete(b *testing.B) {
	var cmds []Command
	for i := range 100 {
		id := fmt.Sprintf("axb1a2b3c4d-p-%d", i)
		at := int64(1_700_000_000_000 + i)
		cmds = append(cmds, fireCmd(id, 12345, 1, "n1", at, at+35_000))
	}
	for i := range 100 {
		id := fmt.Sprintf("axb1a2b3c4d-p-%d", i)
		at := int64(1_700_000_000_000 + i)
		c := completeCmd(id, 12345, 1, OutcomeSuccess, "", 0, at+20)
		x := c.Complete
		x.Executor, x.HTTPStatus, x.AppliedMs, x.StartedMs, x.EndedMs = "ax-bench", 200, at+2, at+3, at+4
		x.DurationNs, x.QueueNs, x.ConnectNs = 150e3, 1e6, 2e3
		cmds = append(cmds, c)
	}
	b.ReportAllocs()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	b.ResetTimer()
	for range b.N {
		data, err := EncodeEntry(cmds)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := DecodeEntry(data); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	runtime.ReadMemStats(&m1)
	reportPerTask(b, b.N*100, &m0, &m1)
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
