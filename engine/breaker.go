package engine

import (
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/sony/gobreaker/v2"
)

// Defaults of [BreakerOptions].
const (
	// BreakerFailuresDefault is the number of consecutive failed attempts
	// that opens a handler's circuit when BreakerOptions.ConsecutiveFailures
	// is 0.
	BreakerFailuresDefault = 5
	// BreakerCoolDownDefault is how long an open circuit waits before its
	// probe when BreakerOptions.CoolDown is 0.
	BreakerCoolDownDefault = 30 * time.Second
	// BreakerProbeTimeoutDefault is how long a half-open probe may stay
	// out without a report when BreakerOptions.ProbeTimeout is 0.
	BreakerProbeTimeoutDefault = 5 * time.Minute
)

// ErrCircuitOpen is wrapped by the *[CircuitOpenError] that [Breakers.Allow]
// returns while a handler's circuit is open or its probe is out. The run
// should wait, not fail: re-arm it for the error's Until, or, while a probe
// is out, for when the probe reports.
var ErrCircuitOpen = errors.New("engine: circuit open")

// ErrInvalidBreaker is returned (wrapped) by BreakerOptions.Validate.
var ErrInvalidBreaker = errors.New("engine: invalid breaker options")

// BreakerState is the state of one handler's circuit.
type BreakerState int

const (
	// BreakerClosed: attempts go through; failures are counted.
	BreakerClosed BreakerState = iota
	// BreakerHalfOpen: the cool-down is over; one probe attempt may go
	// (or is out), the others wait for its result.
	BreakerHalfOpen
	// BreakerOpen: the circuit tripped and cools down; attempts wait.
	BreakerOpen
)

// String returns "closed", "half-open" or "open".
func (s BreakerState) String() string {
	switch s {
	case BreakerClosed:
		return "closed"
	case BreakerHalfOpen:
		return "half-open"
	case BreakerOpen:
		return "open"
	}
	return fmt.Sprintf("BreakerState(%d)", int(s))
}

// CircuitOpenError is returned by [Breakers.Allow] when an attempt must
// wait. It wraps [ErrCircuitOpen].
type CircuitOpenError struct {
	Handler string
	// Until is when the cool-down ends and a probe may go; the zero Time
	// if the cool-down is over and the probe is out (wait for its result,
	// see BreakerOptions.OnStateChange).
	Until time.Time
}

func (e *CircuitOpenError) Error() string {
	if e.Until.IsZero() {
		return fmt.Sprintf("engine: circuit of handler %q is half-open and its probe is out", e.Handler)
	}
	return fmt.Sprintf("engine: circuit of handler %q is open until %s", e.Handler, e.Until.UTC().Format(time.RFC3339Nano))
}

// Unwrap returns ErrCircuitOpen.
func (e *CircuitOpenError) Unwrap() error { return ErrCircuitOpen }

// BreakerOptions configures [NewBreakers]. The zero value selects the
// defaults.
type BreakerOptions struct {
	// ConsecutiveFailures is the number of failed attempts in a row, with
	// no success between, that opens a handler's circuit. Defaults to
	// BreakerFailuresDefault (5); must not be negative.
	ConsecutiveFailures int
	// CoolDown is how long an open circuit lets attempts wait before one
	// probe may go, measured on the Breakers' Clock. Defaults to
	// BreakerCoolDownDefault (30 s); must not be negative.
	CoolDown time.Duration
	// ProbeTimeout bounds how long the half-open probe may stay out
	// without a report, on the Breakers' Clock: past it, the next Allow
	// abandons the probe (as [BreakerAttempt.Abandon]: neither success nor
	// failure, its late report ignored) and sends a new one, so a probe
	// whose report is lost (its caller lost track of the attempt) cannot
	// hold the handler half-open for ever. Defaults to
	// BreakerProbeTimeoutDefault (5 min); must not be negative.
	ProbeTimeout time.Duration
	// OnStateChange, if set, is called after each change of a handler's
	// state (closed→open, open→half-open when the cool-down is over and a
	// probe is let through, half-open→closed, half-open→open), for logs
	// and metrics. It runs on the goroutine that caused the change, after
	// the Breakers' locks are released, so it may call back into Breakers.
	OnStateChange func(handler string, from, to BreakerState)
}

// Validate reports whether o is usable; the error wraps
// [ErrInvalidBreaker].
func (o BreakerOptions) Validate() error {
	if o.ConsecutiveFailures < 0 {
		return fmt.Errorf("%w: ConsecutiveFailures %d must be 0 (default) or positive", ErrInvalidBreaker, o.ConsecutiveFailures)
	}
	if o.CoolDown < 0 {
		return fmt.Errorf("%w: CoolDown %v must be 0 (default) or positive", ErrInvalidBreaker, o.CoolDown)
	}
	if o.ProbeTimeout < 0 {
		return fmt.Errorf("%w: ProbeTimeout %v must be 0 (default) or positive", ErrInvalidBreaker, o.ProbeTimeout)
	}
	return nil
}

// WithDefaults returns o with zero fields set to their defaults.
func (o BreakerOptions) WithDefaults() BreakerOptions {
	if o.ConsecutiveFailures == 0 {
		o.ConsecutiveFailures = BreakerFailuresDefault
	}
	if o.CoolDown == 0 {
		o.CoolDown = BreakerCoolDownDefault
	}
	if o.ProbeTimeout == 0 {
		o.ProbeTimeout = BreakerProbeTimeoutDefault
	}
	return o
}

// Breakers holds one circuit breaker per handler, created on first use.
// After ConsecutiveFailures failed attempts in a row a handler's circuit
// opens: its runs wait (Allow returns a [CircuitOpenError]) for CoolDown;
// then a single probe attempt goes, and its result closes the circuit
// (success) or opens it again for another CoolDown (failure).
//
// The state machine is github.com/sony/gobreaker/v2's (a TwoStepCircuitBreaker
// per handler, MaxRequests 1 so half-open lets one probe through, no
// counting interval, ReadyToTrip on consecutive failures). gobreaker reads
// time.Now itself and takes no clock, so Breakers measures the cool-down on
// its own [Clock] instead: gobreaker's open timeout is set to 1 ns, and
// while Breakers' cool-down runs, Allow answers without asking gobreaker;
// once it is over, gobreaker (whose 1 ns has long passed) is in half-open
// and hands out the one probe. Everything else — counting, tripping, the
// single probe, closing, reopening, ignoring reports from an older
// generation — is gobreaker's. So on a [FakeClock] every transition
// happens exactly when the test advances the clock.
//
// Breakers is safe for concurrent use.
type Breakers struct {
	clock Clock
	opts  BreakerOptions

	mu sync.Mutex
	m  map[string]*breaker
}

// breaker is one handler's circuit.
type breaker struct {
	handler string
	// gate serialises every call into cb with the cool-down bookkeeping,
	// so that a trip (in done) and a check-then-allow (in Allow) cannot
	// interleave: otherwise an Allow that checked "closed" could reach
	// gobreaker just after a trip and get the probe with no cool-down.
	gate     sync.Mutex
	cb       *gobreaker.TwoStepCircuitBreaker[struct{}]
	cooling  bool            // open and cooling down (by our clock)
	openedAt time.Time       // when it last opened, by our clock
	probe    *BreakerAttempt // the half-open probe that is out; nil if none
	events   []breakerEvent
}

type breakerEvent struct{ from, to BreakerState }

// errAttemptFailed is what a failed attempt reports to gobreaker;
// errAttemptAbandoned, an abandoned one (excluded: it counts neither way,
// and frees the half-open probe's slot).
var (
	errAttemptFailed    = errors.New("attempt failed")
	errAttemptAbandoned = errors.New("attempt abandoned")
)

// NewBreakers returns an empty set of breakers on clock. It panics if opts
// is invalid (see [BreakerOptions.Validate]).
func NewBreakers(clock Clock, opts BreakerOptions) *Breakers {
	if err := opts.Validate(); err != nil {
		panic("engine: NewBreakers: " + err.Error())
	}
	return &Breakers{clock: clock, opts: opts.WithDefaults(), m: make(map[string]*breaker)}
}

func (b *Breakers) get(handler string) *breaker {
	b.mu.Lock()
	defer b.mu.Unlock()
	br := b.m[handler]
	if br == nil {
		br = &breaker{handler: handler}
		n := uint32(b.opts.ConsecutiveFailures)
		br.cb = gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
			Name:        handler,
			MaxRequests: 1,
			Timeout:     time.Nanosecond, // the cool-down is ours, on our clock
			ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= n },
			IsExcluded:  func(err error) bool { return errors.Is(err, errAttemptAbandoned) },
			// Called by gobreaker with its mutex held, always under br.gate.
			OnStateChange: func(_ string, from, to gobreaker.State) { b.changed(br, from, to) },
		})
		b.m[handler] = br
	}
	return br
}

// changed records a gobreaker transition; br.gate is held.
func (b *Breakers) changed(br *breaker, from, to gobreaker.State) {
	switch to {
	case gobreaker.StateOpen:
		br.cooling = true
		br.openedAt = b.clock.Now()
		prev := BreakerClosed
		if from == gobreaker.StateHalfOpen {
			prev = BreakerHalfOpen
		}
		br.events = append(br.events, breakerEvent{prev, BreakerOpen})
	case gobreaker.StateClosed:
		br.events = append(br.events, breakerEvent{BreakerHalfOpen, BreakerClosed})
	}
	// gobreaker's own open→half-open comes 1 ns after the trip and means
	// nothing here; Allow reports open→half-open when our cool-down ends.
}

// unlock releases br.gate and then delivers the recorded events.
func (b *Breakers) unlock(br *breaker) {
	ev := br.events
	br.events = nil
	br.gate.Unlock()
	if b.opts.OnStateChange != nil {
		for _, e := range ev {
			b.opts.OnStateChange(br.handler, e.from, e.to)
		}
	}
}

// Allow asks whether an attempt of handler may start now. If it may, done
// must be called exactly once with the attempt's outcome (later calls are
// ignored): false counts towards opening the circuit, and for the
// half-open probe decides it; a probe that never reports holds the
// handler half-open until ProbeTimeout. Report false only for outcomes
// that say the handler is unhealthy (an error, a timeout, a 5xx), not for
// a cancelled run or a 429 from a busy executor. A report for an attempt
// allowed before the circuit last changed state is ignored. If the
// attempt must wait, err is a *[CircuitOpenError] (errors.Is(err,
// ErrCircuitOpen)). It is [Breakers.AllowAttempt] for callers that always
// have an outcome to report.
func (b *Breakers) Allow(handler string) (done func(success bool), err error) {
	a, err := b.AllowAttempt(handler)
	if err != nil {
		return nil, err
	}
	return a.Done, nil
}

// BreakerAttempt is an attempt allowed by [Breakers.AllowAttempt]. End it
// exactly once, with Done or Abandon; later calls are ignored.
type BreakerAttempt struct {
	b      *Breakers
	br     *breaker
	report func(error)
	at     time.Time // when it was allowed, by the Breakers' clock
	probe  bool      // let through half-open: the one probe
	ended  bool      // guarded by br.gate
}

// Probe reports whether the attempt was let through while the circuit was
// half-open: it is the single probe whose outcome closes or reopens it.
func (a *BreakerAttempt) Probe() bool { return a.probe }

// AllowAttempt is [Breakers.Allow] returning the attempt itself, which
// can also be abandoned: an attempt whose outcome will never be known
// (it never started after all, or its caller lost track of it) must not
// decide the circuit, nor hold the half-open probe's slot.
func (b *Breakers) AllowAttempt(handler string) (*BreakerAttempt, error) {
	br := b.get(handler)
	br.gate.Lock()
	defer b.unlock(br)
	now := b.clock.Now()
	if br.cooling {
		until := br.openedAt.Add(b.opts.CoolDown)
		if now.Before(until) {
			return nil, &CircuitOpenError{Handler: handler, Until: until}
		}
		br.cooling = false
		br.events = append(br.events, breakerEvent{BreakerOpen, BreakerHalfOpen})
	}
	report, err := br.cb.Allow()
	if p := br.probe; errors.Is(err, gobreaker.ErrTooManyRequests) && p != nil && !now.Before(p.at.Add(b.opts.ProbeTimeout)) {
		// The probe out has not reported for ProbeTimeout: give up on
		// it and send another.
		p.end(errAttemptAbandoned)
		report, err = br.cb.Allow()
	}
	switch {
	case errors.Is(err, gobreaker.ErrTooManyRequests):
		return nil, &CircuitOpenError{Handler: handler}
	case errors.Is(err, gobreaker.ErrOpenState):
		// gobreaker's 1 ns has not passed on the real clock: only
		// possible right after a trip; try again at once.
		return nil, &CircuitOpenError{Handler: handler, Until: now}
	case err != nil:
		return nil, err
	}
	a := &BreakerAttempt{b: b, br: br, report: report, at: now}
	if br.cb.State() == gobreaker.StateHalfOpen {
		br.probe, a.probe = a, true
	}
	return a, nil
}

// Done reports the attempt's outcome (see [Breakers.Allow]).
func (a *BreakerAttempt) Done(success bool) {
	a.br.gate.Lock()
	defer a.b.unlock(a.br)
	if success {
		a.end(nil)
	} else {
		a.end(errAttemptFailed)
	}
}

// Abandon ends the attempt with no outcome: it counts neither as a
// success nor as a failure, and if it was the half-open probe, the next
// Allow sends a new probe.
func (a *BreakerAttempt) Abandon() {
	a.br.gate.Lock()
	defer a.b.unlock(a.br)
	a.end(errAttemptAbandoned)
}

// end reports err to gobreaker once; a.br.gate is held.
func (a *BreakerAttempt) end(err error) {
	if a.ended {
		return
	}
	a.ended = true
	if a.br.probe == a {
		a.br.probe = nil
	}
	a.report(err)
}

// State returns handler's state (BreakerClosed for a handler never seen).
func (b *Breakers) State(handler string) BreakerState {
	b.mu.Lock()
	br := b.m[handler]
	b.mu.Unlock()
	if br == nil {
		return BreakerClosed
	}
	return b.state(br)
}

func (b *Breakers) state(br *breaker) BreakerState {
	br.gate.Lock()
	defer b.unlock(br)
	if br.cooling {
		if b.clock.Now().Before(br.openedAt.Add(b.opts.CoolDown)) {
			return BreakerOpen
		}
		return BreakerHalfOpen // the next Allow gets the probe
	}
	switch br.cb.State() {
	case gobreaker.StateClosed:
		return BreakerClosed
	case gobreaker.StateOpen: // within gobreaker's 1 ns
		return BreakerOpen
	}
	return BreakerHalfOpen
}

// BreakerStatus is one handler's entry in [Breakers.Snapshot].
type BreakerStatus struct {
	Handler             string
	State               BreakerState
	ConsecutiveFailures int       // failed attempts in a row, in the closed state
	OpenUntil           time.Time // end of the cool-down while open; zero otherwise
}

// Snapshot returns the status of every handler seen, sorted by handler,
// for metrics (e.g. a gauge per handler and state).
func (b *Breakers) Snapshot() []BreakerStatus {
	b.mu.Lock()
	all := make([]*breaker, 0, len(b.m))
	for _, br := range b.m {
		all = append(all, br)
	}
	b.mu.Unlock()
	out := make([]BreakerStatus, 0, len(all))
	for _, br := range all {
		out = append(out, b.status(br))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Handler < out[j].Handler })
	return out
}

// Status returns handler's status (closed, with no failures, for a
// handler never seen): while it is open, OpenUntil is when its cool-down
// ends and the probe may go.
func (b *Breakers) Status(handler string) BreakerStatus {
	b.mu.Lock()
	br := b.m[handler]
	b.mu.Unlock()
	if br == nil {
		return BreakerStatus{Handler: handler, State: BreakerClosed}
	}
	return b.status(br)
}

// status returns br's status.
func (b *Breakers) status(br *breaker) BreakerStatus {
	st := BreakerStatus{Handler: br.handler, State: b.state(br)}
	br.gate.Lock()
	st.ConsecutiveFailures = int(br.cb.Counts().ConsecutiveFailures)
	if st.State == BreakerOpen && br.cooling {
		st.OpenUntil = br.openedAt.Add(b.opts.CoolDown)
	}
	b.unlock(br)
	return st
}

// Forget drops handler's breaker (a handler that was removed); a later
// Allow starts it afresh, closed.
func (b *Breakers) Forget(handler string) {
	b.mu.Lock()
	delete(b.m, handler)
	b.mu.Unlock()
}
