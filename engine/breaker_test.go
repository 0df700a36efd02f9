package engine

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

type breakerLog struct {
	mu sync.Mutex
	ev []string
}

func (l *breakerLog) add(h string, from, to BreakerState) {
	l.mu.Lock()
	l.ev = append(l.ev, fmt.Sprintf("%s:%s->%s", h, from, to))
	l.mu.Unlock()
}

func (l *breakerLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	ev := l.ev
	l.ev = nil
	return ev
}

func newTestBreakers(t *testing.T) (*Breakers, *FakeClock, *breakerLog) {
	t.Helper()
	clock := NewFakeClock(start)
	var log breakerLog
	b := NewBreakers(clock, BreakerOptions{ConsecutiveFailures: 3, CoolDown: 10 * time.Second, OnStateChange: log.add})
	return b, clock, &log
}

// attempt runs one attempt of h with the given outcome and reports whether
// it was allowed.
func attempt(t *testing.T, b *Breakers, h string, success bool) bool {
	t.Helper()
	done, err := b.Allow(h)
	if err != nil {
		if !errors.Is(err, ErrCircuitOpen) {
			t.Fatalf("Allow: %v", err)
		}
		return false
	}
	done(success)
	return true
}

func expectState(t *testing.T, b *Breakers, h string, want BreakerState) {
	t.Helper()
	if got := b.State(h); got != want {
		t.Fatalf("State(%s) = %s, want %s", h, got, want)
	}
}

func TestBreakers_OpensAfterConsecutiveFailures(t *testing.T) {
	b, clock, log := newTestBreakers(t)
	// Failures interrupted by a success do not open it.
	for _, ok := range []bool{false, false, true, false, false, true} {
		if !attempt(t, b, "h", ok) {
			t.Fatal("attempt refused while closed")
		}
	}
	expectState(t, b, "h", BreakerClosed)
	attempt(t, b, "h", false)
	attempt(t, b, "h", false)
	expectState(t, b, "h", BreakerClosed)
	attempt(t, b, "h", false) // third in a row
	expectState(t, b, "h", BreakerOpen)
	_, err := b.Allow("h")
	var oe *CircuitOpenError
	if !errors.As(err, &oe) || oe.Handler != "h" || !oe.Until.Equal(clock.Now().Add(10*time.Second)) {
		t.Fatalf("Allow while open = %v, want open until +10s", err)
	}
	// Other handlers are not affected.
	if !attempt(t, b, "other", true) {
		t.Fatal("other handler refused")
	}
	if ev := log.take(); !slices.Equal(ev, []string{"h:closed->open"}) {
		t.Fatalf("events %v", ev)
	}
	snap := b.Snapshot()
	if len(snap) != 2 || snap[0].Handler != "h" || snap[0].State != BreakerOpen || !snap[0].OpenUntil.Equal(oe.Until) ||
		snap[1].Handler != "other" || snap[1].State != BreakerClosed {
		t.Fatalf("Snapshot = %+v", snap)
	}
}

func TestBreakers_HalfOpenSingleProbeThenClose(t *testing.T) {
	b, clock, log := newTestBreakers(t)
	for range 3 {
		attempt(t, b, "h", false)
	}
	clock.Advance(10*time.Second - time.Nanosecond)
	expectState(t, b, "h", BreakerOpen)
	if attempt(t, b, "h", true) {
		t.Fatal("attempt allowed 1 ns before the cool-down ends")
	}
	clock.Advance(time.Nanosecond)
	expectState(t, b, "h", BreakerHalfOpen)
	probe, err := b.Allow("h")
	if err != nil {
		t.Fatalf("probe refused: %v", err)
	}
	// While the probe is out, everything else waits, with no end time.
	for range 3 {
		_, err := b.Allow("h")
		var oe *CircuitOpenError
		if !errors.As(err, &oe) || !oe.Until.IsZero() {
			t.Fatalf("second attempt in half-open: %v", err)
		}
	}
	expectState(t, b, "h", BreakerHalfOpen)
	probe(true)
	probe(false) // ignored: reported twice
	expectState(t, b, "h", BreakerClosed)
	if !attempt(t, b, "h", true) {
		t.Fatal("refused after closing")
	}
	// The failure count starts over.
	attempt(t, b, "h", false)
	attempt(t, b, "h", false)
	expectState(t, b, "h", BreakerClosed)
	if ev := log.take(); !slices.Equal(ev, []string{"h:closed->open", "h:open->half-open", "h:half-open->closed"}) {
		t.Fatalf("events %v", ev)
	}
}

func TestBreakers_ProbeFailureReopens(t *testing.T) {
	b, clock, log := newTestBreakers(t)
	for range 3 {
		attempt(t, b, "h", false)
	}
	clock.Advance(10 * time.Second)
	if !attempt(t, b, "h", false) { // the probe fails
		t.Fatal("probe refused")
	}
	expectState(t, b, "h", BreakerOpen)
	_, err := b.Allow("h")
	var oe *CircuitOpenError
	if !errors.As(err, &oe) || !oe.Until.Equal(clock.Now().Add(10*time.Second)) {
		t.Fatalf("after failed probe: %v, want open for a new cool-down", err)
	}
	clock.Advance(5 * time.Second)
	expectState(t, b, "h", BreakerOpen)
	clock.Advance(5 * time.Second)
	if !attempt(t, b, "h", true) {
		t.Fatal("second probe refused")
	}
	expectState(t, b, "h", BreakerClosed)
	if ev := log.take(); !slices.Equal(ev, []string{
		"h:closed->open", "h:open->half-open", "h:half-open->open",
		"h:open->half-open", "h:half-open->closed",
	}) {
		t.Fatalf("events %v", ev)
	}
}

func TestBreakers_LateReportsIgnored(t *testing.T) {
	b, clock, _ := newTestBreakers(t)
	// Five attempts start while closed; three fail and open the circuit.
	var dones []func(bool)
	for range 5 {
		d, err := b.Allow("h")
		if err != nil {
			t.Fatal(err)
		}
		dones = append(dones, d)
	}
	for _, d := range dones[:3] {
		d(false)
	}
	expectState(t, b, "h", BreakerOpen)
	// The other two report after the trip: ignored, it stays open.
	dones[3](true)
	dones[4](false)
	expectState(t, b, "h", BreakerOpen)
	// A probe's slot is not taken by them either.
	clock.Advance(10 * time.Second)
	if !attempt(t, b, "h", true) {
		t.Fatal("probe refused")
	}
	expectState(t, b, "h", BreakerClosed)
}

func TestBreakers_DefaultsAndOptions(t *testing.T) {
	b := NewBreakers(NewFakeClock(start), BreakerOptions{})
	for i := range BreakerFailuresDefault {
		expectState(t, b, "h", BreakerClosed)
		if !attempt(t, b, "h", false) {
			t.Fatalf("attempt %d refused", i)
		}
	}
	expectState(t, b, "h", BreakerOpen)
	if s := b.Snapshot(); len(s) != 1 || !s[0].OpenUntil.Equal(start.Add(BreakerCoolDownDefault)) {
		t.Fatalf("Snapshot = %+v", s)
	}
	expectState(t, b, "never-seen", BreakerClosed)
	b.Forget("h")
	expectState(t, b, "h", BreakerClosed)
	if !attempt(t, b, "h", true) {
		t.Fatal("forgotten handler refused")
	}
	for _, o := range []BreakerOptions{{ConsecutiveFailures: -1}, {CoolDown: -time.Second}} {
		if err := o.Validate(); !errors.Is(err, ErrInvalidBreaker) {
			t.Errorf("%+v.Validate() = %v", o, err)
		}
	}
	if got := (BreakerOptions{}).WithDefaults(); got.ConsecutiveFailures != 5 || got.CoolDown != 30*time.Second {
		t.Errorf("WithDefaults = %+v", got)
	}
	for s, want := range map[BreakerState]string{BreakerClosed: "closed", BreakerHalfOpen: "half-open", BreakerOpen: "open", 7: "BreakerState(7)"} {
		if s.String() != want {
			t.Errorf("%d.String() = %s", int(s), s)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("NewBreakers with invalid options did not panic")
		}
	}()
	NewBreakers(RealClock(), BreakerOptions{CoolDown: -1})
}

// TestBreakers_Concurrent hammers a few handlers from several goroutines
// while the clock moves (run it with -race), then checks that every handler
// still works: a failing handler ends open, a healthy one closed.
func TestBreakers_Concurrent(t *testing.T) {
	clock := NewFakeClock(start)
	b := NewBreakers(clock, BreakerOptions{ConsecutiveFailures: 2, CoolDown: time.Millisecond})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2000 {
				h := fmt.Sprintf("h%d", i%3)
				_ = b.State(h)
				if done, err := b.Allow(h); err == nil {
					done((i+w)%4 == 0)
				}
				if i%50 == 0 {
					clock.Advance(time.Millisecond)
					_ = b.Snapshot()
				}
			}
		}()
	}
	wg.Wait()
	clock.Advance(time.Millisecond)
	for range 3 {
		attempt(t, b, "h0", false)
	}
	expectState(t, b, "h0", BreakerOpen)
	clock.Advance(time.Millisecond)
	attempt(t, b, "h1", true)
	expectState(t, b, "h1", BreakerClosed)
}

// An abandoned attempt counts neither way; an abandoned probe frees the
// half-open slot without closing or reopening the circuit, and its late
// report is ignored.
func TestBreakers_AbandonFreesProbe(t *testing.T) {
	b, clock, log := newTestBreakers(t)
	for range 3 {
		attempt(t, b, "h", false)
	}
	clock.Advance(10 * time.Second)
	probe, err := b.AllowAttempt("h")
	if err != nil {
		t.Fatalf("probe refused: %v", err)
	}
	if attempt(t, b, "h", true) {
		t.Fatal("second attempt allowed while the probe is out")
	}
	probe.Abandon()
	expectState(t, b, "h", BreakerHalfOpen)
	next, err := b.AllowAttempt("h")
	if err != nil {
		t.Fatalf("no new probe after the first was abandoned: %v", err)
	}
	probe.Done(false) // ignored: already ended
	expectState(t, b, "h", BreakerHalfOpen)
	next.Done(true)
	expectState(t, b, "h", BreakerClosed)
	// In the closed state an abandoned attempt does not reset the count.
	attempt(t, b, "h", false)
	attempt(t, b, "h", false)
	a, err := b.AllowAttempt("h")
	if err != nil {
		t.Fatal(err)
	}
	a.Abandon()
	attempt(t, b, "h", false)
	expectState(t, b, "h", BreakerOpen)
	if ev := log.take(); !slices.Equal(ev, []string{
		"h:closed->open", "h:open->half-open", "h:half-open->closed", "h:closed->open",
	}) {
		t.Fatalf("events %v", ev)
	}
}

// A probe that never reports holds the circuit half-open only for
// ProbeTimeout; then the next Allow abandons it and sends another.
func TestBreakers_ProbeTimeout(t *testing.T) {
	clock := NewFakeClock(start)
	b := NewBreakers(clock, BreakerOptions{ConsecutiveFailures: 1, CoolDown: time.Second, ProbeTimeout: time.Minute})
	attempt(t, b, "h", false)
	clock.Advance(time.Second)
	lost, err := b.Allow("h")
	if err != nil {
		t.Fatalf("probe refused: %v", err)
	}
	clock.Advance(time.Minute - time.Nanosecond)
	if attempt(t, b, "h", true) {
		t.Fatal("second probe allowed before ProbeTimeout")
	}
	clock.Advance(time.Nanosecond)
	if !attempt(t, b, "h", true) {
		t.Fatal("no new probe after ProbeTimeout")
	}
	expectState(t, b, "h", BreakerClosed)
	lost(false) // the lost probe's late report is ignored
	expectState(t, b, "h", BreakerClosed)
	if got := (BreakerOptions{}).WithDefaults().ProbeTimeout; got != BreakerProbeTimeoutDefault {
		t.Errorf("default ProbeTimeout %v", got)
	}
	if err := (BreakerOptions{ProbeTimeout: -1}).Validate(); !errors.Is(err, ErrInvalidBreaker) {
		t.Errorf("negative ProbeTimeout: %v", err)
	}
}

// Status tells one handler's state, and its cool-down's end while open;
// Probe tells the half-open probe from the attempts of a closed circuit.
func TestBreakers_StatusAndProbe(t *testing.T) {
	b, clock, _ := newTestBreakers(t)
	if st := b.Status("h"); st.State != BreakerClosed || !st.OpenUntil.IsZero() || st.Handler != "h" {
		t.Fatalf("status of an unseen handler %+v, want closed", st)
	}
	a, err := b.AllowAttempt("h")
	if err != nil || a.Probe() {
		t.Fatalf("closed: AllowAttempt %v, probe %v; want an attempt that is not the probe", err, a != nil && a.Probe())
	}
	a.Done(false)
	if st := b.Status("h"); st.State != BreakerClosed || st.ConsecutiveFailures != 1 {
		t.Fatalf("status %+v, want closed with 1 failure", st)
	}
	attempt(t, b, "h", false)
	attempt(t, b, "h", false)
	opened := clock.Now()
	if st := b.Status("h"); st.State != BreakerOpen || !st.OpenUntil.Equal(opened.Add(10*time.Second)) {
		t.Fatalf("status %+v, want open until %v", st, opened.Add(10*time.Second))
	}
	clock.Advance(10 * time.Second)
	if st := b.Status("h"); st.State != BreakerHalfOpen || !st.OpenUntil.IsZero() {
		t.Fatalf("status %+v after the cool-down, want half-open", st)
	}
	p, err := b.AllowAttempt("h")
	if err != nil || !p.Probe() {
		t.Fatalf("half-open: AllowAttempt %v; want the probe", err)
	}
	p.Done(true)
	if a, err := b.AllowAttempt("h"); err != nil || a.Probe() {
		t.Fatalf("closed again: AllowAttempt %v; want an attempt that is not the probe", err)
	}
}
