package engine

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func mustCron(t *testing.T, expr, tz string) *Schedule {
	t.Helper()
	s, err := ParseCron(expr, tz)
	if err != nil {
		t.Fatalf("ParseCron(%q, %q): %v", expr, tz, err)
	}
	return s
}

func mustZone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// slots returns the first n slots after from, as local times formatted
// "2006-01-02 15:04:05 MST".
func slots(s *Schedule, from time.Time, n int, loc *time.Location) []string {
	var out []string
	for range n {
		from = s.Next(from)
		if from.Location() != time.UTC {
			panic("Next returned a non-UTC time")
		}
		out = append(out, from.In(loc).Format("2006-01-02 15:04:05 MST"))
	}
	return out
}

func expectSlots(t *testing.T, got []string, want ...string) {
	t.Helper()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("slots:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

func TestParseCron_DSTBerlin(t *testing.T) {
	loc := mustZone(t, "Europe/Berlin")
	// 2026-03-29: 02:00 CET → 03:00 CEST. 2026-10-25: 03:00 CEST → 02:00 CET.
	t.Run("spring 02:30 fires once at 03:00", func(t *testing.T) {
		s := mustCron(t, "30 2 * * *", "Europe/Berlin")
		expectSlots(t, slots(s, time.Date(2026, 3, 27, 12, 0, 0, 0, loc), 4, loc),
			"2026-03-28 02:30:00 CET",
			"2026-03-29 03:00:00 CEST", // 02:30 does not exist
			"2026-03-30 02:30:00 CEST",
			"2026-03-31 02:30:00 CEST")
	})
	t.Run("spring hourly", func(t *testing.T) {
		s := mustCron(t, "0 * * * *", "Europe/Berlin")
		expectSlots(t, slots(s, time.Date(2026, 3, 29, 0, 30, 0, 0, loc), 4, loc),
			"2026-03-29 01:00:00 CET",
			"2026-03-29 03:00:00 CEST", // 02:00 skipped, merged with 03:00: one run
			"2026-03-29 04:00:00 CEST",
			"2026-03-29 05:00:00 CEST")
	})
	t.Run("spring, several slots in the gap merge", func(t *testing.T) {
		s := mustCron(t, "*/20 2 * * *", "Europe/Berlin")
		expectSlots(t, slots(s, time.Date(2026, 3, 28, 2, 50, 0, 0, loc), 3, loc),
			"2026-03-29 03:00:00 CEST", // 02:00, 02:20, 02:40 all skipped: one run
			"2026-03-30 02:00:00 CEST",
			"2026-03-30 02:20:00 CEST")
	})
	t.Run("fall 02:30 fires once", func(t *testing.T) {
		s := mustCron(t, "30 2 * * *", "Europe/Berlin")
		expectSlots(t, slots(s, time.Date(2026, 10, 24, 12, 0, 0, 0, loc), 3, loc),
			"2026-10-25 02:30:00 CEST", // first occurrence only
			"2026-10-26 02:30:00 CET",
			"2026-10-27 02:30:00 CET")
	})
	t.Run("fall hourly", func(t *testing.T) {
		s := mustCron(t, "0 * * * *", "Europe/Berlin")
		expectSlots(t, slots(s, time.Date(2026, 10, 25, 0, 30, 0, 0, loc), 4, loc),
			"2026-10-25 01:00:00 CEST",
			"2026-10-25 02:00:00 CEST",
			"2026-10-25 03:00:00 CET", // 02:00 CET is the repeat: no run
			"2026-10-25 04:00:00 CET")
	})
	t.Run("fall, from inside the repeat", func(t *testing.T) {
		// A task created at 02:10 CET (the second pass): the repeated
		// quarter hours had their runs in the first pass.
		s := mustCron(t, "*/15 * * * *", "Europe/Berlin")
		from := time.Date(2026, 10, 25, 1, 10, 0, 0, time.UTC) // 02:10 CET
		expectSlots(t, slots(s, from, 2, loc),
			"2026-10-25 03:00:00 CET",
			"2026-10-25 03:15:00 CET")
		// From inside the first pass, the rest of the first pass runs.
		from = time.Date(2026, 10, 25, 0, 10, 0, 0, time.UTC) // 02:10 CEST
		expectSlots(t, slots(s, from, 4, loc),
			"2026-10-25 02:15:00 CEST",
			"2026-10-25 02:30:00 CEST",
			"2026-10-25 02:45:00 CEST",
			"2026-10-25 03:00:00 CET")
	})
	t.Run("every second across the repeat", func(t *testing.T) {
		s := mustCron(t, "* * * * * *", "Europe/Berlin")
		from := time.Date(2026, 10, 25, 0, 59, 58, 0, time.UTC) // 02:59:58 CEST
		expectSlots(t, slots(s, from, 3, loc),
			"2026-10-25 02:59:59 CEST",
			"2026-10-25 03:00:00 CET", // 02:00:00–02:59:59 CET repeat: skipped
			"2026-10-25 03:00:01 CET")
	})
}

func TestParseCron_DSTNewYork(t *testing.T) {
	loc := mustZone(t, "America/New_York")
	// 2026-03-08: 02:00 EST → 03:00 EDT. 2026-11-01: 02:00 EDT → 01:00 EST.
	t.Run("spring 02:30", func(t *testing.T) {
		s := mustCron(t, "30 2 * * *", "America/New_York")
		expectSlots(t, slots(s, time.Date(2026, 3, 7, 12, 0, 0, 0, loc), 3, loc),
			"2026-03-08 03:00:00 EDT",
			"2026-03-09 02:30:00 EDT",
			"2026-03-10 02:30:00 EDT")
	})
	t.Run("spring hourly", func(t *testing.T) {
		s := mustCron(t, "0 * * * *", "America/New_York")
		expectSlots(t, slots(s, time.Date(2026, 3, 8, 0, 30, 0, 0, loc), 3, loc),
			"2026-03-08 01:00:00 EST",
			"2026-03-08 03:00:00 EDT",
			"2026-03-08 04:00:00 EDT")
	})
	t.Run("fall 01:30", func(t *testing.T) {
		s := mustCron(t, "30 1 * * *", "America/New_York")
		expectSlots(t, slots(s, time.Date(2026, 10, 31, 12, 0, 0, 0, loc), 2, loc),
			"2026-11-01 01:30:00 EDT",
			"2026-11-02 01:30:00 EST")
	})
	t.Run("fall hourly", func(t *testing.T) {
		s := mustCron(t, "0 * * * *", "America/New_York")
		expectSlots(t, slots(s, time.Date(2026, 10, 31, 23, 30, 0, 0, loc), 4, loc),
			"2026-11-01 00:00:00 EDT",
			"2026-11-01 01:00:00 EDT",
			"2026-11-01 02:00:00 EST", // 01:00 EST is the repeat
			"2026-11-01 03:00:00 EST")
	})
	t.Run("30 2 is untouched by the fall-back", func(t *testing.T) {
		s := mustCron(t, "30 2 * * *", "America/New_York")
		expectSlots(t, slots(s, time.Date(2026, 10, 31, 12, 0, 0, 0, loc), 2, loc),
			"2026-11-01 02:30:00 EST",
			"2026-11-02 02:30:00 EST")
	})
}

func TestParseCron_Forms(t *testing.T) {
	from := time.Date(2026, 11, 30, 10, 17, 3, 500, time.UTC)
	tests := []struct {
		expr, tz string
		want     []string
	}{
		{"@daily", "", []string{"2026-12-01 00:00:00 UTC", "2026-12-02 00:00:00 UTC"}},
		{"@midnight", "UTC", []string{"2026-12-01 00:00:00 UTC", "2026-12-02 00:00:00 UTC"}},
		{"@hourly", "", []string{"2026-11-30 11:00:00 UTC", "2026-11-30 12:00:00 UTC"}},
		{"@weekly", "", []string{"2026-12-06 00:00:00 UTC", "2026-12-13 00:00:00 UTC"}},
		{"@monthly", "", []string{"2026-12-01 00:00:00 UTC", "2027-01-01 00:00:00 UTC"}},
		{"@yearly", "", []string{"2027-01-01 00:00:00 UTC", "2028-01-01 00:00:00 UTC"}},
		{"@daily", "Asia/Tokyo", []string{"2026-12-01 00:00:00 JST", "2026-12-02 00:00:00 JST"}},
		{"*/15 * * * * *", "", []string{"2026-11-30 10:17:15 UTC", "2026-11-30 10:17:30 UTC"}}, // seconds field
		{"0 30 9 * * MON-FRI", "", []string{"2026-12-01 09:30:00 UTC", "2026-12-02 09:30:00 UTC"}},
		{"5 4 * * sun", "", []string{"2026-12-06 04:05:00 UTC", "2026-12-13 04:05:00 UTC"}},
		{"0 0 29 2 *", "", []string{"2028-02-29 00:00:00 UTC", "2032-02-29 00:00:00 UTC"}},
		{"  0 12 * * *  ", "", []string{"2026-11-30 12:00:00 UTC", "2026-12-01 12:00:00 UTC"}},
	}
	for _, tc := range tests {
		s := mustCron(t, tc.expr, tc.tz)
		loc := time.UTC
		if tc.tz != "" {
			loc = mustZone(t, tc.tz)
		}
		got := slots(s, from, 2, loc)
		if strings.Join(got, ",") != strings.Join(tc.want, ",") {
			t.Errorf("%q in %q: %v, want %v", tc.expr, tc.tz, got, tc.want)
		}
	}
	// Next is strictly after: a slot is not its own successor.
	s := mustCron(t, "0 * * * *", "")
	at := time.Date(2026, 1, 1, 5, 0, 0, 0, time.UTC)
	if got := s.Next(at); !got.Equal(at.Add(time.Hour)) {
		t.Fatalf("Next(slot) = %v", got)
	}
	if got := s.Next(at.Add(-time.Nanosecond)); !got.Equal(at) {
		t.Fatalf("Next(slot-1ns) = %v", got)
	}
	// A monotonic reading and a location on the input do not matter.
	if got := s.Next(time.Now()); got.Location() != time.UTC || got.Minute() != 0 || got.Second() != 0 {
		t.Fatalf("Next(time.Now()) = %v", got)
	}
	if got := s.String(); got != `cron "0 * * * *" in UTC` {
		t.Fatalf("String = %s", got)
	}
}

func TestParseCron_Errors(t *testing.T) {
	tests := []struct {
		expr, tz, want string
	}{
		{"", "", "empty"},
		{"@every 5m", "", "@every"},
		{"TZ=Europe/Berlin 0 * * * *", "", "timezone"},
		{"CRON_TZ=UTC 0 * * * *", "", "timezone"},
		{"61 * * * *", "", "above maximum"},
		{"* * * *", "", "expected 5 to 6 fields"},
		{"* * * * * * *", "", "expected 5 to 6 fields"},
		{"0 0 30 2 *", "", "never fires"},
		{"@fortnightly", "", "unrecognized descriptor"},
		{"0 * * * *", "Mars/Olympus_Mons", "unknown time zone"},
		{"0 * * * *", "Local", "depends on the host"},
		{"0 * * * *", "CET+1", "unknown time zone"},
	}
	for _, tc := range tests {
		_, err := ParseCron(tc.expr, tc.tz)
		if !errors.Is(err, ErrInvalidSchedule) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseCron(%q, %q) = %v, want ErrInvalidSchedule mentioning %q", tc.expr, tc.tz, err, tc.want)
		}
	}
	for _, d := range []time.Duration{0, -time.Second, 999 * time.Millisecond} {
		if _, err := Every(d); !errors.Is(err, ErrInvalidSchedule) {
			t.Errorf("Every(%v) = %v", d, err)
		}
	}
	if _, err := Every(EveryMin); err != nil {
		t.Errorf("Every(EveryMin): %v", err)
	}
}

// TestEvery_NoDrift runs an every schedule 10 000 times the way the leader
// does (each run's slot from the previous slot, while runs take a random
// while and end late) and checks every slot is start + k×interval exactly.
func TestEvery_NoDrift(t *testing.T) {
	for _, interval := range []time.Duration{time.Second, 7*time.Second + 333*time.Millisecond, time.Hour} {
		s, err := Every(interval)
		if err != nil {
			t.Fatal(err)
		}
		created := start
		clock := NewFakeClock(created)
		slot := created
		for k := 1; k <= 10_000; k++ {
			next, skipped := s.NextRun(slot, clock.Now())
			if skipped != 0 {
				t.Fatalf("run %d: skipped %d", k, skipped)
			}
			want := created.Add(time.Duration(k) * interval)
			if !next.Equal(want) {
				t.Fatalf("interval %v run %d: slot %v, want %v (drift %v)", interval, k, next, want, next.Sub(want))
			}
			// The timer fires at the slot; the run takes up to 90 % of the
			// interval and ends; the leader computes the next slot then.
			clock.Advance(next.Sub(clock.Now()) + time.Duration(k*7919%9)*interval/10)
			slot = next
		}
	}
}

// TestNextRun_MisfireEvery: after a long pause an every task fires once for
// all missed slots, at the last one, then keeps its schedule.
func TestNextRun_MisfireEvery(t *testing.T) {
	s, _ := Every(10 * time.Minute)
	created := start
	clock := NewFakeClock(created)
	slot, _ := s.NextRun(created, clock.Now())
	clock.Advance(10 * time.Minute) // first run at +10m, ends at once
	// The leader is down for 3 h 5 min after that run.
	clock.Advance(3*time.Hour + 5*time.Minute)
	next, skipped := s.NextRun(slot, clock.Now())
	// Missed: +20m … +3h10m (18 slots); one run at +3h10m, 17 skipped.
	if want := created.Add(3*time.Hour + 10*time.Minute); !next.Equal(want) || skipped != 17 {
		t.Fatalf("catch-up = %v skipped %d, want %v skipped 17", next.Sub(created), skipped, want.Sub(created))
	}
	if next.After(clock.Now()) {
		t.Fatal("catch-up slot is not due")
	}
	// The catch-up run ends 1 min later; the next one is on the grid.
	clock.Advance(time.Minute)
	after, skipped := s.NextRun(next, clock.Now())
	if want := created.Add(3*time.Hour + 20*time.Minute); !after.Equal(want) || skipped != 0 {
		t.Fatalf("after catch-up: %v skipped %d, want %v", after.Sub(created), skipped, want.Sub(created))
	}
	// Exactly on a slot: that slot is the catch-up.
	next, skipped = s.NextRun(created, created.Add(time.Hour))
	if !next.Equal(created.Add(time.Hour)) || skipped != 5 {
		t.Fatalf("on a slot: %v skipped %d", next.Sub(created), skipped)
	}
	// No pause: no skip.
	next, skipped = s.NextRun(created, created.Add(time.Minute))
	if !next.Equal(created.Add(10*time.Minute)) || skipped != 0 {
		t.Fatalf("no pause: %v skipped %d", next.Sub(created), skipped)
	}
}

// TestNextRun_MisfireCron: the same for cron, with a short and a very long
// pause (beyond the walk limit: bisection and an estimated count).
func TestNextRun_MisfireCron(t *testing.T) {
	s := mustCron(t, "*/5 * * * *", "Europe/Berlin")
	prev := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	now := time.Date(2026, 11, 30, 11, 7, 30, 0, time.UTC)
	next, skipped := s.NextRun(prev, now)
	// Missed 09:05 … 11:05 (25 slots): one run at 11:05, 24 skipped.
	if want := time.Date(2026, 11, 30, 11, 5, 0, 0, time.UTC); !next.Equal(want) || skipped != 24 {
		t.Fatalf("catch-up = %v skipped %d, want %v skipped 24", next, skipped, want)
	}
	after, skipped := s.NextRun(next, now.Add(time.Minute))
	if want := time.Date(2026, 11, 30, 11, 10, 0, 0, time.UTC); !after.Equal(want) || skipped != 0 {
		t.Fatalf("after catch-up: %v skipped %d", after, skipped)
	}

	// Down for 40 days: 11 520 missed slots.
	now = prev.Add(40*24*time.Hour + 2*time.Minute)
	t0 := time.Now()
	next, skipped = s.NextRun(prev, now)
	if el := time.Since(t0); el > time.Second {
		t.Errorf("NextRun took %v", el)
	}
	if want := prev.Add(40 * 24 * time.Hour); !next.Equal(want) {
		t.Fatalf("long pause: %v, want %v", next, want)
	}
	if want := 40*24*12 - 1; skipped < want-want/100 || skipped > want+want/100 {
		t.Fatalf("long pause: skipped %d, want about %d", skipped, want)
	}
	// A sparse schedule far behind: the last slot is found exactly.
	s = mustCron(t, "0 9 1 * *", "America/New_York") // 09:00 on the 1st
	next, _ = s.NextRun(time.Date(1990, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC))
	if want := time.Date(2026, 11, 1, 9, 0, 0, 0, mustZone(t, "America/New_York")); !next.Equal(want) {
		t.Fatalf("sparse: %v, want %v", next, want)
	}
	// Dense seconds far behind, within a DST change.
	s = mustCron(t, "* * * * * *", "Europe/Berlin")
	now = time.Date(2026, 10, 25, 1, 30, 0, 400, time.UTC)
	next, _ = s.NextRun(time.Date(2026, 10, 20, 0, 0, 0, 0, time.UTC), now)
	// 01:30:00Z is 02:30:00 CET, in the repeated hour. No second of the
	// repeat is a slot (each had its slot in the first pass), so the last
	// slot <= now is 02:59:59 CEST (00:59:59Z).
	if want := time.Date(2026, 10, 25, 0, 59, 59, 0, time.UTC); !next.Equal(want) {
		t.Fatalf("dense across fall-back: %v, want %v", next, want)
	}
}

func TestLimits(t *testing.T) {
	until := start.Add(time.Hour)
	tests := []struct {
		l    Limits
		runs int
		next time.Time
		want bool
	}{
		{Limits{}, 1_000_000, start, false},
		{Limits{Repeats: 3}, 2, start, false},
		{Limits{Repeats: 3}, 3, start, true},
		{Limits{Until: until}, 0, until, false}, // a slot exactly at Until runs
		{Limits{Until: until}, 0, until.Add(time.Nanosecond), true},
		{Limits{Repeats: 5, Until: until}, 1, until.Add(time.Second), true},
		{Limits{}, 0, time.Time{}, true}, // no further slot
	}
	for _, tc := range tests {
		if got := tc.l.Done(tc.runs, tc.next); got != tc.want {
			t.Errorf("%+v.Done(%d, %v) = %v", tc.l, tc.runs, tc.next, got)
		}
	}
	if err := (Limits{Repeats: -1}).Validate(); !errors.Is(err, ErrInvalidSchedule) {
		t.Errorf("Validate(-1) = %v", err)
	}
	if err := (Limits{Repeats: 2, Until: until}).Validate(); err != nil {
		t.Errorf("Validate = %v", err)
	}
	// A recurring task with repeats 3 runs exactly 3 times.
	s, _ := Every(time.Minute)
	l := Limits{Repeats: 3}
	slot, runs := start, 0
	for {
		next, _ := s.NextRun(slot, slot)
		if l.Done(runs, next) {
			break
		}
		runs++
		slot = next
	}
	if runs != 3 {
		t.Fatalf("ran %d times", runs)
	}
}

// TestNext_AgainstDefinition checks Next against the DST rule applied
// literally, minute by minute, over the days of both changes in Berlin and
// New York, from many starting points. An instant i is a slot if its local
// time matches the expression and did not occur earlier (a repeat's first
// occurrence), or if i ends a spring-forward gap in which some skipped
// local time matches.
func TestNext_AgainstDefinition(t *testing.T) {
	exprs := []string{"30 2 * * *", "0 * * * *", "*/20 * * * *", "15,45 1-3 * * *", "0 3 * * *", "59 1 * * *"}
	days := []struct {
		tz  string
		day time.Time // a UTC midnight before the change
	}{
		{"Europe/Berlin", time.Date(2026, 3, 28, 12, 0, 0, 0, time.UTC)},
		{"Europe/Berlin", time.Date(2026, 10, 24, 12, 0, 0, 0, time.UTC)},
		{"America/New_York", time.Date(2026, 3, 7, 18, 0, 0, 0, time.UTC)},
		{"America/New_York", time.Date(2026, 10, 31, 18, 0, 0, 0, time.UTC)},
	}
	for _, d := range days {
		loc := mustZone(t, d.tz)
		for _, expr := range exprs {
			s := mustCron(t, expr, d.tz)
			matches := func(l time.Time) bool { return s.spec.Next(l.Add(-time.Second)).Equal(l) }
			isSlot := func(i time.Time) bool {
				l := wallClock(i, loc)
				if matches(l) {
					for _, back := range []time.Duration{30 * time.Minute, time.Hour, 2 * time.Hour} {
						if wallClock(i.Add(-back), loc).Equal(l) {
							return false // a repeat: it had its slot
						}
					}
					return true
				}
				_, off := i.Zone()
				_, offBefore := i.Add(-time.Second).In(loc).Zone()
				if gap := time.Duration(off-offBefore) * time.Second; gap > 0 {
					for g := l.Add(-gap); g.Before(l); g = g.Add(time.Minute) {
						if matches(g) {
							return true
						}
					}
				}
				return false
			}
			var all []time.Time
			for i := d.day; i.Before(d.day.Add(48 * time.Hour)); i = i.Add(time.Minute) {
				if isSlot(i.In(loc)) {
					all = append(all, i)
				}
			}
			for from := d.day; from.Before(d.day.Add(40 * time.Hour)); from = from.Add(7*time.Minute + 13*time.Second) {
				var want time.Time
				for _, a := range all {
					if a.After(from) {
						want = a
						break
					}
				}
				if want.IsZero() {
					continue // beyond the brute-force window
				}
				if got := s.Next(from); !got.Equal(want) {
					t.Fatalf("%s %q: Next(%s) = %s, want %s", d.tz, expr,
						from.In(loc).Format(time.RFC3339), got.In(loc).Format(time.RFC3339), want.In(loc).Format(time.RFC3339))
				}
			}
		}
	}
}

// TestNextRunAfter: the run that ends was the one run of every slot up to
// its start. After downtime the stored slot fires late, as the catch-up;
// once it ends the schedule goes on, with no second immediate run (with
// NextRun(slot, now), the task fired twice, 3 ms apart). A run that
// outlasts its period is still followed at once by one run for the slots
// that passed while it ran.
func TestNextRunAfter(t *testing.T) {
	s, _ := Every(2 * time.Second)
	c := start
	at := func(d time.Duration) time.Time { return c.Add(d) }
	for _, tc := range []struct {
		name                string
		slot, started, now  time.Duration
		want                time.Duration
		wantSkipped, oldDue int // oldDue: 1 if NextRun(slot, now) is due at once
	}{
		// Stored slot +6 s; the node was down until +11.2 s, when it fired.
		{"after downtime", 6 * time.Second, 11200 * time.Millisecond, 11203 * time.Millisecond, 12 * time.Second, 0, 1},
		{"started on a slot", 6 * time.Second, 12 * time.Second, 12003 * time.Millisecond, 14 * time.Second, 0, 1},
		{"on time", 6 * time.Second, 6 * time.Second, 6500 * time.Millisecond, 8 * time.Second, 0, 0},
		{"no start known", 6 * time.Second, -1, 6500 * time.Millisecond, 8 * time.Second, 0, 0},
		// Fired on time at +6 s, ran until +11.2 s: +8 s and +10 s passed
		// meanwhile: one run at once, for +10 s.
		{"outlasts its period", 6 * time.Second, 6 * time.Second, 11200 * time.Millisecond, 10 * time.Second, 1, 1},
		// Late start and a long run: only the slots after the start
		// count (+12, +14, +16 s: one run, at +16 s, two skipped).
		{"late and long", 6 * time.Second, 11200 * time.Millisecond, 16500 * time.Millisecond, 16 * time.Second, 2, 1},
	} {
		started := time.Time{}
		if tc.started >= 0 {
			started = at(tc.started)
		}
		next, skipped := s.NextRunAfter(at(tc.slot), started, at(tc.now))
		if !next.Equal(at(tc.want)) || skipped != tc.wantSkipped {
			t.Errorf("%s: %v skipped %d, want %v skipped %d", tc.name, next.Sub(c), skipped, tc.want, tc.wantSkipped)
		}
		if old, _ := s.NextRun(at(tc.slot), at(tc.now)); (!old.After(at(tc.now))) != (tc.oldDue == 1) {
			t.Errorf("%s: NextRun(slot, now) = %v: test case does not exercise what it says", tc.name, old.Sub(c))
		}
	}
	// Cron: a task every minute, down from 10:00:30 to 10:05:20; the
	// stored 10:01 slot fires at 10:05:20 and is the catch-up.
	cr := mustCron(t, "* * * * *", "")
	base := time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)
	next, skipped := cr.NextRunAfter(base.Add(time.Minute), base.Add(5*time.Minute+20*time.Second), base.Add(5*time.Minute+21*time.Second))
	if !next.Equal(base.Add(6*time.Minute)) || skipped != 0 {
		t.Errorf("cron after downtime: %v skipped %d, want 10:06", next, skipped)
	}
}
