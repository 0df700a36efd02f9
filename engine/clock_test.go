package engine

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func recv(t *testing.T, tm Timer) (time.Time, bool) {
	t.Helper()
	select {
	case v := <-tm.C():
		return v, true
	default:
		return time.Time{}, false
	}
}

func TestFakeClock_TimersFireOnAdvance(t *testing.T) {
	c := NewFakeClock(start)
	a := c.NewTimer(2 * time.Second)
	b := c.NewTimer(time.Second)
	if c.Armed() != 2 {
		t.Fatalf("Armed = %d, want 2", c.Armed())
	}
	c.Advance(999 * time.Millisecond)
	if _, ok := recv(t, b); ok {
		t.Fatal("timer fired early")
	}
	c.Advance(time.Millisecond)
	if v, ok := recv(t, b); !ok || !v.Equal(at(time.Second)) {
		t.Fatalf("b: got %v %v, want %v", v, ok, at(time.Second))
	}
	// a fires on a later Advance even if nobody reads its channel: the send
	// does not block Advance.
	c.Advance(time.Hour)
	c.Advance(time.Hour)
	if _, ok := recv(t, a); !ok {
		t.Fatal("a did not fire")
	}
	if _, ok := recv(t, a); ok {
		t.Fatal("a fired twice")
	}
	if got := c.Now(); !got.Equal(at(2*time.Hour + time.Second)) {
		t.Fatalf("Now = %v", got)
	}
	if c.Armed() != 0 {
		t.Fatalf("Armed = %d, want 0", c.Armed())
	}
}

func TestFakeClock_StopReset(t *testing.T) {
	c := NewFakeClock(start)
	tm := c.NewTimer(time.Second)
	if !tm.Stop() {
		t.Fatal("Stop of an armed timer = false")
	}
	if tm.Stop() {
		t.Fatal("second Stop = true")
	}
	c.Advance(time.Hour)
	if _, ok := recv(t, tm); ok {
		t.Fatal("stopped timer fired")
	}
	if tm.Reset(time.Second) {
		t.Fatal("Reset of a stopped timer = true")
	}
	if !tm.Reset(2 * time.Second) {
		t.Fatal("Reset of an armed timer = false")
	}
	c.Advance(time.Second)
	if _, ok := recv(t, tm); ok {
		t.Fatal("timer fired at its old deadline")
	}
	c.Advance(time.Second)
	// Fired but not received: Reset drops the stale value (Go 1.23 timers).
	tm.Reset(time.Second)
	if _, ok := recv(t, tm); ok {
		t.Fatal("stale value after Reset")
	}
	c.Advance(time.Second)
	if _, ok := recv(t, tm); !ok {
		t.Fatal("reset timer did not fire")
	}
	// d <= 0 fires at once.
	z := c.NewTimer(0)
	if _, ok := recv(t, z); !ok {
		t.Fatal("NewTimer(0) did not fire at once")
	}
	z.Reset(-time.Second)
	if _, ok := recv(t, z); !ok {
		t.Fatal("Reset(-1s) did not fire at once")
	}
}

func TestFakeClock_SetStepsWallTimeOnly(t *testing.T) {
	c := NewFakeClock(start)
	tm := c.NewTimer(time.Second)
	c.Set(start.Add(time.Hour))
	if _, ok := recv(t, tm); ok {
		t.Fatal("Set fired a timer")
	}
	if !c.Now().Equal(start.Add(time.Hour)) {
		t.Fatalf("Now = %v", c.Now())
	}
	c.Set(start.Add(-time.Hour))
	c.Advance(time.Second) // monotonic time moved by 1 s: the timer fires
	if v, ok := recv(t, tm); !ok || !v.Equal(start.Add(-time.Hour+time.Second)) {
		t.Fatalf("got %v %v", v, ok)
	}
	if m := c.mono(); m != time.Second {
		t.Fatalf("mono = %v, want 1s", m)
	}
	// Set and NewFakeClock drop monotonic readings.
	c.Set(time.Now())
	if s := c.Now().String(); strings.Contains(s, "m=") {
		t.Fatalf("Now carries a monotonic reading: %s", s)
	}
}

func TestFakeClock_AdvanceNegativePanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("no panic")
		}
	}()
	NewFakeClock(start).Advance(-1)
}

func TestFakeClock_BlockUntil(t *testing.T) {
	c := NewFakeClock(start)
	done := make(chan struct{})
	go func() {
		c.BlockUntil(2)
		close(done)
	}()
	c.NewTimer(time.Second)
	select {
	case <-done:
		t.Fatal("BlockUntil(2) returned with one timer")
	case <-time.After(20 * time.Millisecond):
	}
	c.NewTimer(time.Second)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("BlockUntil(2) did not return with two timers")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := c.BlockUntilContext(ctx, 3); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("BlockUntilContext = %v, want deadline exceeded", err)
	}
	if err := c.BlockUntilContext(context.Background(), 2); err != nil {
		t.Fatalf("BlockUntilContext = %v", err)
	}
}

func TestRealClock(t *testing.T) {
	c := RealClock()
	before := time.Now()
	if now := c.Now(); now.Before(before) {
		t.Fatal("Now went back")
	}
	tm := c.NewTimer(time.Millisecond)
	select {
	case <-tm.C():
	case <-time.After(5 * time.Second):
		t.Fatal("real timer did not fire")
	}
	if tm.Stop() {
		t.Fatal("Stop after fire = true")
	}
	if tm.Reset(time.Hour) {
		t.Fatal("Reset after fire = true")
	}
	if !tm.Stop() {
		t.Fatal("Stop of an armed timer = false")
	}
	m := c.(monoClock)
	if a, b := m.mono(), m.mono(); b < a {
		t.Fatal("mono went back")
	}
}

// A fake timer re-armed for an instant that an Advance has already reached
// fires at once, and one re-armed after a partial Advance fires at the
// instant, not the advance later. TimerSet.Run re-arms this way; with
// Reset(d) from an earlier Now, an Advance in between left Run asleep past
// its deadline (TestTimerSet_Run hung about 1 run in 200 under -race).
func TestFakeTimer_ResetAt(t *testing.T) {
	c := NewFakeClock(start)
	tm := c.NewTimer(time.Second)
	at, ok := tm.(absTimer)
	if !ok {
		t.Fatal("the fake clock's timer is not an absTimer")
	}
	c.Advance(time.Second) // fires; the value waits in the channel
	at.resetAt(start.Add(time.Second))
	select {
	case <-tm.C():
	default:
		t.Fatal("re-armed for a reached instant: no fire")
	}
	at.resetAt(start.Add(3 * time.Second))
	c.Advance(500 * time.Millisecond)
	at.resetAt(start.Add(3 * time.Second)) // as Run does after its Now
	c.Advance(1500 * time.Millisecond)     // exactly the instant
	select {
	case <-tm.C():
	default:
		t.Fatal("re-armed after a partial advance: no fire at the instant")
	}
}
