package sidecar

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/axsched/ax/engine"
)

func testSlot(limit int) *slot {
	m := &metrics{
		executorFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "f"}, []string{"executor"}),
		executorQueue:  prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "q"}, []string{"executor"}),
	}
	return &slot{name: "x", m: m, limit: limit, wait: map[string]chan struct{}{},
		ready: engine.NewReadyQueue(engine.RealClock(), engine.ReadyOptions{Capacity: 100})}
}

// When an executor is saturated, waiting attempts get its slots by
// priority (0 first), FIFO within a priority.
func TestSlotGrantsByPriority(t *testing.T) {
	s := testSlot(1)
	ctx := context.Background()
	if !s.acquire(ctx, "running", 2) {
		t.Fatal("first acquire must not wait")
	}
	var mu sync.Mutex
	var order []string
	var wg sync.WaitGroup
	enqueue := func(key string, prio int) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if s.acquire(ctx, key, prio) {
				mu.Lock()
				order = append(order, key)
				mu.Unlock()
				s.release()
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
	s.release() // the running attempt ends: the queue drains one at a time
	wg.Wait()
	want := []string{"high-1", "high-2", "mid", "low"}
	for i := range want {
		if order[i] != want[i] {
			t.Fatalf("grant order %v, want %v", order, want)
		}
	}
	if s.busy != 0 || s.ready.Len() != 0 {
		t.Fatalf("busy %d, queued %d after draining", s.busy, s.ready.Len())
	}
}

// A waiting attempt whose context ends (cancelled task) leaves the queue
// and takes no slot.
func TestSlotAbandonedWaitFreesNothing(t *testing.T) {
	s := testSlot(1)
	if !s.acquire(context.Background(), "a", 2) {
		t.Fatal("first acquire")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan bool)
	go func() { done <- s.acquire(ctx, "b", 2) }()
	for s.ready.Len() == 0 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if <-done {
		t.Fatal("a cancelled wait must not get a slot")
	}
	if s.ready.Len() != 0 || s.busy != 1 {
		t.Fatalf("queued %d busy %d", s.ready.Len(), s.busy)
	}
	s.release()
	if s.busy != 0 {
		t.Fatalf("busy %d", s.busy)
	}
}
