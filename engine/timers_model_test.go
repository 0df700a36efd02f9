package engine

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"
)

// TestTimers_ModelBased is the acceptance test of the timer set: thousands
// of random insert / cancel / re-arm / advance-clock steps against a
// reference model (a map of key to due time), on a FakeClock, checking
// that
//
//   - every live timer fires exactly once, with the due time it was last
//     armed for;
//   - never early: Now() >= due when it is delivered;
//   - never late: it is delivered by the clock advance that reaches its
//     due time, so lateness on the fake clock is less than that step; in
//     the "tick" configurations every step is at most one tick, so no
//     timer fires more than one tick after its deadline;
//   - cancelled and replaced timers never fire.
//
// After an advance the test does not poke Run (no settle): it waits for
// the timers the model says are due, so they must come from Run's own
// clock timer, i.e. the tickless sleep-until-deadline path. Only then does
// it settle, to check that nothing else fires.
func TestTimers_ModelBased(t *testing.T) {
	type config struct {
		opts     TimersOptions
		steps    int
		tickStep bool // advance by at most one tick per step
	}
	configs := []config{
		{TimersOptions{}, 4000, false},
		{TimersOptions{Tick: time.Millisecond, Slots: 64}, 4000, false}, // a 64 ms window: most timers migrate
		{TimersOptions{Tick: 10 * time.Millisecond, Slots: 256}, 4000, true},
		{TimersOptions{Tick: 7 * time.Millisecond, Slots: 100}, 4000, true},
		{TimersOptions{MaxSleep: 50 * time.Millisecond}, 3000, false},
	}
	if testing.Short() {
		for i := range configs {
			configs[i].steps /= 4
		}
	}
	for ci, cfg := range configs {
		t.Run(fmt.Sprintf("%d/tick=%v,slots=%d,tickStep=%v", ci, cfg.opts.Tick, cfg.opts.Slots, cfg.tickStep), func(t *testing.T) {
			modelRun(t, uint64(ci), cfg.opts, cfg.steps, cfg.tickStep)
		})
	}
}

func modelRun(t *testing.T, seed uint64, opts TimersOptions, steps int, tickStep bool) {
	rng := rand.New(rand.NewPCG(seed, 42))
	h := newHarness(t, opts)
	tick := opts.WithDefaults().Tick
	h.settle()

	model := map[string]time.Time{}   // key -> due of its live timer
	armedAt := map[string]time.Time{} // key -> when its live timer was armed
	firedAt := map[string]time.Time{} // key+due -> when it fired
	dead := map[string]bool{}         // key+due of cancelled or replaced timers
	// maybe holds key+due of timers replaced or cancelled when they were
	// already due: Run may have taken them into a batch already (Arm and
	// Cancel race with a due timer, as documented), so they may fire once.
	maybe := map[string]bool{}
	id := func(k string, due time.Time) string { return k + "@" + strconv.FormatInt(due.UnixNano(), 10) }
	nkeys := 300
	randDue := func(now time.Time) time.Time {
		var d time.Duration
		switch rng.IntN(6) {
		case 0: // past or now
			d = -time.Duration(rng.Int64N(int64(time.Second)))
		case 1: // within a few ticks
			d = time.Duration(rng.Int64N(int64(5 * tick)))
		case 2:
			d = time.Duration(rng.Int64N(int64(time.Second)))
		case 3:
			d = time.Duration(rng.Int64N(int64(time.Minute)))
		case 4: // beyond the default window: the far heap
			d = time.Duration(rng.Int64N(int64(2 * time.Hour)))
		default: // on a tick boundary, shared by several keys
			d = time.Duration(rng.IntN(20)) * tick
			return now.Truncate(tick).Add(d)
		}
		return now.Add(d)
	}
	// check consumes what fired since the last check; prevNow is the clock
	// before the step, now after it.
	check := func(step int, prevNow, now time.Time) {
		t.Helper()
		for _, f := range h.take() {
			for _, e := range f.batch {
				k := id(e.Key, e.Due)
				if maybe[k] && firedAt[k].IsZero() {
					delete(maybe, k)
					firedAt[k] = f.at
					continue
				}
				switch due, ok := model[e.Key]; {
				case dead[k]:
					t.Fatalf("step %d: %s fired after it was cancelled or replaced", step, k)
				case !firedAt[k].IsZero():
					t.Fatalf("step %d: %s fired twice", step, k)
				case !ok || !due.Equal(e.Due):
					t.Fatalf("step %d: %s fired but is not armed (model: %v %v)", step, k, due, ok)
				case e.Due.After(f.at):
					t.Fatalf("step %d: %s fired early at %v", step, k, f.at)
				case !e.Due.After(prevNow) && !f.at.Equal(prevNow):
					// It was due before this step, so it should have
					// fired in an earlier one.
					t.Fatalf("step %d: %s (due %v) fired late at %v", step, k, e.Due, f.at)
				}
				firedAt[k] = f.at
				delete(model, e.Key)
				// Lateness counts from the due time, or from the arming
				// of a timer armed already due.
				from := e.Due
				if a := armedAt[e.Key]; a.After(from) {
					from = a
				}
				if tickStep && f.at.Sub(from) > tick {
					t.Fatalf("step %d: %s fired %v late, more than a tick", step, k, f.at.Sub(from))
				}
			}
		}
		for k, due := range model {
			if !due.After(now) {
				t.Fatalf("step %d: %s due %v not fired at %v", step, k, due, now)
			}
		}
		if n := h.tm.Len(); n != len(model) {
			t.Fatalf("step %d: Len = %d, model has %d", step, n, len(model))
		}
	}
	// waitDue waits until Run has delivered everything the model says is
	// due, without waking Run itself.
	waitDue := func(step int, now time.Time) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			h.mu.Lock()
			got := map[string]bool{}
			for _, f := range h.fires {
				for _, e := range f.batch {
					got[e.Key] = true
				}
			}
			h.mu.Unlock()
			missing := 0
			for k, due := range model {
				if !due.After(now) && !got[k] {
					missing++
				}
			}
			if missing == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("step %d: %d due timers not delivered by Run's own timer", step, missing)
			}
			time.Sleep(50 * time.Microsecond)
		}
	}

	for step := range steps {
		now := h.clock.Now()
		k := "k" + strconv.Itoa(rng.IntN(nkeys))
		switch r := rng.IntN(100); {
		case r < 35: // insert (or re-arm if k is armed)
			due := randDue(now)
			if old, ok := model[k]; ok && !old.Equal(due) {
				if old.After(now) {
					dead[id(k, old)] = true
				} else {
					maybe[id(k, old)] = true
				}
			}
			model[k] = due
			armedAt[k] = now
			// A key armed again with a due it had before is a new timer.
			delete(dead, id(k, due))
			delete(maybe, id(k, due))
			delete(firedAt, id(k, due))
			h.tm.Arm(k, due)
			h.settle()
			check(step, now, now)
		case r < 45: // re-arm a live key
			for mk := range model {
				k = mk
				break
			}
			due := randDue(now)
			if old, ok := model[k]; ok && !old.Equal(due) {
				if old.After(now) {
					dead[id(k, old)] = true
				} else {
					maybe[id(k, old)] = true
				}
			}
			model[k] = due
			armedAt[k] = now
			// A key armed again with a due it had before is a new timer.
			delete(dead, id(k, due))
			delete(maybe, id(k, due))
			delete(firedAt, id(k, due))
			h.tm.Arm(k, due)
			h.settle()
			check(step, now, now)
		case r < 60: // cancel
			old, ok := model[k]
			got := h.tm.Cancel(k)
			alreadyDue := ok && !old.After(now)
			if got != ok && !(alreadyDue && !got) {
				t.Fatalf("step %d: Cancel(%s) = %v, model %v", step, k, got, ok)
			}
			if ok {
				if got && !alreadyDue {
					dead[id(k, old)] = true
				} else {
					maybe[id(k, old)] = true // taken by Run already, or racing with it
				}
				delete(model, k)
			}
			h.settle()
			check(step, now, now)
		default: // advance the clock
			var d time.Duration
			switch {
			case tickStep:
				d = time.Duration(1 + rng.Int64N(int64(tick)))
			case rng.IntN(10) == 0:
				d = time.Duration(rng.Int64N(int64(10 * time.Minute)))
			default:
				d = time.Duration(rng.Int64N(int64(3 * tick)))
			}
			h.clock.Advance(d)
			after := h.clock.Now()
			waitDue(step, after)
			h.settle()
			check(step, now, after)
		}
	}
	// Let everything left come due: each fires exactly once.
	left := len(model)
	for len(model) > 0 {
		now := h.clock.Now()
		var next time.Time
		for _, due := range model {
			if next.IsZero() || due.Before(next) {
				next = due
			}
		}
		h.clock.Advance(next.Sub(now))
		waitDue(-1, h.clock.Now())
		h.settle()
		check(-1, now, h.clock.Now())
	}
	for k := range dead {
		if !firedAt[k].IsZero() {
			t.Fatalf("%s was cancelled but fired", k)
		}
	}
	t.Logf("%d fired, %d cancelled or replaced, %d left at the end", len(firedAt), len(dead), left)
}
