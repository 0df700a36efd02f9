package engine

import (
	"errors"
	"fmt"
	"strings"
	"time"
	_ "time/tzdata" // IANA zones even on hosts (distroless images) without /usr/share/zoneinfo

	"github.com/robfig/cron/v3"
)

// ErrInvalidSchedule is returned (wrapped) by [ParseCron], [Every] and
// [Limits.Validate]; the message names the problem.
var ErrInvalidSchedule = errors.New("engine: invalid schedule")

// EveryMin is the smallest interval [Every] accepts. A recurring task costs
// one Raft round trip per run, so sub-second periods would turn a
// misconfigured task into a flood of log entries; work that needs them
// belongs inside the application.
const EveryMin = time.Second

// misfireWalk is how many missed cron slots [Schedule.NextRun] counts one by
// one; beyond it, it finds the last missed slot by bisection and estimates
// the count.
const misfireWalk = 1000

// cronParser accepts the standard five fields, an optional leading seconds
// field, and descriptors (@yearly, @monthly, @weekly, @daily, @midnight,
// @hourly; @every is refused before parsing).
var cronParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Schedule is a parsed recurring schedule: a cron expression in a time
// zone ([ParseCron]) or a fixed interval ([Every]). It is immutable and safe
// for concurrent use; parse it once per task and keep it.
//
// A schedule is a set of instants, its slots. [Schedule.Next] returns the
// first slot after a time; [Schedule.NextRun] applies the misfire rule.
// All times returned are UTC with no monotonic reading.
type Schedule struct {
	// cron
	expr string
	tz   string
	loc  *time.Location
	spec *cron.SpecSchedule // Location UTC: evaluated on local wall-clock readings
	// every
	interval time.Duration
}

// ParseCron parses a cron expression to be evaluated in the IANA time zone
// timezone ("" means UTC), with github.com/robfig/cron/v3: five fields
// (minute hour day-of-month month day-of-week), or six with a leading
// seconds field, or a descriptor such as @daily or @hourly. "@every" is not
// accepted (use [Every]), nor is a TZ= or CRON_TZ= prefix (pass the zone
// as timezone), nor an expression that never fires (30 February). The
// error wraps [ErrInvalidSchedule] and says what is wrong.
//
// DST: the expression is matched against the local wall clock of the zone.
// A local time that a spring-forward skips fires once, at the first
// instant after the gap (02:30 on the night Berlin jumps from 02:00 to
// 03:00 fires at 03:00 CEST; several skipped slots merge into that one
// run, and with a 03:00 slot too). A local time that a fall-back repeats
// fires once, at its first occurrence (02:30 CEST, not again at 02:30 CET;
// an hourly "0 * * * *" runs at 02:00 CEST and then 03:00 CET). robfig/cron
// on its own does neither (it skips the gap and fires twice in the
// overlap), so Schedule evaluates the fields on the wall clock and maps
// wall-clock times to instants itself.
func ParseCron(expr, timezone string) (*Schedule, error) {
	expr = strings.TrimSpace(expr)
	switch {
	case expr == "":
		return nil, fmt.Errorf("%w: empty cron expression", ErrInvalidSchedule)
	case strings.HasPrefix(expr, "@every"):
		return nil, fmt.Errorf("%w: cron %q: @every is not accepted here; use an every schedule", ErrInvalidSchedule, expr)
	case strings.HasPrefix(expr, "TZ=") || strings.HasPrefix(expr, "CRON_TZ="):
		return nil, fmt.Errorf("%w: cron %q: give the time zone as timezone, not in the expression", ErrInvalidSchedule, expr)
	}
	loc, err := loadZone(timezone)
	if err != nil {
		return nil, err
	}
	parsed, err := cronParser.Parse(expr)
	if err != nil {
		return nil, fmt.Errorf("%w: cron %q: %v", ErrInvalidSchedule, expr, err)
	}
	spec, ok := parsed.(*cron.SpecSchedule)
	if !ok { // only @every yields another type, and it is refused above
		return nil, fmt.Errorf("%w: cron %q: unsupported expression", ErrInvalidSchedule, expr)
	}
	utc := *spec
	utc.Location = time.UTC
	// robfig looks five years ahead; from 1 January of a leap year that
	// covers every date an expression can name, 29 February included.
	if utc.Next(time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)).IsZero() {
		return nil, fmt.Errorf("%w: cron %q never fires (no such date)", ErrInvalidSchedule, expr)
	}
	if timezone == "" {
		timezone = "UTC"
	}
	return &Schedule{expr: expr, tz: timezone, loc: loc, spec: &utc}, nil
}

// loadZone resolves an IANA zone name; "" is UTC. "Local" is refused: it
// depends on the host, and the nodes of a cluster must agree.
func loadZone(name string) (*time.Location, error) {
	switch name {
	case "":
		return time.UTC, nil
	case "Local":
		return nil, fmt.Errorf("%w: time zone %q depends on the host; name an IANA zone such as \"Europe/Berlin\"", ErrInvalidSchedule, name)
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("%w: unknown time zone %q (want an IANA name such as \"America/New_York\")", ErrInvalidSchedule, name)
	}
	return loc, nil
}

// Every returns a fixed-interval schedule: its slots are a start time plus
// whole multiples of interval, exactly, with no drift. The start is
// whatever time the caller hands to Next or NextRun first (the task's
// creation), since Next(t) is t + interval; keep passing slots (never the
// time a run ended) and every slot stays on the grid start + k×interval.
// interval must be at least [EveryMin] (1 s); the error wraps
// [ErrInvalidSchedule].
func Every(interval time.Duration) (*Schedule, error) {
	if interval < EveryMin {
		return nil, fmt.Errorf("%w: every %v is below the minimum of %v", ErrInvalidSchedule, interval, EveryMin)
	}
	return &Schedule{interval: interval}, nil
}

// String describes the schedule, e.g. `cron "30 2 * * *" in Europe/Berlin`
// or `every 5m0s`.
func (s *Schedule) String() string {
	if s.spec == nil {
		return "every " + s.interval.String()
	}
	return fmt.Sprintf("cron %q in %s", s.expr, s.tz)
}

// Next returns the first slot strictly after after, in UTC. For a cron
// schedule it is the zero Time if there is none within five years (only
// possible for a 29 February expression across 2100, which is not a leap
// year). For an every schedule it is after + interval.
func (s *Schedule) Next(after time.Time) time.Time {
	after = after.Round(0)
	if s.spec == nil {
		return after.Add(s.interval).UTC()
	}
	w := wallClock(after, s.loc)
	// Each turn either returns or moves w forward past a repeated local
	// time (at most one per transition), so a few turns suffice; the bound
	// only guards against a zone database with absurd transitions.
	for range 16 {
		l := s.spec.Next(w)
		if l.IsZero() {
			return time.Time{}
		}
		at, repeatEnd := s.instant(l)
		if at.After(after) {
			return at.UTC()
		}
		// l is a repeated local time whose first occurrence is not after
		// after (which lies in the repeat): it has had its run. So have
		// all the repeated times up to the end of the repeat.
		w = l
		if repeatEnd.After(w) {
			w = repeatEnd.Add(-time.Nanosecond)
		}
	}
	return time.Time{}
}

// instant returns the slot of local wall-clock time l (a UTC-labelled
// reading of the zone's clock): l itself if it occurs once; its first
// occurrence if a fall-back repeats it, with repeatEnd, the wall-clock time
// at which the repeat ends; the first instant after the gap if a
// spring-forward skips it.
func (s *Schedule) instant(l time.Time) (at, repeatEnd time.Time) {
	t := time.Date(l.Year(), l.Month(), l.Day(), l.Hour(), l.Minute(), l.Second(), l.Nanosecond(), s.loc)
	switch w := wallClock(t, s.loc); {
	case w.After(l):
		// l was skipped and Go chose an instant after the gap: the gap
		// ends where t's zone starts.
		start, _ := t.ZoneBounds()
		return start, time.Time{}
	case w.Before(l):
		// l was skipped and Go chose an instant before the gap.
		_, end := t.ZoneBounds()
		return end, time.Time{}
	}
	// l exists. Is t its second occurrence, after a fall-back?
	_, offT := t.Zone()
	if start, _ := t.ZoneBounds(); !start.IsZero() {
		_, offBefore := start.Add(-time.Nanosecond).Zone()
		if d := time.Duration(offBefore-offT) * time.Second; d > 0 && t.Sub(start) < d {
			return t.Add(-d), wallClock(start, s.loc).Add(d)
		}
	}
	// Is t the first occurrence of a repeat?
	if _, end := t.ZoneBounds(); !end.IsZero() {
		_, offAfter := end.Zone()
		if d := time.Duration(offT-offAfter) * time.Second; d > 0 && end.Sub(t) <= d {
			return t, wallClock(end, s.loc).Add(d)
		}
	}
	return t, time.Time{}
}

// wallClock returns the wall-clock reading of t in loc as a UTC time, so
// that robfig's field matching sees local fields and no DST.
func wallClock(t time.Time, loc *time.Location) time.Time {
	t = t.In(loc)
	return time.Date(t.Year(), t.Month(), t.Day(), t.Hour(), t.Minute(), t.Second(), t.Nanosecond(), time.UTC)
}

// NextRun applies the misfire rule and returns the slot of the next run.
//
// prevSlot is the slot of the run that just ended, or the task's creation
// time before its first run; now is the leader's clock. If the first slot
// after prevSlot is still ahead of now, that is the next run, and skipped
// is 0. Otherwise slots went by without a run (the leader was down, or a
// run lasted longer than the period): the task fires once for all of
// them, at the last missed slot, which is <= now and so due at once; the
// run after it is back on the schedule, so there is no storm of catch-up
// runs. skipped is the number of missed slots that get no run of their
// own (all but the one returned).
//
// For an every schedule the last missed slot is computed arithmetically:
// prevSlot + k×interval with k = ⌊(now − prevSlot) / interval⌋, and
// skipped = k − 1. For cron, up to 1000 missed slots are walked one by one
// and skipped is exact; beyond that the last missed slot is found by
// bisection over time (about 40 Next calls for a year) and skipped is an
// estimate from the mean period of the slots walked, good enough for a
// log line or a metric.
//
// slot is the zero Time if the schedule has no further slot (see Next).
func (s *Schedule) NextRun(prevSlot, now time.Time) (slot time.Time, skipped int) {
	prevSlot, now = prevSlot.Round(0), now.Round(0)
	next := s.Next(prevSlot)
	if next.IsZero() || next.After(now) {
		return next, 0
	}
	if s.spec == nil {
		k := int64(now.Sub(prevSlot) / s.interval)
		return prevSlot.Add(time.Duration(k) * s.interval).UTC(), int(k - 1)
	}
	first, last := next, next
	for walked := 1; ; walked++ {
		n := s.Next(last)
		if n.IsZero() || n.After(now) {
			return last, walked - 1
		}
		last = n
		if walked == misfireWalk {
			break
		}
	}
	// Far behind: bisect for the last slot <= now. lo is always a slot
	// <= now, and there is no slot in (hi, now].
	lo, hi := last, now
	for hi.Sub(lo) > time.Second {
		mid := lo.Add(hi.Sub(lo) / 2)
		if n := s.Next(mid); !n.IsZero() && !n.After(now) {
			lo = n
		} else {
			hi = mid
		}
	}
	for {
		n := s.Next(lo)
		if n.IsZero() || n.After(now) {
			break
		}
		lo = n
	}
	period := last.Sub(first) / time.Duration(misfireWalk-1)
	estimate := misfireWalk
	if period > 0 {
		estimate += int(lo.Sub(last) / period)
	}
	return lo, estimate - 1
}

// NextRunAfter is [Schedule.NextRun] for a run that ends now: the run of
// slot that started at started (its latest attempt; late when the leader
// was down, or when its attempts were retried). That run was the one run
// of every slot up to started, so the misfire rule counts only the slots
// that went by since: the base is the last slot at or before started
// (slot itself if started is not after it, or is the zero Time), and the
// result is NextRun(base, now). So after downtime the task fires once,
// then keeps its schedule, instead of firing its stored slot and then at
// once the last missed one; and a run that outlasts its period is still
// followed at once by one run for the slots that passed while it ran.
// Bases are slots, so an every schedule stays on its grid.
func (s *Schedule) NextRunAfter(slot, started, now time.Time) (next time.Time, skipped int) {
	base := slot
	if started.After(slot) {
		if last, _ := s.NextRun(slot, started); !last.IsZero() && !last.After(started) {
			base = last
		}
	}
	return s.NextRun(base, now)
}

// Limits ends a recurring task: after Repeats runs, or when its next slot
// would be after Until. The zero value sets no limit.
type Limits struct {
	// Repeats is the number of runs after which the task stops; 0 means
	// no limit. Must not be negative.
	Repeats int
	// Until is the last instant a run may be due at; a slot after it is
	// not run and the task stops. The zero Time means no limit.
	Until time.Time
}

// Validate reports whether l is usable; the error wraps
// [ErrInvalidSchedule].
func (l Limits) Validate() error {
	if l.Repeats < 0 {
		return fmt.Errorf("%w: repeats %d must be 0 (no limit) or positive", ErrInvalidSchedule, l.Repeats)
	}
	return nil
}

// Done reports whether a recurring task that has had runs runs, and whose
// next slot would be nextSlot, is finished: runs has reached Repeats, or
// nextSlot is after Until, or nextSlot is the zero Time (the schedule has
// no further slot). A slot exactly at Until still runs.
func (l Limits) Done(runs int, nextSlot time.Time) bool {
	switch {
	case l.Repeats > 0 && runs >= l.Repeats:
		return true
	case nextSlot.IsZero():
		return true
	case !l.Until.IsZero() && nextSlot.After(l.Until):
		return true
	}
	return false
}
