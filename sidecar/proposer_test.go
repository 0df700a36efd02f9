package sidecar

import (
	"testing"
	"time"

	"github.com/axsched/ax/raftfsm"
)

// prepare must be idempotent: propose resends the very same commands to
// the next leader after a leadership change. A busy outcome once turned its
// Retry-After into a due time in place, and the second prepare read that
// due time (~1.8e12 ms) as a Retry-After: the task snoozed for 57 years.
func TestPrepareIsIdempotent(t *testing.T) {
	p := &proposer{n: &Node{cfg: Config{LeaseGrace: 5 * time.Second}}, task: func(string) *raftfsm.Task { return nil }}
	now := time.UnixMilli(1_700_000_000_000)
	c := raftfsm.Command{Type: raftfsm.CmdComplete, Complete: &raftfsm.Complete{ID: "a", Attempt: 1, Outcome: raftfsm.OutcomeBusy, RetryAfterMs: 2000}}
	p.prepare(&c, now)
	first := c.Complete.RetryDueMs
	if want := now.UnixMilli() + 2000; first != want {
		t.Fatalf("busy due %d, want %d", first, want)
	}
	later := now.Add(300 * time.Millisecond)
	p.prepare(&c, later)
	if want := later.UnixMilli() + 2000; c.Complete.RetryDueMs != want {
		t.Fatalf("second prepare: due %d, want %d", c.Complete.RetryDueMs, want)
	}

	s := raftfsm.Command{Type: raftfsm.CmdSubmit, Submit: &raftfsm.Submit{ID: "b", Spec: raftfsm.Spec{DelayNs: int64(time.Second)}}}
	p.prepare(&s, now)
	p.prepare(&s, now)
	if want := now.UnixMilli() + 1000; s.Submit.DueMs != want {
		t.Fatalf("submit due %d, want %d", s.Submit.DueMs, want)
	}
	l := raftfsm.Command{Type: raftfsm.CmdLease, Lease: &raftfsm.Lease{ID: "c", Attempt: 1}}
	p.prepare(&l, now)
	if l.Lease.GraceMs != 5000 || l.Lease.AtMs != now.UnixMilli() {
		t.Fatalf("lease %+v", l.Lease)
	}
}

func TestCeilMsNeverEarly(t *testing.T) {
	base := time.UnixMilli(1_700_000_000_000)
	for _, d := range []time.Duration{0, 1, time.Microsecond, 999 * time.Microsecond, time.Millisecond, time.Millisecond + 1} {
		tt := base.Add(d)
		ms := ceilMs(tt)
		if time.UnixMilli(ms).Before(tt) {
			t.Errorf("ceilMs(%v) = %d is before it", d, ms)
		}
		if time.UnixMilli(ms).Sub(tt) >= time.Millisecond {
			t.Errorf("ceilMs(%v) = %d rounds up by a whole millisecond or more", d, ms)
		}
	}
}
