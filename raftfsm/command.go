package raftfsm

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
)

// CommandType says which field of a Command is set.
type CommandType uint8

// Command types. Values are stored in the Raft log: never renumber them.
const (
	CmdSubmit    CommandType = 1
	CmdCancel    CommandType = 2
	CmdFire      CommandType = 3
	CmdComplete  CommandType = 4
	CmdNode      CommandType = 5
	CmdExecutor  CommandType = 6
	CmdRetry     CommandType = 7
	CmdLease     CommandType = 8
	CmdPurge     CommandType = 9
	CmdPause     CommandType = 10
	CmdFlow      CommandType = 11 // flow.go
	CmdAlertDone CommandType = 12 // alert.go
)

// EntryVersion is the first byte of every Raft log entry this version writes.
const EntryVersion = 1

// Command is one state change. Exactly the field matching Type is set.
type Command struct {
	Type      CommandType     `msgpack:"t"`
	Submit    *Submit         `msgpack:"s,omitempty"`
	Cancel    *Cancel         `msgpack:"c,omitempty"`
	Fire      *Fire           `msgpack:"f,omitempty"`
	Complete  *Complete       `msgpack:"x,omitempty"`
	Node      *Node           `msgpack:"n,omitempty"`
	Executor  *ExecutorChange `msgpack:"ex,omitempty"`
	Retry     *Retry          `msgpack:"r,omitempty"`
	Lease     *Lease          `msgpack:"l,omitempty"`
	Purge     *Purge          `msgpack:"pg,omitempty"`
	Pause     *Pause          `msgpack:"pause,omitempty"`
	Flow      *FlowSubmit     `msgpack:"fl,omitempty"`
	AlertDone *AlertDone      `msgpack:"ad,omitempty"`
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
	// FlowNextSlotMs, for a stage task of a cron flow, is the slot of the
	// flow's next run should this command end the current one, decided
	// by the leader (flowNextSlot); 0 ends the flow with that run.
	FlowNextSlotMs int64 `msgpack:"fn,omitempty"`
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
	// HistoryRuns bounds the run records kept for the task (the leader's
	// --history-runs): 0 means HistoryRunsDefault, negative keeps none.
	// ParkedReason is why the leader held the run back before this Fire,
	// "" when it did not (history.go).
	HistoryRuns  int    `msgpack:"hr,omitempty"`
	ParkedReason string `msgpack:"pr,omitempty"`
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
	// RetryAfterMs is the executor's Retry-After with a busy outcome, or
	// the node's probe backoff with an unavailable one; the leader turns
	// it into RetryDueMs.
	RetryAfterMs int64 `msgpack:"ra,omitempty"`
	// NextSlotMs, for a recurring task whose run ends (success, or its
	// attempts exhausted), is the slot of its next run, decided by the
	// leader from the schedule and the misfire rule; 0 ends the schedule.
	// NextDueMs is when that run is due (the slot, or now for a catch-up).
	NextSlotMs int64 `msgpack:"ns,omitempty"`
	NextDueMs  int64 `msgpack:"nd,omitempty"`
	AtMs       int64 `msgpack:"at"`
	// Alert is set by a leader with a dead-run webhook (--on-dead-url):
	// a Complete that ends the run DEAD or FAILED then writes a pending
	// alert (alert.go). The FSM must not read a node's flag, so it
	// travels here, like Fire.HistoryRuns.
	Alert bool `msgpack:"al,omitempty"`
	// FlowNextSlotMs is Cancel.FlowNextSlotMs for a Complete.
	FlowNextSlotMs int64 `msgpack:"fn,omitempty"`

	// What only the delivering node knows, for the run record
	// (history.go); all zero in a Complete the leader makes (a timeout, a
	// lost node). Times are Unix ms on the node's clock. AppliedMs is when
	// the node saw the Fire applied; QueueNs the wait from then (or from
	// the Fire's start time, if later) until the call began; ConnectNs the
	// call's wait for a connection; StartedMs, EndedMs and DurationNs the
	// call itself.
	Executor   string `msgpack:"xn,omitempty"`
	HTTPStatus int    `msgpack:"hs,omitempty"`
	AppliedMs  int64  `msgpack:"ap,omitempty"`
	StartedMs  int64  `msgpack:"sa,omitempty"`
	EndedMs    int64  `msgpack:"ea,omitempty"`
	DurationNs int64  `msgpack:"dn,omitempty"`
	QueueNs    int64  `msgpack:"qn,omitempty"`
	ConnectNs  int64  `msgpack:"cn,omitempty"`
	// Result is a successful attempt's answer body (or the app's
	// reported result), at most ResultMaxBytes; ResultBinary marks bytes
	// that are not JSON, ResultTruncated a body that was cut.
	Result          []byte `msgpack:"res,omitempty"`
	ResultBinary    bool   `msgpack:"rbi,omitempty"`
	ResultTruncated bool   `msgpack:"rtr,omitempty"`

	// ShardCount, in a successful Complete of a sharded task's attempt
	// (Spec.Shards), is the number of shards its run gets (Count, or
	// the executor's answer; bounded by Shards.Bound): the run's shard
	// tasks are created in the same apply (shard.go).
	ShardCount int `msgpack:"shc,omitempty"`
}

// Result is what one applied command did.
type Result struct {
	Code    string `msgpack:"c,omitempty"` // CodeOK, CodeNotFound, CodeConflict, CodeStale
	Created bool   `msgpack:"cr,omitempty"`
	Task    *Task  `msgpack:"t,omitempty"`
	// Index is the Raft index of the entry that held the command.
	Index uint64 `msgpack:"i"`
	// Purged, for a CmdPurge, says per task of Purge.Tasks (same order)
	// whether it was deleted.
	Purged []bool `msgpack:"pg,omitempty"`
	// PurgedFlows is the same for Purge.Flows.
	PurgedFlows []bool `msgpack:"pf,omitempty"`
	// Warning is not the FSM's: the leader adds it to a submit's result
	// when the handler's backlog is near its bound ("depth/limit").
	Warning string `msgpack:"w,omitempty"`
	// Flow is the flow a CmdFlow is about, after it (flow.go).
	Flow *Flow `msgpack:"fl,omitempty"`
}

// EncodeEntry encodes commands as one Raft log entry.
// The bytes are those msgpack.Marshal writes for cmds, after the version
// byte; submits are written without reflection (codec.go).
func EncodeEntry(cmds []Command) ([]byte, error) {
	if cmds == nil {
		return []byte{EntryVersion, 0xc0}, nil // msgpack's nil slice
	}
	size := 6
	for i := range cmds {
		size += commandSize(&cmds[i])
	}
	b := appendArrayLen(append(make([]byte, 0, size), EntryVersion), len(cmds))
	for i := range cmds {
		var err error
		if b, err = appendCommand(b, &cmds[i]); err != nil {
			return nil, fmt.Errorf("encode entry: %w", err)
		}
	}
	return b, nil
}

// DecodeEntry decodes a Raft log entry written by EncodeEntry.
func DecodeEntry(data []byte) ([]Command, error) {
	if len(data) == 0 || data[0] != EntryVersion {
		return nil, fmt.Errorf("entry version %v: %w", first(data), ErrBadEntry)
	}
	cmds, err := decodeCommands(data[1:])
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
// element takes at least one byte. Slices nested in the elements are
// bounded by checkLengths.
func decodeArray[T any](b []byte) ([]T, error) {
	if err := checkLengths(b); err != nil {
		return nil, err
	}
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

// checkLengths walks the msgpack value at the start of b without decoding
// it and fails unless it is whole and shallow: every array, map, string,
// binary and extension has the elements and bytes its header claims, and
// arrays and maps nest at most maxNesting deep. msgpack v5.4.1 allocates
// a slice at any depth from its length header alone (decodeSliceValue
// tests its alloc-limit flag with "!= 1", which always holds), so an
// entry of a few bytes claiming an array of 2^31 structs ran the process
// out of memory (FuzzDecodeEntry,
// testdata/fuzz/FuzzDecodeEntry/dd2c48b11dfcfb96). The walk reads the
// format's headers itself (github.com/msgpack/msgpack spec.md: "Formats"),
// allocates nothing by them and keeps its own stack.
func checkLengths(b []byte) error {
	_, err := valueEnd(b)
	return err
}

// valueEnd is checkLengths returning where the value ends in b.
func valueEnd(b []byte) (int, error) {
	var stack [maxNesting + 1]int   // on the stack: the nesting is bounded
	pending := append(stack[:0], 1) // values still to read, per open array or map
	p := 0
	for len(pending) > 0 {
		top := len(pending) - 1
		if pending[top] == 0 {
			pending = pending[:top]
			continue
		}
		pending[top]--
		if p >= len(b) {
			return 0, errTruncated
		}
		c := b[p]
		p++
		n, skip := 0, 0 // elements that follow, bytes that follow
		switch {
		case c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3:
		case c <= 0x8f:
			n = 2 * int(c&0x0f)
		case c <= 0x9f:
			n = int(c & 0x0f)
		case c <= 0xbf:
			skip = int(c & 0x1f)
		default:
			if c < 0xc4 { // 0xc1, never used
				return 0, fmt.Errorf("msgpack code %#x", c)
			}
			h := msgpackHeaders[c-0xc4]
			if len(b)-p < h.size {
				return 0, errTruncated
			}
			var v uint64
			for _, x := range b[p : p+h.size] {
				v = v<<8 | uint64(x)
			}
			p += h.size
			if v > uint64(len(b)) {
				return 0, fmt.Errorf("length %d in %d bytes", v, len(b))
			}
			switch h.kind {
			case 'b':
				skip = int(v) + h.extra
			case 'a':
				n = int(v)
			case 'm':
				n = 2 * int(v)
			case 'f':
				skip = h.extra
			}
		}
		if len(b)-p < skip {
			return 0, errTruncated
		}
		p += skip
		if n > len(b)-p {
			return 0, fmt.Errorf("%d elements in %d bytes", n, len(b)-p)
		}
		if n > 0 {
			if len(pending) > maxNesting {
				return 0, fmt.Errorf("arrays and maps nested over %d deep", maxNesting)
			}
			pending = append(pending, n)
		}
	}
	return p, nil
}

var errTruncated = errors.New("msgpack value cut short")

// msgpackHeaders describes the msgpack codes 0xc4–0xdf (index c-0xc4),
// in order: size is the
// bytes of their length (0 for fixed sizes); kind is 'b' (bytes follow:
// str, bin, ext, plus extra bytes: an ext's type), 'a' (array), 'm' (map)
// or 'f' (extra fixed bytes follow: numbers, fixext).
var msgpackHeaders = [...]struct {
	size, extra int
	kind        byte
}{
	{1, 0, 'b'}, {2, 0, 'b'}, {4, 0, 'b'}, // 0xc4–0xc6 bin
	{1, 1, 'b'}, {2, 1, 'b'}, {4, 1, 'b'}, // 0xc7–0xc9 ext
	{0, 4, 'f'}, {0, 8, 'f'}, // 0xca, 0xcb float
	{0, 1, 'f'}, {0, 2, 'f'}, {0, 4, 'f'}, {0, 8, 'f'}, // 0xcc–0xcf uint
	{0, 1, 'f'}, {0, 2, 'f'}, {0, 4, 'f'}, {0, 8, 'f'}, // 0xd0–0xd3 int
	{0, 2, 'f'}, {0, 3, 'f'}, {0, 5, 'f'}, {0, 9, 'f'}, {0, 17, 'f'}, // 0xd4–0xd8 fixext
	{1, 0, 'b'}, {2, 0, 'b'}, {4, 0, 'b'}, // 0xd9–0xdb str
	{2, 0, 'a'}, {4, 0, 'a'}, // 0xdc, 0xdd array
	{2, 0, 'm'}, {4, 0, 'm'}, // 0xde, 0xdf map
}

// maxNesting bounds the nesting of arrays and maps in an entry or record;
// the commands nest a few levels.
const maxNesting = 32

// EncodeResults and DecodeResults carry results over the peer API (a
// forwarded proposal's answer). The bytes are those msgpack.Marshal writes
// for rs; a submit's result (its task) is written without reflection
// (codec.go).
func EncodeResults(rs []Result) ([]byte, error) {
	if rs == nil {
		return []byte{0xc0}, nil // msgpack's nil slice
	}
	size := 5
	for i := range rs {
		size += resultSize(&rs[i])
	}
	b := appendArrayLen(make([]byte, 0, size), len(rs))
	for i := range rs {
		var err error
		if b, err = appendResult(b, &rs[i]); err != nil {
			return nil, fmt.Errorf("encode results: %w", err)
		}
	}
	return b, nil
}

// DecodeResults decodes what EncodeResults wrote: results of the usual
// shape without reflection (decodeResultsFast), anything else as
// msgpack.Unmarshal reads it.
func DecodeResults(b []byte) ([]Result, error) {
	if err := checkLengths(b); err != nil {
		return nil, err
	}
	if rs, ok := decodeResultsFast(b); ok {
		return rs, nil
	}
	return decodeArray[Result](b)
}
