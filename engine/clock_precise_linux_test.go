//go:build linux && (amd64 || arm64)

package engine

import (
	"context"
	"testing"
	"time"
)

// TestWaitTimer checks the timerfd timer against the Timer contract:
// it fires after at least d, Stop prevents a fire, and after Stop or
// Reset no stale value is received.
func TestWaitTimer(t *testing.T) {
	t0 := time.Now()
	tm := newWaitTimer(2 * time.Millisecond)
	ft, ok := tm.(*fdTimer)
	if !ok {
		t.Skip("timerfd not available; newWaitTimer fell back to time.Timer")
	}
	defer ft.close()
	<-tm.C()
	if el := time.Since(t0); el < 2*time.Millisecond {
		t.Fatalf("fired after %v, want >= 2ms", el)
	}
	// Stop before expiry: nothing is delivered.
	tm.Reset(5 * time.Millisecond)
	if !tm.Stop() {
		t.Fatal("Stop of an armed timer = false")
	}
	select {
	case <-tm.C():
		t.Fatal("fired after Stop")
	case <-time.After(20 * time.Millisecond):
	}
	// Reset after expiry without receiving: the old value is dropped and
	// the new expiry comes at least d (and the coalescing gap) later.
	tm.Reset(time.Millisecond)
	time.Sleep(10 * time.Millisecond)
	t1 := time.Now()
	tm.Reset(3 * time.Millisecond)
	<-tm.C()
	if el := time.Since(t1); el < 3*time.Millisecond {
		t.Fatalf("Reset: fired after %v, want >= 3ms (stale value?)", el)
	}
	// Deadlines closer together than the gap are coalesced.
	t2 := time.Now()
	tm.Reset(0)
	<-tm.C()
	tm.Reset(0)
	<-tm.C()
	if el := time.Since(t2); el < preciseGap {
		t.Fatalf("two expiries %v apart, want >= %v", el, preciseGap)
	}
	// Many quick resets: each delivery comes after its own arming.
	for i := range 200 {
		d := time.Duration(i%5) * 100 * time.Microsecond
		start := time.Now()
		tm.Reset(d)
		got := <-tm.C()
		if got.Sub(start) < d {
			t.Fatalf("reset %d: delivered %v after arming, want >= %v", i, got.Sub(start), d)
		}
	}
}

// TestTimerSet_WaitsOnTimerfd runs a TimerSet on RealClock: Run sleeps on
// the timerfd, fires nothing early, and releases the fd when it returns.
func TestTimerSet_WaitsOnTimerfd(t *testing.T) {
	s := NewTimerSet[int](RealClock(), TimersOptions{})
	got := make(chan time.Time, 10)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Run(ctx, func(batch []Fired[int]) {
			now := time.Now()
			for _, f := range batch {
				if now.Before(f.Due) {
					t.Errorf("fired %v early", f.Due.Sub(now))
				}
				got <- now
			}
		})
	}()
	for i := range 5 {
		due := time.Now().Add(time.Duration(i+1) * 3 * time.Millisecond)
		s.Arm(due, i)
	}
	for range 5 {
		select {
		case <-got:
		case <-time.After(5 * time.Second):
			t.Fatal("timer did not fire")
		}
	}
	cancel()
	<-done
}
