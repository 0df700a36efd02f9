package raftfsm

import (
	"bytes"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
)

// CommandType says which field of a Command is set.
type CommandType uint8

// Command types. Values are stored in the Raft log: never renumber them.
const (
	CmdSubmit   CommandType = 1
	CmdCancel   CommandType = 2
	CmdFire     CommandType = 3
	CmdComplete CommandType = 4
	CmdNode     CommandType = 5
	CmdExecutor CommandType = 6
	CmdRetry    CommandType = 7
	CmdLease    CommandType = 8
)

// EntryVersion is the first byte of every Raft log entry this version writes.
const EntryVersion = 1

// Command is one state change. Exactly the field matching Type is set.
type Command struct {
	Type     CommandType     `msgpack:"t"`
	Submit   *Submit         `msgpack:"s,omitempty"`
	Cancel   *Cancel         `msgpack:"c,omitempty"`
	Fire     *Fire           `msgpack:"f,omitempty"`
	Complete *Complete       `msgpack:"x,omitempty"`
	Node     *Node           `msgpack:"n,omitempty"`
	Executor *ExecutorChange `msgpack:"ex,omitempty"`
	Retry    *Retry          `msgpack:"r,omitempty"`
	Lease    *Lease          `msgpack:"l,omitempty"`
}

// ExecutorChange registers (or with Remove, removes) an executor of a node
// through the API. Registering a name again replaces it.
type ExecutorChange struct {
	Node     string   `msgpack:"n"`
	Executor Executor `msgpack:"x"`
	Remove   bool     `msgpack:"rm,omitempty"`
	AtMs     int64    `msgpack:"at"`
}

// Retry re-runs a DEAD or FAILED task: it becomes WAITING, due at AtMs,
// with its attempt count reset. Other states give CodeState.
type Retry struct {
	ID   string `msgpack:"id"`
	AtMs int64  `msgpack:"at"`
}

// Lease extends the deadline of the current attempt (a heartbeat) to AtMs
// plus the task's timeout plus GraceMs, never shortening it. It takes
// effect only while attempt Attempt is running; otherwise CodeStale. The
// leader fills AtMs and GraceMs.
type Lease struct {
	ID      string `msgpack:"id"`
	Attempt int    `msgpack:"a"`
	GraceMs int64  `msgpack:"g"`
	AtMs    int64  `msgpack:"at"`
}

// Submit creates a task, or returns the existing one when the id exists with
// an equal spec; a different spec is a conflict unless Overwrite is set.
// The leader fills DueMs (RunAt, or its clock plus Delay) and AtMs.
type Submit struct {
	ID    string `msgpack:"id"`
	Spec  Spec   `msgpack:"s"`
	DueMs int64  `msgpack:"du"`
	// SlotMs is the schedule slot of the first run of a recurring task
	// (equal to DueMs), 0 for a one-off task.
	SlotMs    int64 `msgpack:"sl,omitempty"`
	AtMs      int64 `msgpack:"at"`
	Overwrite bool  `msgpack:"o,omitempty"`
}

// Cancel moves a WAITING or RUNNING task to CANCELLED. A terminal task is
// left as it is (and returned).
type Cancel struct {
	ID   string `msgpack:"id"`
	AtMs int64  `msgpack:"at"`
}

// Fire starts attempt number Attempt of a WAITING task on Node. It takes
// effect only when the task still has Epoch and Attempts == Attempt-1.
type Fire struct {
	ID      string `msgpack:"id"`
	Epoch   uint64 `msgpack:"e"`
	Attempt int    `msgpack:"a"`
	Node    string `msgpack:"n"`
	AtMs    int64  `msgpack:"at"`
	LeaseMs int64  `msgpack:"le"`
}

// Complete reports how attempt Attempt of a RUNNING task ended. It takes
// effect only when that attempt is still the current one (and, unless Epoch
// is 0 — a result reported by the app, which does not know epochs — the
// task still has Epoch). The leader fills
// RetryDueMs (its clock plus the backoff) and AtMs.
type Complete struct {
	ID         string  `msgpack:"id"`
	Epoch      uint64  `msgpack:"e"`
	Attempt    int     `msgpack:"a"`
	Outcome    Outcome `msgpack:"o"`
	Error      string  `msgpack:"er,omitempty"`
	RetryDueMs int64   `msgpack:"r,omitempty"`
	// RetryAfterMs is the executor's Retry-After with a busy outcome; the
	// leader turns it into RetryDueMs.
	RetryAfterMs int64 `msgpack:"ra,omitempty"`
	// NextSlotMs, for a recurring task whose run ends (success, or its
	// attempts exhausted), is the slot of its next run, decided by the
	// leader from the schedule and the misfire rule; 0 ends the schedule.
	// NextDueMs is when that run is due (the slot, or now for a catch-up).
	NextSlotMs int64 `msgpack:"ns,omitempty"`
	NextDueMs  int64 `msgpack:"nd,omitempty"`
	AtMs       int64 `msgpack:"at"`
}

// Result is what one applied command did.
type Result struct {
	Code    string `msgpack:"c,omitempty"` // CodeOK, CodeNotFound, CodeConflict, CodeStale
	Created bool   `msgpack:"cr,omitempty"`
	Task    *Task  `msgpack:"t,omitempty"`
	// Index is the Raft index of the entry that held the command.
	Index uint64 `msgpack:"i"`
	// Warning is not the FSM's: the leader adds it to a submit's result
	// when the handler's backlog is near its bound ("depth/limit").
	Warning string `msgpack:"w,omitempty"`
}

// EncodeEntry encodes commands as one Raft log entry.
func EncodeEntry(cmds []Command) ([]byte, error) {
	b, err := msgpack.Marshal(cmds)
	if err != nil {
		return nil, fmt.Errorf("encode entry: %w", err)
	}
	return append([]byte{EntryVersion}, b...), nil
}

// DecodeEntry decodes a Raft log entry written by EncodeEntry.
func DecodeEntry(data []byte) ([]Command, error) {
	if len(data) == 0 || data[0] != EntryVersion {
		return nil, fmt.Errorf("entry version %v: %w", first(data), ErrBadEntry)
	}
	cmds, err := decodeArray[Command](data[1:])
	if err != nil {
		return nil, fmt.Errorf("decode entry: %v: %w", err, ErrBadEntry)
	}
	return cmds, nil
}

// decodeArray decodes a msgpack array of T. It checks the array length
// against the input size before allocating: msgpack v5.4.1 sizes a slice of
// structs from the length header alone (its allocation limit is not applied
// there), so a few corrupt bytes would ask for hundreds of GiB and crash the
// process with an out-of-memory error that recover cannot catch. Every
// element takes at least one byte.
func decodeArray[T any](b []byte) ([]T, error) {
	dec := msgpack.NewDecoder(bytes.NewReader(b))
	n, err := dec.DecodeArrayLen()
	if err != nil {
		return nil, err
	}
	if n < 0 { // msgpack nil
		return nil, nil
	}
	if n > len(b) {
		return nil, fmt.Errorf("array of %d elements in %d bytes", n, len(b))
	}
	out := make([]T, n)
	for i := range out {
		if err := dec.Decode(&out[i]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// EncodeResults and DecodeResults carry results over the peer API.
func EncodeResults(rs []Result) ([]byte, error) { return msgpack.Marshal(rs) }

// DecodeResults decodes what EncodeResults wrote.
func DecodeResults(b []byte) ([]Result, error) { return decodeArray[Result](b) }
