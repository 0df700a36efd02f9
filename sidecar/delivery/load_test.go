package delivery

import (
	"context"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/axsched/ax/engine"
	"github.com/axsched/ax/raftfsm"
)

// The load report's executors carry each slot's limit, in flight and
// queued, and the time an unreachable one is tried again; the leader's
// parked share reaches the slots of the executors that run the handler.
func TestCapacityReportAndParkedShare(t *testing.T) {
	f := testFSM(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	applyEntry(t, f, 1, raftfsm.Command{Type: raftfsm.CmdNode, Node: &raftfsm.Node{ID: "a", Executors: []raftfsm.Executor{
		{Name: "x", Handlers: []string{"h.*"}, URL: "unix:///x"}, {Name: "y", Handlers: []string{"other"}, URL: "unix:///y"}}}})
	d := New(Deps{Config: Config{NodeID: "a", Concurrency: 10, MinConcurrency: 3}, Store: f, Log: zerolog.Nop(), Clock: engine.RealClock(), Context: ctx,
		Metrics: testMetrics()})
	rec, _ := f.Node("a")
	sx := d.slot(&rec.Executors[0])
	tok, ok := sx.acquire(ctx, "k1", 2)
	if !ok {
		t.Fatal("no slot")
	}
	defer tok.Done(engine.LimitDropped, 0)
	d.markDown(&rec.Executors[1], false)

	got := d.Capacity()
	if len(got) != 2 {
		t.Fatalf("capacity: %+v", got)
	}
	x, y := got[0], got[1]
	if x.Name != "x" || x.Limit != 3 || x.InFlight != 1 || x.Queued != 0 || x.DownUntilMs != 0 || !runs(x, "h.a") {
		t.Fatalf("executor x: %+v", x)
	}
	if y.Name != "y" || y.Limit != 0 || y.DownUntilMs <= time.Now().UnixMilli() {
		t.Fatalf("executor y (no slot yet, unreachable): %+v", y)
	}

	d.SetParked(map[string]int{"h.a": 5, "h.b": 2, "other": 7})
	if p := sx.parked.Load(); p != 7 {
		t.Fatalf("slot x counts %d parked runs, want 7 (h.a + h.b)", p)
	}
	d.SetParked(nil)
	if p := sx.parked.Load(); p != 0 {
		t.Fatalf("slot x counts %d parked runs after an empty share", p)
	}
}

// runs reports whether executor x of a load report runs handler (as the
// leader reads it).
func runs(x ExecutorLoad, handler string) bool {
	for _, h := range x.Handlers {
		if raftfsm.MatchHandler(h, handler) {
			return true
		}
	}
	return false
}
