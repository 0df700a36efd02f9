package raftfsm

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/hashicorp/raft"
)

// BenchmarkApplySubmitBatch measures Apply of one entry holding batch new
// submits (256-byte payloads), badger on disk with synchronous writes off as
// OpenDB sets it. Entries are encoded once as a template; each iteration only
// rewrites the fixed-width ids in place, so the figure is the FSM's cost
// (decoding the entry included). Besides the figures per entry (op) it
// reports them per task: ns/task, B/task, allocs/task.
func BenchmarkApplySubmitBatch(b *testing.B) {
	for _, batch := range []int{1, 64, 256, 1000} {
		b.Run(strconv.Itoa(batch), func(b *testing.B) { benchApplySubmitBatch(b, batch, 0) })
	}
	// Tasks due a day after their creation (those of `ax bench
	// throughput`'s submits): not kept in the task cache.
	b.Run("1000-due24h", func(b *testing.B) { benchApplySubmitBatch(b, 1000, 24*time.Hour) })
}

func benchApplySubmitBatch(b *testing.B, batch int, due time.Duration) {
	e := newEnv(b)
	payload := bytes.Repeat([]byte("p"), 256)
	const idWidth = 16
	cmds := make([]Command, batch)
	for i := range cmds {
		s := Spec{Handler: "order.timeout", Payload: payload, Priority: 2, TimeoutNs: 30e9, MaxAttempts: 3}
		cmds[i] = submitCmd(fmt.Sprintf("%0*x", idWidth, i), s, 1_700_000_000_000+due.Milliseconds()+int64(i), 1_700_000_000_000)
	}
	data := mustEncode(b, cmds...)
	// Where each id sits in the encoded entry.
	offs := make([]int, batch)
	for i := range cmds {
		id := []byte(cmds[i].Submit.ID)
		o := bytes.Index(data, append([]byte{0xa0 | idWidth}, id...)) // fixstr header + id
		if o < 0 {
			b.Fatalf("id %s not found in the entry", id)
		}
		offs[i] = o + 1
	}
	next := uint64(0)
	idx := uint64(0)
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	b.ResetTimer()
	for range b.N {
		for _, o := range offs {
			hexID(data[o:o+idWidth], next)
			next++
		}
		idx++
		rs, ok := e.f.Apply(&raft.Log{Index: idx, Type: raft.LogCommand, Data: data}).([]Result)
		if !ok || !rs[0].Created || !rs[batch-1].Created {
			b.Fatalf("entry %d not applied as new tasks", idx)
		}
	}
	b.StopTimer()
	runtime.ReadMemStats(&m1)
	reportPerTask(b, b.N*batch, &m0, &m1)
	b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "tasks/s")
}

// reportPerTask reports time, bytes and allocations per task for n tasks
// handled between the memory statistics m0 and m1.
func reportPerTask(b *testing.B, n int, m0, m1 *runtime.MemStats) {
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/task")
	b.ReportMetric(float64(m1.TotalAlloc-m0.TotalAlloc)/float64(n), "B/task")
	b.ReportMetric(float64(m1.Mallocs-m0.Mallocs)/float64(n), "allocs/task")
}

// hexID writes v as lower-case hex into dst, zero padded.
func hexID(dst []byte, v uint64) {
	const digits = "0123456789abcdef"
	for i := len(dst) - 1; i >= 0; i-- {
		dst[i] = digits[v&0xf]
		v >>= 4
	}
}

// BenchmarkApplyRun measures Apply of one run of a new task as the
// cluster commits it: submit, fire, complete (success, with the delivering
// node's facts and a 16-byte JSON result), each its own entry; with the
// run history (the default bound) and without it (HistoryRuns -1). It
// reports the run record's bytes (key + value, as stored) per run.
func BenchmarkApplyRun(b *testing.B) {
	for _, tc := range []struct {
		name    string
		history int
	}{{"history", 0}, {"no-history", -1}} {
		b.Run(tc.name, func(b *testing.B) {
			e := newEnv(b)
			s := Spec{Handler: "order.timeout", Payload: bytes.Repeat([]byte("p"), 64), Priority: 2, TimeoutNs: 30e9, MaxAttempts: 3}
			idx := uint64(0)
			apply := func(c Command) Result {
				idx++
				rs, ok := e.f.Apply(&raft.Log{Index: idx, Type: raft.LogCommand, Data: mustEncode(b, c)}).([]Result)
				if !ok || rs[0].Code != CodeOK {
					b.Fatalf("entry %d: %+v", idx, rs)
				}
				return rs[0]
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				id := fmt.Sprintf("order|%012d", i)
				at := int64(1_700_000_000_000 + i)
				epoch := apply(submitCmd(id, s, at, at)).Task.Epoch
				f := fireCmd(id, epoch, 1, "node-1", at, at+35_000)
				f.Fire.HistoryRuns = tc.history
				apply(f)
				c := completeCmd(id, epoch, 1, OutcomeSuccess, "", 0, at+20)
				x := c.Complete
				x.Executor, x.HTTPStatus, x.AppliedMs, x.StartedMs, x.EndedMs = "app", 200, at+2, at+3, at+18
				x.DurationNs, x.QueueNs, x.ConnectNs, x.Result = 15e6, 1e6, 2e5, []byte(`{"closed":true}`)
				apply(c)
			}
			b.StopTimer()
			var n int64
			if err := e.db.View(func(txn *badger.Txn) error {
				it := txn.NewIterator(badger.IteratorOptions{Prefix: prefixHistory})
				defer it.Close()
				for it.Rewind(); it.Valid(); it.Next() {
					n += int64(len(it.Item().Key())) + it.Item().ValueSize()
				}
				return nil
			}); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(n)/float64(b.N), "record-B/run")
			// The tables on disk once the memtables are flushed (a
			// reopen): every key of the runs, history or not.
			e.reopen()
			ents, err := os.ReadDir(e.dir)
			if err != nil {
				b.Fatal(err)
			}
			var sst int64
			for _, de := range ents {
				if fi, err := de.Info(); err == nil && strings.HasSuffix(de.Name(), ".sst") {
					sst += fi.Size()
				}
			}
			b.ReportMetric(float64(sst)/float64(b.N), "sst-B/run")
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "runs/s")
		})
	}
}
