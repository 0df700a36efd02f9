package bench

import (
	"testing"
	"time"
)

// arrivals counts only submitted tasks, measures lateness from each task's
// due time and finds the earliest and latest first callbacks.
func TestRecorderArrivals(t *testing.T) {
	r := newRecorder("run", 4)
	base := time.Unix(1_700_000_000, 0)
	r.record("run-0", 1, base.Add(30*time.Millisecond))
	r.record("run-0", 2, base.Add(90*time.Millisecond)) // a duplicate: the first callback counts
	r.record("run-2", 1, base.Add(-5*time.Millisecond))
	r.record("run-3", 1, base.Add(70*time.Millisecond)) // not submitted: ignored
	ok := []bool{true, true, true, false}
	a := r.arrivals(ok, func(int) int64 { return base.UnixNano() })
	if a.received != 2 || a.missing != 1 {
		t.Fatalf("received %d missing %d, want 2 and 1", a.received, a.missing)
	}
	if len(a.late) != 2 || a.late[0] != 30*time.Millisecond || a.late[1] != -5*time.Millisecond {
		t.Fatalf("late %v", a.late)
	}
	if a.first != base.Add(-5*time.Millisecond).UnixNano() || a.last != base.Add(30*time.Millisecond).UnixNano() {
		t.Fatalf("first %d last %d", a.first, a.last)
	}
}
