package ipc

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"
)

func TestMapError(t *testing.T) {
	tests := []struct {
		name       string
		err        error
		status     int
		code, msg  string
		retryAfter time.Duration
	}{
		{"nil", nil, 200, "", "", 0},
		{"invalid", ErrInvalid, 400, "bad_request", "bad request", 0},
		{"errorf invalid", Errorf(ErrInvalid, "handler: required"), 400, "bad_request", "handler: required", 0},
		{"invalid json", Errorf(ErrInvalidJSON, "invalid json at byte 3"), 400, "invalid_json", "invalid json at byte 3", 0},
		{"wrapped not found", fmt.Errorf("task %q: %w", "a|b", ErrNotFound), 404, "not_found", `task "a|b": not found`, 0},
		{"twice wrapped", fmt.Errorf("cancel: %w", fmt.Errorf("task %q: %w", "x", ErrNotFound)), 404, "not_found", `cancel: task "x": not found`, 0},
		{"method", ErrMethodNotAllowed, 405, "method_not_allowed", "method not allowed", 0},
		{"conflict", Errorf(ErrConflict, "task %q exists with a different spec", "x"), 409, "conflict", `task "x" exists with a different spec`, 0},
		{"too large", ErrTooLarge, 413, "payload_too_large", "payload too large", 0},
		{"queue full default", ErrQueueFull, 429, "queue_full", "queue full", time.Second},
		{"queue full hint", Errorf(ErrQueueFull, "depth %d", 9).WithRetryAfter(5 * time.Second), 429, "queue_full", "depth 9", 5 * time.Second},
		{"no leader", fmt.Errorf("submit: %w", ErrNoLeader), 503, "no_leader", "submit: no leader", time.Second},
		{"not ready", ErrNotReady, 503, "not_ready", "not ready", 0},
		{"joined", errors.Join(errors.New("forward"), ErrNoLeader), 503, "no_leader", "forward\nno leader", time.Second},
		{"deadline", fmt.Errorf("apply: %w", context.DeadlineExceeded), 503, "not_ready", "request timed out before the cluster answered; a submit may still take effect, retry with the same id", time.Second},
		{"cancelled", context.Canceled, 503, "not_ready", "request cancelled", time.Second},
		{"unknown", errors.New("badger: value log corrupt"), 500, "internal", "internal error", 0},
		{"internal sentinel", ErrInternal, 500, "internal", "internal error", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status, code, msg, ra := MapError(tc.err)
			if status != tc.status || code != tc.code || msg != tc.msg || ra != tc.retryAfter {
				t.Errorf("MapError = (%d, %q, %q, %s), want (%d, %q, %q, %s)",
					status, code, msg, ra, tc.status, tc.code, tc.msg, tc.retryAfter)
			}
		})
	}
}

func TestError_Is(t *testing.T) {
	err := Errorf(ErrNotFound, "task %q", "x")
	if !errors.Is(err, ErrNotFound) {
		t.Error("Errorf(ErrNotFound) is not ErrNotFound")
	}
	if errors.Is(err, ErrConflict) || errors.Is(err, ErrInvalid) {
		t.Error("Errorf(ErrNotFound) matches another sentinel")
	}
	if !errors.Is(fmt.Errorf("get: %w", err), ErrNotFound) {
		t.Error("wrapped Errorf(ErrNotFound) is not ErrNotFound")
	}
	if errors.Is(ErrInvalidJSON, ErrInvalid) {
		t.Error("invalid_json must not match bad_request")
	}
	// %w inside Errorf keeps the cause reachable.
	cause := errors.New("disk full")
	wrapped := Errorf(ErrNotReady, "store: %w", cause)
	if !errors.Is(wrapped, cause) || !errors.Is(wrapped, ErrNotReady) {
		t.Error("Errorf with %w lost its cause or its kind")
	}
	var e *Error
	if !errors.As(fmt.Errorf("x: %w", wrapped), &e) || e.Code != "not_ready" || e.Message != "store: disk full" {
		t.Errorf("errors.As = %+v", e)
	}
	// WithRetryAfter does not change the sentinel.
	_ = ErrQueueFull.WithRetryAfter(time.Minute)
	if ErrQueueFull.RetryAfter != time.Second {
		t.Errorf("WithRetryAfter changed the sentinel: %s", ErrQueueFull.RetryAfter)
	}
}

// TestErrorCodes pins the list the client libraries mirror.
func TestErrorCodes(t *testing.T) {
	want := []string{"bad_request", "invalid_json", "invalid_traceparent", "invalid_tracestate", "invalid_shards", "not_found", "handler_not_found", "method_not_allowed", "conflict",
		"task_finished", "payload_too_large", "queue_full", "no_leader", "not_ready", "storage_unavailable", "internal"}
	if got := ErrorCodes(); !reflect.DeepEqual(got, want) {
		t.Errorf("ErrorCodes = %q, want %q", got, want)
	}
	seen := map[string]bool{}
	for _, e := range errorTable {
		if seen[e.Code] {
			t.Errorf("code %q twice in the table", e.Code)
		}
		seen[e.Code] = true
		if e.Status < 400 || e.Status > 599 {
			t.Errorf("code %q has status %d", e.Code, e.Status)
		}
	}
}

func TestRetryAfterSeconds(t *testing.T) {
	for d, want := range map[time.Duration]int64{time.Millisecond: 1, time.Second: 1, 1001 * time.Millisecond: 2, time.Minute: 60} {
		if got := retryAfterSeconds(d); got != want {
			t.Errorf("retryAfterSeconds(%s) = %d, want %d", d, got, want)
		}
	}
}
