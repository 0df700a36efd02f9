package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/axsched/ax/clients/go/axapi"
)

// ax get shows why a due task waits, since when and until when; ax list
// adds the reason to the next-run column.
func TestWaitingReasonShown(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	since, until, next := now.Add(-time.Minute), now.Add(25*time.Second), now.Add(-2*time.Minute)
	task := axapi.Task{ID: "a", Handler: "h", State: "WAITING", NextRunAt: &next,
		WaitingReason: "circuit_open", WaitingSince: &since, WaitingUntil: &until}
	var b bytes.Buffer
	if err := printTask(&b, &task, now); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "Waiting:") || !strings.Contains(b.String(), "circuit_open since") || !strings.Contains(b.String(), "until") || !strings.Contains(b.String(), "(in 25s)") {
		t.Fatalf("ax get:\n%s", b.String())
	}
	b.Reset()
	if err := printTaskTable(&b, []axapi.Task{task}, now); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "waiting: circuit_open") {
		t.Fatalf("ax list:\n%s", b.String())
	}
	task.WaitingReason = ""
	b.Reset()
	_ = printTask(&b, &task, now)
	if strings.Contains(b.String(), "Waiting") {
		t.Fatalf("ax get without a reason:\n%s", b.String())
	}
}
