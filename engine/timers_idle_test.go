package engine

import (
	"context"
	"slices"
	"testing"
	"time"
)

// idleRun runs tm on clock and returns the batches it fires.
func idleRun(t *testing.T, tm *Timers) <-chan []Expired {
	t.Helper()
	got := make(chan []Expired, 16)
	tm.set.syncC = make(chan chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tm.Run(ctx, func(b []Expired) { got <- b })
	}()
	t.Cleanup(func() { cancel(); <-done })
	return got
}

// settleRun waits until Run has consumed every wake-up caused so far.
func settleRun(t *testing.T, tm *Timers) {
	t.Helper()
	reply := make(chan struct{})
	select {
	case tm.set.syncC <- reply:
	case <-time.After(10 * time.Second):
		t.Fatal("settle: Run does not take the sync request")
	}
	select {
	case <-reply:
	case <-time.After(10 * time.Second):
		t.Fatal("settle: Run does not settle")
	}
}

func expectNoFire(t *testing.T, got <-chan []Expired) {
	t.Helper()
	select {
	case b := <-got:
		t.Fatalf("fired %+v", b)
	case <-time.After(20 * time.Millisecond):
	}
}

func expectFire(t *testing.T, got <-chan []Expired, want ...string) {
	t.Helper()
	select {
	case b := <-got:
		var ks []string
		for _, e := range b {
			ks = append(ks, e.Key)
		}
		if !slices.Equal(ks, want) {
			t.Fatalf("fired %v, want %v", ks, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%v did not fire", want)
	}
}

// TestTimers_TicklessNoPeriodicWakeups: with timers armed far ahead, Run
// sleeps on one clock timer until the earliest deadline and does not wake
// in between (Stats.Wakeups stays put while the clock moves for an hour).
// With MaxSleep set it wakes once per MaxSleep.
func TestTimers_TicklessNoPeriodicWakeups(t *testing.T) {
	for _, maxSleep := range []time.Duration{0, MaxSleep} {
		clock := NewFakeClock(start)
		tm := NewTimers(clock, TimersOptions{MaxSleep: maxSleep})
		got := idleRun(t, tm)
		for i := range 1000 {
			tm.Arm("far-"+string(rune('a'+i%26))+string(rune('a'+i/26)), at(2*time.Hour+time.Duration(i)*time.Second))
		}
		clock.BlockUntil(1)
		settleRun(t, tm) // the wake-ups of the Arms above are over
		w0 := tm.Stats().Wakeups
		for range 3600 {
			clock.Advance(time.Second)
			clock.BlockUntil(1) // Run holds its timer again (after a wake, if any)
		}
		woke := tm.Stats().Wakeups - w0
		switch {
		case maxSleep == 0 && woke != 0:
			t.Fatalf("tickless Run woke %d times in an idle hour", woke)
		case maxSleep > 0 && (woke < 3590 || woke > 3610):
			t.Fatalf("MaxSleep %v: Run woke %d times in an hour, want about 3600", maxSleep, woke)
		}
		expectNoFire(t, got)
		clock.Advance(time.Hour)
		expectFire(t, got, "far-aa")
	}
}

// TestTimers_TicklessForwardStep documents the trade-off of the tickless
// default: a forward wall-clock step is noticed at the next natural
// wake-up (here the earliest deadline, 10 minutes of monotonic time
// later), not within MaxSleep; nothing fires early and nothing is lost, and
// the jump is counted. An Arm that moves the earliest deadline forward is
// also a natural wake-up.
func TestTimers_TicklessForwardStep(t *testing.T) {
	clock := NewFakeClock(start)
	tm := NewTimers(clock, TimersOptions{})
	got := idleRun(t, tm)
	tm.Arm("a", at(10*time.Minute))
	tm.Arm("b", at(50*time.Minute))
	tm.Arm("c", at(2*time.Hour))
	// The wake-ups of the Arms above are over: one left pending would make
	// Run plan again after the step below (a CI race run fired a and b at
	// +1 h 1 s).
	settleRun(t, tm)
	clock.BlockUntil(1)
	clock.Set(at(time.Hour)) // NTP steps the wall clock forward by 1 h
	clock.Advance(time.Second)
	expectNoFire(t, got) // not noticed yet: Run sleeps until +10 min
	clock.Advance(10*time.Minute - time.Second)
	expectFire(t, got, "a", "b") // the natural wake: both became due, one batch
	if st := tm.Stats(); st.ClockJumps != 1 {
		t.Fatalf("Stats = %+v, want one jump", st)
	}
	// c is due at 2 h wall time; it is now 1 h 10 min.
	clock.BlockUntil(1)
	clock.Advance(50*time.Minute - time.Nanosecond)
	expectNoFire(t, got)
	clock.Advance(time.Nanosecond)
	expectFire(t, got, "c")

	// An Arm of an earlier deadline wakes Run, which then sees the step.
	tm.Arm("d", at(3*time.Hour))
	settleRun(t, tm) // d's wake-up is over before the step
	clock.BlockUntil(1)
	clock.Set(at(4 * time.Hour))
	tm.Arm("e", at(4*time.Hour+time.Minute)) // later than d: no wake
	expectNoFire(t, got)
	tm.Arm("f", at(3*time.Hour)) // d's due time: not earlier, no wake
	expectNoFire(t, got)
	tm.Arm("g", at(time.Hour)) // earlier than d: wakes Run, which fires g, d, f
	expectFire(t, got, "g", "d", "f")
}

// TestTimers_CancelEarliestDropsClockTimer: cancelling the timer Run sleeps
// for lets it plan again, so that with nothing armed it holds no clock
// timer (and does not wake for nothing).
func TestTimers_CancelEarliestDropsClockTimer(t *testing.T) {
	clock := NewFakeClock(start)
	tm := NewTimers(clock, TimersOptions{})
	idleRun(t, tm)
	tm.Arm("k", at(time.Hour))
	clock.BlockUntil(1)
	tm.Cancel("k")
	deadline := time.Now().Add(10 * time.Second)
	for clock.Armed() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("Run still holds a clock timer with nothing armed")
		}
		time.Sleep(time.Millisecond)
	}
}
