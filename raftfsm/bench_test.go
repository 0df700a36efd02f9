package raftfsm

import (
	"bytes"
	"fmt"
	"strconv"
	"testing"

	"github.com/hashicorp/raft"
)

// BenchmarkApplySubmitBatch measures Apply of one entry holding batch new
// submits (256-byte payloads), badger on disk with synchronous writes off as
// OpenDB sets it. Entries are encoded once as a template; each iteration only
// rewrites the fixed-width ids in place, so the figure is the FSM's cost.
func BenchmarkApplySubmitBatch(b *testing.B) {
	for _, batch := range []int{1, 64, 256} {
		b.Run(strconv.Itoa(batch), func(b *testing.B) {
			e := newEnv(b)
			payload := bytes.Repeat([]byte("p"), 256)
			const idWidth = 16
			cmds := make([]Command, batch)
			for i := range cmds {
				s := Spec{Handler: "order.timeout", Payload: payload, Priority: 2, TimeoutNs: 30e9, MaxAttempts: 3}
				cmds[i] = submitCmd(fmt.Sprintf("%0*x", idWidth, i), s, 1_700_000_000_000+int64(i), 1_700_000_000_000)
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
			b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "tasks/s")
		})
	}
}

// hexID writes v as lower-case hex into dst, zero padded.
func hexID(dst []byte, v uint64) {
	const digits = "0123456789abcdef"
	for i := len(dst) - 1; i >= 0; i-- {
		dst[i] = digits[v&0xf]
		v >>= 4
	}
}
