package api

import (
	"testing"
	"time"

	"github.com/axsched/ax/raftfsm"
)

// A run handed back without an attempt counted (its executor unavailable,
// or a 429/503 answer) waits until its due time, and its view says why on
// every node, from the stored task alone: the leader has not parked it
// (it is not due yet). A review found most tasks of an executor outage
// listed without a reason.
func TestTaskViewHeldBackRun(t *testing.T) {
	upd, due := int64(1_700_000_000_000), int64(1_700_000_002_500)
	for _, tc := range []struct {
		held   raftfsm.Outcome
		state  raftfsm.State
		reason string
	}{
		{raftfsm.OutcomeUnavailable, raftfsm.StateWaiting, ReasonExecutorUnavailable},
		{raftfsm.OutcomeBusy, raftfsm.StateWaiting, ReasonExecutorBusy},
		{0, raftfsm.StateWaiting, ""},
		{raftfsm.OutcomeUnavailable, raftfsm.StateCancelled, ""},
	} {
		v := taskView(&raftfsm.Task{ID: "a", State: tc.state, HeldBy: tc.held, UpdatedMs: upd, DueMs: due, Spec: raftfsm.Spec{Handler: "h"}})
		if v.WaitingReason != tc.reason {
			t.Fatalf("held by %v, %v: reason %q, want %q", tc.held, tc.state, v.WaitingReason, tc.reason)
		}
		if tc.reason == "" {
			continue
		}
		if v.WaitingSince == nil || !v.WaitingSince.Equal(time.UnixMilli(upd)) || v.WaitingUntil == nil || !v.WaitingUntil.Equal(time.UnixMilli(due)) {
			t.Fatalf("held by %v: since %v until %v, want %v and %v", tc.held, v.WaitingSince, v.WaitingUntil, time.UnixMilli(upd), time.UnixMilli(due))
		}
	}
}

// A run's result stored as JSON (ResultBinary false) that is not UTF-8,
// an executor's answer taken before EncodeResult checked it, is shown as
// result_base64: spliced in raw, the task view and its runs were not JSON.
func TestRunViewResultNotUTF8(t *testing.T) {
	for result, b64 := range map[string]string{
		"{\"a\":\"\xff\"}": "eyJhIjoi/yJ9",
		`{"a":"é"}`:        "",
	} {
		v := RunView(nil, &raftfsm.RunRecord{Run: 1, Result: []byte(result)})
		if v.ResultBase64 != b64 || (b64 == "") != (string(v.Result) == result) {
			t.Errorf("result %q: result %q, result_base64 %q; want base64 %q", result, v.Result, v.ResultBase64, b64)
		}
	}
}

// durationString gives d.String() for every duration, also when two
// durations take turns in one cache slot, and allocates nothing for a
// duration it has just formatted.
func TestDurationStringIsString(t *testing.T) {
	ds := []time.Duration{0, 1, -1, 999, time.Microsecond, 1500 * time.Millisecond, 30 * time.Second,
		24 * time.Hour, -90 * time.Minute, 1<<63 - 1, -1 << 63}
	for i := range 2000 {
		ds = append(ds, time.Duration(i)*time.Millisecond*37)
	}
	for round := range 3 {
		for _, d := range ds {
			if got, want := durationString(d), d.String(); got != want {
				t.Fatalf("round %d: durationString(%d) = %q, want %q", round, int64(d), got, want)
			}
		}
	}
	d := 30 * time.Second
	durationString(d)
	if n := testing.AllocsPerRun(100, func() { durationString(d) }); n != 0 {
		t.Fatalf("%.1f allocations for a duration just formatted, want 0", n)
	}
}
