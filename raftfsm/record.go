package raftfsm

import (
	"fmt"
	"strings"

	"github.com/vmihailenco/msgpack/v5"
)

// State is a task state (docs/DESIGN.md section 2).
type State uint8

// Task states. The zero value is not a valid state.
const (
	StateWaiting State = iota + 1
	StateRunning
	StateSuccess
	StateDead
	StateFailed
	StateCancelled
)

var stateNames = [...]string{"", "WAITING", "RUNNING", "SUCCESS", "DEAD", "FAILED", "CANCELLED"}

// String returns the wire name of s ("WAITING" ...).
func (s State) String() string {
	if int(s) < len(stateNames) && s != 0 {
		return stateNames[s]
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// Terminal reports whether no further attempt of the task will run.
func (s State) Terminal() bool {
	return s == StateSuccess || s == StateDead || s == StateFailed || s == StateCancelled
}

// Spec is what the client asked for: the fields that decide whether a second
// submit with the same id is "the same task". Durations are nanoseconds and
// times Unix milliseconds (UTC) so the encoding is stable.
type Spec struct {
	Handler       string `msgpack:"h"`
	Payload       []byte `msgpack:"p"`
	PayloadBase64 bool   `msgpack:"pb,omitempty"`
	DelayNs       int64  `msgpack:"d,omitempty"`
	RunAtMs       int64  `msgpack:"ra,omitempty"`
	Priority      int    `msgpack:"pr"`
	TimeoutNs     int64  `msgpack:"to"`
	MaxAttempts   int    `msgpack:"ma"`

	// Recurring: Cron (in Timezone) or EveryNs; Repeats (0 = unlimited)
	// and UntilMs (0 = none) end the schedule.
	Cron     string `msgpack:"cr,omitempty"`
	Timezone string `msgpack:"tz,omitempty"`
	EveryNs  int64  `msgpack:"ev,omitempty"`
	Repeats  int    `msgpack:"rp,omitempty"`
	UntilMs  int64  `msgpack:"un,omitempty"`
	// Backoff overrides the default retry backoff when set.
	Backoff  *Backoff          `msgpack:"bo,omitempty"`
	RouteKey string            `msgpack:"rk,omitempty"`
	Labels   map[string]string `msgpack:"lb,omitempty"`
	// RetentionNs, when positive, is how long the task is kept once it
	// is finished (SUCCESS, CANCELLED, DEAD, FAILED), overriding the
	// node's retention flags; 0 means the flags decide.
	RetentionNs int64 `msgpack:"rt,omitempty"`
	// TraceParent and TraceState are the W3C trace context the task was
	// submitted with, validated by the API ("" for none): its callbacks
	// carry the trace id and flags (axapi.CallbackTraceParent). They are
	// not part of Equal: a submit retried from another trace is the same
	// task, and the stored task keeps its first trace context.
	TraceParent string `msgpack:"tp,omitempty"`
	TraceState  string `msgpack:"ts,omitempty"`
	// Shards, when set, runs each run of the task as shard tasks
	// (shard.go); nil for a task that is not sharded.
	Shards *Shards `msgpack:"sh,omitempty"`
	// ShardIndex (from 0) and ShardTotal are set in the spec of a shard
	// task (ShardTotal > 0), sent as Ax-Shard-Index and Ax-Shard-Total.
	ShardIndex int `msgpack:"si,omitempty"`
	ShardTotal int `msgpack:"sn,omitempty"`
}

// Backoff is a task's retry backoff (engine.Backoff in nanoseconds).
type Backoff struct {
	InitialNs  int64   `msgpack:"i"`
	MaxNs      int64   `msgpack:"m"`
	Multiplier float64 `msgpack:"x"`
	Jitter     float64 `msgpack:"j"`
}

// Recurring reports whether the task has a schedule.
func (a *Spec) Recurring() bool { return a.Cron != "" || a.EveryNs > 0 }

// Equal reports whether a and b are the same spec. The trace context
// (TraceParent, TraceState) is not compared: it says where a submit came
// from, not what it asks for, and a client retrying a submit (a timeout,
// a redeploy) under a new trace must get the stored task, not a conflict.
func (a Spec) Equal(b Spec) bool {
	return a.Handler == b.Handler && string(a.Payload) == string(b.Payload) &&
		a.PayloadBase64 == b.PayloadBase64 && a.DelayNs == b.DelayNs && a.RunAtMs == b.RunAtMs &&
		a.Priority == b.Priority && a.TimeoutNs == b.TimeoutNs && a.MaxAttempts == b.MaxAttempts &&
		a.Cron == b.Cron && a.Timezone == b.Timezone && a.EveryNs == b.EveryNs && a.Repeats == b.Repeats &&
		a.UntilMs == b.UntilMs && equalBackoff(a.Backoff, b.Backoff) && a.RouteKey == b.RouteKey && equalLabels(a.Labels, b.Labels) &&
		a.RetentionNs == b.RetentionNs && equalShards(a.Shards, b.Shards) &&
		a.ShardIndex == b.ShardIndex && a.ShardTotal == b.ShardTotal
}

func equalShards(a, b *Shards) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

func equalBackoff(a, b *Backoff) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

func equalLabels(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// Task is the stored record of a task. Times are Unix milliseconds, UTC;
// 0 means unset.
type Task struct {
	ID   string `msgpack:"id"`
	Spec Spec   `msgpack:"s"`
	// Epoch is the Raft index of the submit that created (or overwrote) the
	// task. Fire and Complete commands name it so that a command meant for
	// an overwritten task cannot touch its replacement.
	Epoch    uint64 `msgpack:"e"`
	State    State  `msgpack:"st"`
	Attempts int    `msgpack:"a"` // attempts of the current run started so far; the current one while RUNNING
	// Run is the number of the current (or last) run of the current spec,
	// from 1; a one-off task has one run, and Spec.Repeats counts these.
	// SlotMs is the scheduled slot of that run.
	Run    int   `msgpack:"rn,omitempty"`
	SlotMs int64 `msgpack:"sl,omitempty"`
	// RunBase counts the runs of the specs that overwrites replaced: the
	// run number executors see (Ax-Run, RunNumber) is RunBase + Run, so
	// (id, run, attempt) never repeats an earlier delivery's key.
	RunBase int `msgpack:"rb,omitempty"`
	// FailedRuns counts runs of a recurring task that ended DEAD (their
	// attempts exhausted) while the schedule went on.
	FailedRuns int   `msgpack:"fr,omitempty"`
	Snoozes    int   `msgpack:"sn"` // busy answers (429/503), not counted as attempts
	DueMs      int64 `msgpack:"du"` // when the next attempt is due (WAITING only)
	// Node runs the current attempt while RUNNING; afterwards it names the
	// node of the latest attempt.
	Node string `msgpack:"n,omitempty"`
	// FiredMs is when the latest attempt was assigned.
	FiredMs int64 `msgpack:"fi,omitempty"`
	// LeaseMs is the deadline of the current attempt (RUNNING only): past
	// it, the leader counts a TIMEOUT.
	LeaseMs    int64  `msgpack:"le,omitempty"`
	LastError  string `msgpack:"le2,omitempty"`
	CreatedMs  int64  `msgpack:"c"`
	UpdatedMs  int64  `msgpack:"u"`
	FinishedMs int64  `msgpack:"f,omitempty"`
	// Paused is set by a Pause of the task: its due runs wait (with
	// reason paused) until a Pause with Paused false resumes it. A
	// RUNNING attempt is not interrupted. It survives an overwrite and a
	// Retry.
	Paused bool `msgpack:"pz,omitempty"`
	// HeldBy is the outcome that handed the current attempt back without
	// counting it (OutcomeBusy: a 429/503 answer; OutcomeUnavailable: the
	// executor could not be given the request), 0 otherwise: the task
	// waits until DueMs for that reason. A Fire clears it.
	HeldBy Outcome `msgpack:"hb,omitempty"`
	// HistFirst is the oldest run number that may still have a run
	// record (history.go); 0 before the first.
	HistFirst int `msgpack:"hf,omitempty"`
	// HistRun is the newest run number with a stored record. RunDueMs,
	// RunFiredMs and RunParked are the current run's due time, first
	// Fire time and park reason, noted by its first Fire for its record
	// (RunFiredMs 0: the run has no history). See history.go.
	HistRun    int    `msgpack:"hr,omitempty"`
	RunDueMs   int64  `msgpack:"rdu,omitempty"`
	RunFiredMs int64  `msgpack:"rfi,omitempty"`
	RunParked  string `msgpack:"rpk,omitempty"`
	// Shards is a sharded task's progress through the shards of its
	// current (or last) run (shard.go); nil before its first shards.
	Shards *ShardRun `msgpack:"shr,omitempty"`
}

// RunNumber is the number of the current (or last) run as executors and
// the API see it (Ax-Run), from 1: unique for the task id across overwrites.
func (t *Task) RunNumber() int { return t.RunBase + max(t.Run, 1) }

// Node is what the cluster knows of one node: its addresses and its
// executors, so the leader can route attempts.
type Node struct {
	ID        string     `msgpack:"id"`
	RaftAddr  string     `msgpack:"ra"`
	PeerAddr  string     `msgpack:"pa"`
	Executors []Executor `msgpack:"x,omitempty"`
	UpdateMs  int64      `msgpack:"u"`
	// Incarnation is a random id of the node's data dir, made when the
	// dir was first used: a node that comes back under this id with
	// another one lost its data. "" from nodes of older versions.
	Incarnation string `msgpack:"inc,omitempty"`
}

// Executor is an app endpoint registered on a node, by flag (FromFlag) or
// through the API.
type Executor struct {
	Name string `msgpack:"n"`
	// Handlers are patterns: "*" matches every handler, "order.*" every
	// handler with that prefix, anything else itself.
	Handlers       []string `msgpack:"h"`
	URL            string   `msgpack:"u"`
	MinConcurrency int      `msgpack:"mi,omitempty"`
	MaxConcurrency int      `msgpack:"ma,omitempty"`
	TimeoutNs      int64    `msgpack:"to,omitempty"`
	FromFlag       bool     `msgpack:"f,omitempty"`
}

// Runs reports whether e runs handler.
func (e *Executor) Runs(handler string) bool {
	for _, h := range e.Handlers {
		if MatchHandler(h, handler) {
			return true
		}
	}
	return false
}

// MatchHandler reports whether pattern matches handler: "*" matches every
// handler, a pattern ending in "*" matches by prefix, anything else must be
// equal.
func MatchHandler(pattern, handler string) bool {
	if pattern == "*" || pattern == handler {
		return true
	}
	if prefix, ok := strings.CutSuffix(pattern, "*"); ok {
		return strings.HasPrefix(handler, prefix)
	}
	return false
}

// Runs reports whether the node has an executor for handler.
func (n *Node) Runs(handler string) bool {
	return n.ExecutorFor(handler) != nil
}

// Rank is how well executor e matches handler: 3 for a pattern equal to
// it, 2 for a prefix pattern ("order.*"), 1 for "*", 0 when none of its
// patterns matches (its best pattern counts).
func (e *Executor) Rank(handler string) int {
	best := 0
	for _, h := range e.Handlers {
		switch {
		case h == handler:
			return 3
		case h != "*" && MatchHandler(h, handler):
			best = max(best, 2)
		case h == "*":
			best = max(best, 1)
		}
	}
	return best
}

// ExecutorsFor returns the executors of n that run handler, best first:
// an exact match before a prefix pattern before "*" (registration order
// within a rank).
func (n *Node) ExecutorsFor(handler string) []*Executor {
	var ranked [4][]*Executor
	for i := range n.Executors {
		e := &n.Executors[i]
		if r := e.Rank(handler); r > 0 {
			ranked[r] = append(ranked[r], e)
		}
	}
	return append(append(ranked[3], ranked[2]...), ranked[1]...)
}

// ExecutorFor returns the executor of n for handler: an exact match before
// a prefix pattern before "*"; nil when there is none.
func (n *Node) ExecutorFor(handler string) *Executor {
	var best *Executor
	bestRank := 0
	for i := range n.Executors {
		e := &n.Executors[i]
		if r := e.Rank(handler); r > bestRank {
			best, bestRank = e, r
		}
	}
	return best
}

const recordVersion = 1

// encodeRecord writes v's record: the version byte, then v as
// msgpack.Marshal writes it, the keys of maps in increasing order
// (marshalSorted; a *Task without reflection: codec.go).
func encodeRecord(v any) ([]byte, error) {
	if t, ok := v.(*Task); ok {
		return appendTask(append(make([]byte, 0, taskSize(t)), recordVersion), t)
	}
	if r, ok := v.(*RunRecord); ok {
		return appendRunRecord(append(make([]byte, 0, runRecordSize(r)), recordVersion), r), nil
	}
	b, err := marshalSorted(v)
	if err != nil {
		return nil, err
	}
	return append([]byte{recordVersion}, b...), nil
}

func decodeRecord(b []byte, v any) error {
	if len(b) == 0 || b[0] != recordVersion {
		return fmt.Errorf("record version %v: %w", first(b), ErrBadEntry)
	}
	// A record comes from badger, written by this package, or from a
	// snapshot a leader sent: its lengths are checked as an entry's.
	if err := checkLengths(b[1:]); err != nil {
		return fmt.Errorf("record: %v: %w", err, ErrBadEntry)
	}
	if t, ok := v.(*Task); ok {
		if decodeTaskFast(&reader{b: b[1:]}, t) {
			return nil
		}
		*t = Task{} // msgpack decodes from scratch (every caller passes a zero Task)
	}
	return msgpack.Unmarshal(b[1:], v)
}

func first(b []byte) any {
	if len(b) == 0 {
		return "empty"
	}
	return b[0]
}
