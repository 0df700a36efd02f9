package callback

import (
	"context"
	"net"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/axsched/ax/raftfsm"
)

// BenchmarkExecute measures one callback's client side (building the
// request with its headers, the round trip to an executor on a Unix
// socket that answers 200 at once, reading the answer): the hot path of
// delivery.
func BenchmarkExecute(b *testing.B) {
	path := filepath.Join(b.TempDir(), "x.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })}
	go func() { _ = srv.Serve(ln) }()
	b.Cleanup(func() { _ = srv.Close() })
	c := NewCaller(CallerOptions{})
	defer c.Close()
	cb := Callback{TaskID: "order|42", Handler: "order.timeout", Attempt: 1, Run: 1, Payload: []byte(`{"order_id":42}`)}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		cb.Attempt = i
		cb.Deadline = time.Now().Add(time.Minute)
		if out := c.Execute(ctx, "unix://"+path, cb); out.Kind != raftfsm.OutcomeSuccess {
			b.Fatal(out.Error)
		}
	}
}
