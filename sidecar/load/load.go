package load

import "github.com/axsched/ax/raftfsm"

// ExecutorLoad is one executor of a node in its load report: what the
// leader needs to assign attempts to the node only while it has room. Its
// JSON is the peer API's.
type ExecutorLoad struct {
	Name string `json:"name"`
	// Handlers are the executor's handler patterns (as registered).
	Handlers []string `json:"handlers,omitempty"`
	// Limit is its adaptive concurrency limit now (engine.Limiter.Limit);
	// 0 before its first callback (the limiter's starting limit applies).
	Limit int `json:"limit,omitempty"`
	// InFlight and Queued are its callbacks in flight and the attempts
	// waiting for one of its slots.
	InFlight int `json:"in_flight,omitempty"`
	Queued   int `json:"queued,omitempty"`
	// DownUntilMs (Unix ms, the reporting node's wall clock) is set while
	// the executor is unavailable (unreachable lately): it is tried again
	// then.
	DownUntilMs int64 `json:"down_until_ms,omitempty"`
}

// Runs reports whether the executor runs handler (raftfsm.MatchHandler
// against each of its patterns).
func (e *ExecutorLoad) Runs(handler string) bool {
	for _, h := range e.Handlers {
		if raftfsm.MatchHandler(h, handler) {
			return true
		}
	}
	return false
}

// Circuit is one handler whose circuit breaker is open on the reporting
// node (sidecar/delivery's own breaker, fed by that node's callbacks):
// the node hands the handler's attempts back uncalled until UntilMs, so
// the leader routes them to other nodes meanwhile. Its JSON is the peer
// API's; a report without circuits (and one from a node of a version
// before this field) means none is open.
type Circuit struct {
	// Handler is the handler's name (a task's handler, not a pattern).
	Handler string `json:"handler"`
	// UntilMs (Unix ms, the reporting node's clock) is when the node
	// takes the handler's attempts again: the end of its cool-down, or,
	// while its half-open probe is out, that probe's deadline (its
	// outcome is known then at the latest). Always set.
	UntilMs int64 `json:"until_ms"`
}
