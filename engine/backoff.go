package engine

import (
	"fmt"
	"math"
	"time"
)

// Backoff is an exponential retry delay, capped and jittered:
//
//	base(n)  = min(Initial × Multiplier^(n−1), Max)          n = attempt ≥ 1
//	delay(n) = clamp(base(n) × (1 + Jitter × (2·rnd − 1)), 0, Max)
//
// so the first retry waits about Initial, each further one Multiplier times
// longer, never more than Max, and each delay is spread uniformly over
// ±Jitter×base around its base to keep failed tasks from retrying in step
// (the "thundering herd"; the scheduler ax grew out of spread its retries
// with a random 0–2 s offset to 2 s, 4 s, 8 s …). Because the result is
// capped at Max after jitter, delays at the cap fall in
// [Max×(1−Jitter), Max].
//
// A Backoff is a plain value, safe to copy and to use concurrently. It is
// what a task's `backoff` field (initial, max, multiplier, jitter) maps to.
type Backoff struct {
	// Initial is the delay before the first retry (attempt 1), before
	// jitter. Must be > 0.
	Initial time.Duration
	// Max caps every delay, after jitter. Must be >= Initial.
	Max time.Duration
	// Multiplier is the growth factor from one attempt to the next. Must be
	// >= 1 and finite; 1 gives a constant delay.
	Multiplier float64
	// Jitter is the fraction of the delay by which it is randomly spread,
	// in [0, 1]; 0 disables jitter, 0.2 gives ±20 %.
	Jitter float64
}

// BackoffDefault is the retry backoff used when a task names none: 2 s, 4 s,
// 8 s, 16 s, then 30 s, each ±20 % (the in-house scheduler's defaults).
var BackoffDefault = Backoff{Initial: 2 * time.Second, Max: 30 * time.Second, Multiplier: 2, Jitter: 0.2}

// Delay returns how long to wait before the next attempt. attempt is the
// number of failed attempts so far (1 before the first retry); values below
// 1 count as 1, and huge values saturate at Max without overflow. rnd is a
// uniform random number in [0, 1) supplied by the caller, which keeps Delay
// deterministic (the Raft leader draws rnd and records the result, so every
// node agrees); values outside [0, 1), and NaN, are clamped into it (NaN
// counts as 0.5, no jitter). 0.5 gives the unjittered delay.
//
// The result is never negative and never above Max. Delay does not validate
// b; with an invalid Backoff it still returns a value in [0, max(Max, 0)].
func (b Backoff) Delay(attempt int, rnd float64) time.Duration {
	if attempt < 1 {
		attempt = 1
	}
	maxD := float64(b.Max)
	if b.Max <= 0 || b.Initial <= 0 {
		return 0
	}
	m := b.Multiplier
	if !(m >= 1) || math.IsInf(m, 0) { // also catches NaN
		m = 1
	}
	base := float64(b.Initial) * math.Pow(m, float64(attempt-1))
	if !(base < maxD) { // also catches +Inf
		base = maxD
	}
	switch {
	case math.IsNaN(rnd):
		rnd = 0.5
	case rnd < 0:
		rnd = 0
	case rnd >= 1:
		rnd = math.Nextafter(1, 0)
	}
	j := b.Jitter
	if !(j >= 0) { // also catches NaN
		j = 0
	}
	j = min(j, 1)
	d := base * (1 + j*(2*rnd-1))
	switch {
	case d <= 0:
		return 0
	case d >= maxD:
		return b.Max
	}
	return time.Duration(d)
}

// Validate reports whether b is usable; the error names the field and the
// bound and wraps [ErrInvalidBackoff].
func (b Backoff) Validate() error {
	switch {
	case b.Initial <= 0:
		return fmt.Errorf("%w: Initial %v must be > 0", ErrInvalidBackoff, b.Initial)
	case b.Max < b.Initial:
		return fmt.Errorf("%w: Max %v must be >= Initial %v", ErrInvalidBackoff, b.Max, b.Initial)
	case math.IsNaN(b.Multiplier) || math.IsInf(b.Multiplier, 0) || b.Multiplier < 1:
		return fmt.Errorf("%w: Multiplier %v must be finite and >= 1", ErrInvalidBackoff, b.Multiplier)
	case math.IsNaN(b.Jitter) || b.Jitter < 0 || b.Jitter > 1:
		return fmt.Errorf("%w: Jitter %v must be in [0, 1]", ErrInvalidBackoff, b.Jitter)
	}
	return nil
}
