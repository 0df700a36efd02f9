package scheduler

// Waiting reasons: why a due run has not started (the API's
// waiting_reason, ax_parked_runs{reason}).
const (
	// ReasonNoExecutor: no live node has an executor registered for the
	// handler.
	ReasonNoExecutor = "no_executor"
	// ReasonExecutorBusy: every executor for the handler is at its
	// capacity (its limit in flight plus a queue of max_concurrency).
	ReasonExecutorBusy = "executor_busy"
	// ReasonExecutorUnavailable: the handler's executors exist but could
	// not be reached lately; they are probed again at waiting_until.
	ReasonExecutorUnavailable = "executor_unavailable"
	// ReasonCircuitOpen: the handler's circuit breaker is open until
	// waiting_until (then one probe goes): the leader's, or, where more
	// than one live node runs the handler, the own circuit of every one
	// of them (their load reports' Circuits; waiting_until is the
	// earliest end).
	ReasonCircuitOpen = "circuit_open"
	// ReasonHandlerLimit: the handler's cluster-wide cap (--handler-limit)
	// is reached.
	ReasonHandlerLimit = "handler_limit"
	// ReasonPreviousRunRunning: the previous run of a recurring task is
	// still running. A task is one record with one state, so its next run
	// is WAITING only once the previous one ended: the reason is defined
	// for the API and never given today.
	ReasonPreviousRunRunning = "previous_run_running"
	// ReasonPaused: the task or its handler is paused.
	ReasonPaused = "paused"
)

// WaitingView is why a due run waits, as the API shows it (and the peer
// API carries it): the reason, since when (Unix ms) and, for circuit_open
// and executor_unavailable, until when it may end.
type WaitingView struct {
	Reason  string `json:"reason"`
	SinceMs int64  `json:"since_ms"`
	UntilMs int64  `json:"until_ms,omitempty"`
}

// nonCompeting reports whether runs waiting for reason wait for something
// other than capacity: the wait budget restarts when they can start.
func nonCompeting(reason string) bool {
	return reason == ReasonNoExecutor || reason == ReasonExecutorUnavailable || reason == ReasonCircuitOpen
}

// executorReason reports whether a queue waiting for reason is woken by
// load reports and executor changes.
func executorReason(reason string) bool {
	return reason == ReasonNoExecutor || reason == ReasonExecutorBusy || reason == ReasonExecutorUnavailable
}

// ParkedByReason counts the parked runs: handler → reason → runs (for
// GET /v1/handlers and ax_parked_runs). Runs being started are not
// counted.
func (l *Scheduler) ParkedByReason() map[string]map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]map[string]int, len(l.queues))
	for h, q := range l.queues {
		m := map[string]int{}
		if n := q.rq.Len(); n > 0 && q.reason != "" {
			m[q.reason] = n
		}
		if q.paused > 0 {
			m[ReasonPaused] = q.paused
		}
		if len(m) > 0 {
			out[h] = m
		}
	}
	return out
}

// Waiting returns why each of ids waits, for those this leader holds
// parked (the others are absent).
func (l *Scheduler) Waiting(ids []string) map[string]WaitingView {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out map[string]WaitingView
	for _, id := range ids {
		h, ok := l.parkedIDs[id]
		if !ok {
			continue
		}
		q := l.queues[h]
		if q == nil {
			continue
		}
		pr := q.runs[id]
		if pr == nil {
			continue
		}
		v := WaitingView{Reason: q.reason, SinceMs: pr.since.UnixMilli()}
		if pr.paused {
			v.Reason = ReasonPaused
		} else if !q.until.IsZero() {
			v.UntilMs = q.until.UnixMilli()
		}
		if v.Reason == "" {
			continue // being started
		}
		if out == nil {
			out = map[string]WaitingView{}
		}
		out[id] = v
	}
	return out
}
