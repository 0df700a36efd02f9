package engine

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

func TestBackoff_Delay(t *testing.T) {
	noJitter := Backoff{Initial: time.Second, Max: time.Minute, Multiplier: 2}
	tests := []struct {
		name    string
		b       Backoff
		attempt int
		rnd     float64
		want    time.Duration
	}{
		// Growth.
		{"first retry", noJitter, 1, 0.3, time.Second},
		{"second", noJitter, 2, 0.3, 2 * time.Second},
		{"third", noJitter, 3, 0.3, 4 * time.Second},
		{"sixth", noJitter, 6, 0.3, 32 * time.Second},
		{"attempt 0 counts as 1", noJitter, 0, 0.3, time.Second},
		{"negative attempt counts as 1", noJitter, -5, 0.3, time.Second},
		{"multiplier 1.5", Backoff{Initial: time.Second, Max: time.Hour, Multiplier: 1.5}, 3, 0, 2250 * time.Millisecond},
		{"multiplier 1 is constant", Backoff{Initial: time.Second, Max: time.Hour, Multiplier: 1}, 50, 0, time.Second},
		// Cap.
		{"capped", noJitter, 7, 0.3, time.Minute},
		{"capped far out", noJitter, 1000, 0.3, time.Minute},
		// Overflow.
		{"huge attempt", noJitter, math.MaxInt, 0.3, time.Minute},
		{"huge attempt, max duration cap", Backoff{Initial: time.Second, Max: math.MaxInt64, Multiplier: 10}, math.MaxInt, 0.5, math.MaxInt64},
		{"huge multiplier", Backoff{Initial: time.Second, Max: time.Hour, Multiplier: math.MaxFloat64}, 3, 0.5, time.Hour},
		// Jitter.
		{"jitter low end", BackoffDefault, 1, 0, 1600 * time.Millisecond},
		{"jitter middle", BackoffDefault, 1, 0.5, 2 * time.Second},
		{"jitter 0.75", BackoffDefault, 2, 0.75, 4400 * time.Millisecond},
		{"jitter at cap only goes down", BackoffDefault, 10, 0.999, 30 * time.Second},
		{"jitter at cap low end", BackoffDefault, 10, 0, 24 * time.Second},
		{"full jitter can reach 0", Backoff{Initial: time.Second, Max: time.Minute, Multiplier: 2, Jitter: 1}, 1, 0, 0},
		// Out-of-range rnd is clamped.
		{"rnd below 0", BackoffDefault, 1, -3, 1600 * time.Millisecond},
		{"rnd NaN", BackoffDefault, 1, math.NaN(), 2 * time.Second},
		{"rnd above 1", BackoffDefault, 1, 7, 2400 * time.Millisecond},
		// Invalid values never give a negative or oversized result.
		{"zero value", Backoff{}, 3, 0.5, 0},
		{"negative jitter ignored", Backoff{Initial: time.Second, Max: time.Minute, Multiplier: 2, Jitter: -1}, 1, 0, time.Second},
		{"jitter above 1 clamped", Backoff{Initial: time.Second, Max: time.Minute, Multiplier: 2, Jitter: 5}, 1, 0, 0},
		{"multiplier below 1 ignored", Backoff{Initial: time.Second, Max: time.Minute, Multiplier: 0.5}, 4, 0.5, time.Second},
		{"max below initial", Backoff{Initial: time.Minute, Max: time.Second, Multiplier: 2}, 1, 0.5, time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.b.Delay(tc.attempt, tc.rnd)
			// Float rounding may cost a nanosecond.
			if diff := got - tc.want; diff < -1 || diff > 1 {
				t.Fatalf("%+v.Delay(%d, %v) = %v, want %v", tc.b, tc.attempt, tc.rnd, got, tc.want)
			}
		})
	}
}

// TestBackoff_JitterBounds checks, for random rnd, that every delay is within
// ±Jitter of its base, capped at Max and never negative, and that the
// delays grow monotonically with the attempt for a fixed rnd.
func TestBackoff_JitterBounds(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, b := range []Backoff{
		BackoffDefault,
		{Initial: 10 * time.Millisecond, Max: time.Hour, Multiplier: 3, Jitter: 0.5},
		{Initial: time.Nanosecond, Max: 2 * time.Nanosecond, Multiplier: 1.1, Jitter: 1},
	} {
		if err := b.Validate(); err != nil {
			t.Fatal(err)
		}
		for range 10000 {
			attempt := 1 + rng.IntN(40)
			rnd := rng.Float64()
			got := b.Delay(attempt, rnd)
			base := b.Delay(attempt, 0.5)
			lo := time.Duration(float64(base) * (1 - b.Jitter))
			hi := min(b.Max, time.Duration(float64(base)*(1+b.Jitter)))
			if got < 0 || got > b.Max || got < lo-1 || got > hi+1 {
				t.Fatalf("%+v.Delay(%d, %v) = %v, want in [%v, %v]", b, attempt, rnd, got, lo, hi)
			}
			if next := b.Delay(attempt+1, rnd); next < got {
				t.Fatalf("%+v: Delay(%d) = %v > Delay(%d) = %v", b, attempt, got, attempt+1, next)
			}
		}
	}
}

func TestBackoff_Validate(t *testing.T) {
	tests := []struct {
		name string
		b    Backoff
		ok   bool
	}{
		{"default", BackoffDefault, true},
		{"constant no jitter", Backoff{Initial: time.Second, Max: time.Second, Multiplier: 1}, true},
		{"full jitter", Backoff{Initial: time.Second, Max: time.Second, Multiplier: 1, Jitter: 1}, true},
		{"zero initial", Backoff{Max: time.Second, Multiplier: 2}, false},
		{"negative initial", Backoff{Initial: -1, Max: time.Second, Multiplier: 2}, false},
		{"max below initial", Backoff{Initial: time.Second, Max: time.Millisecond, Multiplier: 2}, false},
		{"multiplier below 1", Backoff{Initial: time.Second, Max: time.Second, Multiplier: 0.9}, false},
		{"multiplier zero", Backoff{Initial: time.Second, Max: time.Second}, false},
		{"multiplier NaN", Backoff{Initial: time.Second, Max: time.Second, Multiplier: math.NaN()}, false},
		{"multiplier Inf", Backoff{Initial: time.Second, Max: time.Second, Multiplier: math.Inf(1)}, false},
		{"jitter negative", Backoff{Initial: time.Second, Max: time.Second, Multiplier: 2, Jitter: -0.1}, false},
		{"jitter above 1", Backoff{Initial: time.Second, Max: time.Second, Multiplier: 2, Jitter: 1.1}, false},
		{"jitter NaN", Backoff{Initial: time.Second, Max: time.Second, Multiplier: 2, Jitter: math.NaN()}, false},
	}
	for _, tc := range tests {
		err := tc.b.Validate()
		if (err == nil) != tc.ok {
			t.Errorf("%s: Validate() = %v, want ok %v", tc.name, err, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalidBackoff) {
			t.Errorf("%s: error %v does not wrap ErrInvalidBackoff", tc.name, err)
		}
	}
}

func BenchmarkBackoffDelay(b *testing.B) {
	var sink time.Duration
	for i := 0; b.Loop(); i++ {
		sink += BackoffDefault.Delay(i%20+1, 0.37)
	}
	_ = sink
}
