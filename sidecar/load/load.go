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
