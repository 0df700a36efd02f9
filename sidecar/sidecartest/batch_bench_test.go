package sidecartest

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/axsched/ax/ipc"
)

// BenchmarkSubmitBatchNode measures the batch path of one real node in
// process, below the socket: 16 callers submit batches of 1 000 new
// tasks (256-byte payloads, due in 24 h) through the node's ipc.Backend,
// so each op is one batch through the proposer, the Raft log (WAL with
// fsync), the FSM's apply into badger and the answer. Besides wall time
// per task it reports the process's CPU time per task (getrusage: user +
// system, every goroutine, badger's flushes and compactions and the
// snapshots included), which a loaded machine stretches much less than
// wall time. -benchtime 300x submits 300 batches.
func BenchmarkSubmitBatchNode(b *testing.B) {
	const callers, batch = 16, 1000
	c := New(b, Options{NoExecutor: true})
	api := c.API(0)
	payload := bytes.Repeat([]byte("p"), 256)
	var next atomic.Int64
	var failed atomic.Value
	b.ReportAllocs()
	ru0 := rusage(b)
	b.ResetTimer()
	var wg sync.WaitGroup
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			specs := make([]ipc.TaskSpec, batch)
			for {
				n := next.Add(1)
				if n > int64(b.N) {
					return
				}
				for i := range specs {
					specs[i] = ipc.TaskSpec{ID: fmt.Sprintf("b%08d-%04d", n, i), Handler: "bench.h", Payload: payload,
						Delay: 24 * time.Hour, Priority: 2, Timeout: 30 * time.Second, MaxAttempts: 3}
				}
				items, err := api.SubmitBatch(context.Background(), specs, false)
				if err == nil && len(items) != batch {
					err = fmt.Errorf("%d results for %d tasks", len(items), batch)
				}
				if err != nil {
					failed.Store(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	ru1 := rusage(b)
	tasks := float64(b.N * batch)
	cpu := time.Duration(ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano())
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/tasks, "ns/task")
	b.ReportMetric(float64(cpu.Nanoseconds())/tasks, "cpu-ns/task")
	b.ReportMetric(tasks/b.Elapsed().Seconds(), "tasks/s")
}

func rusage(b *testing.B) syscall.Rusage {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return ru
}
