package raftfsm

import "fmt"

// Outcome is how one attempt ended: the one outcome type of ax. The
// callback client classifies an executor's answer as an Outcome, the
// delivery maps it to the limiter's signal (engine.LimitSignal) and to the
// ax_attempts_total label (MetricLabel), and a Complete command carries it
// to the FSM, where the lifecycle (lifecycle.go) decides the task's next
// state from it.
//
// It lives here, not in engine or ipc, because the values 1–7 are stored
// in the Raft log (Complete.Outcome, Task.HeldBy) and raftfsm imports no
// other ax package; engine imports nothing of ax (its limiter takes its
// own signal type) and the callback client imports raftfsm.
type Outcome uint8

// Attempt outcomes. Values 1–7 are stored in the Raft log: never renumber
// them.
const (
	// OutcomeSuccess: the executor answered 2xx other than 202 (or
	// reported success later): the run is done.
	OutcomeSuccess Outcome = 1
	// OutcomeRetryable: 5xx, any other unexpected status, a connection
	// error after the request was written, or an invalid executor URL: a
	// failed attempt, retried with backoff, or DEAD when it was the last.
	OutcomeRetryable Outcome = 2
	// OutcomePermanent: the executor answered another 4xx: FAILED, no
	// retry.
	OutcomePermanent Outcome = 3
	// OutcomeTimeout: the attempt ran past its deadline (the request was
	// aborted) or its lease expired: a failed attempt, as retryable.
	OutcomeTimeout Outcome = 4
	// OutcomeBusy: the executor answered 429 or 503 (Retry-After
	// honoured): snoozed, not counted as a failed attempt.
	OutcomeBusy Outcome = 5
	// OutcomeLost: the attempt's node died or restarted (its lease
	// expired, or it reported the attempt lost): a failed attempt, retried,
	// but not the handler's fault (the circuit breaker ignores it).
	OutcomeLost Outcome = 6
	// OutcomeUnavailable: the executor could not be given the request at
	// all: no byte of it was written to a connection (connection refused,
	// no socket file, EAGAIN, a connect that timed out, a reset before
	// sending), or, over TCP, none was acknowledged by the executor's
	// kernel (its accept queue was full). The callback certainly did not
	// run. Like OutcomeBusy it is not a failed attempt (the attempt number
	// is given back) and the task waits until RetryDueMs, which the leader
	// fills from the node's probe backoff (RetryAfterMs); unlike it, it is
	// not a snooze (Snoozes stays), and the circuit breaker does not see
	// it. The callback client's Outcome.Overloaded tells overload (the
	// executor is there but did not take the connection) from absence.
	OutcomeUnavailable Outcome = 7

	// OutcomeAccepted and OutcomeCancelled are answers of the callback
	// client that end no attempt, so they are never written in a Complete
	// (the FSM refuses them as any unknown value: ErrBadEntry). Their
	// values have the high bit set, away from the stored ones.

	// OutcomeAccepted: the executor answered 202; it reports the result
	// itself through POST /v1/tasks/{id}/result.
	OutcomeAccepted Outcome = 0x80
	// OutcomeCancelled: the request was aborted because its context was
	// cancelled (the task was cancelled or replaced, the node is
	// stopping). Nothing is known about the attempt.
	OutcomeCancelled Outcome = 0x81
)

var outcomeNames = [...]string{"", "success", "retryable", "permanent", "timeout", "busy", "lost", "unavailable"}

// String returns the lower-case outcome name ("success"), for logs;
// "Outcome(9)" for a value that names none.
func (o Outcome) String() string {
	switch {
	case o == OutcomeAccepted:
		return "accepted"
	case o == OutcomeCancelled:
		return "cancelled"
	case int(o) < len(outcomeNames) && o != 0:
		return outcomeNames[o]
	}
	return fmt.Sprintf("Outcome(%d)", uint8(o))
}

// MetricLabel returns the outcome label of ax_attempts_total: the name,
// except "snoozed" for OutcomeBusy and "failed" for OutcomeRetryable,
// OutcomeLost and any unknown value.
func (o Outcome) MetricLabel() string {
	switch o {
	case OutcomeSuccess, OutcomeAccepted, OutcomePermanent, OutcomeTimeout, OutcomeCancelled, OutcomeUnavailable:
		return o.String()
	case OutcomeBusy:
		return "snoozed"
	}
	return "failed"
}

// Failed reports whether o is a failed attempt, which counts against the
// task's MaxAttempts and is retried after its backoff: retryable, timeout,
// lost.
func (o Outcome) Failed() bool {
	return o == OutcomeRetryable || o == OutcomeTimeout || o == OutcomeLost
}
