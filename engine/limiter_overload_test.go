package engine

import (
	"errors"
	"testing"
	"time"
)

// An executor whose accept queue overflows beyond 40 connections: every
// call over 40 is refused at connect (LimitOverload). The limit must be
// cut multiplicatively at once, like a busy answer, and the refused
// connects must never become latency samples.
func TestLimiterFallsOnOverload(t *testing.T) {
	const svc = 20 * time.Millisecond
	s := newLimSim(t, LimiterOptions{}, func(s *limSim, n int) (LimitSignal, time.Duration) {
		if s.now >= 2*time.Second && n > 40 {
			return LimitOverload, 0
		}
		return LimitSuccess, svc
	})
	s.queue = 1_000_000
	s.run(2 * time.Second)
	s.run(6 * time.Second)
	if got := s.limitAt(2020 * time.Millisecond); got > 50 {
		t.Errorf("limit %d 20 ms after the executor overflowed, want <= 50\n%s", got, s.dump())
	}
	lo, hi := s.rangeSince(2100 * time.Millisecond)
	if lo < 25 || hi > 60 {
		t.Errorf("limit in [%d, %d] once overloaded, want around 40 (AIMD sawtooth in [25, 60])\n%s", lo, hi, s.dump())
	}
	st := s.l.Stats()
	if st.Overloads == 0 || st.Busy != 0 || st.Baseline != svc || st.LastRTT != svc {
		t.Errorf("overloads miscounted or leaked into the samples: %+v", st)
	}
	t.Logf("limit 200 → %d within 20 ms, then [%d, %d]; %d overloads", s.limitAt(2020*time.Millisecond), lo, hi, st.Overloads)
}

// One overload cuts by Backoff; a second from a call admitted before that
// cut (the same burst) does not cut again within an Interval.
func TestLimiterOverloadCutsOncePerBurst(t *testing.T) {
	d := newLimDriver(t, LimiterOptions{Min: 4, Max: 100, Initial: 100})
	toks := d.acquire(100)
	toks[0].Done(LimitOverload, 0)
	if got := d.l.Limit(); got != 80 {
		t.Fatalf("limit %d after one overload, want 80 (×0.8)", got)
	}
	for _, tok := range toks[1:50] {
		tok.Done(LimitOverload, 0)
	}
	if got := d.l.Limit(); got != 80 {
		t.Fatalf("limit %d after the same burst's overloads, want still 80", got)
	}
	if st := d.l.Stats(); st.Overloads != 50 || st.Successes != 0 || st.Dropped != 0 {
		t.Fatalf("stats %+v", st)
	}
	if LimitOverload.String() != "overload" {
		t.Fatalf("name %q", LimitOverload.String())
	}
}

// An executor registered again with other bounds: SetBounds takes effect
// at once (the limit is clamped into the new bounds) and a raised Max is
// reached by slow start, as with a new limiter.
func TestLimiterSetBounds(t *testing.T) {
	d := newLimDriver(t, LimiterOptions{Min: 4, Max: 100, Initial: 100})
	if err := d.l.SetBounds(0, 10); !errors.Is(err, ErrInvalidOptions) {
		t.Fatalf("SetBounds(0, 10) = %v, want ErrInvalidOptions", err)
	}
	if err := d.l.SetBounds(20, 10); !errors.Is(err, ErrInvalidOptions) {
		t.Fatalf("SetBounds(20, 10) = %v, want ErrInvalidOptions", err)
	}
	if mn, mx := d.l.Bounds(); mn != 4 || mx != 100 {
		t.Fatalf("a refused SetBounds changed the bounds to [%d, %d]", mn, mx)
	}
	// Lower the max: the limit drops to it at once.
	if err := d.l.SetBounds(4, 50); err != nil {
		t.Fatal(err)
	}
	if got := d.l.Limit(); got != 50 {
		t.Fatalf("limit %d after SetBounds(4, 50), want 50", got)
	}
	// Raise the min above the limit: the limit rises to it at once.
	if err := d.l.SetBounds(60, 200); err != nil {
		t.Fatal(err)
	}
	if got := d.l.Limit(); got != 60 {
		t.Fatalf("limit %d after SetBounds(60, 200), want 60", got)
	}
	// With a backlog, slow start climbs to the new Max of 200.
	d.l.Observe(10_000)
	for i := 0; i < 10 && d.l.Limit() < 200; i++ {
		n := d.l.Limit()
		d.round(n, LimitSuccess, 10*time.Millisecond)
	}
	if got := d.l.Limit(); got != 200 {
		t.Fatalf("limit %d after ten round trips with a backlog, want the new Max 200", got)
	}
	if mn, mx := d.l.Bounds(); mn != 60 || mx != 200 {
		t.Fatalf("Bounds = [%d, %d], want [60, 200]", mn, mx)
	}
}

// Overloads are one congestion event per burst: a window where most calls
// found the accept queue full is cut once by Backoff (rule 4), not in
// proportion to their share (rule 4b, which busy answers get).
func TestLimiterOverloadIsNotALossShare(t *testing.T) {
	for _, tc := range []struct {
		out  LimitSignal
		want int
	}{{LimitOverload, 80}, {LimitBusy, 32}} {
		d := newLimDriver(t, LimiterOptions{Min: 4, Max: 100, Initial: 100})
		d.l.Observe(1000)
		toks := d.acquire(100)
		for _, tok := range toks[:60] {
			tok.Done(tc.out, time.Millisecond)
		}
		d.clock.Advance(20 * time.Millisecond)
		for _, tok := range toks[60:] {
			tok.Done(LimitSuccess, 20*time.Millisecond)
		}
		d.clock.Advance(LimiterIntervalDefault)
		if got := d.l.Limit(); got > tc.want+1 || got < tc.want-1 {
			t.Errorf("%s: limit %d after 60 of 100 calls, want about %d (%s)", tc.out, got, tc.want, d.l.Stats().LastReason)
		}
	}
}
