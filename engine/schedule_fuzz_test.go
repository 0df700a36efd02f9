package engine

import (
	"errors"
	"testing"
	"time"
)

// FuzzSchedule drives the schedule parsers a task submission reaches (a
// cron expression in a time zone, an every interval) with arbitrary text,
// and evaluates what parses. The property: no panic, no hang; a refusal
// wraps ErrInvalidSchedule; Next is strictly after its argument (or zero:
// no slot within five years); NextRun's slot is not after now when a slot
// was missed, and the next slot after it is. Seeds:
// testdata/fuzz/FuzzSchedule and the cases below.
func FuzzSchedule(f *testing.F) {
	for _, c := range []struct {
		expr, tz, every string
	}{
		{"0 2 * * *", "Europe/Berlin", "5m"},
		{"30 2 * * *", "America/New_York", "1s"},
		{"*/5 * * * * *", "", "1h30m"},
		{"@daily", "UTC", "0s"},
		{"@every 1m", "Local", "-1s"},
		{"TZ=UTC 0 * * * *", "../../etc/passwd", "9223372036854775807ns"},
		{"0 0 30 2 *", "Asia/Kathmandu", "1e9"},
		{"0 0 29 2 *", "Australia/Lord_Howe", ""},
		{"59 23 31 12 6", "Pacific/Chatham", "1.5h"},
		{"1-59/0 * * * *", "Etc/GMT+12", "1µs"},
		{"* * * * * * *", "\x00", "5m5m5m"},
	} {
		f.Add(c.expr, c.tz, c.every, int64(1764547200), uint32(3600))
	}
	f.Fuzz(func(t *testing.T, expr, tz, every string, at int64, lagSec uint32) {
		// An instant between 1970 and about 2200, and a lag of up to
		// about 136 years (NextRun's misfire walk and bisection).
		now0 := time.Unix(int64(uint64(at)%(230*365*86400)), 0).UTC()
		lag := time.Duration(lagSec) * time.Second
		check := func(s *Schedule, err error) {
			if err != nil {
				if !errors.Is(err, ErrInvalidSchedule) {
					t.Fatalf("error %v does not wrap ErrInvalidSchedule", err)
				}
				return
			}
			_ = s.String()
			next := s.Next(now0)
			if !next.IsZero() && !next.After(now0) {
				t.Fatalf("%s: Next(%v) = %v, not after", s, now0, next)
			}
			now := now0.Add(lag)
			slot, skipped := s.NextRun(now0, now)
			if slot.IsZero() || skipped < 0 {
				if skipped < 0 {
					t.Fatalf("%s: NextRun skipped %d", s, skipped)
				}
				return
			}
			if !next.IsZero() && !next.After(now) {
				// A slot was missed: the one returned is the last one
				// not after now.
				if slot.After(now) {
					t.Fatalf("%s: NextRun(%v, %v) = %v, after now", s, now0, now, slot)
				}
				if n := s.Next(slot); !n.IsZero() && !n.After(now) && skipped < misfireWalk-1 {
					t.Fatalf("%s: NextRun(%v, %v) = %v, but %v is a later slot not after now", s, now0, now, slot, n)
				}
			}
			_, _ = s.NextRunAfter(slot, now, now.Add(time.Minute))
		}
		check(ParseCron(expr, tz))
		if d, err := time.ParseDuration(every); err == nil {
			check(Every(d))
		}
	})
}
