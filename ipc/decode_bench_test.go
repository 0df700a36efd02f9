package ipc

import (
	"bytes"
	"fmt"
	"runtime"
	"testing"
)

// batchBody returns a POST /v1/tasks/batch body of n tasks shaped like
// ax bench throughput's (an id, a handler, a delay), each with payload
// (a JSON value) when it is not empty.
func batchBody(n int, payload string) []byte {
	var b bytes.Buffer
	b.WriteString(`{"tasks":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"id":"axb1a2b3c4d-b3-%d-%d","handler":"axbench.throughput","delay":"24h0m0s"`, i/100, i)
		if payload != "" {
			b.WriteString(`,"payload":`)
			b.WriteString(payload)
		}
		b.WriteByte('}')
	}
	b.WriteString("]}")
	return b.Bytes()
}

// BenchmarkDecodeSubmitBatch measures DecodeSubmitBatch (decoding and
// validation) of a body of 1 000 tasks, per task: without a payload, as
// ax bench throughput sends them, and with a 200-byte JSON object (both
// read by scanSubmitBatch); and, through encoding/json (decodeStrict),
// the same with labels on every task, which the scanner leaves to it.
func BenchmarkDecodeSubmitBatch(b *testing.B) {
	payload := `{"order":"` + string(bytes.Repeat([]byte("x"), 178)) + `","n":42}`
	for _, tc := range []struct {
		name, payload string
		labels        bool
	}{
		{"no-payload", "", false},
		{"payload-200B", payload, false},
		{"json-labels", "", true},
		{"json-labels-payload-200B", payload, true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			body := batchBody(1000, tc.payload)
			if tc.labels {
				body = bytes.ReplaceAll(body, []byte(`"delay":`), []byte(`"labels":{"team":"a","env":"prod"},"delay":`))
				if _, ok := scanSubmitBatch(body); ok {
					b.Fatal("the scanner read the body with labels")
				}
			}
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			var m0, m1 runtime.MemStats
			runtime.ReadMemStats(&m0)
			b.ResetTimer()
			for range b.N {
				specs, err := DecodeSubmitBatch(body)
				if err != nil || len(specs) != 1000 {
					b.Fatalf("%d specs, %v", len(specs), err)
				}
			}
			b.StopTimer()
			runtime.ReadMemStats(&m1)
			n := float64(b.N * 1000)
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/n, "ns/task")
			b.ReportMetric(float64(m1.TotalAlloc-m0.TotalAlloc)/n, "B/task")
			b.ReportMetric(float64(m1.Mallocs-m0.Mallocs)/n, "allocs/task")
		})
	}
}

// BenchmarkDecodeSubmit measures DecodeSubmit of one task as ax bench
// throughput sends it (read by scanSubmit) and with labels (which
// scanSubmit leaves to encoding/json, decodeStrict).
func BenchmarkDecodeSubmit(b *testing.B) {
	for _, tc := range []struct{ name, body string }{
		{"scanned", `{"id":"axb1a2b3c4d-b3-0-1","handler":"axbench.throughput","delay":"24h0m0s","payload":{"n":42}}`},
		{"json-labels", `{"id":"axb1a2b3c4d-b3-0-1","handler":"axbench.throughput","delay":"24h0m0s","labels":{"team":"a","env":"prod"},"payload":{"n":42}}`},
	} {
		b.Run(tc.name, func(b *testing.B) {
			body := []byte(tc.body)
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for range b.N {
				if _, err := DecodeSubmit(body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
