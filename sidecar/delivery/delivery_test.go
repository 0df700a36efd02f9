package delivery

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/axsched/ax/engine"
	"github.com/axsched/ax/raftfsm"
	"github.com/axsched/ax/sidecar/delivery/callback"
)

// testSlot returns a slot with a fixed limit (min = max).
func testSlot(limit int) *slot {
	m := &Metrics{
		ExecutorFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "f"}, []string{"executor"}),
		ExecutorQueue:  prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "q"}, []string{"executor"}),
	}
	return &slot{name: "x", m: m, clock: engine.RealClock(), wait: map[string]chan *engine.Token{},
		lim:     engine.NewLimiter(engine.RealClock(), engine.LimiterOptions{Min: limit, Max: limit}),
		ready:   engine.NewReadyQueue(engine.RealClock(), engine.ReadyOptions{Capacity: 100}),
		flightG: m.ExecutorFlight.WithLabelValues("x"), queueG: m.ExecutorQueue.WithLabelValues("x")}
}

var okOutcome = callback.Outcome{Kind: raftfsm.OutcomeSuccess, Duration: time.Millisecond}

// When an executor is saturated, waiting attempts get its slots by
// priority (0 first), FIFO within a priority.
func TestSlotGrantsByPriority(t *testing.T) {
	s := testSlot(1)
	ctx := context.Background()
	first, ok := s.acquire(ctx, "running", 2)
	if !ok {
		t.Fatal("first acquire must not wait")
	}
	var mu sync.Mutex
	var order []string
	var wg sync.WaitGroup
	enqueue := func(key string, prio int) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if tok, ok := s.acquire(ctx, key, prio); ok {
				mu.Lock()
				order = append(order, key)
				mu.Unlock()
				s.release(tok, okOutcome)
			}
		}()
		// Wait until it is queued, so that the arrival order is known.
		for deadline := time.Now().Add(5 * time.Second); ; {
			s.mu.Lock()
			_, queued := s.wait[key]
			s.mu.Unlock()
			if queued {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s never queued", key)
			}
			time.Sleep(time.Millisecond)
		}
	}
	enqueue("low", 4)
	enqueue("high-1", 0)
	enqueue("mid", 2)
	enqueue("high-2", 0)
	if d := s.depths(); d[0] != 2 || d[2] != 1 || d[4] != 1 {
		t.Fatalf("depths %v", d)
	}
	s.release(first, okOutcome) // the running attempt ends: the queue drains one at a time
	wg.Wait()
	want := []string{"high-1", "high-2", "mid", "low"}
	for i := range want {
		if order[i] != want[i] {
			t.Fatalf("grant order %v, want %v", order, want)
		}
	}
	if s.lim.InFlight() != 0 || s.ready.Len() != 0 {
		t.Fatalf("in flight %d, queued %d after draining", s.lim.InFlight(), s.ready.Len())
	}
}

// A waiting attempt whose context ends (cancelled task) leaves the queue
// and takes no slot.
func TestSlotAbandonedWaitFreesNothing(t *testing.T) {
	s := testSlot(1)
	first, ok := s.acquire(context.Background(), "a", 2)
	if !ok {
		t.Fatal("first acquire")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan bool)
	go func() { _, ok := s.acquire(ctx, "b", 2); done <- ok }()
	for s.ready.Len() == 0 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if <-done {
		t.Fatal("a cancelled wait must not get a slot")
	}
	if s.ready.Len() != 0 || s.lim.InFlight() != 1 {
		t.Fatalf("queued %d in flight %d", s.ready.Len(), s.lim.InFlight())
	}
	s.release(first, okOutcome)
	if s.lim.InFlight() != 0 {
		t.Fatalf("in flight %d", s.lim.InFlight())
	}
}
