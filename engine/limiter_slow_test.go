package engine

import (
	"testing"
	"time"
)

// An executor with room to spare whose calls go from 2 ms to 2 s at once
// (a downstream that became slow): the latency rule cuts the limit, but
// the executor is not saturated, so with a backlog waiting the limit must
// not stay near Min for good. A window at a low limit collects fewer
// than MinSamples answers of 2 s within MaxWindow (2 s); it must wait for
// them rather than be discarded, or no decision is ever taken again, the
// baseline never learns the new latency, and the backlog is served at
// Min ÷ 2 s per second forever.
func TestLimiterRecoversFromSlowExecutor(t *testing.T) {
	s := newLimSim(t, LimiterOptions{}, func(s *limSim, n int) (LimitSignal, time.Duration) {
		if s.now >= 5*time.Second {
			return LimitSuccess, 2 * time.Second
		}
		return LimitSuccess, 2 * time.Millisecond
	})
	s.queue = 1_000_000
	s.run(5 * time.Second)
	s.run(5*time.Second + 5*time.Minute)
	lo, hi := s.rangeSince(5*time.Second + 4*time.Minute)
	if lo < 100 {
		t.Errorf("limit in [%d, %d] during the 5th minute at 2 s per call with a backlog and no saturation, want >= 100 (stats %+v)\n%s",
			lo, hi, s.l.Stats(), s.dump())
	}
	t.Logf("limit in [%d, %d] in the 5th minute; back to >= 100 at %v\n%s", lo, hi, recoveredAt(s, 100, 30*time.Second), s.dump())
}

// recoveredAt returns when the limit first reached n after t (-1: never).
func recoveredAt(s *limSim, n int, t time.Duration) time.Duration {
	for _, p := range s.trace {
		if p.at > t && p.limit >= n {
			return p.at
		}
	}
	return -1
}
